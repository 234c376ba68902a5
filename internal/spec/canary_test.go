package spec

import (
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
