package workflows

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// ring4Agents are fake agents for four switchless Sparks listed a, c, b, d and cabled
// a-b-c-d-a: a 10 GbE LAN every node shares, and a /30 per cable between two CX-7 ports
// (port k of a node is enp1s0f<k>np<k> with HCA rocep1s0f<k>).
func ring4Agents() (*fakeagents.Agents, spec.Cluster) {
	f := fakeagents.New()
	names := []string{"node-a", "node-c", "node-b", "node-d"}
	probes := map[string]*netplan.NodeProbe{}
	s := fakeagents.SeedSpec()
	s.Nodes = nil
	for i, n := range names {
		role := spec.RoleWorker
		if i == 0 {
			role = spec.RoleHead
		}
		s.Nodes = append(s.Nodes, spec.Node{Name: n, Role: role, GPUs: 1})
		probes[n] = &netplan.NodeProbe{Node: n, Hostname: n, BootID: "boot-" + n, GPUs: 1, GPUSource: "spec", Links: []netplan.Link{
			{Name: "enP7s7", Kind: "device", MTU: 1500, Up: true, SpeedMbps: 10000, Addrs: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.1.230.%d/24", 10+i))}},
		}}
	}
	s.Parallel = spec.Parallel{Tensor: 4}
	port := func(n, addr string) {
		p := probes[n]
		k := len(p.RDMA)
		netdev := fmt.Sprintf("enp1s0f%dnp%d", k, k)
		p.Links = append(p.Links, netplan.Link{Name: netdev, Kind: "device", MTU: 9000, Up: true, SpeedMbps: 200000, Addrs: []netip.Prefix{netip.MustParsePrefix(addr)}})
		p.RDMA = append(p.RDMA, netplan.RDMADevice{Name: fmt.Sprintf("rocep1s0f%d", k), Port: 1, Netdev: netdev, State: "ACTIVE", LinkLayer: "Ethernet", RateMbps: 200000, UVerbs: fmt.Sprintf("uverbs%d", k)})
	}
	for i, cb := range [][2]string{{"node-a", "node-b"}, {"node-b", "node-c"}, {"node-c", "node-d"}, {"node-d", "node-a"}} {
		port(cb[0], fmt.Sprintf("192.168.%d.1/30", 10+i))
		port(cb[1], fmt.Sprintf("192.168.%d.2/30", 10+i))
	}
	f.Probes = map[string]netplan.NodeProbe{}
	for n, p := range probes {
		f.Probes[n] = *p
	}
	return f, s.WithDefaults()
}

// TestMPRanksFollowTheCables: on a ring of four listed a, c, b, d, the reachability test
// measures every cable both ways, and executor mp starts node-b as node rank 1 and node-c
// as 2 (the cables' order), not the spec's; the proof ranks the same way.
func TestMPRanksFollowTheCables(t *testing.T) {
	f, s := ring4Agents()
	s.Executor = spec.ExecutorMP
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	fab := res.Plan.Fabric
	if fab == nil || !fab.Used || fab.Shape != "ring" || len(fab.Graph.Links) != 4 || !slices.Equal(fab.Order, []string{"node-a", "node-b", "node-c", "node-d"}) {
		t.Fatalf("fabric %+v", fab)
	}
	got := fakeagents.Calls(f, "StartVLLMRank")
	for _, want := range []string{"StartVLLMRank node-b rank=1 replace=true", "StartVLLMRank node-c rank=2 replace=true", "StartVLLMRank node-d rank=3 replace=true", "StartVLLMRank node-a rank=0 replace=true"} {
		if !slices.Contains(got, want) {
			t.Errorf("rank starts %q lack %q", got, want)
		}
	}
	ranks := map[string]int{}
	for _, r := range f.ProofRequests {
		ranks[r.Node] = r.Rank
	}
	if ranks["node-b"] != 1 || ranks["node-c"] != 2 || ranks["node-d"] != 3 {
		t.Errorf("proof ranks %v, want the cables' order", ranks)
	}
	// The proof goes round the cables: a, b, c, d is also the ring's cycle.
	if res.DataPlane == nil || res.DataPlane.Summary != "IB on 4 links (ring node-a-node-b-node-c-node-d), 23.7 GB/s per hop" {
		t.Errorf("data plane %+v", res.DataPlane)
	}
	for _, w := range res.Plan.Warnings {
		if strings.Contains(w, "order") {
			t.Errorf("warning %q: mp places the ranks itself", w)
		}
	}
}

// TestRayRingInIPOrderTheCablesDoNotFollowIsRefused: vLLM's legacy Ray executor ranks
// node-c before node-b (10.1.230.11 < .12), so on the ring the deploy is refused naming the
// pairs, before any container.
func TestRayRingInIPOrderTheCablesDoNotFollowIsRefused(t *testing.T) {
	f, s := ring4Agents()
	s.Executor = spec.ExecutorRay
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	var app *temporal.ApplicationError
	err := env.GetWorkflowError()
	if !errors.As(err, &app) || app.Type() != contract.ErrDataPlaneUnreachable || !strings.Contains(app.Message(), "node-a and node-c share no link") ||
		!strings.Contains(app.Message(), "executor: mp") {
		t.Fatalf("err = %v, want DataPlaneUnreachable naming node-a and node-c", err)
	}
	if starts := fakeagents.Calls(f, "StartRayHead", "StartRayWorker", "StartVLLMRank"); len(starts) != 0 {
		t.Errorf("started %q", starts)
	}
}
