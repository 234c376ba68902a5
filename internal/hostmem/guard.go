package hostmem

import (
	"fmt"
	"time"
)

// DefaultFloor is the guard's floor: below max(1 GiB, 2 %) of the node's memory
// available, the agent stops the engine containers before the kernel has to choose (on a
// GB10 it may not choose at all: NVIDIA/open-gpu-kernel-modules#1358 is a whole-host wedge
// with no OOM kill). earlyoom, which eugr's spark-vllm-docker runs, acts at 512 MiB; a
// share scales it to a Spark's 120 GiB, where the driver's own allocations run ahead of
// MemAvailable (vllm#56824 saw NV_ERR_NO_MEMORY at ~22 GiB MemAvailable).
var DefaultFloor = Reserve{Bytes: GiB, Percent: 2}

// Guard follows a node's MemAvailable while its engine containers run: it keeps the
// lowest seen and says when it is below the floor.
type Guard struct {
	Floor  int64
	Lowest int64
	// running says the engine containers were running at the last sample.
	running bool
}

// Trip is the guard's verdict: the engines were stopped at At, memory having fallen to
// Lowest below the floor.
type Trip struct {
	Lowest, Floor, Total int64
	PSIFull              *float64
	At                   time.Time
}

// Observe takes one sample. running says whether engine containers run now (the lowest
// starts over with each run of them). It returns true when the engines must be stopped.
func (g *Guard) Observe(f Facts, running bool) bool {
	if !running {
		g.running, g.Lowest = false, 0
		return false
	}
	if !g.running || f.AvailableBytes < g.Lowest {
		g.Lowest = f.AvailableBytes
	}
	g.running = true
	return f.AvailableBytes < g.Floor
}

// Message is the trip as HostMemoryPressure says it.
func (t Trip) Message(node string) string {
	psi := ""
	if t.PSIFull != nil {
		psi = fmt.Sprintf(", memory pressure full %.1f%%", *t.PSIFull)
	}
	return fmt.Sprintf("%s: host memory fell to %s available (the lowest seen) of %s, below the guard's floor %s%s: the engine containers were stopped (SIGTERM, then SIGKILL) before the host could wedge. Fix: lower --gpu-memory-utilization or --max-model-len, or free the host's memory",
		node, Human(t.Lowest), Human(t.Total), Human(t.Floor), psi)
}
