//go:build integration

package activities

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/labnet"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// seedLab builds the seed topology in network namespaces and returns one agent per node.
// It needs root and iproute2, which CI has; without them it fails rather than skips.
func seedLab(t testing.TB, n int) (*labnet.Topology, []*Agent) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("network namespace tests need root (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("network namespace tests need iproute2's ip (make test installs it)")
	}
	prefix := fmt.Sprintf("tpd-t%d", os.Getpid()%100000)
	topo, err := labnet.Seed(prefix, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topo.Close(); err != nil {
			t.Error(err)
		}
	})
	agents := make([]*Agent, n)
	for i, node := range topo.Nodes {
		agents[i] = New(Config{Name: node.Name, NetNS: node.NetNS, unrestricted: true})
	}
	return topo, agents
}

func seedSpec(n int) spec.Cluster {
	c := spec.Cluster{Name: "lab", Image: "tpdeploy/sim:dev", Model: spec.Model{Path: "/m"}, Parallel: spec.Parallel{Tensor: n}}
	for i := range n {
		role := spec.RoleWorker
		if i == 0 {
			role = spec.RoleHead
		}
		c.Nodes = append(c.Nodes, spec.Node{Name: labnet.NodeName(i), Role: role, GPUs: 1})
	}
	return c.WithDefaults()
}

func findLink(p netplan.NodeProbe, name string) (netplan.Link, bool) {
	for _, l := range p.Links {
		if l.Name == name {
			return l, true
		}
	}
	return netplan.Link{}, false
}

func TestProbeSeedTopology(t *testing.T) {
	_, agents := seedLab(t, 2)
	ctx := context.Background()
	a, err := agents[0].Probe.ProbeNode(ctx, contract.ProbeRequest{Node: "node-a", SpecGPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := agents[1].Probe.ProbeNode(ctx, contract.ProbeRequest{Node: "node-b", SpecGPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	fast, ok := findLink(a, "vethA")
	if !ok || !fast.Up || fast.MTU != 9000 || fast.Kind != "veth" || len(fast.Addrs) == 0 || fast.Addrs[0].String() != "192.168.77.12/24" {
		t.Errorf("node-a vethA = %+v", fast)
	}
	if ext, ok := findLink(a, "ext0"); !ok || ext.Addrs[0].String() != "10.77.230.180/24" {
		t.Errorf("node-a ext0 = %+v", ext)
	}
	// What Ray's head would register under without --node-ip-address: the default route's source.
	if a.DefaultRoute == nil || a.DefaultRoute.Interface != "ext0" || a.DefaultRoute.Source.String() != "10.77.230.180" {
		t.Errorf("node-a default route = %+v, want ext0 from 10.77.230.180", a.DefaultRoute)
	}
	if b.DefaultRoute != nil {
		t.Errorf("node-b has no default route, probe says %+v", b.DefaultRoute)
	}
	if l, ok := findLink(b, "ibp1"); !ok || l.Addrs[0].String() != "192.168.77.13/24" {
		t.Errorf("node-b ibp1 = %+v", l)
	}
	if lo, ok := findLink(b, "lo"); !ok || !lo.Loopback {
		t.Errorf("node-b lo = %+v", lo)
	}
	if a.BootID == "" || a.Hostname == "" || a.GPUs != 1 || a.GPUSource != "spec" {
		t.Errorf("node-a boot %q host %q gpus %d (%s)", a.BootID, a.Hostname, a.GPUs, a.GPUSource)
	}
}

// reach runs the reachability protocol the workflow runs: everyone listens, everyone
// dials everyone else, everyone closes.
func reach(t testing.TB, agents []*Agent, addrs map[string][]netip.Prefix) []netplan.PairResult {
	return reachWith(t, agents, addrs, false)
}

// reachWith is reach, with the ephemeral-range listeners when ephemeral (as the workflow
// asks).
func reachWith(t testing.TB, agents []*Agent, addrs map[string][]netip.Prefix, ephemeral bool) []netplan.PairResult {
	t.Helper()
	ctx := context.Background()
	listeners := make([]contract.ListenResult, len(agents))
	for i, a := range agents {
		r, err := a.Reachability.OpenProbeListeners(ctx, contract.ListenRequest{Node: a.Probe.name, Addrs: addrs[a.Probe.name], TTL: time.Minute, Ephemeral: ephemeral})
		if err != nil {
			t.Fatal(err)
		}
		listeners[i] = r
	}
	var mu sync.Mutex
	var matrix []netplan.PairResult
	var wg sync.WaitGroup
	for i, a := range agents {
		var targets []netplan.Target
		for j, l := range listeners {
			if j != i {
				targets = append(targets, l.Targets...)
			}
		}
		wg.Go(func() {
			res, err := a.Reachability.DialPeers(ctx, contract.DialRequest{Node: a.Probe.name, Targets: targets, Timeout: time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			matrix = append(matrix, res...)
			mu.Unlock()
		})
	}
	wg.Wait()
	for i, a := range agents {
		if err := a.Reachability.CloseProbeListeners(ctx, contract.CloseRequest{Node: a.Probe.name, Token: listeners[i].Token}); err != nil {
			t.Fatal(err)
		}
		if a.Reachability.openSets() != 0 {
			t.Errorf("%s: listeners left open", a.Probe.name)
		}
	}
	return matrix
}

func probeAll(t testing.TB, agents []*Agent) []netplan.NodeProbe {
	t.Helper()
	probes := make([]netplan.NodeProbe, len(agents))
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Go(func() {
			p, err := a.Probe.ProbeNode(context.Background(), contract.ProbeRequest{Node: a.Probe.name, SpecGPUs: 1})
			if err != nil {
				t.Error(err)
			}
			probes[i] = p
		})
	}
	wg.Wait()
	return probes
}

func TestSeedPlanChoosesSharedFastSubnet(t *testing.T) {
	_, agents := seedLab(t, 2)
	c := seedSpec(2)
	probes := probeAll(t, agents)
	matrix := reach(t, agents, netplan.ListenAddrs(c, probes))
	if len(matrix) != 2 {
		t.Fatalf("matrix = %+v, want the fast subnet in both directions", matrix)
	}
	for _, r := range matrix {
		if !r.OK || r.RTT <= 0 {
			t.Errorf("%s → %s over %s: %+v", r.From, r.To, r.Subnet, r)
		}
	}
	plan, err := netplan.Choose(c, probes, matrix)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Subnet.String() != "192.168.77.0/24" || plan.RayAddress != "192.168.77.12:6379" {
		t.Errorf("plan subnet %s ray %s", plan.Subnet, plan.RayAddress)
	}
	a, _ := plan.Node("node-a")
	b, _ := plan.Node("node-b")
	// The seed's topology as measured on real GPUs: one exact-name list survives vLLM's copy
	// of the driver's NCCL_*; Gloo and the address stay per node.
	if a.Env["NCCL_SOCKET_IFNAME"] != "=vethA,ibp1" || b.Env["NCCL_SOCKET_IFNAME"] != "=vethA,ibp1" || plan.NCCL.Form != netplan.NCCLClusterWide ||
		a.Env["GLOO_SOCKET_IFNAME"] != "vethA" || b.Env["GLOO_SOCKET_IFNAME"] != "ibp1" || b.Env["VLLM_HOST_IP"] != "192.168.77.13" {
		t.Errorf("env a=%v b=%v nccl %+v", a.Env, b.Env, plan.NCCL)
	}
	var ext netplan.Candidate
	for _, d := range plan.Decision {
		if d.Subnet == labnet.ExtNet {
			ext = d
		}
	}
	if ext.Reason != "rejected: node-b has no address in it" {
		t.Errorf("external subnet: %+v", ext)
	}
}

// TestWorkerCannotReachHeadExternalAddress is the seed's failure 2 on real sockets: from
// node-b the head's external address is unroutable.
func TestWorkerCannotReachHeadExternalAddress(t *testing.T) {
	topo, agents := seedLab(t, 2)
	ctx := context.Background()
	l, err := agents[0].Reachability.OpenProbeListeners(ctx, contract.ListenRequest{Node: "node-a", Addrs: []netip.Prefix{topo.Nodes[0].ExtAddr, topo.Nodes[0].FastAddr}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer agents[0].Reachability.CloseProbeListeners(ctx, contract.CloseRequest{Node: "node-a", Token: l.Token})
	res, err := agents[1].Reachability.DialPeers(ctx, contract.DialRequest{Node: "node-b", Targets: l.Targets, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].OK || !strings.Contains(res[0].Error, "network is unreachable") {
		t.Errorf("node-b → external %s: %+v, want network is unreachable", res[0].Addr, res[0])
	}
	if !res[1].OK {
		t.Errorf("node-b → fast %s: %+v", res[1].Addr, res[1])
	}
}

func TestListenersCloseAndExpire(t *testing.T) {
	topo, agents := seedLab(t, 2)
	ctx := context.Background()
	a := agents[0]
	l, err := a.Reachability.OpenProbeListeners(ctx, contract.ListenRequest{Node: "node-a", Addrs: []netip.Prefix{topo.Nodes[0].FastAddr}, TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if a.Reachability.openSets() != 1 {
		t.Fatalf("open sets = %d", a.Reachability.openSets())
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.Reachability.openSets() != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if a.Reachability.openSets() != 0 {
		t.Fatal("listeners outlived their TTL")
	}
	res, err := agents[1].Reachability.DialPeers(ctx, contract.DialRequest{Node: "node-b", Targets: l.Targets, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].OK || !strings.Contains(res[0].Error, "connection refused") {
		t.Errorf("dial after expiry: %+v, want connection refused", res[0])
	}
	// Closing an expired token is not an error.
	if err := a.Reachability.CloseProbeListeners(ctx, contract.CloseRequest{Node: "node-a", Token: l.Token}); err != nil {
		t.Error(err)
	}
}

func TestCutNodeIsRejectedWithReason(t *testing.T) {
	topo, agents := seedLab(t, 2)
	if err := topo.Cut("node-b"); err != nil {
		t.Fatal(err)
	}
	c := seedSpec(2)
	probes := probeAll(t, agents)
	_, err := netplan.Choose(c, probes, reach(t, agents, netplan.ListenAddrs(c, probes)))
	if err == nil || !strings.Contains(err.Error(), "192.168.77.0/24 rejected: node-b: 192.168.77.13 on ibp1 is down") {
		t.Errorf("plan with node-b cut: %v", err)
	}
}
