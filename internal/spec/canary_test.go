package spec

import (
	"strings"
	"testing"
	"time"
)

// The canary's defaults declare a wedged engine EngineWedged within every + failures ×
// timeout of freezing (internal/control/canary.go): within 90 s, well before vLLM's own
// execute timeout (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 300 s by default in vllm/envs.py)
// ends an engine whose rank froze, and at all where that timeout does not apply (the
// legacy Ray executor, a frozen EngineCore).
func TestCanaryDefaultsCatchAWedgedEngineWithin90s(t *testing.T) {
	c := Canary{}.WithDefaults()
	bound := c.Every.D() + time.Duration(c.Failures)*c.Timeout.D()
	if bound > 90*time.Second {
		t.Errorf("every %s + %d × timeout %s = %s, want at most 90s", c.Every.D(), c.Failures, c.Timeout.D(), bound)
	}
	if c.Timeout.D() < 10*time.Second {
		t.Errorf("timeout %s: one token of a loaded engine needs more", c.Timeout.D())
	}
}

// vllm/v1/executor/vllm_net_devices.py (vLLM PR #42083): value = f"{rdma_dev}{suffix}";
// if existing: value = f"{value},{existing}" — the plan's exact NCCL_IB_HCA would lose its
// leading "=". Both variables are refused in a node's env, naming why.
func TestNICSelectionVariablesAreRefused(t *testing.T) {
	for _, k := range []string{"VLLM_GPU_NIC_PCIE_MAPPING", "VLLM_NIC_SELECTION_VARS"} {
		y := strings.Replace(validYAML, "gpus: 1}\n  - {name: node-b", "gpus: 1, env: {"+k+": 'NCCL_IB_HCA:1'}}\n  - {name: node-b", 1)
		_, err := Parse([]byte(y))
		if err == nil || !strings.Contains(err.Error(), "nodes[0].env."+k) || !strings.Contains(err.Error(), "PR #42083") || !strings.Contains(err.Error(), "NCCL_IB_HCA") {
			t.Errorf("%s: %v, want a refusal naming the field, vLLM PR #42083 and NCCL_IB_HCA", k, err)
		}
	}
}
