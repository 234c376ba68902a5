package netplan

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/failure"
	"github.com/tpdeploy/tpdeploy/internal/release"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// switchless builds Sparks without a switch: every node on a 10 GbE management LAN, and
// per cable a /30 of its own between two CX-7 ports, each port its own netdev and HCA
// (port k of a node is enp1s0f<k>np<k> and rocep1s0f<k>, in the order its cables are
// listed). cables are pairs of indexes into names.
func switchless(names []string, cables [][2]int) (spec.Cluster, []NodeProbe) {
	c := clusterOf(names...)
	probes := make([]NodeProbe, len(names))
	for i, n := range names {
		probes[i] = NodeProbe{Node: n, GPUs: 1, GPUSource: "spec", Links: []Link{
			link("enP7s7", fmt.Sprintf("10.1.230.%d/24", 10+i), 1500, speedMbps(10000)),
		}}
	}
	port := func(i int, addr string) {
		k := len(probes[i].RDMA)
		netdev := fmt.Sprintf("enp1s0f%dnp%d", k, k)
		probes[i].Links = append(probes[i].Links, link(netdev, addr, 9000, speedMbps(200000)))
		probes[i].RDMA = append(probes[i].RDMA, RDMADevice{Name: fmt.Sprintf("rocep1s0f%d", k), Port: 1, Netdev: netdev, State: "ACTIVE", RateMbps: 200000})
	}
	for ci, cb := range cables {
		port(cb[0], fmt.Sprintf("192.168.%d.1/30", 10+ci))
		port(cb[1], fmt.Sprintf("192.168.%d.2/30", 10+ci))
	}
	return c, probes
}

// measured is the reachability test as the data plane needs it: the all-pairs test on the
// bootstrap candidates plus every link subnet between the nodes it joins, both ways.
// blocked "from>to@subnet" dials fail.
func measured(c spec.Cluster, probes []NodeProbe, blocked map[string]bool) []PairResult {
	addrs := ReachAddrs(c, probes)
	var out []PairResult
	for _, from := range probes {
		var targets []Target
		for _, to := range probes {
			for _, a := range addrs[to.Node] {
				targets = append(targets, Target{Node: to.Node, Subnet: a.Masked(), Addr: netip.AddrPortFrom(a.Addr(), 40000)})
			}
		}
		for _, t := range DialTargets(from, targets) {
			r := PairResult{From: from.Node, To: t.Node, Subnet: t.Subnet, Addr: t.Addr, OK: true, RTT: 50 * time.Microsecond}
			if blocked[from.Node+">"+t.Node+"@"+t.Subnet.String()] {
				r.OK, r.RTT, r.Error = false, 0, "i/o timeout"
			}
			out = append(out, r)
		}
	}
	return out
}

var ring4Cables = [][2]int{{0, 1}, {1, 2}, {2, 3}, {3, 0}} // a-b-c-d-a: a-c and b-d have none

// fabricFor is the rank placement alone (planFabric) on the measured graph, one GPU per
// node: what the cables carry, before channelNICs asks whether NCCL can use them.
func fabricFor(c spec.Cluster, probes []NodeProbe, m []PairResult) (Fabric, error) {
	gpus := map[string]int{}
	for _, n := range c.Nodes {
		gpus[n.Name] = 1
	}
	return planFabric(c, BuildGraph(c, probes, m), gpus)
}

// TestTriangleOfOneGPUSparksIsRefusedForNCCLsChannelNIC: every pair of a triangle is
// cabled, but NCCL 2.28.9 connects each channel of a one-GPU node to both its neighbours
// over one NIC (channelNICs), so IB cannot carry it: the deploy is refused naming each
// node's ports and the ways out, and data_plane: warn runs NCCL over sockets on the LAN
// with the IB plugin off (NCCL_IB_DISABLE=1), saying why.
func TestTriangleOfOneGPUSparksIsRefusedForNCCLsChannelNIC(t *testing.T) {
	c, probes := switchless([]string{"node-a", "node-b", "node-c"}, [][2]int{{0, 1}, {1, 2}, {2, 0}})
	f, err := fabricFor(c, probes, measured(c, probes, nil))
	if err != nil || f.Shape != "triangle" || len(f.Graph.Links) != 3 || f.Algo != "" {
		t.Fatalf("the cables carry tensor 3 in any order: %v %+v", err, f)
	}
	_, err = Choose(c, probes, measured(c, probes, nil))
	var pe *Error
	if !errors.As(err, &pe) || pe.Type != failure.DataPlaneUnreachable {
		t.Fatalf("err %v, want %s", err, failure.DataPlaneUnreachable)
	}
	for _, w := range []string{"the image's NCCL (version unknown) connects a one-GPU node to all its peers over each channel's one NIC", "ncclTopoGetNetDev",
		"node-a reaches node-b only over rocep1s0f0:1 and node-c only over rocep1s0f1:1", "ways out: an image whose NCCL is 2.30.7 or later", "a switch, so that", "data_plane: warn"} {
		if !strings.Contains(pe.Msg, w) {
			t.Errorf("message lacks %q:\n%s", w, pe.Msg)
		}
	}
	c.DataPlane = spec.DataPlaneWarn
	plan, err := Choose(c, probes, measured(c, probes, nil))
	if err != nil {
		t.Fatal(err)
	}
	if plan.Subnet.String() != "10.1.230.0/24" || plan.Fabric == nil || plan.Fabric.Used {
		t.Fatalf("bootstrap %s, fabric %+v", plan.Subnet, plan.Fabric)
	}
	for _, n := range plan.Nodes {
		if _, ok := n.Env["NCCL_IB_HCA"]; ok || len(n.RDMA) != 0 || n.Env["NCCL_IB_DISABLE"] != "1" {
			t.Errorf("%s: env %v, rdma %v; want NCCL on sockets", n.Name, n.Env, n.RDMA)
		}
		if n.Env["NCCL_SOCKET_IFNAME"] != "=enP7s7" || n.Env["VLLM_HOST_IP"] != n.Address.String() {
			t.Errorf("%s: bootstrap %q %q, want the LAN", n.Name, n.Env["NCCL_SOCKET_IFNAME"], n.Env["VLLM_HOST_IP"])
		}
	}
	if w := strings.Join(plan.Warnings, "\n"); !strings.Contains(w, "the data plane's 3 link(s) are not used: the image's NCCL (version unknown) connects") || !strings.Contains(w, "(data_plane: warn)") {
		t.Errorf("warnings %q", plan.Warnings)
	}
	// The operator's own NCCL_IB_DISABLE stands.
	c.Nodes[1].Env = map[string]string{"NCCL_IB_DISABLE": "0"}
	if plan, err = Choose(c, probes, measured(c, probes, nil)); err != nil || plan.Nodes[1].Env["NCCL_IB_DISABLE"] != "0" {
		t.Errorf("operator's NCCL_IB_DISABLE: %v %v", err, plan.Nodes[1].Env)
	}
}

func TestRing4PlacesRanksByTheCables(t *testing.T) {
	// The spec lists the nodes a, c, b, d: its neighbours in the list are not cabled.
	names := []string{"node-a", "node-c", "node-b", "node-d"}
	idx := func(n string) int { return slices.Index(names, n) }
	var cables [][2]int
	for _, cb := range [][2]string{{"node-a", "node-b"}, {"node-b", "node-c"}, {"node-c", "node-d"}, {"node-d", "node-a"}} {
		cables = append(cables, [2]int{idx(cb[0]), idx(cb[1])})
	}
	for _, tc := range []struct {
		name     string
		tp, pp   int
		algo     string
		nPairs   int
		specFits bool
	}{
		{"TP=4 over the ring", 4, 1, "Ring", 4, false},
		{"TP=2 x PP=2 on cabled pairs", 2, 2, "", 4, false},
		{"PP=4 round the ring", 1, 4, "Ring", 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, probes := switchless(names, cables)
			c.Parallel = spec.Parallel{Tensor: tc.tp, Pipeline: tc.pp}
			f, err := fabricFor(c, probes, measured(c, probes, nil))
			if err != nil {
				t.Fatal(err)
			}
			if f.Shape != "ring" || len(f.Pairs) != tc.nPairs || f.Order[0] != "node-a" {
				t.Fatalf("fabric %+v", f)
			}
			for _, p := range f.Pairs {
				if !f.Graph.Linked(p[0], p[1]) {
					t.Errorf("%s and %s must talk and share no link; order %v", p[0], p[1], f.Order)
				}
			}
			if slices.Equal(f.Order, names) != tc.specFits {
				t.Errorf("order %v: the spec's order does not fit the cables", f.Order)
			}
			if f.Algo != tc.algo {
				t.Errorf("algo %q (%s), want %q", f.Algo, f.AlgoReason, tc.algo)
			}
			// Every node talks to both its neighbours, on two ports: NCCL cannot (channelNICs).
			if why := channelNICs(f, map[string]int{}, "2.28.9"); !strings.Contains(why, "node-a reaches node-b only over") {
				t.Errorf("channelNICs %q", why)
			}
			if !strings.Contains(strings.Join(f.Cannot, "\n"), "node-a-node-c") {
				t.Errorf("cannot %q does not name the opposite corners", f.Cannot)
			}
		})
	}
}

func TestLayoutTheLinksCannotCarryIsRefused(t *testing.T) {
	t.Run("ring4 with a cable that does not connect", func(t *testing.T) {
		c, probes := switchless([]string{"node-a", "node-b", "node-c", "node-d"}, ring4Cables)
		// The d-a cable (the fourth, 192.168.13.0/30) is up but does not connect one way.
		_, err := Choose(c, probes, measured(c, probes, map[string]bool{"node-a>node-d@192.168.13.0/30": true}))
		var pe *Error
		if !errors.As(err, &pe) || pe.Type != failure.DataPlaneUnreachable {
			t.Fatalf("err %v, want %s", err, failure.DataPlaneUnreachable)
		}
		for _, w := range []string{"tensor 4 x pipeline 1", "node-a and node-d share no link",
			"node-a-node-d on 192.168.13.0/30 is cabled but left out: node-a cannot reach node-d at 192.168.13.1:40000", "ways out: cable the missing pairs", "data_plane: skip"} {
			if !strings.Contains(pe.Msg, w) {
				t.Errorf("message lacks %q:\n%s", w, pe.Msg)
			}
		}
	})
	t.Run("ring6: TP=3 x PP=2 needs triangles, and says which splits fit", func(t *testing.T) {
		names := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
		var cables [][2]int
		for i := range 6 {
			cables = append(cables, [2]int{i, (i + 1) % 6})
		}
		c, probes := switchless(names, cables)
		c.Parallel = spec.Parallel{Tensor: 3, Pipeline: 2}
		_, err := Choose(c, probes, measured(c, probes, nil))
		var pe *Error
		if !errors.As(err, &pe) || pe.Type != failure.DataPlaneUnreachable {
			t.Fatalf("err %v", err)
		}
		for _, w := range []string{"n0 and n2 share no link", "tensor 6 x pipeline 1, tensor 1 x pipeline 6"} {
			if !strings.Contains(pe.Msg, w) {
				t.Errorf("message lacks %q:\n%s", w, pe.Msg)
			}
		}
		if strings.Contains(pe.Msg, "tensor 2 x pipeline 3") {
			t.Errorf("offers a split whose PP groups need triangles:\n%s", pe.Msg)
		}
		// data_plane: skip plans the LAN, and says the links are not used.
		c.DataPlane = spec.DataPlaneSkip
		plan, err := Choose(c, probes, measured(c, probes, nil))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := plan.Nodes[0].Env["NCCL_IB_HCA"]; ok || len(plan.Nodes[0].RDMA) != 0 {
			t.Errorf("skip still plans RDMA: %v", plan.Nodes[0].Env)
		}
		if !strings.Contains(strings.Join(plan.Warnings, "\n"), "the data plane's 6 link(s) are not used: data_plane: skip") {
			t.Errorf("warnings %q", plan.Warnings)
		}
		// warn serves on sockets too, and says why the links are not used.
		c.DataPlane = spec.DataPlaneWarn
		plan, err = Choose(c, probes, measured(c, probes, nil))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := plan.Nodes[0].Env["NCCL_IB_HCA"]; ok || !strings.Contains(strings.Join(plan.Warnings, "\n"), "no rank order carries tensor 3 x pipeline 2 on them (data_plane: warn)") {
			t.Errorf("warn: env %v, warnings %q", plan.Nodes[0].Env, plan.Warnings)
		}
	})
}

// The seed's pair: both rails span the pair, so the plan is today's; the fabric only
// draws it.
func TestSparkPairFabricIsTheRails(t *testing.T) {
	c, probes := sparkPair()
	plan, err := Choose(c, probes, fullMatrix(c, probes, nil))
	if err != nil {
		t.Fatal(err)
	}
	f := plan.Fabric
	if f == nil || f.Shape != "pair" || len(f.Graph.Links) != 2 || !f.Used || f.Algo != "" {
		t.Fatalf("fabric %+v", f)
	}
	for _, n := range plan.Nodes {
		if _, ok := n.Env["NCCL_ALGO"]; ok || n.Env["NCCL_IB_HCA"] != "=rocep1s0f1:1,roceP2p1s0f1:1" {
			t.Errorf("%s env %v", n.Name, n.Env)
		}
	}
	want := []string{
		"data plane: pair spark-a-spark-b, 2 link(s)",
		"  spark-a-spark-b 192.168.100.0/24 rocep1s0f1:1<->rocep1s0f1:1 100 Gb/s",
		"  spark-a-spark-b 192.168.101.0/24 roceP2p1s0f1:1<->roceP2p1s0f1:1 100 Gb/s",
	}
	if got := f.Lines(); !slices.Equal(got[:3], want) {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Without RDMA anywhere the plan is today's: sockets on the LAN, no fabric.
func TestTriangleWithoutRDMAIsTodaysPlan(t *testing.T) {
	c, probes := switchless([]string{"node-a", "node-b", "node-c"}, [][2]int{{0, 1}, {1, 2}, {2, 0}})
	for i := range probes {
		probes[i].RDMA = nil
	}
	plan, err := Choose(c, probes, measured(c, probes, nil))
	if err != nil {
		t.Fatal(err)
	}
	if plan.Fabric != nil || plan.DataPlane != spec.DataPlaneSkip || plan.Subnet.String() != "10.1.230.0/24" {
		t.Fatalf("fabric %+v, data plane %q, subnet %s", plan.Fabric, plan.DataPlane, plan.Subnet)
	}
	if _, ok := plan.Nodes[0].Env["NCCL_IB_HCA"]; ok {
		t.Error("NCCL_IB_HCA without RDMA")
	}
}

func TestFabricLinesDrawTheRing(t *testing.T) {
	c, probes := switchless([]string{"node-a", "node-b", "node-c", "node-d"}, ring4Cables)
	c.DataPlane = spec.DataPlaneWarn
	plan, err := Choose(c, probes, measured(c, probes, nil))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan.Fabric.Lines(), "\n")
	for _, w := range []string{
		"data plane: ring node-a-node-b-node-c-node-d, 4 link(s)",
		"  node-a-node-b 192.168.10.0/30 rocep1s0f0:1<->rocep1s0f0:1 200 Gb/s",
		"  node-a-node-d 192.168.13.0/30 rocep1s0f1:1<->rocep1s0f1:1 200 Gb/s",
		"  ranks by node: node-a, node-b, node-c, node-d",
		"NCCL_ALGO=Ring",
		"cannot: no all-to-all",
		"not used: NCCL_IB_HCA lists none of these HCAs",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("lines lack %q:\n%s", w, text)
		}
	}
}

func TestDataPlaneListenAddrsAreTheCablesOnly(t *testing.T) {
	c, probes := switchless([]string{"node-a", "node-b", "node-c"}, [][2]int{{0, 1}, {1, 2}})
	got := DataPlaneListenAddrs(c, probes)
	if len(got["node-a"]) != 1 || len(got["node-b"]) != 2 || len(got["node-c"]) != 1 || got["node-a"][0].String() != "192.168.10.1/30" {
		t.Fatalf("listen %v", got)
	}
	// node-c has no address on the a-b cable: it does not dial it.
	if ShouldDial(probes[2], Target{Node: "node-a", Subnet: netip.MustParsePrefix("192.168.10.0/30")}) {
		t.Error("node-c dials the a-b cable")
	}
	if !ShouldDial(probes[2], Target{Node: "node-a", Subnet: netip.MustParsePrefix("10.1.230.0/24")}) {
		t.Error("node-c does not dial the LAN")
	}
}

// TestRanksPlacedByTheExecutor: on a ring of four listed a, c, b, d, executor mp gives
// every node its place in the cables' order as its node rank; vLLM's legacy Ray executor
// ranks by IP string (a, c, b, d here), which the cables do not carry, so the deploy is
// refused naming the pairs and the ways out; listed a, b, c, d, the IP order is the
// cables' and Ray serves; RayExecutorV2 ranks by Ray node ID and is refused on the ring
// but serves a triangle, where every order is cabled.
func TestRanksPlacedByTheExecutor(t *testing.T) {
	ring := func(names ...string) (spec.Cluster, []NodeProbe) {
		idx := func(n string) int { return slices.Index(names, n) }
		var cables [][2]int
		for _, cb := range [][2]string{{"node-a", "node-b"}, {"node-b", "node-c"}, {"node-c", "node-d"}, {"node-d", "node-a"}} {
			cables = append(cables, [2]int{idx(cb[0]), idx(cb[1])})
		}
		return switchless(names, cables)
	}
	// placed is the placement for an executor (placeForExecutor) on the cables alone, as
	// it would run were NCCL able to use them (on one-GPU Sparks it is not: channelNICs).
	placed := func(c spec.Cluster, probes []NodeProbe, e *release.Model) (Plan, error) {
		f, err := fabricFor(c, probes, measured(c, probes, nil))
		if err != nil {
			return Plan{}, err
		}
		f.Used = true
		c.Executor = e.Executor // as ChooseFor sets it from the release
		addrs, gpus := map[string]netip.Addr{}, map[string]int{}
		for _, p := range probes {
			addrs[p.Node], gpus[p.Node] = p.Links[0].Addrs[0].Addr(), 1
		}
		err = placeForExecutor(c, e, &f, addrs, gpus)
		return Plan{Fabric: &f}, err
	}
	mp := &release.Model{Executor: spec.ExecutorMP}
	legacy := &release.Model{Executor: spec.ExecutorRay, RayExecutor: release.RayLegacy}
	v2 := &release.Model{Executor: spec.ExecutorRay, RayExecutor: release.RayV2}

	c, probes := ring("node-a", "node-c", "node-b", "node-d")
	m := measured(c, probes, nil)
	plan, err := placed(c, probes, mp)
	if err != nil {
		t.Fatal(err)
	}
	if got := plan.Fabric.Order; !slices.Equal(got, []string{"node-a", "node-b", "node-c", "node-d"}) || !strings.HasPrefix(plan.Fabric.Placement, "executor mp") {
		t.Fatalf("mp order %v (%s)", got, plan.Fabric.Placement)
	}
	for want, n := range []string{"node-a", "node-b", "node-c", "node-d"} {
		if r := plan.NodeRank(c, n); r != want {
			t.Errorf("mp: %s has node rank %d, want %d (the spec ranks it %d)", n, r, want, c.NodeRank(n))
		}
	}

	for _, e := range []*release.Model{legacy, v2} {
		_, err = placed(c, probes, e)
		var pe *Error
		if !errors.As(err, &pe) || pe.Type != failure.DataPlaneUnreachable || !strings.Contains(pe.Msg, "ways out: executor: mp") {
			t.Fatalf("%s: %v", e.RayExecutor, err)
		}
		if e == legacy && !strings.Contains(pe.Msg, "node-a, node-c, node-b, node-d (node-c 10.1.230.11 < node-b 10.1.230.12 < node-d 10.1.230.13), in which node-a and node-c share no link; node-b and node-d share no link") {
			t.Errorf("legacy: %s", pe.Msg)
		}
		if e == v2 && !strings.Contains(pe.Msg, "by Ray node ID") {
			t.Errorf("v2: %s", pe.Msg)
		}
	}
	// The whole plan: NCCL cannot use the ring's cables (channelNICs), whatever the
	// executor; data_plane: warn serves on sockets and says why, with the spec's order.
	cw := c
	cw.DataPlane = spec.DataPlaneWarn
	plan, err = ChooseFor(cw, probes, m, Options{Engine: legacy})
	if err != nil || plan.Fabric.Used || !strings.Contains(strings.Join(plan.Warnings, "\n"), "are not used: the image's NCCL (version unknown) connects") {
		t.Errorf("warn: %v, used %v, warnings %q", err, plan.Fabric.Used, plan.Warnings)
	}
	if _, ok := plan.Node("node-a"); ok && plan.NodeRank(cw, "node-c") != 1 {
		t.Errorf("unused fabric: node-c ranks %d, want the spec's 1", plan.NodeRank(cw, "node-c"))
	}

	c, probes = ring("node-a", "node-b", "node-c", "node-d")
	plan, err = placed(c, probes, legacy)
	if err != nil || !strings.Contains(plan.Fabric.Placement, "node-b 10.1.230.11 < node-c 10.1.230.12 < node-d 10.1.230.13): that order carries the layout") {
		t.Fatalf("legacy on an IP order that follows the cables: %v %+v", err, plan.Fabric)
	}

	// The other way round the ring by IP (node-d .11, node-b .13): Ray's order replaces the
	// search's, with its pairs.
	c, probes = ring("node-a", "node-b", "node-c", "node-d")
	probes[1].Links[0].Addrs[0], probes[3].Links[0].Addrs[0] = probes[3].Links[0].Addrs[0], probes[1].Links[0].Addrs[0]
	plan, err = placed(c, probes, legacy)
	if err != nil || !slices.Equal(plan.Fabric.Order, []string{"node-a", "node-d", "node-c", "node-b"}) || plan.Fabric.Algo != "Ring" ||
		!slices.Contains(plan.Fabric.Pairs, [2]string{"node-a", "node-d"}) {
		t.Fatalf("legacy the other way round: %v %+v", err, plan.Fabric)
	}

	c, probes = switchless([]string{"node-a", "node-b", "node-c"}, [][2]int{{0, 1}, {1, 2}, {2, 0}})
	if plan, err = placed(c, probes, v2); err != nil || !strings.Contains(plan.Fabric.Placement, "every such order carries") {
		t.Fatalf("v2 on a triangle: %v %+v", err, plan.Fabric)
	}
}

// TestProofGoesRoundTheCables: tensor 2 x pipeline 2 on a ring ranks a, b, d, c, whose
// world ring would close over b-d; the proof's one all_reduce ranks the cables' cycle
// from the head instead, crossing each cable once.
func TestProofGoesRoundTheCables(t *testing.T) {
	c, probes := switchless([]string{"node-a", "node-c", "node-b", "node-d"}, [][2]int{{0, 2}, {2, 1}, {1, 3}, {3, 0}})
	c.Parallel = spec.Parallel{Tensor: 2, Pipeline: 2}
	f, err := fabricFor(c, probes, measured(c, probes, nil))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.Order, []string{"node-a", "node-b", "node-d", "node-c"}) {
		t.Fatalf("order %v", f.Order)
	}
	order := f.ProofOrder("node-a")
	links := ProofLinks(order)
	if len(links) != 4 {
		t.Fatalf("proof order %v links %v", order, links)
	}
	for _, l := range links {
		if !f.Graph.Linked(l[0], l[1]) {
			t.Errorf("the proof's ring crosses %s-%s, which share no link (order %v)", l[0], l[1], order)
		}
	}
	if f.Name() != "ring node-a-node-b-node-c-node-d" || order[0] != "node-a" {
		t.Errorf("name %q, proof order %v", f.Name(), order)
	}
	if got := ProofLinks([]string{"x", "y"}); len(got) != 1 {
		t.Errorf("a pair's proof crosses %v, want its one link", got)
	}
}

// TestReachabilityMeasuresEveryCableBothWays: on a ring of four the test listens on the
// LAN and on both ends of every cable, each cable's address is dialled only from the node
// at its other end, and a cable cut in one direction is left out naming that direction.
func TestReachabilityMeasuresEveryCableBothWays(t *testing.T) {
	c, probes := switchless([]string{"node-a", "node-b", "node-c", "node-d"}, ring4Cables)
	addrs := ReachAddrs(c, probes)
	for _, n := range c.Nodes {
		if len(addrs[n.Name]) != 3 { // the LAN and two cables
			t.Errorf("%s listens on %v, want the LAN and its two cables", n.Name, addrs[n.Name])
		}
	}
	matrix := measured(c, probes, nil)
	// 12 LAN dials (all ordered pairs) + 8 cable dials (4 cables, both ways).
	if len(matrix) != 12+8 {
		t.Fatalf("matrix has %d dials, want 20", len(matrix))
	}
	for _, r := range matrix {
		if r.Subnet.Bits() == 30 && ((r.From == "node-a" && r.To == "node-c") || (r.From == "node-b" && r.To == "node-d")) {
			t.Errorf("%s dialled %s over %s, a cable it is not on", r.From, r.To, r.Subnet)
		}
	}
	if g := BuildGraph(c, probes, matrix); len(g.Links) != 4 || len(g.LeftOut) != 0 {
		t.Fatalf("graph %+v, want the 4 cables", g)
	}
	// node-b's dial to node-c on the b-c cable times out; node-c's to node-b connects.
	g := BuildGraph(c, probes, measured(c, probes, map[string]bool{"node-b>node-c@192.168.11.0/30": true}))
	if len(g.Links) != 3 || len(g.LeftOut) != 1 {
		t.Fatalf("graph %+v, want b-c left out", g)
	}
	lo := g.LeftOut[0]
	if lo.A != "node-b" || lo.B != "node-c" || lo.Reason != "node-b cannot reach node-c at 192.168.11.2:40000 (i/o timeout)" {
		t.Errorf("left out %+v", lo)
	}
	if g.Linked("node-b", "node-c") {
		t.Error("a cable that failed one way is a link")
	}
}

// TestFabricProperty: on random cabling of 3 to 7 one-GPU nodes and a random split, a
// plan's pairs are all cabled, its order is a permutation with the head first, and a
// refusal means no order exists (checked by brute force against the rule stated
// independently: each TP and PP group's nodes, in rank order, form a cabled cycle).
func TestFabricProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	planned, refused := 0, 0
	for iter := range 300 {
		n := 3 + rng.IntN(5)
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("n%d", i))
		}
		var cables [][2]int
		for i := range n {
			for j := i + 1; j < n; j++ {
				if rng.IntN(2) == 0 {
					cables = append(cables, [2]int{i, j})
				}
			}
		}
		if len(cables) == 0 {
			continue
		}
		var splits [][2]int
		for tp := 1; tp <= n; tp++ {
			if n%tp == 0 {
				splits = append(splits, [2]int{tp, n / tp})
			}
		}
		sp := splits[rng.IntN(len(splits))]
		c, probes := switchless(names, cables)
		c.Parallel = spec.Parallel{Tensor: sp[0], Pipeline: sp[1]}
		linked := map[[2]string]bool{}
		for _, cb := range cables {
			linked[[2]string{names[cb[0]], names[cb[1]]}] = true
			linked[[2]string{names[cb[1]], names[cb[0]]}] = true
		}
		f, err := fabricFor(c, probes, measured(c, probes, nil))
		var pe *Error
		switch {
		case err == nil:
			planned++
			if f.Order[0] != "n0" || len(f.Order) != n {
				t.Fatalf("iter %d: fabric %+v", iter, f)
			}
			sorted := slices.Clone(f.Order)
			slices.Sort(sorted)
			if !slices.Equal(sorted, names) {
				t.Fatalf("iter %d: order %v is not a permutation", iter, f.Order)
			}
			if !fits(f.Order, sp[0], sp[1], linked) {
				t.Fatalf("iter %d: order %v does not fit tp %d pp %d on %v", iter, f.Order, sp[0], sp[1], cables)
			}
		case errors.As(err, &pe) && pe.Type == failure.DataPlaneUnreachable:
			refused++
			rest := names[1:]
			for perm := range permutations(rest) {
				if order := append([]string{"n0"}, perm...); fits(order, sp[0], sp[1], linked) {
					t.Fatalf("iter %d: refused, but %v fits tp %d pp %d on %v:\n%s", iter, order, sp[0], sp[1], cables, pe.Msg)
				}
			}
		default:
			t.Fatalf("iter %d: %v", iter, err)
		}
	}
	if planned < 30 || refused < 30 {
		t.Fatalf("planned %d, refused %d of 300: the generator proves little", planned, refused)
	}
	t.Logf("planned %d, refused %d", planned, refused)
}

// fits: every TP group (consecutive ranks) and PP group (one TP rank across stages) of one
// rank per node has its nodes cabled as a cycle in rank order (two nodes: one cable).
func fits(order []string, tp, pp int, linked map[[2]string]bool) bool {
	var groups [][]string
	for s := range pp {
		groups = append(groups, order[s*tp:(s+1)*tp])
	}
	for r := range tp {
		var g []string
		for s := range pp {
			g = append(g, order[s*tp+r])
		}
		groups = append(groups, g)
	}
	for _, g := range groups {
		for i := range g {
			if len(g) == 1 || (len(g) == 2 && i == 1) {
				break
			}
			if !linked[[2]string{g[i], g[(i+1)%len(g)]}] {
				return false
			}
		}
	}
	return true
}

func permutations(s []string) func(func([]string) bool) {
	return func(yield func([]string) bool) {
		var rec func(k int) bool
		p := slices.Clone(s)
		rec = func(k int) bool {
			if k == len(p) {
				return yield(slices.Clone(p))
			}
			for i := k; i < len(p); i++ {
				p[k], p[i] = p[i], p[k]
				if !rec(k + 1) {
					return false
				}
				p[k], p[i] = p[i], p[k]
			}
			return true
		}
		rec(0)
	}
}

func benchmarkRing(b *testing.B, n int) {
	var names []string
	var cables [][2]int
	for i := range n {
		names = append(names, fmt.Sprintf("spark-%02d", i))
		cables = append(cables, [2]int{i, (i + 1) % n})
	}
	c, probes := switchless(names, cables)
	// The IB plan in full on NCCL 2.30.7: placement, channelNICs, subnet-aware routing, env.
	c.Executor = spec.ExecutorMP
	o := Options{Engine: &release.Model{VLLM: "0.32.0", NCCL: "2.30.7", Executor: spec.ExecutorMP, EnvCopy: release.EnvCopyNone}}
	matrix := measured(c, probes, nil)
	b.ResetTimer()
	for b.Loop() {
		plan, err := ChooseFor(c, probes, matrix, o)
		if err != nil || plan.Fabric == nil || plan.Fabric.Algo != "Ring" || !plan.Fabric.Used || plan.Fabric.SubnetPrefixLen != 30 {
			b.Fatalf("%v %+v", err, plan.Fabric)
		}
	}
}

// BenchmarkPlanRing4 is the whole plan (bootstrap subnet, graph, rank placement, env) for
// four Sparks in a ring, TP=4.
func BenchmarkPlanRing4(b *testing.B) { benchmarkRing(b, 4) }

// BenchmarkPlanRing16 is the same for sixteen, TP=16: the placement search is a
// Hamiltonian cycle on the ring.
func BenchmarkPlanRing16(b *testing.B) { benchmarkRing(b, 16) }

// A Spark's CX-7 port is two PCIe x4 halves, each its own netdev, HCA and subnet
// (upstream.md §9): one cable is two links, and NCCL_IB_HCA names every rail of every
// cable. A half whose HCA port is down on one end is no link.
func TestTriangleOfSparksUsesEveryRail(t *testing.T) {
	c, probes := switchless([]string{"node-a", "node-b", "node-c"}, [][2]int{{0, 1}, {1, 2}, {2, 0}})
	// Give every port its second half: P2 twins of each port, on a subnet of their own.
	for ci, cb := range [][2]int{{0, 1}, {1, 2}, {2, 0}} {
		for end, i := range cb {
			port := map[[2]int]int{{0, 0}: 0, {0, 1}: 0, {1, 0}: 1, {1, 1}: 0, {2, 0}: 1, {2, 1}: 1}[[2]int{ci, end}]
			netdev := fmt.Sprintf("enP2p1s0f%dnp%d", port, port)
			probes[i].Links = append(probes[i].Links, link(netdev, fmt.Sprintf("192.168.%d.%d/30", 100+ci, end+1), 9000, speedMbps(100000)))
			probes[i].RDMA = append(probes[i].RDMA, RDMADevice{Name: fmt.Sprintf("roceP2p1s0f%d", port), Port: 1, Netdev: netdev, State: "ACTIVE"})
		}
	}
	f, err := fabricFor(c, probes, measured(c, probes, nil))
	if err != nil {
		t.Fatal(err)
	}
	if f.Shape != "triangle" || len(f.Graph.Links) != 6 {
		t.Fatalf("fabric %+v", f)
	}
	for n, hcas := range fabricHCAs(f.Graph) {
		if len(hcas) != 4 {
			t.Errorf("%s lists %v: want its four halves", n, hcas)
		}
	}
	// node-c's second half towards node-a goes down: five links, node-c lists three HCAs.
	for i, d := range probes[2].RDMA {
		if d.Name == "roceP2p1s0f1" {
			probes[2].RDMA[i].State = "DOWN"
		}
	}
	if f, err = fabricFor(c, probes, measured(c, probes, nil)); err != nil {
		t.Fatal(err)
	}
	if len(f.Graph.Links) != 5 {
		t.Fatalf("links %d, want 5", len(f.Graph.Links))
	}
	// node-a's list names roceP2p1s0f1, which node-c has but down: each node its own list.
	if nc := fabricHCAs(f.Graph)["node-c"]; len(nc) != 3 || slices.ContainsFunc(nc, func(d RDMADevice) bool { return d.Name == "roceP2p1s0f1" }) {
		t.Errorf("node-c lists %v", nc)
	}
	// Four halves per node do not help NCCL: each node's peers still sit on different ports.
	if _, err := Choose(c, probes, measured(c, probes, nil)); err == nil || !strings.Contains(err.Error(), "has no subnet-aware routing") {
		t.Errorf("a triangle of four halves per node: %v", err)
	}
}

// With NCCL 2.30.7 or later in the image (read from its libnccl.so.2), a triangle and a
// ring of one-GPU Sparks run IB: the plan turns on NCCL's subnet-aware routing with the
// links' prefix length, lists every HCA on the node's links, and on the ring keeps NCCL to
// its ring (no tree across the diagonal). NCCL 2.30.4 has no such routing: refused as
// before, naming the version and the way out.
func TestSwitchlessFabricsRunIBWithNCCLsSubnetRouting(t *testing.T) {
	mp := func(nccl string) Options {
		return Options{Engine: &release.Model{VLLM: "0.32.0", NCCL: nccl, Executor: spec.ExecutorMP, EnvCopy: release.EnvCopyNone}}
	}
	for _, tc := range []struct {
		name   string
		nodes  []string
		cables [][2]int
		algo   string
	}{
		{"triangle", []string{"node-a", "node-b", "node-c"}, [][2]int{{0, 1}, {1, 2}, {2, 0}}, ""},
		{"ring4", []string{"node-a", "node-b", "node-c", "node-d"}, ring4Cables, "Ring"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, probes := switchless(tc.nodes, tc.cables)
			c.Executor = spec.ExecutorMP
			m := measured(c, probes, nil)
			plan, err := ChooseFor(c, probes, m, mp("2.30.7"))
			if err != nil {
				t.Fatal(err)
			}
			if plan.Fabric == nil || !plan.Fabric.Used || plan.Fabric.SubnetPrefixLen != 30 || plan.Fabric.NCCLCannot != "" {
				t.Fatalf("fabric %+v", plan.Fabric)
			}
			for _, n := range plan.Nodes {
				want := map[string]string{"NCCL_IB_HCA": "=rocep1s0f0:1,rocep1s0f1:1", EnvSubnetRouting: "1", EnvSubnetPrefixLen: "30", "NCCL_SOCKET_IFNAME": "=enP7s7"}
				for k, v := range want {
					if n.Env[k] != v {
						t.Errorf("%s: %s=%q, want %q", n.Name, k, n.Env[k], v)
					}
				}
				if n.Env["NCCL_ALGO"] != tc.algo {
					t.Errorf("%s: NCCL_ALGO=%q, want %q", n.Name, n.Env["NCCL_ALGO"], tc.algo)
				}
				if _, off := n.Env["NCCL_IB_DISABLE"]; off {
					t.Errorf("%s: IB disabled: %v", n.Name, n.Env)
				}
			}
			if l := strings.Join(plan.Fabric.Lines(), "\n"); !strings.Contains(l, "NCCL 2.30.7: NCCL_IB_SUBNET_AWARE_ROUTING=1 NCCL_IB_SUBNET_PREFIX_LEN=30") || !strings.Contains(l, "ncclIbFindDevBySubnet") {
				t.Errorf("plan lines:\n%s", l)
			}
			// 2.30.4 lacks the variable: today's refusal, naming the version and the way out.
			_, err = ChooseFor(c, probes, m, mp("2.30.4"))
			var pe *Error
			if !errors.As(err, &pe) || pe.Type != failure.DataPlaneUnreachable {
				t.Fatalf("2.30.4: %v, want %s", err, failure.DataPlaneUnreachable)
			}
			for _, w := range []string{"the image's NCCL 2.30.4 connects a one-GPU node", "has no subnet-aware routing (NCCL_IB_SUBNET_AWARE_ROUTING, first in NCCL 2.30.7)", "ways out: an image whose NCCL is 2.30.7 or later"} {
				if !strings.Contains(pe.Msg, w) {
					t.Errorf("2.30.4: message lacks %q:\n%s", w, pe.Msg)
				}
			}
			// An operator's other value stands (the signed spec's must), and is warned about.
			c.Nodes[1].Env = map[string]string{EnvSubnetRouting: "0"}
			plan, err = ChooseFor(c, probes, m, mp("2.30.7"))
			if err != nil || plan.Nodes[1].Env[EnvSubnetRouting] != "0" || !strings.Contains(strings.Join(plan.Warnings, "\n"), "node-b's env sets NCCL_IB_SUBNET_AWARE_ROUTING=0, but on this") {
				t.Errorf("operator's 0: %v %v %q", err, plan.Nodes[1].Env, plan.Warnings)
			}
		})
	}
}

// NCCL applies one prefix length to every link: cables whose subnets fall together under
// the shortest one cannot be told apart, and the plan refuses naming them.
func TestSubnetRoutingRefusesLinksOnePrefixCannotTellApart(t *testing.T) {
	c, probes := switchless([]string{"node-a", "node-b", "node-c"}, [][2]int{{0, 1}, {1, 2}, {2, 0}})
	c.Executor = spec.ExecutorMP
	// b-c is renumbered into a-b's /24 (192.168.10.4/30) and c-a as a /24 of its own: every
	// link is its own subnet, but under the shortest prefix (/24) a-b and b-c are one.
	renumber := map[string]string{"192.168.11.1/30": "192.168.10.5/30", "192.168.11.2/30": "192.168.10.6/30", "192.168.12.1/30": "172.16.0.1/24", "192.168.12.2/30": "172.16.0.2/24"}
	for i := range probes {
		for j, l := range probes[i].Links {
			for k, a := range l.Addrs {
				if to, ok := renumber[a.String()]; ok {
					probes[i].Links[j].Addrs[k] = netip.MustParsePrefix(to)
				}
			}
		}
	}
	_, err := ChooseFor(c, probes, measured(c, probes, nil), Options{Engine: &release.Model{VLLM: "0.32.0", NCCL: "2.30.7", Executor: spec.ExecutorMP, EnvCopy: release.EnvCopyNone}})
	var pe *Error
	if !errors.As(err, &pe) || pe.Type != failure.DataPlaneUnreachable || !strings.Contains(pe.Msg, "at /24 (the shortest link prefix)") || !strings.Contains(pe.Msg, "fall in one subnet 192.168.10.0/24") {
		t.Fatalf("err %v", err)
	}
}
