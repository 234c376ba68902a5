package activities

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/hostmem"
	"github.com/tpdeploy/tpdeploy/internal/metrics"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

// GuardGrace is how long a stopped engine container has after SIGTERM before the engine
// kills it: short, since memory is running out.
const GuardGrace = 3 * time.Second

// agentOOMScoreAdj is the agent's own oom_score_adj: should the kernel have to kill for
// memory, it takes an engine (EngineOOMScoreAdj) first, not the agent that would clean up.
const agentOOMScoreAdj = -900

// memGuard is what the guard found, per cluster, for the watches to report.
type memGuard struct {
	mu    sync.Mutex
	trips map[string]hostmem.Trip
	// active is set when the agent starts a container (ensureContainer) and cleared when
	// the guard finds none running: the guard asks Docker only when memory is below the
	// floor, never every second (the lab's fault proxies count and fault engine calls).
	active atomic.Bool
	// last is the latest sample, for the watches' progress.
	last atomic.Pointer[contract.HostMemorySample]
}

// sample is the guard's latest sample, or nil.
func (g *memGuard) sample() *contract.HostMemorySample {
	if g == nil {
		return nil
	}
	return g.last.Load()
}

func (g *memGuard) record(cluster string, t hostmem.Trip) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.trips == nil {
		g.trips = map[string]hostmem.Trip{}
	}
	g.trips[cluster] = t
}

// clear forgets cluster's trip: the cluster starts a container again (a new deploy).
func (g *memGuard) clear(cluster string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.trips, cluster)
}

// trip is the guard's stop of cluster's engines within the last ten minutes, if any.
func (g *memGuard) trip(cluster string) (hostmem.Trip, bool) {
	if g == nil {
		return hostmem.Trip{}, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.trips[cluster]
	return t, ok && time.Since(t.At) < 10*time.Minute
}

// GuardMemory samples the node's memory every second (procfs and the cgroup only), keeping
// the lowest MemAvailable seen since the agent last started a container; below the
// policy's memory_floor it lists the engine containers of every cluster on the node (the
// default engine's, in the agent's own network mode) and stops them (SIGTERM, then SIGKILL after GuardGrace) and
// records the trip, which the node's serving watch then reports as HostMemoryPressure.
// It protects the agent's own OOM score first. It returns when ctx ends.
// Each sample also sets the node's host memory gauges (gauges may be nil).
func (a *Agent) GuardMemory(ctx context.Context, gauges *metrics.HostMemory) {
	b, d := a.base, a.Containers.docker
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("-900"), 0o644); err != nil {
		b.logger().Warn("cannot protect the agent's oom_score_adj (needs CAP_SYS_RESOURCE)", zap.Int("want", agentOOMScoreAdj), zap.Error(err))
	}
	floor := hostmem.DefaultFloor
	if b.policy != nil {
		floor = b.policy.MemoryFloor
	}
	// Engines may already run (the agent restarted beside them): the first sample below
	// the floor asks Docker.
	b.guard.active.Store(true)
	var g hostmem.Guard
	var lowest int64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f := d.sys.memory(b.policy)
		if f.Error != "" {
			continue
		}
		b.guardOnce(ctx, &g, floor, d.opts.Network, f, func() (guardEngine, error) {
			eng, _, err := d.engine(policy.DefaultDockerHost)
			return eng, err
		})
		if g.Lowest > 0 {
			lowest = g.Lowest // kept once the engines stop: what a trip fell to
		}
		gauges.Set(f.TotalBytes, f.AvailableBytes, lowest, g.Floor)
		b.guard.last.Store(&contract.HostMemorySample{Node: b.name, AvailableBytes: f.AvailableBytes, LowestBytes: lowest, FloorBytes: g.Floor, TotalBytes: f.TotalBytes, At: time.Now()})
	}
}

// guardEngine is what the guard asks of the Docker engine.
type guardEngine interface {
	ContainerList(ctx context.Context, o client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerStop(ctx context.Context, id string, o client.ContainerStopOptions) (client.ContainerStopResult, error)
}

// guardOnce takes one sample: above the floor it only follows the lowest; below, it asks
// the engine for the node's engine containers (those in the agent's network mode, not
// another lab's node of the same name: ownContainer), stops them all at once (SIGTERM, SIGKILL
// after GuardGrace) and records the trip for each of their clusters. It returns the IDs
// it stopped.
func (b *nodeBase) guardOnce(ctx context.Context, g *hostmem.Guard, floor hostmem.Reserve, network string, f hostmem.Facts, engine func() (guardEngine, error)) []string {
	g.Floor = floor.Of(f.TotalBytes)
	if !g.Observe(f, b.guard.active.Load()) {
		return nil
	}
	eng, err := engine()
	if err != nil {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	flt := client.Filters{}
	flt.Add("label", LabelNode+"="+b.name)
	list, err := eng.ContainerList(lctx, client.ContainerListOptions{Filters: flt})
	cancel()
	if err != nil {
		return nil
	}
	var engines []container.Summary
	for _, c := range list.Items {
		if c.Labels[LabelCluster] != "" && c.Labels[LabelRole] != contract.RoleProof && ownContainer(c.Labels, network) {
			engines = append(engines, c)
		}
	}
	b.guard.active.Store(false)
	if len(engines) == 0 {
		g.Observe(f, false)
		return nil
	}
	t := hostmem.Trip{Lowest: g.Lowest, Floor: g.Floor, Total: f.TotalBytes, PSIFull: f.PSIFull, At: time.Now()}
	b.logger().Error("host memory below the guard's floor: stopping the engine containers",
		zap.Int64("available", f.AvailableBytes), zap.Int64("lowest", g.Lowest), zap.Int64("floor", g.Floor), zap.Int("containers", len(engines)))
	secs := int(GuardGrace.Seconds())
	var wg sync.WaitGroup
	var stopped []string
	for _, c := range engines {
		b.guard.record(c.Labels[LabelCluster], t)
		stopped = append(stopped, c.ID)
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, GuardGrace+5*time.Second)
			defer cancel()
			if _, err := eng.ContainerStop(sctx, id, client.ContainerStopOptions{Timeout: &secs}); err != nil {
				b.logger().Warn("guard: stop "+id[:min(12, len(id))], zap.Error(err))
			}
		}(c.ID)
	}
	wg.Wait()
	g.Observe(f, false)
	return stopped
}
