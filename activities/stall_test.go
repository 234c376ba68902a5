package activities

import (
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// Every output line moves the load's progress (the workflow's load_stall bound counts
// them) but the notices a waiting process repeats, which say nothing moved.
func TestWatchCountsProgressLines(t *testing.T) {
	w := &watch{v: New(Config{Name: "node-a"}).VLLM, req: contract.WatchRequest{Node: "node-a"}}
	for _, l := range []string{
		"INFO 12-01 22:00:01 [default_loader.py:267] Loading safetensors checkpoint shards:  13% Completed | 4/30",
		"",
		"WARNING 12-01 22:01:01 [shm_broadcast.py:466] No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work (e.g. compilation).",
		"(raylet) Warning: The following resource request cannot be scheduled right now: {'GPU': 1.0}",
	} {
		if err := w.line(l); err != nil {
			t.Fatal(err)
		}
	}
	if w.p.Lines != 1 || w.p.LastLine != "INFO 12-01 22:00:01 [default_loader.py:267] Loading safetensors checkpoint shards:  13% Completed | 4/30" {
		t.Errorf("lines %d, last %q", w.p.Lines, w.p.LastLine)
	}
}
