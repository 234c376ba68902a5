package main

// NCCL's IB transport per link, for fabrics without a switch (a triangle or a ring of DGX
// Sparks, every cable its own subnet; lab/README.md, "NCCL per link"). What follows NCCL
// 2.28.9's source (the modelled images' NCCL):
//   - which peers a communicator connects: the ring's neighbours, node by node in order of
//     first rank and the last back to the first (src/graph/connect.cc, connectRings), and,
//     when NCCL_ALGO allows Tree, the double binary tree over the nodes (src/graph/trees.cc,
//     ncclGetDtree: for four nodes node 0 is linked to node 2). NCCL_ALGO is parsed as
//     src/graph/tuning.cc parseList does (a list, `^` to exclude, `func:list` per
//     collective; all_reduce here). NCCL 2.28 connects an algorithm when a collective first
//     needs it (NCCL_RUNTIME_CONNECT=1, src/init.cc; src/group.cc ncclCollPreconnect) and
//     all of ring, tree and PAT at init with NCCL_RUNTIME_CONNECT=0 (src/init.cc);
//   - a queue pair towards a peer that the local HCA's cable does not reach fails in
//     ibv_modify_qp to RTR with ETIMEDOUT, which NCCL retries NCCL_IB_MQP_RETRY_CNT (34)
//     times, sleeping NCCL_IB_MQP_RETRY_SLEEP_MSEC (100) × attempt ms, logging each at INFO,
//     then WARNs (src/misc/ibvwrap.cc wrap_ibv_modify_qp, ibvModifyQpLog); NCCLCHECK traces
//     the return up (`file:line -> 2`, src/include/checks.h).
// The local GID is the netdev's IPv4 address, RoCE v2 (ncclIbGetGidIndex's choice with
// NCCL_IB_ADDR_FAMILY and NCCL_IB_ROCE_VERSION_NUM at their defaults), index 3 as mlx5 lays
// out its table.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"
)

// ibPort is an HCA port NCCL's IB plugin uses, with its netdev's IPv4 address and subnet.
type ibPort struct {
	HCA    string `json:"hca"`
	Port   int    `json:"port"`
	Addr   string `json:"addr"`
	Subnet string `json:"subnet"`
}

// ibNode is what a rank knows of a node's NCCL: a key naming the node, its IB ports and
// its first rank in the communicator.
type ibNode struct {
	Key   string
	Ports []ibPort
	First int
}

// ncclAlgos are the algorithms NCCL_ALGO leaves all_reduce (nil error), every one when unset.
func ncclAlgos(v string) (map[string]bool, error) {
	all := []string{"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"}
	on := map[string]bool{}
	for _, a := range all {
		on[a] = true
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return on, nil
	}
	for i, tok := range strings.Split(v, ";") {
		prefix, list, hasPrefix := strings.Cut(tok, ":")
		if !hasPrefix {
			if i > 0 {
				return nil, fmt.Errorf("All entries except the first must have a prefix: %q", v)
			}
			list, prefix = prefix, ""
		}
		if prefix != "" && !strings.EqualFold(prefix, "allreduce") {
			continue
		}
		set := !strings.HasPrefix(list, "^")
		list = strings.TrimPrefix(list, "^")
		for _, a := range all {
			on[a] = !set
		}
		for _, e := range strings.Split(list, ",") {
			found := false
			for _, a := range all {
				if strings.EqualFold(strings.TrimSpace(e), a) {
					on[a], found = set, true
				}
			}
			if !found {
				return nil, fmt.Errorf("Unrecognized element token %q when parsing %q", e, v)
			}
		}
	}
	return on, nil
}

// btree is ncclGetBtree: rank's parent in a binary tree of n (-1 at the root).
func btree(n, rank int) int {
	if rank == 0 {
		return -1
	}
	bit := 1
	for ; bit < n; bit <<= 1 {
		if bit&rank != 0 {
			break
		}
	}
	up := (rank ^ bit) | (bit << 1)
	if up >= n {
		up = rank ^ bit
	}
	return up
}

// dtreeEdges are the node pairs of ncclGetDtree's two trees over n nodes (the second tree
// the first shifted by one for odd n, mirrored for even n).
func dtreeEdges(n int) [][2]int {
	var out [][2]int
	add := func(a, b int) {
		if a < 0 || b < 0 || a == b {
			return
		}
		e := [2]int{min(a, b), max(a, b)}
		for _, o := range out {
			if o == e {
				return
			}
		}
		out = append(out, e)
	}
	for r := range n {
		add(r, btree(n, r))
		if n%2 == 1 {
			s := (r - 1 + n) % n
			if u := btree(n, s); u != -1 {
				add(r, (u+1)%n)
			}
		} else if u := btree(n, n-1-r); u != -1 {
			add(r, n-1-u)
		}
	}
	return out
}

// ibPair is a pair of nodes (indices in order of first rank) an algorithm connects.
type ibPair struct {
	A, B int
	Algo string // Ring or Tree
}

// commPairs are the node pairs a communicator over n nodes connects for its first
// all_reduce. At init with NCCL_RUNTIME_CONNECT=0 (runtime false): the ring, the trees and,
// with one rank per node, PAT's rank ± 2^k (src/transport/generic.cc
// ncclTransportPatConnect), whatever NCCL_ALGO says (src/init.cc). At the first use
// (runtime): the ring where Ring is allowed, and the trees where Tree is: vLLM's
// PyNcclCommunicator runs a one-element all_reduce right after ncclCommInitRank (pynccl.py,
// "A small all_reduce for warmup"), and the lab takes the tree for it wherever NCCL_ALGO
// allows Tree and the communicator spans three or more nodes (NCCL's tuner,
// src/graph/tuning.cc, rates Tree's latency by log2 of the nodes and the ring's by the
// nodes; the lab does not compute it).
func commPairs(n int, algos map[string]bool, runtime, onePerNode bool) []ibPair {
	var out []ibPair
	seen := map[[2]int]bool{}
	add := func(a, b int, algo string) {
		e := [2]int{min(a, b), max(a, b)}
		if a != b && !seen[e] {
			seen[e] = true
			out = append(out, ibPair{a, b, algo})
		}
	}
	if n < 2 {
		return nil
	}
	if !runtime || algos["Ring"] || !algos["Tree"] {
		for i := range n {
			add(i, (i+1)%n, "Ring")
		}
	}
	if (!runtime || algos["Tree"]) && n >= 3 {
		for _, e := range dtreeEdges(n) {
			add(e[0], e[1], "Tree")
		}
	}
	if !runtime && onePerNode {
		for mask := 1; mask < n; mask <<= 1 {
			for r := range n {
				add(r, (r+mask)%n, "PAT")
			}
		}
	}
	return out
}

// ibRoute is the local port whose subnet holds one of the peer's ports, with that port.
func ibRoute(mine, peer []ibPort) (ibPort, ibPort, bool) {
	for _, l := range mine {
		s, err := netip.ParsePrefix(l.Subnet)
		if err != nil {
			continue
		}
		for _, p := range peer {
			if a, err := netip.ParseAddr(p.Addr); err == nil && s.Contains(a) {
				return l, p, true
			}
		}
	}
	return ibPort{}, ibPort{}, false
}

// ibLink is one connection this node opens: to which node, over which local and remote port.
type ibLink struct {
	Peer          int
	Algo          string
	Local, Remote ibPort
	OK            bool
}

// ibLinks are the connections node me (an index of nodes) opens for a communicator over
// nodes, each over the local port whose cable reaches the peer; OK false where none does.
func ibLinks(nodes []ibNode, me int, algos map[string]bool, runtime, onePerNode bool) []ibLink {
	var out []ibLink
	for _, p := range commPairs(len(nodes), algos, runtime, onePerNode) {
		peer := -1
		switch me {
		case p.A:
			peer = p.B
		case p.B:
			peer = p.A
		default:
			continue
		}
		l := ibLink{Peer: peer, Algo: p.Algo}
		l.Local, l.Remote, l.OK = ibRoute(nodes[me].Ports, nodes[peer].Ports)
		if !l.OK && len(nodes[me].Ports) > 0 && len(nodes[peer].Ports) > 0 {
			// The queue pair NCCL tries is channel 0's: the first local NIC (src/graph/topo.cc
			// ncclTopoGetLocalNet: channel 0 → the GPU's first net) to the peer's.
			l.Local, l.Remote = nodes[me].Ports[0], nodes[peer].Ports[0]
		}
		out = append(out, l)
	}
	return out
}

// ibFailLines are NCCL's lines for a queue pair that cannot reach its peer, in order, and
// the sleep before each retry (unscaled). runtime says the algorithm was connected at its
// first use (NCCL_RUNTIME_CONNECT=1) rather than at init.
func ibFailLines(l ibLink, runtime bool) (info []string, sleeps []time.Duration, warn string, trace []string) {
	const retries = 34 // NCCL_IB_MQP_RETRY_CNT
	qp := fmt.Sprintf("on dev %s:%d, curr state INIT, next state RTR, local GID index 3, local GID ::ffff:%s, remote GID ::ffff:%s",
		l.Local.HCA, max(l.Local.Port, 1), l.Local.Addr, l.Remote.Addr)
	for attempt := 1; attempt <= retries; attempt++ {
		sleep := time.Duration(100*attempt) * time.Millisecond
		info = append(info, fmt.Sprintf("Call to ibv_modify_qp failed with 110 Connection timed out, %s, retrying %d/%d after %d msec of sleep", qp, attempt, retries+1, sleep.Milliseconds()))
		sleeps = append(sleeps, sleep)
	}
	warn = "Call to ibv_modify_qp failed with 110 Connection timed out, " + qp
	trace = []string{"transport/net_ib.cc:1591 -> 2"}
	switch {
	case l.Algo == "PAT":
		trace = append(trace, "transport/generic.cc:73 -> 2", "init.cc:1288 -> 2")
	case l.Algo == "Tree" && runtime:
		trace = append(trace, "transport/generic.cc:55 -> 2", "group.cc:153 -> 2")
	case l.Algo == "Tree":
		trace = append(trace, "transport/generic.cc:55 -> 2", "init.cc:1285 -> 2")
	case runtime:
		trace = append(trace, "transport/generic.cc:25 -> 2", "group.cc:149 -> 2")
	default:
		trace = append(trace, "transport/generic.cc:25 -> 2", "init.cc:1282 -> 2")
	}
	return info, sleeps, warn, trace
}

// ibPortsOf gives each verbs port its netdev's IPv4 address and subnet in this network
// namespace (a port whose netdev has none keeps empty ones: it reaches nothing).
func ibPortsOf(devs []verbsPort) []ibPort {
	var out []ibPort
	for _, d := range devs {
		p := ibPort{HCA: d.hca, Port: d.port}
		if i, err := net.InterfaceByName(d.netdev); err == nil {
			addrs, _ := i.Addrs()
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
					p.Addr = n.IP.String()
					p.Subnet = (&net.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask}).String()
					break
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// ncclIBPorts are the ports NCCL's IB plugin would use under the rank's env (nil: the
// socket transport): none with NCCL_NET=Socket or NCCL_IB_DISABLE set, else the ACTIVE
// ports libibverbs lists that NCCL_IB_HCA keeps.
func ncclIBPorts(getenv func(string) string) []ibPort {
	if strings.EqualFold(strings.TrimSpace(getenv("NCCL_NET")), "Socket") {
		return nil
	}
	if v := strings.TrimSpace(getenv("NCCL_IB_DISABLE")); v != "" && v != "0" {
		return nil
	}
	return ibPortsOf(filterHCAs(getenv("NCCL_IB_HCA"), verbsDevices()))
}

// commGroupsOf are vLLM's NCCL communicators for world ranks with tensor size tp, as rank
// lists: a TP group of consecutive ranks per stage and a PP group of one TP rank across the
// stages (vllm/distributed/parallel_state.py); its world group opens no NCCL connection.
func commGroupsOf(world, tp int) [][]int {
	tp = max(tp, 1)
	pp := max(world/tp, 1)
	var groups [][]int
	for s := range pp {
		var g []int
		for r := range tp {
			g = append(g, s*tp+r)
		}
		groups = append(groups, g)
	}
	if pp > 1 {
		for r := range tp {
			var g []int
			for s := range pp {
				g = append(g, s*tp+r)
			}
			groups = append(groups, g)
		}
	}
	return groups
}

// ibGroupNodes are the nodes of one communicator (ranks in group order) in order of first
// rank, and the index of rank's node among them.
func ibGroupNodes(group []int, rank int, peers []hello) ([]ibNode, int) {
	var nodes []ibNode
	me := -1
	for _, r := range group {
		if r >= len(peers) {
			continue
		}
		key := peers[r].IBKey
		idx := -1
		for i, n := range nodes {
			if n.Key == key {
				idx = i
			}
		}
		if idx == -1 {
			nodes = append(nodes, ibNode{Key: key, Ports: peers[r].IB, First: r})
			idx = len(nodes) - 1
		}
		if r == rank {
			me = idx
		}
	}
	return nodes, me
}

// ibConnect is the IB part of a rank's NCCL init when its NCCL uses the IB plugin (mine:
// its ports; none is the socket transport, which ncclStart covers): for every communicator
// of the rank (commGroupsOf), the connections of its node (ibLinks), each over the HCA whose
// cable reaches the peer, or NCCL's failure when none does, after NCCL's retries (scaled by
// the lab's time scale), raised as vLLM's pynccl wrapper raises it (NCCL_CHECK).
func ibConnect(ctx context.Context, rank, world, tp int, getenv func(string) string, mine []ibPort, peers []hello, log rankLog) error {
	if len(mine) == 0 {
		return nil
	}
	algos, err := ncclAlgos(getenv("NCCL_ALGO"))
	if err != nil {
		log("WARNING", "tuning.cc:80", "NCCL WARN "+err.Error())
		return fmt.Errorf("RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)")
	}
	runtime := strings.TrimSpace(getenv("NCCL_RUNTIME_CONNECT")) != "0"
	for _, g := range commGroupsOf(world, tp) {
		if !slices.Contains(g, rank) {
			continue
		}
		nodes, me := ibGroupNodes(g, rank, peers)
		allIB := len(nodes) > 1
		for _, n := range nodes {
			allIB = allIB && len(n.Ports) > 0
		}
		if !allIB {
			continue // one node or a node on sockets: no IB queue pair here
		}
		for _, l := range ibLinks(nodes, me, algos, runtime, len(nodes) == len(g)) {
			if l.OK {
				dev := slices.IndexFunc(mine, func(p ibPort) bool { return p.HCA == l.Local.HCA })
				log("INFO", "connect.cc:0", fmt.Sprintf("NCCL INFO Channel 00/0 : %d[0] -> %d[0] [send] via NET/IB/%d", rank, nodes[l.Peer].First, max(dev, 0)))
				continue
			}
			info, sleeps, warn, trace := ibFailLines(l, runtime)
			for i := range info {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(scaled(sleeps[i])):
				}
				log("INFO", "ibvwrap.cc:297", "NCCL INFO "+info[i])
			}
			log("WARNING", "ibvwrap.cc:307", "NCCL WARN "+warn)
			for _, t := range trace {
				log("INFO", strings.Fields(t)[0], "NCCL INFO "+t)
			}
			return fmt.Errorf("RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)")
		}
	}
	return nil
}

// ibHopGBs is the slowest hop of a communicator of world ranks (tensor size tp) in GB/s:
// per connection, 95% of the rates of the local ports whose cable reaches the peer (two
// rails to one peer add up; a triangle's or ring's hop is one port), as proof.go models
// RDMA. failed says some pair, anywhere in the communicators, has no cable.
func ibHopGBs(world, tp int, peers []hello, mine []verbsPort) (float64, bool) {
	rate := map[string]int{}
	for _, d := range mine {
		rate[d.hca] = d.rateMbps
	}
	algos, _ := ncclAlgos(os.Getenv("NCCL_ALGO"))
	runtime := strings.TrimSpace(os.Getenv("NCCL_RUNTIME_CONNECT")) != "0"
	slow, failed := 0.0, false
	for _, g := range commGroupsOf(world, tp) {
		for _, r := range g {
			nodes, me := ibGroupNodes(g, r, peers)
			allIB := len(nodes) > 1
			for _, n := range nodes {
				allIB = allIB && len(n.Ports) > 0
			}
			if !allIB {
				continue
			}
			for _, l := range ibLinks(nodes, me, algos, runtime, len(nodes) == len(g)) {
				if !l.OK {
					failed = true
					continue
				}
				gbs := 0.0
				for _, p := range nodes[me].Ports {
					if _, _, ok := ibRoute([]ibPort{p}, nodes[l.Peer].Ports); ok {
						mbps := rate[p.HCA]
						if mbps == 0 {
							mbps = 100000
						}
						gbs += float64(mbps) / 1000 * 0.95 / 8
					}
				}
				if slow == 0 || gbs < slow {
					slow = gbs
				}
			}
		}
	}
	return slow, failed
}
