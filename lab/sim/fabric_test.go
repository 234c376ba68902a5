package main

import (
	"context"
	"fmt"
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

func links(t *testing.T, peers []hello, group []int, rank int, algo string, runtime bool) []ibLink {
	t.Helper()
	algos, err := ncclAlgos(algo)
	if err != nil {
		t.Fatal(err)
	}
	nodes, me := ibGroupNodes(group, rank, peers)
	return ibLinks(nodes, me, algos, runtime, len(nodes) == len(group))
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

// Each pair connects over the HCA whose cable reaches the peer: on a ring of four with
// NCCL_ALGO=Ring node-a reaches node-b on port 1 and node-d on port 0; a triangle connects
// every pair, trees included; the seed's pair has both rails to its peer.
func TestIBLinksTakeTheHCAFacingThePeer(t *testing.T) {
	ring := switchless(4)
	got := links(t, ring, []int{0, 1, 2, 3}, 0, "Ring", true)
	if len(got) != 2 || !got[0].OK || !got[1].OK || got[0].Peer != 1 || got[0].Local.HCA != "rocep1s0f1" || got[1].Peer != 3 || got[1].Local.HCA != "rocep1s0f0" {
		t.Errorf("ring4, NCCL_ALGO=Ring, node 0: %+v", got)
	}
	for r := range 3 {
		for _, l := range links(t, switchless(3), []int{0, 1, 2}, r, "", true) {
			if !l.OK {
				t.Errorf("triangle: rank %d to %d (%s) did not connect", r, l.Peer, l.Algo)
			}
		}
	}
	// Tensor 2 x pipeline 2 placed a, b, d, c: TP pairs a-b, d-c, PP pairs a-d, b-c.
	placed := []hello{ring[0], ring[1], ring[3], ring[2]}
	for i := range placed {
		placed[i].Rank = i
	}
	for _, g := range commGroupsOf(4, 2) {
		for _, r := range g {
			for _, l := range links(t, placed, g, r, "", true) {
				if !l.OK {
					t.Errorf("tp2 x pp2 on a, b, d, c: group %v rank %d: %+v", g, r, l)
				}
			}
		}
	}
	pair := []hello{
		{Rank: 0, IBKey: "a", IB: []ibPort{{HCA: "rocep1s0f1", Addr: "10.200.1.12", Subnet: "10.200.1.0/24"}, {HCA: "roceP2p1s0f1", Addr: "10.201.1.12", Subnet: "10.201.1.0/24"}}},
		{Rank: 1, IBKey: "b", IB: []ibPort{{HCA: "rocep1s0f1", Addr: "10.200.1.13", Subnet: "10.200.1.0/24"}, {HCA: "roceP2p1s0f1", Addr: "10.201.1.13", Subnet: "10.201.1.0/24"}}},
	}
	if got := links(t, pair, []int{0, 1}, 1, "", true); len(got) != 1 || !got[0].OK || got[0].Peer != 0 {
		t.Errorf("spark pair: %+v", got)
	}
}

// Where the tree is not excluded, or NCCL_RUNTIME_CONNECT=0 connects it at init whatever
// NCCL_ALGO says, ring4's opposite corners must connect and cannot.
func TestIBLinksFailAcrossTheDiagonal(t *testing.T) {
	ring := switchless(4)
	for _, tc := range []struct {
		algo    string
		runtime bool
		want    string
	}{{"", true, "Tree"}, {"^Ring", true, "Tree"}, {"Ring", false, "Tree"}} {
		var failed []ibLink
		for _, l := range links(t, ring, []int{0, 1, 2, 3}, 0, tc.algo, tc.runtime) {
			if !l.OK {
				failed = append(failed, l)
			}
		}
		if len(failed) != 1 || failed[0].Peer != 2 || failed[0].Algo != tc.want {
			t.Errorf("NCCL_ALGO=%q runtime %v: failed links %+v, want node 0 to 2 by %s", tc.algo, tc.runtime, failed, tc.want)
		}
	}
	// A ring laid across the diagonal (a, c, b, d) fails on the ring itself.
	crossed := []hello{ring[0], ring[2], ring[1], ring[3]}
	for i := range crossed {
		crossed[i].Rank = i
	}
	l := links(t, crossed, []int{0, 1, 2, 3}, 0, "Ring", true)
	if len(l) != 2 || l[0].OK || l[0].Algo != "Ring" || l[0].Local.HCA != "rocep1s0f0" {
		t.Errorf("a ring across the diagonal: %+v", l)
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
	qp := "on dev rocep1s0f0:1, curr state INIT, next state RTR, local GID index 3, local GID ::ffff:10.205.1.12, remote GID ::ffff:10.203.1.14"
	want := []string{
		"NCCL INFO Call to ibv_modify_qp failed with 110 Connection timed out, " + qp + ", retrying 1/35 after 100 msec of sleep",
		"NCCL INFO Call to ibv_modify_qp failed with 110 Connection timed out, " + qp + ", retrying 34/35 after 3400 msec of sleep",
		"NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, " + qp,
		"NCCL INFO transport/net_ib.cc:1591 -> 2",
		"NCCL INFO transport/generic.cc:55 -> 2",
		"NCCL INFO group.cc:153 -> 2",
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
	// NCCL_ALGO=Ring carries the same ring.
	lines = nil
	env["NCCL_ALGO"] = "Ring"
	if err := ibConnect(context.Background(), 0, 4, 4, func(k string) string { return env[k] }, ring[0].IB, ring, log); err != nil {
		t.Fatalf("NCCL_ALGO=Ring: %v\n%s", err, strings.Join(lines, "\n"))
	}
	if !slices.Contains(lines, "NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/1") || !slices.Contains(lines, "NCCL INFO Channel 00/0 : 0[0] -> 3[0] [send] via NET/IB/0") {
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
