//go:build integration

package activities

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/failure"
	"github.com/tpdeploy/tpdeploy/internal/labnet"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// switchlessLab is the seed lab's nodes (their switched network stands in for the
// management LAN) with a veth cable per pair in cables, each its own /30 (cable i is
// 192.168.(10+i).0/30, the first node's end .1): a Spark's CX-7 port per cable end, named
// cxK on the node (K its K-th cable), with a simulated HCA roceK on it in the node's own
// sysfs tree, as the lab's topologies give them. It returns one agent per node.
func switchlessLab(t testing.TB, n int, cables [][2]int) (*labnet.Topology, []*Agent) {
	t.Helper()
	topo, _ := seedLab(t, n)
	ports := make([]int, n)
	sys := make([]string, n)
	for i := range n {
		sys[i] = filepath.Join(t.TempDir(), "sys")
	}
	end := func(i int) string {
		k := ports[i]
		ports[i]++
		dev := filepath.Join(sys[i], "class/infiniband", fmt.Sprintf("roce%d", k), "ports/1")
		netdev := fmt.Sprintf("cx%d", k)
		for f, v := range map[string]string{"state": "4: ACTIVE\n", "gid_attrs/ndevs/0": netdev + "\n", "link_layer": "Ethernet\n", "rate": "200 Gb/sec (4X HDR)\n"} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dev, f)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dev, f), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return netdev
	}
	for ci, cb := range cables {
		a, b := end(cb[0]), end(cb[1])
		if err := topo.Cable(cb[0], cb[1], a, b, cableNet(ci)); err != nil {
			t.Fatal(err)
		}
	}
	agents := make([]*Agent, n)
	for i, node := range topo.Nodes {
		boot := filepath.Join(t.TempDir(), "boot_id")
		if err := os.WriteFile(boot, []byte(node.Name+"-boot\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		agents[i] = New(Config{Name: node.Name, NetNS: node.NetNS, SysRoot: sys[i], ProcRoot: t.TempDir(), BootIDFile: boot, unrestricted: true})
	}
	return topo, agents
}

func cableNet(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 168, byte(10 + i), 0}), 30)
}

// reachFabric is the workflow's reachability test with the data plane's cables: every
// node listens on ReachAddrs and dials DialTargets of the others' listeners.
func reachFabric(t testing.TB, agents []*Agent, c spec.Cluster, probes []netplan.NodeProbe) []netplan.PairResult {
	t.Helper()
	ctx := context.Background()
	addrs := netplan.ReachAddrs(c, probes)
	listeners := make([]contract.ListenResult, len(agents))
	for i, a := range agents {
		r, err := a.Reachability.OpenProbeListeners(ctx, contract.ListenRequest{Node: a.Probe.name, Addrs: addrs[a.Probe.name], TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		listeners[i] = r
	}
	defer func() {
		for i, a := range agents {
			_ = a.Reachability.CloseProbeListeners(ctx, contract.CloseRequest{Node: a.Probe.name, Token: listeners[i].Token})
		}
	}()
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
		targets = netplan.DialTargets(probes[i], targets)
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
	return matrix
}

// TestTriangleCablesMeasuredBothWays: three nodes on a LAN and a triangle of veth cables;
// the reachability test measures every cable in both directions, and a cable whose one
// direction is cut (node-c's connections to node-a dropped at node-a) is left out with
// that direction as the reason, so tensor 3 is refused naming the pair.
func TestTriangleCablesMeasuredBothWays(t *testing.T) {
	topo, agents := switchlessLab(t, 3, [][2]int{{0, 1}, {1, 2}, {2, 0}})
	c := seedSpec(3)
	probes := probeAll(t, agents)
	matrix := reachFabric(t, agents, c, probes)
	cables := 0
	for _, r := range matrix {
		if r.Subnet.Bits() == 30 {
			cables++
			if !r.OK {
				t.Errorf("%s → %s over %s: %s", r.From, r.To, r.Subnet, r.Error)
			}
		}
	}
	if cables != 6 {
		t.Fatalf("%d cable dials, want 3 cables both ways: %+v", cables, matrix)
	}
	// The cables carry tensor 3, but NCCL 2.28.9 cannot use them (netplan channelNICs);
	// data_plane: warn plans NCCL on sockets over the LAN with the IB plugin off.
	cw := c
	cw.DataPlane = spec.DataPlaneWarn
	plan, err := netplan.Choose(cw, probes, matrix)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Subnet != labnet.FastNet || plan.Fabric == nil || plan.Fabric.Shape != "triangle" || len(plan.Fabric.Graph.Links) != 3 || plan.Fabric.Used {
		t.Fatalf("plan on %s, fabric %+v", plan.Subnet, plan.Fabric)
	}
	if a, _ := plan.Node("node-a"); a.Env["NCCL_IB_DISABLE"] != "1" || a.Env["NCCL_IB_HCA"] != "" {
		t.Errorf("node-a env %v, want NCCL on sockets", a.Env)
	}

	// Cut c → a on the c-a cable (c's end .1, a's .2): SYNs from c are dropped at a; a's
	// SYN to c and c's SYN-ACK still pass.
	cut := exec.Command("ip", "netns", "exec", topo.Nodes[0].NetNS, "iptables", "-I", "INPUT", "-p", "tcp", "--syn",
		"-s", "192.168.12.1", "-d", "192.168.12.2", "-j", "DROP")
	if out, err := cut.CombinedOutput(); err != nil {
		t.Fatalf("iptables: %v: %s", err, out)
	}
	matrix = reachFabric(t, agents, c, probes)
	g := netplan.BuildGraph(c, probes, matrix)
	if len(g.Links) != 2 || len(g.LeftOut) != 1 {
		t.Fatalf("graph %+v, want c-a left out", g)
	}
	lo := g.LeftOut[0]
	if lo.A != "node-a" || lo.B != "node-c" || !strings.HasPrefix(lo.Reason, "node-c cannot reach node-a at 192.168.12.2:") ||
		!strings.HasSuffix(lo.Reason, "(i/o timeout)") || strings.Contains(lo.Reason, "node-a cannot") {
		t.Errorf("left out %+v, want only node-c → node-a timing out", lo)
	}
	_, err = netplan.Choose(c, probes, matrix)
	var pe *netplan.Error
	if !errors.As(err, &pe) || pe.Type != failure.DataPlaneUnreachable || !strings.Contains(pe.Msg, "node-a and node-c share no link") ||
		!strings.Contains(pe.Msg, "node-a-node-c on 192.168.12.0/30 is cabled but left out: node-c cannot reach node-a") {
		t.Errorf("tensor 3 with c-a cut one way: %v", err)
	}
}

// BenchmarkReachRing16 is the reachability test and the plan for sixteen Sparks in a ring
// on real network namespaces (a LAN and a veth per cable), calling the activities
// directly: 240 LAN dials and 32 cable dials per round. It reports the wall time per round.
func BenchmarkReachRing16(b *testing.B) {
	const n = 16
	var cables [][2]int
	for i := range n {
		cables = append(cables, [2]int{i, (i + 1) % n})
	}
	_, agents := switchlessLab(b, n, cables)
	c := seedSpec(n)
	c.DataPlane = spec.DataPlaneWarn // the placement in full; then NCCL on sockets (channelNICs)
	var total time.Duration
	runs := 0
	for b.Loop() {
		start := time.Now()
		probes := probeAll(b, agents)
		matrix := reachFabric(b, agents, c, probes)
		plan, err := netplan.Choose(c, probes, matrix)
		if err != nil {
			b.Fatal(err)
		}
		if len(matrix) != n*(n-1)+2*n || plan.Fabric == nil || plan.Fabric.Shape != "ring" || len(plan.Fabric.Graph.Links) != n {
			b.Fatalf("matrix %d dials, fabric %+v", len(matrix), plan.Fabric)
		}
		total += time.Since(start)
		runs++
	}
	b.ReportMetric(total.Seconds()/float64(runs), "s/plan")
}
