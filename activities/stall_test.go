package activities

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/hostmem"
	"github.com/tpdeploy/tpdeploy/internal/spec"
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

// When this node's memory guard stopped the cluster's engines, the watch reports
// HostMemoryPressure with the lowest MemAvailable seen, not a bare exit.
func TestWatchReportsTheGuardsStop(t *testing.T) {
	a := New(Config{Name: "node-a"})
	w := &watch{v: a.VLLM, req: contract.WatchRequest{Node: "node-a", Spec: spec.Cluster{Name: "c"}}}
	if err := w.guardStopped(); err != nil {
		t.Fatalf("no trip: %v", err)
	}
	a.base.guard.record("other", hostmem.Trip{Lowest: 100 * hostmem.MiB, Floor: hostmem.GiB, Total: 3 * hostmem.GiB, At: time.Now()})
	if err := w.guardStopped(); err != nil {
		t.Fatalf("another cluster's trip: %v", err)
	}
	a.base.guard.record("c", hostmem.Trip{Lowest: 700 * hostmem.MiB, Floor: hostmem.GiB, Total: 3 * hostmem.GiB, At: time.Now()})
	var ae *temporal.ApplicationError
	if err := w.guardStopped(); !errors.As(err, &ae) || ae.Type() != contract.ErrHostMemoryPressure || !strings.Contains(ae.Error(), "700 MiB available (the lowest seen)") {
		t.Fatalf("the guard's stop: %v", err)
	}
	a.base.guard.clear("c")
	if err := w.guardStopped(); err != nil {
		t.Fatalf("a trip cleared by a new start: %v", err)
	}
	a.base.guard.record("c", hostmem.Trip{Lowest: 700 * hostmem.MiB, At: time.Now().Add(-time.Hour)})
	if err := w.guardStopped(); err != nil {
		t.Fatalf("an old trip: %v", err)
	}
}
