package hostmem

import (
	"strings"
	"testing"
)

func TestGuard(t *testing.T) {
	g := Guard{Floor: GiB}
	steps := []struct {
		avail   int64
		running bool
		trip    bool
		lowest  int64
	}{
		{100 * MiB, false, false, 0},       // nothing runs: nothing to stop, nothing followed
		{8 * GiB, true, false, 8 * GiB},    // the engines start
		{3 * GiB, true, false, 3 * GiB},    // loading
		{5 * GiB, true, false, 3 * GiB},    // the lowest stays
		{900 * MiB, true, true, 900 * MiB}, // below the floor
		{2 * GiB, false, false, 0},         // stopped: the next run starts over
		{6 * GiB, true, false, 6 * GiB},
	}
	for i, s := range steps {
		if trip := g.Observe(Facts{AvailableBytes: s.avail}, s.running); trip != s.trip || g.Lowest != s.lowest {
			t.Errorf("step %d: trip %v lowest %d, want %v %d", i, trip, g.Lowest, s.trip, s.lowest)
		}
	}
	full := 37.5
	msg := Trip{Lowest: 900 * MiB, Floor: GiB, Total: 3 * GiB, PSIFull: &full}.Message("node-b")
	for _, w := range []string{"node-b", "900 MiB available (the lowest seen) of 3.0 GiB", "floor 1.0 GiB", "full 37.5%", "SIGKILL"} {
		if !strings.Contains(msg, w) {
			t.Errorf("message lacks %q: %s", w, msg)
		}
	}
	if DefaultFloor.Of(120*GiB) != frac(0.02, 120*GiB) || DefaultFloor.Of(8*GiB) != GiB {
		t.Error("default floor")
	}
}
