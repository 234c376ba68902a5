package hostmem

import (
	"strings"
)

// Whether a node's GPUs compute in host memory. NVIDIA's own tools say it two ways:
//
//   - NVML's nvmlDeviceGetAddressingMode (nvml.h, NVML_DEVICE_ADDRESSING_MODE_ATS = 2,
//     HMM = 1, NONE = 0), printed by `nvidia-smi -q` as "Addressing Mode : ATS", together
//     with NVML's memory info being unsupported: "FB Memory Usage" with "Total : N/A". A
//     GB10 (DGX Spark) reports both; a GH200 is ATS-addressed too but has its own HBM and
//     reports a framebuffer, so ATS alone is not enough — both are asked.
//   - CUDA's cudaDevAttrIntegrated (1 on an integrated GPU: GB10, Jetson), with
//     cudaDevAttrPageableMemoryAccessUsesHostPageTables; the agent runs no CUDA, so it
//     does not ask CUDA, but it is the same fact.
//
// The agent runs `nvidia-smi -q` where it exists (ParseNvidiaSMI); without it, the
// driver's /proc/driver/nvidia/gpus/*/information names the model (ParseProcModel), and
// a model known to be integrated (IntegratedModels) counts. nodes[].unified_memory in the
// spec overrides both.

// IntegratedModels are GPU model names (as the driver prints them) whose memory is the
// host's: the DGX Spark's GB10 and NVIDIA's Jetson modules.
var IntegratedModels = []string{"GB10", "Orin", "Thor"}

// ParseNvidiaSMI says whether `nvidia-smi -q` describes a GPU without a framebuffer of
// its own that addresses host memory through ATS, and how many GPUs it lists.
func ParseNvidiaSMI(text string) (unified bool, gpus int) {
	section := ""
	ats, noFB := false, false
	for line := range strings.SplitSeq(text, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "GPU ") && strings.Count(t, ":") >= 2 && !strings.Contains(t, " : ") {
			// "GPU 0000000F:01:00.0" starts a GPU's block.
			gpus++
			continue
		}
		k, v, _ := strings.Cut(t, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if v == "" {
			// "FB Memory Usage" heads the lines below it.
			section = k
			continue
		}
		switch {
		case k == "Addressing Mode" && strings.EqualFold(v, "ATS"):
			ats = true
		case k == "FB Memory Usage" && v == "N/A":
			noFB = true
		case section == "FB Memory Usage" && k == "Total" && v == "N/A":
			noFB = true
		}
	}
	return ats && noFB, gpus
}

// ParseProcModel reads the "Model:" line of /proc/driver/nvidia/gpus/BUS/information and
// says whether that model is integrated.
func ParseProcModel(text string) (model string, integrated bool) {
	for line := range strings.SplitSeq(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "Model" {
			model = strings.TrimSpace(v)
			break
		}
	}
	for _, m := range IntegratedModels {
		for _, w := range strings.Fields(model) {
			if w == m {
				return model, true
			}
		}
	}
	return model, false
}
