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
		if got := b.guardOnce(context.Background(), &g, floor, "host", hostmem.Facts{TotalBytes: total, AvailableBytes: avail}, eng); got != nil {
			t.Fatalf("stopped %v above the floor", got)
		}
	}
	if fake.lists != 0 {
		t.Fatalf("asked Docker %d times above the floor", fake.lists)
	}
	got := b.guardOnce(context.Background(), &g, floor, "host", hostmem.Facts{TotalBytes: total, AvailableBytes: 700 * hostmem.MiB}, eng)
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
	b.guardOnce(context.Background(), &g, floor, "host", hostmem.Facts{TotalBytes: total, AvailableBytes: 500 * hostmem.MiB}, eng)
	if fake.lists != 1 {
		t.Errorf("asked Docker %d times, want once", fake.lists)
	}
}

// Labs whose nodes share one Docker engine reuse node names: the guard of one lab's node-a
// stops only the engines in its own network mode (LabelNetwork), never another lab's
// node-a's, whose memory is another node's; an engine started before the label is still
// stopped on a host-network node (a real node has one agent per engine).
func TestGuardStopsOnlyItsOwnNodesEngines(t *testing.T) {
	for _, tt := range []struct {
		network string
		want    []string
	}{
		{"container:tpd-lab1-node-a", []string{"mine"}},
		{"host", []string{"legacy", "real"}},
	} {
		t.Run(tt.network, func(t *testing.T) {
			b := &nodeBase{name: "node-a", log: zap.NewNop(), guard: &memGuard{}}
			b.guard.active.Store(true)
			fake := &guardFake{items: []container.Summary{
				{ID: "mine", Labels: map[string]string{LabelCluster: "c", LabelRole: contract.RoleVLLM, LabelNode: "node-a", LabelNetwork: "container:tpd-lab1-node-a"}},
				{ID: "theirs", Labels: map[string]string{LabelCluster: "d", LabelRole: contract.RoleVLLM, LabelNode: "node-a", LabelNetwork: "container:tpd-lab2-node-a"}},
				{ID: "real", Labels: map[string]string{LabelCluster: "e", LabelRole: contract.RoleVLLM, LabelNode: "node-a", LabelNetwork: "host"}},
				{ID: "legacy", Labels: map[string]string{LabelCluster: "f", LabelRole: contract.RoleVLLM, LabelNode: "node-a"}},
			}}
			var g hostmem.Guard
			got := b.guardOnce(context.Background(), &g, hostmem.Reserve{Bytes: hostmem.GiB}, tt.network,
				hostmem.Facts{TotalBytes: 8 * hostmem.GiB, AvailableBytes: 500 * hostmem.MiB}, func() (guardEngine, error) { return fake, nil })
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("stopped %v, want %v", got, tt.want)
			}
			if _, ok := b.guard.trip("d"); ok {
				t.Error("recorded a trip for the other lab's cluster")
			}
		})
	}
}

// The start-up sweep (and a proof's removal) takes only its own lab's short-lived
// containers: a node of the same name in another network mode is another lab's.
func TestShortLivedAreOnlyTheAgentsOwnMode(t *testing.T) {
	read := map[string]string{LabelImageRead: "sha256:x", LabelNode: "node-a", LabelNetwork: "container:tpd-lab1-node-a"}
	if !shortLived(read, "node-a", "container:tpd-lab1-node-a") || shortLived(read, "node-a", "container:tpd-lab2-node-a") || shortLived(read, "node-b", "container:tpd-lab1-node-a") {
		t.Error("an image read is swept by its own lab's node-a only")
	}
	legacy := map[string]string{LabelRole: contract.RoleProof, LabelNode: "node-a"}
	if !shortLived(legacy, "node-a", "host") || shortLived(legacy, "node-a", "container:tpd-lab1-node-a") {
		t.Error("an unlabelled proof is swept on a host-network node only")
	}
}
