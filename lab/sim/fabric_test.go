package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// switchless lays out n Sparks cabled in a cycle as the lab's triangle and ring4 do: node i's
// rocep1s0f1 and node i+1's rocep1s0f0 on cable i's subnet 10.202+i.1.0/24.
func switchless(n int) []hello {
	var hs []hello
	for i := range n {
		prev := (i - 1 + n) % n
		hs = append(hs, hello{Rank: i, IBKey: fmt.Sprint("node-", i), IB: []ibPort{
			{HCA: "rocep1s0f0", Port: 1, Addr: fmt.Sprintf("10.%d.1.%d", 202+prev, 12+i), Subnet: fmt.Sprintf("10.%d.1.0/24", 202+prev)},
			{HCA: "rocep1s0f1", Port: 1, Addr: fmt.Sprintf("10.%d.1.%d", 202+i, 12+i), Subnet: fmt.Sprintf("10.%d.1.0/24", 202+i)},
		}})
	}
	return hs
}

func links(t *testing.T, peers []hello, group []int, rank int, algo string, runtime, merge bool) []ibLink {
	t.Helper()
	algos, err := ncclAlgos(algo)
	if err != nil {
		t.Fatal(err)
	}
	nodes, me := ibGroupNodes(group, rank, peers)
	return ibLinks(nodes, me, algos, runtime, len(nodes) == len(group), merge, 0)
}

// sparkPair is the seed's two Sparks on two rails, each rail one PCIe half of the port.
func sparkPair() []hello {
	return []hello{
		{Rank: 0, IBKey: "a", IB: []ibPort{{HCA: "rocep1s0f1", Port: 1, Addr: "10.200.1.12", Subnet: "10.200.1.0/24"}, {HCA: "roceP2p1s0f1", Port: 1, Addr: "10.201.1.12", Subnet: "10.201.1.0/24"}}},
		{Rank: 1, IBKey: "b", IB: []ibPort{{HCA: "rocep1s0f1", Port: 1, Addr: "10.200.1.13", Subnet: "10.200.1.0/24"}, {HCA: "roceP2p1s0f1", Port: 1, Addr: "10.201.1.13", Subnet: "10.201.1.0/24"}}},
	}
}

// NCCL fuses the two ports of one CX-7 (functions 0 and 1 of one PCI device) into one NIC
// unless NCCL_IB_MERGE_NICS=0; the seed's two PCIe halves are two devices and stay two.
func TestNCCLFusesTheTwoPortsOfOneCX7(t *testing.T) {
	ports := switchless(3)[0].IB
	if got := ncclNets(ports, true); len(got) != 1 || got[0].Dev != 2 || len(got[0].Ports) != 2 {
		t.Errorf("merged: %+v", got)
	}
	if got := ncclNets(ports, false); len(got) != 2 || got[0].Dev != 0 || got[1].Dev != 1 {
		t.Errorf("NCCL_IB_MERGE_NICS=0: %+v", got)
	}
	if got := ncclNets(sparkPair()[0].IB, true); len(got) != 2 || got[1].Ports[0].HCA != "roceP2p1s0f1" {
		t.Errorf("spark rails: %+v", got)
	}
	for name, want := range map[string]string{"rocep1s0f0": "rocep1s0", "roceP2p1s0f1": "roceP2p1s0", "mlx5_0": "mlx5_0", "ibf": "ibf"} {
		if got := pciDevice(name); got != want {
			t.Errorf("pciDevice(%q) = %q, want %q", name, got, want)
		}
	}
}

// A one-GPU node's channel uses one NIC for both ring neighbours, never the port that
// faces the peer: on a triangle and on a ring of four every connection has a queue pair on
// a port whose cable does not reach the peer, fused ports or not, NCCL_ALGO=Ring or not.
// The seed's pair (each rail one subnet both nodes reach on the same device index) and a
// switch (every port on one subnet) connect on every channel.
func TestIBLinksUseTheChannelsNICNotThePeers(t *testing.T) {
	for _, n := range []int{3, 4} {
		for _, merge := range []bool{true, false} {
			for r := range n {
				ls := links(t, switchless(n), seq(n), r, "Ring", true, merge)
				if len(ls) == 0 {
					t.Fatalf("%d nodes: no links", n)
				}
				for _, l := range ls {
					if l.OK {
						t.Errorf("%d nodes, merge %v: rank %d to %d connected on channel %d over %s: NCCL's channel NIC faces one neighbour only", n, merge, r, l.Peer, l.Channel, l.Local.HCA)
					}
				}
			}
		}
	}
	// Merged, node 0's first queue pair on its fused NIC is rocep1s0f0 (cabled to node 3)
	// towards node 1's rocep1s0f0 (cabled to node 0's other port).
	l := links(t, switchless(4), seq(4), 0, "Ring", true, true)[0]
	if l.Peer != 1 || l.Dev != 2 || l.Local.HCA != "rocep1s0f0" || l.Remote.Addr != "10.202.1.13" {
		t.Errorf("ring4 node 0's first link: %+v", l)
	}
	for _, merge := range []bool{true, false} {
		got := links(t, sparkPair(), []int{0, 1}, 1, "", true, merge)
		if len(got) != 2 || !got[0].OK || !got[1].OK || got[0].Local.HCA != "rocep1s0f1" || got[1].Local.HCA != "roceP2p1s0f1" {
			t.Errorf("spark pair, merge %v: %+v", merge, got)
		}
	}
	switched := switchless(4)
	for i := range switched {
		for j := range switched[i].IB {
			switched[i].IB[j].Addr = fmt.Sprintf("10.210.1.%d", 10*i+j+1)
			switched[i].IB[j].Subnet = "10.210.1.0/24"
		}
	}
	for _, l := range links(t, switched, seq(4), 0, "", true, true) {
		if !l.OK {
			t.Errorf("behind a switch: %+v", l)
		}
	}
}

func seq(n int) []int {
	var out []int
	for i := range n {
		out = append(out, i)
	}
	return out
}

// NCCL's double binary tree over four nodes links node 0 to node 2 (ncclGetDtree), the
// opposite corner of a ring of four.
func TestDtreeOfFourLinksOppositeCorners(t *testing.T) {
	got := dtreeEdges(4)
	for _, want := range [][2]int{{0, 2}, {1, 2}, {2, 3}, {0, 1}, {1, 3}} {
		if !slices.Contains(got, want) {
			t.Errorf("dtree(4) = %v, lacks %v", got, want)
		}
	}
	if len(got) != 5 {
		t.Errorf("dtree(4) = %v", got)
	}
}

// Where the tree is not excluded, or NCCL_RUNTIME_CONNECT=0 connects it at init whatever
// NCCL_ALGO says, ring4's opposite corners connect too; NCCL_ALGO=Ring at runtime keeps
// to the neighbours.
func TestCommPairsCrossTheDiagonalUnlessRingOnly(t *testing.T) {
	for _, tc := range []struct {
		algo     string
		runtime  bool
		diagonal bool
	}{{"", true, true}, {"^Ring", true, true}, {"Ring", false, true}, {"Ring", true, false}} {
		algos, err := ncclAlgos(tc.algo)
		if err != nil {
			t.Fatal(err)
		}
		diagonal := false
		for _, p := range commPairs(4, algos, tc.runtime, true) {
			if (p.A == 0 && p.B == 2) || (p.A == 1 && p.B == 3) {
				diagonal = true
			}
		}
		if diagonal != tc.diagonal {
			t.Errorf("NCCL_ALGO=%q runtime %v: diagonal %v, want %v", tc.algo, tc.runtime, diagonal, tc.diagonal)
		}
	}
}

// NCCL's lines for a queue pair with no path: 34 INFO retries, the WARN, the traces, and
// vLLM's pynccl error; the retries sleep 100 ms x attempt (scaled).
func TestIBConnectFailsWithNCCLsLines(t *testing.T) {
	ring := switchless(4)
	t.Setenv(envTimeScale, "0")
	var lines []string
	log := func(level, where, msg string) { lines = append(lines, msg) }
	env := map[string]string{}
	err := ibConnect(context.Background(), 0, 4, 4, func(k string) string { return env[k] }, ring[0].IB, ring, log)
	if err == nil || err.Error() != "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)" {
		t.Fatalf("err %v", err)
	}
	// Channel 0's fused NIC, its first queue pair: node 0's rocep1s0f0 (cable 3-0) towards
	// node 1's rocep1s0f0 (cable 0-1), the ring's first connection.
	qp := "on dev rocep1s0f0:1, curr state INIT, next state RTR, local GID index 3, local GID ::ffff:10.205.1.12, remote GID ::ffff:10.202.1.13"
	want := []string{
		"NCCL INFO Call to ibv_modify_qp failed with 110 Connection timed out, " + qp + ", retrying 1/35 after 100 msec of sleep",
		"NCCL INFO Call to ibv_modify_qp failed with 110 Connection timed out, " + qp + ", retrying 34/35 after 3400 msec of sleep",
		"NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, " + qp,
		"NCCL INFO transport/net_ib.cc:1591 -> 2",
		"NCCL INFO transport/generic.cc:25 -> 2",
		"NCCL INFO group.cc:149 -> 2",
	}
	text := strings.Join(lines, "\n")
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("lacks %q:\n%s", w, text)
		}
	}
	if n := strings.Count(text, "retrying "); n != 34 {
		t.Errorf("%d retries, want 34", n)
	}
	// NCCL_ALGO=Ring (the tree kept off the diagonal) fails the same way: the ring's own
	// channel NIC does not face both neighbours. The seed's pair connects on both rails.
	lines = nil
	env["NCCL_ALGO"] = "Ring"
	if err := ibConnect(context.Background(), 0, 4, 4, func(k string) string { return env[k] }, ring[0].IB, ring, log); err == nil || !strings.Contains(strings.Join(lines, "\n"), "NCCL WARN Call to ibv_modify_qp failed with 110") {
		t.Errorf("NCCL_ALGO=Ring on a ring of four: %v\n%s", err, strings.Join(lines, "\n"))
	}
	lines = nil
	pair := sparkPair()
	if err := ibConnect(context.Background(), 0, 2, 2, func(k string) string { return env[k] }, pair[0].IB, pair, log); err != nil {
		t.Fatalf("spark pair: %v\n%s", err, strings.Join(lines, "\n"))
	}
	if !slices.Contains(lines, "NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0") || !slices.Contains(lines, "NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/1") {
		t.Errorf("channel lines:\n%s", strings.Join(lines, "\n"))
	}
}

// NCCL_ALGO as parseList reads it for all_reduce.
func TestNCCLAlgoParsing(t *testing.T) {
	for v, want := range map[string][]string{
		"Ring":                 {"Ring"},
		"ring,tree":            {"Ring", "Tree"},
		"^Tree":                {"CollNetChain", "CollNetDirect", "NVLS", "NVLSTree", "PAT", "Ring"},
		"tree;allreduce:ring":  {"Ring"},
		"ring;broadcast:tree":  {"Ring"},
		"allreduce:^ring,nvls": {"CollNetChain", "CollNetDirect", "NVLSTree", "PAT", "Tree"},
	} {
		on, err := ncclAlgos(v)
		if err != nil {
			t.Errorf("%q: %v", v, err)
			continue
		}
		var got []string
		for a, ok := range on {
			if ok {
				got = append(got, a)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
	if _, err := ncclAlgos("Rings"); err == nil || !strings.Contains(err.Error(), `Unrecognized element token "Rings"`) {
		t.Errorf("a bad token: %v", err)
	}
}

// NCCL 2.30.7 with NCCL_IB_SUBNET_AWARE_ROUTING=1 moves each connection to the port on the
// peer's subnet, at both ends: a triangle connects every pair under any algorithm, a ring
// of four under NCCL_ALGO=Ring (its tree still crosses the diagonal, which has no cable).
// NCCL 2.30.4 has no such variable, and 2.30.7 without it behaves as 2.28.9.
func TestSubnetAwareRoutingConnectsEachPeerOverItsPort(t *testing.T) {
	t.Setenv(envTimeScale, "0")
	defer func(f func() string) { loadedNCCL = f }(loadedNCCL)
	connect := func(nccl string, n int, env map[string]string) ([]string, error) {
		loadedNCCL = func() string { return nccl }
		hs := switchless(n)
		var lines []string
		var err error
		for r := range n {
			log := func(level, where, msg string) { lines = append(lines, fmt.Sprintf("rank %d %s", r, msg)) }
			if err = ibConnect(context.Background(), r, n, n, func(k string) string { return env[k] }, hs[r].IB, hs, log); err != nil {
				return lines, err
			}
		}
		return lines, nil
	}
	on := map[string]string{"NCCL_IB_SUBNET_AWARE_ROUTING": "1", "NCCL_IB_SUBNET_PREFIX_LEN": "24"}
	ring := map[string]string{"NCCL_IB_SUBNET_AWARE_ROUTING": "1", "NCCL_IB_SUBNET_PREFIX_LEN": "24", "NCCL_ALGO": "Ring"}
	for _, tc := range []struct {
		name string
		nccl string
		n    int
		env  map[string]string
		ok   bool
	}{
		{"triangle, 2.30.7, routing on", "2.30.7", 3, on, true},
		{"ring4, 2.30.7, routing on, ring only", "2.30.7", 4, ring, true},
		{"ring4, 2.30.7, routing on, tree across the diagonal", "2.30.7", 4, on, false},
		{"triangle, 2.30.4, variable set", "2.30.4", 3, on, false},
		{"triangle, 2.30.7, variable unset", "2.30.7", 3, map[string]string{}, false},
		{"triangle, 2.28.9, variable set", "2.28.9", 3, on, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, err := connect(tc.nccl, tc.n, tc.env)
			text := strings.Join(lines, "\n")
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok %v\n%s", err, tc.ok, text)
			}
			if tc.ok && !strings.Contains(text, "NCCL INFO NET/IB: Subnet-aware routing: overriding dev 2 with dev ") {
				t.Errorf("no override line:\n%s", text)
			}
			if !tc.ok && !strings.Contains(text, "NCCL WARN Call to ibv_modify_qp failed with 110") {
				t.Errorf("no NCCL failure lines:\n%s", text)
			}
		})
	}
	// Every connection's first queue pair joins two ports of one cable, fused or not.
	loadedNCCL = func() string { return "2.30.7" }
	for _, merge := range []bool{true, false} {
		hs := switchless(4)
		algos, _ := ncclAlgos("Ring")
		for r := range 4 {
			nodes, me := ibGroupNodes(seq(4), r, hs)
			for _, l := range ibLinks(nodes, me, algos, true, true, merge, 24) {
				if _, _, joined := ibRoute([]ibPort{l.Local}, []ibPort{l.Remote}); !l.OK || !joined || len(l.Ports) != 1 {
					t.Errorf("merge %v: rank %d to %d: %+v", merge, r, l.Peer, l)
				}
			}
		}
	}
	// A prefix length out of range is NCCL's WARN and invalid argument.
	lines, err := connect("2.30.7", 3, map[string]string{"NCCL_IB_SUBNET_AWARE_ROUTING": "1", "NCCL_IB_SUBNET_PREFIX_LEN": "40"})
	if err == nil || !strings.Contains(strings.Join(lines, "\n"), "NCCL WARN NET/IB: NCCL_IB_SUBNET_PREFIX_LEN=40 is out of range [1,32]") {
		t.Errorf("prefix 40: %v %q", err, lines)
	}
}

// vLLM's legacy executor ranks the driver first, then the other workers by how many share
// their node, then by IP as a string: "10.0.0.10" before "10.0.0.9", whatever the order
// the placement group's bundles were created in.
func TestLegacyRayRanksAreSortByDriverThenWorkerIP(t *testing.T) {
	got := rerank("10.0.0.5", []workerIP{{Created: 1, IP: "10.0.0.9"}, {Created: 2, IP: "10.0.0.10"}, {Created: 3, IP: "10.0.0.7"}})
	want := map[int]int{0: 0, 2: 1, 3: 2, 1: 3}
	if !maps.Equal(got, want) {
		t.Errorf("rerank %v, want %v", got, want)
	}
	// A node with two workers comes after nodes with one; the driver's own node first.
	got = rerank("10.0.0.5", []workerIP{{Created: 1, IP: "10.0.0.6"}, {Created: 2, IP: "10.0.0.6"}, {Created: 3, IP: "10.0.0.8"}, {Created: 4, IP: "10.0.0.5"}})
	want = map[int]int{0: 0, 4: 1, 3: 2, 1: 3, 2: 4}
	if !maps.Equal(got, want) {
		t.Errorf("rerank %v, want %v", got, want)
	}
}
