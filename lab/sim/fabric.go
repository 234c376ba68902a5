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
//   - which NIC each connection uses: the one NCCL puts in the channel, the same for every
//     peer of a one-GPU node, the two ports of one CX-7 fused into one NIC by default
//     (ibLinks, ncclNets, ibQPs give the source) — not the port that faces the peer, so a
//     node whose ring neighbours sit on different ports (a triangle's, a ring's) opens a
//     queue pair on a port whose cable does not reach the peer;
//   - a queue pair towards a peer that the local HCA's cable does not reach fails in
//     ibv_modify_qp to RTR with ETIMEDOUT, which NCCL retries NCCL_IB_MQP_RETRY_CNT (34)
//     times, sleeping NCCL_IB_MQP_RETRY_SLEEP_MSEC (100) × attempt ms, logging each at INFO,
//     then WARNs (src/misc/ibvwrap.cc wrap_ibv_modify_qp, ibvModifyQpLog); NCCLCHECK traces
//     the return up (`file:line -> 2`, src/include/checks.h).
// NCCL 2.30.7 adds subnet-aware routing (src/transport/net_ib/connect.cc at v2.30.7-1;
// absent from v2.30.4-1 and earlier), off unless NCCL_IB_SUBNET_AWARE_ROUTING is set: the
// listener puts the GIDs of its device's first two RoCE ports in its handle
// (ncclIbListen), the connector moves to the first of its devices whose every RoCE port
// shares a subnet with one of them (ncclIbConnect → ncclIbFindDevBySubnet), and the
// acceptor does the same against the connector's ports (ncclIbAccept). The device NCCL
// first gave the channel stays when all its ports match; the search runs over the
// physical ports first (devices 0..n-1, init.cc ncclIbInitDevices) and then the fused
// NICs, so on a switchless fabric each connection lands on the port facing the peer
// (subnetRoute). Subnets are compared on the GID's IPv4 address under
// NCCL_IB_SUBNET_PREFIX_LEN bits (default 24; outside [1,32] a WARN and invalid usage).
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
	"strconv"
	"strings"
	"time"
)

// loadedNCCL is the version of the NCCL library the image's engine loads (imageNCCL).
var loadedNCCL = imageNCCL

// subnetRoute is NCCL's subnet-aware routing as the rank's NCCL and env have it: the
// prefix length its subnets are compared under, 0 when off (NCCL before 2.30.7, or
// NCCL_IB_SUBNET_AWARE_ROUTING unset or 0: NCCL_PARAM reads an integer, default 0).
func subnetRoute(nccl string, getenv func(string) string) (int, error) {
	if nccl == "" || versionBefore(nccl, "2.30.7") {
		return 0, nil
	}
	if on, err := strconv.ParseInt(strings.TrimSpace(getenv("NCCL_IB_SUBNET_AWARE_ROUTING")), 0, 64); err != nil || on == 0 {
		return 0, nil
	}
	prefix := int64(24)
	if v := strings.TrimSpace(getenv("NCCL_IB_SUBNET_PREFIX_LEN")); v != "" {
		if n, err := strconv.ParseInt(v, 0, 64); err == nil {
			prefix = n
		}
	}
	if prefix < 1 || prefix > 32 {
		return 0, fmt.Errorf("NET/IB: NCCL_IB_SUBNET_PREFIX_LEN=%d is out of range [1,32]", prefix)
	}
	return int(prefix), nil
}

// sameSubnet is connect.cc gidSameSubnet for IPv4 GIDs: the addresses under prefix bits.
func sameSubnet(a, b ibPort, prefix int) bool {
	x, err1 := netip.ParseAddr(a.Addr)
	y, err2 := netip.ParseAddr(b.Addr)
	if err1 != nil || err2 != nil || !x.Is4() || !y.Is4() {
		return false
	}
	px, _ := x.Prefix(prefix)
	py, _ := y.Prefix(prefix)
	return px == py
}

// findDevBySubnet is connect.cc ncclIbFindDevBySubnet: def when every one of its ports
// shares a subnet with one of remote's, else the first of devs (physical ports, then
// fused NICs) whose every port does, else def.
func findDevBySubnet(devs []ncclNet, def ncclNet, remote []ibPort, prefix int) ncclNet {
	all := func(d ncclNet) bool {
		for _, p := range d.Ports {
			if !slices.ContainsFunc(remote, func(r ibPort) bool { return sameSubnet(p, r, prefix) }) {
				return false
			}
		}
		return len(d.Ports) > 0
	}
	if all(def) {
		return def
	}
	for _, d := range devs {
		if d.Dev != def.Dev && all(d) {
			return d
		}
	}
	return def
}

// ibDevices are NCCL's IB devices in index order, as ncclIbFindDevBySubnet searches them:
// each port alone (0..n-1), then the fused NICs ncclNets made.
func ibDevices(ports []ibPort, merge bool) []ncclNet {
	var out []ncclNet
	for i, p := range ports {
		out = append(out, ncclNet{Dev: i, Ports: []ibPort{p}})
	}
	for _, n := range ncclNets(ports, merge) {
		if n.Dev >= len(ports) {
			out = append(out, n)
		}
	}
	return out
}

// routed is a connection from local NIC l to the peer's NIC r under subnet-aware routing:
// the connector's device chosen against the listener's first two ports, the acceptor's
// against the connector's chosen ports.
func routed(mine, theirs []ibPort, l, r ncclNet, merge bool, prefix int) (ncclNet, ncclNet) {
	listen := r.Ports[:min(2, len(r.Ports))]
	lc := findDevBySubnet(ibDevices(mine, merge), l, listen, prefix)
	rc := findDevBySubnet(ibDevices(theirs, merge), r, lc.Ports, prefix)
	return lc, rc
}

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

// ncclNet is one of NCCL's network devices over a node's IB ports: a port, or a virtual
// NIC of several (net_ib.cc ncclIbMakeVDeviceInternal, named "a+b"), with NCCL's index.
type ncclNet struct {
	Dev   int
	Ports []ibPort
}

// pciDevice is the PCI device of an HCA named as rdma-core names RoCE devices after their
// PCI address (rocep<bus>s<slot>f<function>, roceP<domain>p<bus>s<slot>f<function>, as on
// a DGX Spark): the name without its function, as ncclIbGetPciPath sets the path's last
// character to '0' (net_ib.cc). Another name is its own device.
func pciDevice(hca string) string {
	i := strings.LastIndexByte(hca, 'f')
	if i <= 0 || i == len(hca)-1 {
		return hca
	}
	for _, c := range hca[i+1:] {
		if c < '0' || c > '9' {
			return hca
		}
	}
	return hca[:i]
}

// ncclNets are NCCL 2.28.9's network devices over ports (in libibverbs' order, the
// physical devices 0..n-1). With NCCL_IB_MERGE_NICS at its default 1 and
// NCCL_NET_MERGE_LEVEL at its default PORT (src/graph/topo.cc ncclTopoGetFusionEnv), the
// ports of one PCI device — a CX-7's two ports, rocep1s0f0 and rocep1s0f1 — are fused into
// one virtual NIC (topo.cc ncclTopoAutoMerge, net_ib.cc ncclIbMakeVDeviceInternal), which
// the topology uses instead of its ports and whose index follows the physical ones;
// NCCL_IB_MERGE_NICS=0 makes ncclIbMakeVDeviceInternal refuse, and each port stays a NIC.
func ncclNets(ports []ibPort, merge bool) []ncclNet {
	var out []ncclNet
	groups := map[string]int{}
	virtual := len(ports)
	for i, p := range ports {
		key := pciDevice(p.HCA)
		if g, ok := groups[key]; ok && merge {
			if len(out[g].Ports) == 1 {
				out[g].Dev = virtual
				virtual++
			}
			out[g].Ports = append(out[g].Ports, p)
			continue
		}
		groups[key] = len(out)
		out = append(out, ncclNet{Dev: i, Ports: []ibPort{p}})
	}
	return out
}

// ncclMergeNICs is NCCL_IB_MERGE_NICS as NCCL_PARAM reads it (default 1; 0 disables).
func ncclMergeNICs(getenv func(string) string) bool {
	return strings.TrimSpace(getenv("NCCL_IB_MERGE_NICS")) != "0"
}

// ibQPs are the queue pairs of one connection between local NIC l and the peer's NIC r:
// ncclIbConnect and ncclIbAccept (net_ib.cc) open max(local, remote) × NCCL_IB_QPS_PER_
// CONNECTION (1) queue pairs, "Alternate QPs between devices": queue pair q on local
// device q mod l's ports and remote device q mod r's, each brought to RTR towards that
// remote device's GID. The first pair the cables do not join is returned with ok false.
func ibQPs(l, r ncclNet) (local, remote ibPort, ok bool) {
	n := max(len(l.Ports), len(r.Ports))
	for q := range n {
		a, b := l.Ports[q%len(l.Ports)], r.Ports[q%len(r.Ports)]
		if _, _, joined := ibRoute([]ibPort{a}, []ibPort{b}); !joined {
			return a, b, false
		}
	}
	return l.Ports[0], r.Ports[0], true
}

// ibLink is one connection this node opens on one channel: to which node, by which
// algorithm, over which local NIC (NCCL's index) and the first queue pair's (or the
// failing one's) local and remote port.
type ibLink struct {
	Peer          int
	Algo          string
	Channel, Dev  int
	Local, Remote ibPort
	Ports         []ibPort // the local NIC's ports (after subnet-aware routing's move)
	// Routed is the device subnet-aware routing moved the connection to (-1: none).
	Routed int
	OK     bool
}

// ibLinks are the connections node me (an index of nodes) opens for a communicator over
// nodes, per channel, over the NIC NCCL puts in the channel — never chosen by the peer.
// NCCL 2.28.9, for a node of one GPU:
//   - ring and tree channels connect over the NIC the topology search put in the
//     channel's graph, for both neighbours: ncclTopoGetNetDev (src/graph/search.cc) takes
//     graph->inter[channel*2+index] with index 0 where the channel's first GPU is the rank
//     (with one GPU, always), for send (sendSetup) and receive (recvSetup, "the receiver
//     uses its own NIC") alike (src/transport/net.cc);
//   - the search gives channel c the node's NIC c mod NICs: ncclTopoSearchRecNet tries
//     nets[(graph->nChannels+i)%netCount] first, and with crossNic 0 (NCCL_CROSS_NIC's
//     default 2 searches without it first) ncclTopoSearchCheckNet makes the channel leave
//     by the NIC it entered; NCCL_CROSS_NIC=1 could not help, as index is always 0;
//   - send/recv without a graph take ncclTopoGetLocalNet (src/graph/topo.cc): the GPU's
//     NIC plus channelId mod NICs — again the channel's, not the peer's;
//   - the peer's end is its own NIC of the same channel (its search on the same machine
//     gives the same graph), and the queue pairs pair device q with device q (ibQPs).
//
// There are as many channels as NICs (at least one each).
//
// route > 0 is subnet-aware routing's prefix length (subnetRoute): each connection then
// moves, at both ends, to the device on the peer's subnet (routed), in both directions.
func ibLinks(nodes []ibNode, me int, algos map[string]bool, runtime, onePerNode, merge bool, route int) []ibLink {
	var out []ibLink
	mine := ncclNets(nodes[me].Ports, merge)
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
		theirs := ncclNets(nodes[peer].Ports, merge)
		if len(mine) == 0 || len(theirs) == 0 {
			out = append(out, ibLink{Peer: peer, Algo: p.Algo})
			continue
		}
		for c := range max(len(mine), len(theirs)) {
			l, r := mine[c%len(mine)], theirs[c%len(theirs)]
			link := ibLink{Peer: peer, Algo: p.Algo, Channel: c, Dev: l.Dev, Ports: l.Ports, Routed: -1}
			if route == 0 {
				link.Local, link.Remote, link.OK = ibQPs(l, r)
				out = append(out, link)
				continue
			}
			// This node sends (connects) and receives (accepts) on the channel.
			lc, rc := routed(nodes[me].Ports, nodes[peer].Ports, l, r, merge, route)
			rs, ls := routed(nodes[peer].Ports, nodes[me].Ports, r, l, merge, route)
			if lc.Dev != l.Dev {
				link.Routed = lc.Dev
			}
			link.Ports = lc.Ports
			link.Local, link.Remote, link.OK = ibQPs(lc, rc)
			if link.OK {
				var back bool
				if _, _, back = ibQPs(ls, rs); !back {
					link.Local, link.Remote, link.OK = ls.Ports[0], rs.Ports[0], false
				}
			}
			out = append(out, link)
		}
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
// of the rank (commGroupsOf), the connections of its node per channel (ibLinks), each over
// the channel's NIC, or NCCL's failure where a queue pair's cable does not reach, after NCCL's retries (scaled by
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
	merge := ncclMergeNICs(getenv)
	route, err := subnetRoute(loadedNCCL(), getenv)
	if err != nil {
		log("WARNING", "connect.cc:529", "NCCL WARN "+err.Error())
		return fmt.Errorf("RuntimeError: NCCL error: invalid argument (run with NCCL_DEBUG=WARN for details)")
	}
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
		for _, l := range ibLinks(nodes, me, algos, runtime, len(nodes) == len(g), merge, route) {
			if l.OK {
				log("INFO", "net.cc:0", fmt.Sprintf("NCCL INFO Channel %02d/0 : %d[0] -> %d[0] [send] via NET/IB/%d", l.Channel, rank, nodes[l.Peer].First, l.Dev))
				if l.Routed >= 0 {
					log("INFO", "connect.cc:587", fmt.Sprintf("NCCL INFO NET/IB: Subnet-aware routing: overriding dev %d with dev %d", l.Dev, l.Routed))
				}
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
// per connection to a peer, 95% of the rates of the local ports its channels' NICs hold
// (the seed's two rails add up; a fused NIC counts its ports), as proof.go models RDMA.
// failed says some channel, anywhere in the communicators, has a queue pair the cables do
// not join.
func ibHopGBs(world, tp int, peers []hello, mine []verbsPort) (float64, bool) {
	rate := map[string]int{}
	for _, d := range mine {
		rate[d.hca] = d.rateMbps
	}
	algos, _ := ncclAlgos(os.Getenv("NCCL_ALGO"))
	runtime := strings.TrimSpace(os.Getenv("NCCL_RUNTIME_CONNECT")) != "0"
	merge := ncclMergeNICs(os.Getenv)
	route, err := subnetRoute(loadedNCCL(), os.Getenv)
	if err != nil {
		return 0, true
	}
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
			used := map[int]map[string]bool{}
			for _, l := range ibLinks(nodes, me, algos, runtime, len(nodes) == len(g), merge, route) {
				if !l.OK {
					failed = true
					continue
				}
				if used[l.Peer] == nil {
					used[l.Peer] = map[string]bool{}
				}
				for _, p := range l.Ports {
					used[l.Peer][p.HCA] = true
				}
			}
			for _, hcas := range used {
				gbs := 0.0
				for h := range hcas {
					mbps := rate[h]
					if mbps == 0 {
						mbps = 100000
					}
					gbs += float64(mbps) / 1000 * 0.95 / 8
				}
				if slow == 0 || gbs < slow {
					slow = gbs
				}
			}
		}
	}
	return slow, failed
}
