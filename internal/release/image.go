// Package release knows what a node's image holds and how the vLLM release in it behaves
// across nodes: which executor can run, how the driver's environment reaches the workers,
// which address the c10d rendezvous uses, and which failures that release can print. The
// facts come from upstream source (docs/upstream.md §2, §7, §8); the
// package is pure, so the decision can be table-tested and recorded in workflow history.
package release

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ReadScript is what the agent runs in a short-lived container of the image (entrypoint
// /bin/sh -c, no network, no mounts) to learn what it holds. It reads only the filesystem
// with shell builtins and globs: no Python start-up (importing vllm takes seconds and
// imports torch), no package manager, nothing that differs between an Ubuntu-based stock
// image and a Debian or NGC one. pip records every installed distribution as a
// `<name>-<version>.dist-info` directory (the wheel spec's name: PEP 427/PEP 491), so the
// versions are the directory names; the Python version is the site directory's path.
// NCCL is read from the library itself, not from its wheel's record: a user who builds a
// newer NCCL and drops it over the wheel's file changes what runs and not the dist-info
// (docs/network.md, "The NCCL version"). The library read is the first of the site
// directories' nvidia/nccl/lib/libnccl.so.2 (where torch's CUDA wheels load NCCL from:
// the nvidia-nccl-cu* wheel's file) and then the system's (an NGC image's torch links the
// system NCCL); its version is the string NCCL compiles in (src/init.cc VERSION_STRING,
// "NCCL version 2.28.9+cuda13.0", kept as 2.28.9), read with grep where the image has one.
const ReadScript = `for d in /usr/local/lib/python3*/dist-packages /usr/local/lib/python3*/site-packages /usr/lib/python3/dist-packages /usr/lib/python3*/site-packages /opt/*/lib/python3*/site-packages; do
  for m in "$d"/*.dist-info; do [ -d "$m" ] && echo "dist $d ${m##*/}"; done
done
for c in vllm ray python3; do command -v "$c" >/dev/null 2>&1 && echo "bin $c"; done
for l in /usr/lib/*-linux-gnu/libibverbs.so.1 /lib/*-linux-gnu/libibverbs.so.1 /usr/lib64/libibverbs.so.1; do [ -e "$l" ] && echo "lib libibverbs"; done
for l in /usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2 /usr/local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 /usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2 /usr/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 /opt/*/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 /usr/lib/*-linux-gnu/libnccl.so.2 /lib/*-linux-gnu/libnccl.so.2 /usr/lib64/libnccl.so.2; do
  [ -f "$l" ] || continue; v=""
  command -v grep >/dev/null 2>&1 && v=$(grep -aoE -m1 'NCCL version [0-9]+\.[0-9]+\.[0-9]+[^[:space:][:cntrl:]]*' "$l" | { read -r _ _ x; echo "${x%%+*}"; })
  echo "nccllib $l $v"
done
[ -n "${VLLM_GPU_NIC_PCIE_MAPPING:+x}" ] && echo "env VLLM_GPU_NIC_PCIE_MAPPING"
[ -n "${VLLM_NIC_SELECTION_VARS:+x}" ] && echo "env VLLM_NIC_SELECTION_VARS"
echo "end"
`

// The read container is created with no Env of its own, so its environment is the image's
// ENV: ReadScript's "env" lines name the NIC-selection variables (NICSelectionEnv) the
// image itself sets to a non-blank value (vLLM treats a blank one as unset:
// vllm/v1/executor/vllm_net_devices.py set_worker_net_device tests `.strip()`).

// MaxReadOutput bounds what the agent keeps of ReadScript's output: an image with
// thousands of distributions prints about 100 bytes each.
const MaxReadOutput = 1 << 20

// Image is what one node's copy of the spec's image holds.
type Image struct {
	Node string `json:"node"`
	// Ref is the spec's image reference, ID the engine's image ID (sha256:…).
	Ref string `json:"ref"`
	ID  string `json:"id"`
	// Versions of the distributions that decide behaviour; empty when absent.
	VLLM  string `json:"vllm,omitempty"`
	Ray   string `json:"ray,omitempty"`
	Torch string `json:"torch,omitempty"`
	// NCCL is the version of the NCCL library the engine loads (NCCLLib), or of the NCCL
	// wheel when the library's version cannot be read.
	NCCL    string `json:"nccl,omitempty"`
	NCCLLib string `json:"nccl_lib,omitempty"`
	Python  string `json:"python,omitempty"`
	// RayBin and VLLMBin say the executables are on the image's PATH: a container whose
	// entrypoint is `ray` starts only when RayBin.
	RayBin  bool `json:"ray_bin"`
	VLLMBin bool `json:"vllm_bin"`
	// Verbs says libibverbs is installed (NCCL's IB/RoCE transport needs it).
	Verbs bool `json:"libibverbs"`
	// NICSelection are the NICSelectionEnv variables the image's own ENV sets.
	NICSelection []string `json:"nic_selection_env,omitempty"`
	// Cached says the agent answered from its cache of this image ID.
	Cached bool `json:"cached,omitempty"`
}

// HasRay says Ray can run from the image: installed and on PATH.
func (i Image) HasRay() bool { return i.Ray != "" && i.RayBin }

// Summary is the one-line form `starter plan` and `status` print.
func (i Image) Summary() string {
	parts := []string{"vllm " + orNone(i.VLLM), "ray " + orNone(i.Ray), "torch " + orNone(i.Torch), "nccl " + orNone(i.NCCL)}
	if i.Python != "" {
		parts = append(parts, "python "+i.Python)
	}
	if i.Verbs {
		parts = append(parts, "libibverbs")
	} else {
		parts = append(parts, "no libibverbs")
	}
	return strings.Join(parts, ", ")
}

func orNone(v string) string {
	if v == "" {
		return "none"
	}
	return v
}

var pythonDir = regexp.MustCompile(`/python(\d+\.\d+)/`)

// ParseRead reads ReadScript's output. Garbage is refused rather than guessed at: an
// output without the final "end" was cut short, and an image without vLLM is not one
// tpdeploy can deploy.
func ParseRead(out string) (Image, error) {
	var img Image
	ended := false
	libNCCL := ""
	// The first site directory holding each distribution wins, as on Python's sys.path
	// (/usr/local before /usr).
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "dist":
			if len(f) != 3 {
				return Image{}, fmt.Errorf("image read: malformed line %q", line)
			}
			name, version, ok := distInfo(f[2])
			if !ok {
				continue
			}
			var field *string
			switch {
			case name == "vllm":
				field = &img.VLLM
				if m := pythonDir.FindStringSubmatch(f[1] + "/"); m != nil && img.VLLM == "" {
					img.Python = m[1]
				}
			case name == "ray":
				field = &img.Ray
			case name == "torch":
				field = &img.Torch
			case strings.HasPrefix(name, "nvidia_nccl_cu"):
				field = &img.NCCL
			default:
				continue
			}
			if *field == "" {
				*field = version
			}
		case "bin":
			if len(f) == 2 {
				img.VLLMBin = img.VLLMBin || f[1] == "vllm"
				img.RayBin = img.RayBin || f[1] == "ray"
			}
		case "lib":
			img.Verbs = img.Verbs || (len(f) == 2 && f[1] == "libibverbs")
		case "env":
			if len(f) == 2 && slices.Contains(NICSelectionEnv, f[1]) && !slices.Contains(img.NICSelection, f[1]) {
				img.NICSelection = append(img.NICSelection, f[1])
			}
		case "nccllib":
			// The first library found is the one loaded; its version, when read, wins over
			// the wheel's record.
			if (len(f) == 2 || len(f) == 3) && img.NCCLLib == "" {
				img.NCCLLib = f[1]
				if len(f) == 3 {
					libNCCL = f[2]
				}
			}
		case "end":
			ended = true
		default:
			return Image{}, fmt.Errorf("image read: unexpected line %q", truncate(line, 120))
		}
	}
	if !ended {
		return Image{}, fmt.Errorf("image read: output ended early (no \"end\" line)")
	}
	if libNCCL != "" {
		img.NCCL = libNCCL
	}
	if img.VLLM == "" {
		return Image{}, fmt.Errorf("image holds no vLLM installation (no vllm-*.dist-info in any Python site directory)")
	}
	return img, nil
}

// distInfo splits "vllm-0.17.1.dist-info" into its normalised name and version.
func distInfo(dir string) (name, version string, ok bool) {
	base, found := strings.CutSuffix(dir, ".dist-info")
	if !found {
		return "", "", false
	}
	i := strings.Index(base, "-")
	if i <= 0 || i == len(base)-1 {
		return "", "", false
	}
	name = strings.ToLower(strings.NewReplacer("-", "_", ".", "_").Replace(base[:i]))
	return name, base[i+1:], true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Version is a release's numeric part: "0.17.1+cu129" and "0.17.1rc1" are 0.17.1. A
// pre-release of X is taken as X: thresholds below are features' first releases, and a
// release candidate of that release has them.
type Version [3]int

// ParseVersion reads the leading major.minor[.patch] of v.
func ParseVersion(v string) (Version, bool) {
	var out Version
	rest := v
	for i := 0; i < 3; i++ {
		j := 0
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j == 0 {
			return out, i >= 2
		}
		n, err := strconv.Atoi(rest[:j])
		if err != nil {
			return out, false
		}
		out[i] = n
		rest = rest[j:]
		if !strings.HasPrefix(rest, ".") {
			return out, i >= 1
		}
		rest = rest[1:]
	}
	return out, true
}

// AtLeast says v ≥ w.
func (v Version) AtLeast(w Version) bool { return slices.Compare(v[:], w[:]) >= 0 }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }
