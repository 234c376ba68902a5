package activities

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/hostmem"
)

type guardFake struct {
	mu      sync.Mutex
	items   []container.Summary
	lists   int
	stopped []string
	grace   int
}

func (f *guardFake) ContainerList(context.Context, client.ContainerListOptions) (client.ContainerListResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return client.ContainerListResult{Items: f.items}, nil
}

func (f *guardFake) ContainerStop(_ context.Context, id string, o client.ContainerStopOptions) (client.ContainerStopResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, id)
	f.grace = *o.Timeout
	return client.ContainerStopResult{}, nil
}

// Above the floor the guard asks Docker nothing; below it, it stops every engine container
// of every cluster on the node (not a proof's) with a short grace, records each cluster's
// trip with the lowest MemAvailable seen, and follows again only after the next start.
func TestGuardStopsTheEnginesBelowTheFloor(t *testing.T) {
	b := &nodeBase{name: "node-b", log: zap.NewNop(), guard: &memGuard{}}
	b.guard.active.Store(true)
	fake := &guardFake{items: []container.Summary{
		{ID: "aaaaaaaaaaaa1", Labels: map[string]string{LabelCluster: "c", LabelRole: contract.RoleRayWorker}},
		{ID: "bbbbbbbbbbbb2", Labels: map[string]string{LabelCluster: "d", LabelRole: contract.RoleVLLM}},
		{ID: "cccccccccccc3", Labels: map[string]string{LabelCluster: "c", LabelRole: contract.RoleProof}},
	}}
	eng := func() (guardEngine, error) { return fake, nil }
	floor := hostmem.Reserve{Bytes: hostmem.GiB}
	var g hostmem.Guard
	total := int64(8 * hostmem.GiB)
	for _, avail := range []int64{6 * hostmem.GiB, 2 * hostmem.GiB, 3 * hostmem.GiB} {
		if got := b.guardOnce(context.Background(), &g, floor, hostmem.Facts{TotalBytes: total, AvailableBytes: avail}, eng); got != nil {
			t.Fatalf("stopped %v above the floor", got)
		}
	}
	if fake.lists != 0 {
		t.Fatalf("asked Docker %d times above the floor", fake.lists)
	}
	got := b.guardOnce(context.Background(), &g, floor, hostmem.Facts{TotalBytes: total, AvailableBytes: 700 * hostmem.MiB}, eng)
	slices.Sort(fake.stopped)
	if !slices.Equal(got, []string{"aaaaaaaaaaaa1", "bbbbbbbbbbbb2"}) || !slices.Equal(fake.stopped, got) || fake.grace != int(GuardGrace.Seconds()) {
		t.Fatalf("stopped %v (engine saw %v, grace %d s)", got, fake.stopped, fake.grace)
	}
	for _, cluster := range []string{"c", "d"} {
		if tr, ok := b.guard.trip(cluster); !ok || tr.Lowest != 700*hostmem.MiB || tr.Floor != hostmem.GiB {
			t.Errorf("trip of %s: %+v %v", cluster, tr, ok)
		}
	}
	// Stopped: low memory alone asks Docker no more until the agent starts a container.
	b.guardOnce(context.Background(), &g, floor, hostmem.Facts{TotalBytes: total, AvailableBytes: 500 * hostmem.MiB}, eng)
	if fake.lists != 1 {
		t.Errorf("asked Docker %d times, want once", fake.lists)
	}
}
