package netplan

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/tpdeploy/tpdeploy/internal/failure"
	"github.com/tpdeploy/tpdeploy/internal/release"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// The data plane of a fleet without a switch. Three DGX Sparks are cabled as a triangle and
// four as a ring; every cable is its own subnet, so no link subnet spans the cluster and the
// plan has two planes: the bootstrap plane (Plan.Subnet: one subnet every node reaches, for
// Ray, c10d, Gloo, VLLM_HOST_IP and NCCL's bootstrap socket) and the data plane, the graph
// of measured links between HCAs that NCCL's RDMA transport runs on (docs/network.md).

// DataLink is one cable of the data plane: two nodes with an ACTIVE HCA port each whose
// netdev holds an IPv4 address in one subnet.
type DataLink struct {
	A      string       `json:"a"`
	B      string       `json:"b"`
	Subnet netip.Prefix `json:"subnet"`
	AHCA   RDMADevice   `json:"a_hca"`
	BHCA   RDMADevice   `json:"b_hca"`
	AAddr  netip.Addr   `json:"a_addr"`
	BAddr  netip.Addr   `json:"b_addr"`
	// SpeedMbps is the slower end's link speed (the HCA port's rate when the netdev
	// reports none); 0 unknown.
	SpeedMbps int `json:"speed_mbps,omitempty"`
	// Reason says why a cabled pair is left out (Graph.LeftOut): a direction that did not
	// connect, or was not tested.
	Reason string `json:"reason,omitempty"`
}

// Graph is the data plane as measured: Links connected in both directions in the
// reachability test; LeftOut were cabled (addresses and HCAs) but did not.
type Graph struct {
	Nodes   []string   `json:"nodes"`
	Links   []DataLink `json:"links,omitempty"`
	LeftOut []DataLink `json:"left_out,omitempty"`
}

// linker is Linked as a set, for the placement search's many questions.
func (g Graph) linker() func(a, b string) bool {
	set := map[[2]string]bool{}
	for _, l := range g.Links {
		set[[2]string{l.A, l.B}], set[[2]string{l.B, l.A}] = true, true
	}
	return func(a, b string) bool { return set[[2]string{a, b}] }
}

// Linked reports whether a and b share a measured link.
func (g Graph) Linked(a, b string) bool {
	for _, l := range g.Links {
		if (l.A == a && l.B == b) || (l.A == b && l.B == a) {
			return true
		}
	}
	return false
}

// Fabric is the data-plane part of a plan: the graph, the nodes in rank order, the pairs
// the layout's NCCL communicators connect, and what NCCL may use on it.
type Fabric struct {
	Graph Graph `json:"graph"`
	// Shape is pair, triangle, ring, mesh (every pair linked) or partial.
	Shape string `json:"shape"`
	// Order is the nodes in rank order: node i holds ranks i*g … i*g+g-1 (g GPUs each).
	Order []string `json:"order"`
	// Pairs are the node pairs that must talk (each TP and PP group's NCCL ring), each on
	// a link.
	Pairs [][2]string `json:"pairs,omitempty"`
	// Algo is the planned NCCL_ALGO, empty when NCCL may choose; AlgoReason says why.
	Algo       string `json:"algo,omitempty"`
	AlgoReason string `json:"algo_reason,omitempty"`
	// Cannot says what the layout cannot do on this graph (an all-to-all between nodes that
	// share no link).
	Cannot []string `json:"cannot,omitempty"`
	// Placement says who puts the ranks in Order: tpdeploy (executor mp's --node-rank) or
	// vLLM's Ray executor, whose own order the plan checked.
	Placement string `json:"placement,omitempty"`
	// Used says whether NCCL_IB_HCA lists the graph's HCAs (through the rails every node
	// shares, Plan.Rails, or per link); false when data_plane: skip or warn leaves it unused.
	Used bool `json:"used,omitempty"`
	// NCCLCannot says why NCCL cannot use the links although they carry the layout (a node
	// whose peers sit on different ports, channelNICs); empty when it can.
	NCCLCannot string `json:"nccl_cannot,omitempty"`
	// NCCL is the image's NCCL version the data plane was planned for ("" unknown).
	NCCL string `json:"nccl,omitempty"`
	// SubnetPrefixLen, when set, plans NCCL's subnet-aware routing (NCCL ≥ 2.30.7) with
	// this prefix length: each connection moves to the local HCA whose port shares the
	// peer's subnet, so a node's peers may sit on different ports (subnetRouting).
	SubnetPrefixLen int `json:"subnet_prefix_len,omitempty"`
}

// EnvSubnetRouting and EnvSubnetPrefixLen are NCCL's switches for subnet-aware routing
// (src/transport/net_ib/connect.cc at v2.30.7-1: NCCL_PARAM IbSubnetAwareRouting, default
// 0; IbSubnetPrefixLen, default 24, out of [1,32] a WARN and ncclInvalidArgument).
const (
	EnvSubnetRouting   = "NCCL_IB_SUBNET_AWARE_ROUTING"
	EnvSubnetPrefixLen = "NCCL_IB_SUBNET_PREFIX_LEN"
)

// subnetRouting plans NCCL ≥ 2.30.7's subnet-aware routing on the graph: NCCL compares
// the IPv4 address in the local port's GID with the peer's under one prefix length for
// every link (connect.cc gidSameSubnet: the mask of NCCL_IB_SUBNET_PREFIX_LEN bits), so the
// length must keep both ends of every link together (no longer than any link's prefix)
// and every link apart from every other (else a port on one cable would pass for one on
// another, and its queue pair would time out). It returns the length, or why there is
// none.
func subnetRouting(g Graph) (int, string) {
	bits := 32
	for _, l := range g.Links {
		bits = min(bits, l.Subnet.Bits())
	}
	seen := map[netip.Prefix]string{}
	for _, l := range g.Links {
		p := netip.PrefixFrom(l.Subnet.Addr(), bits).Masked()
		name := l.A + "-" + l.B + " on " + l.Subnet.String()
		if other, dup := seen[p]; dup && other != name {
			return 0, fmt.Sprintf("NCCL_IB_SUBNET_PREFIX_LEN applies one length to every link, and at /%d (the shortest link prefix) %s and %s fall in one subnet %s, so NCCL could pick a port whose cable does not reach the peer", bits, other, name, p)
		}
		seen[p] = name
	}
	return bits, ""
}

// subnetRoutingIn says whether the image's NCCL has subnet-aware routing.
func subnetRoutingIn(nccl string) bool {
	v, ok := release.ParseVersion(nccl)
	return ok && v.AtLeast(release.NCCLSubnetRoutingSince)
}

// BuildGraph is the data plane from the probes and the reachability matrix: for every
// subnet in which two or more nodes have an up, ACTIVE HCA-backed address, a link per pair
// of them, kept when both directions connected over it. The operator's exclusions apply
// as they do to the bootstrap subnet.
func BuildGraph(c spec.Cluster, probes []NodeProbe, matrix []PairResult) Graph {
	p := prefsOf(c)
	byNode := map[string]NodeProbe{}
	for _, pr := range probes {
		byNode[pr.Node] = pr
	}
	type end struct {
		node string
		hca  RDMADevice
		addr netip.Addr
		mbps int
	}
	ends := map[netip.Prefix][]end{}
	var subnets []netip.Prefix
	g := Graph{}
	for _, n := range c.Nodes {
		g.Nodes = append(g.Nodes, n.Name)
		pr := byNode[n.Name]
		for _, l := range pr.Links {
			if !l.Up || l.Loopback || globMatch(p.excludeIface, l.Name) {
				continue
			}
			devs := rdmaOn(pr, l.Name)
			if len(devs) == 0 {
				continue
			}
			for _, a := range l.Addrs {
				s := a.Masked()
				if !a.Addr().Is4() || linkLocal.Overlaps(s) || p.excluded(s) {
					continue
				}
				if _, seen := ends[s]; !seen {
					subnets = append(subnets, s)
				}
				mbps := l.SpeedMbps
				if mbps == 0 {
					mbps = devs[0].RateMbps
				}
				ends[s] = append(ends[s], end{node: n.Name, hca: devs[0], addr: a.Addr(), mbps: mbps})
			}
		}
	}
	slices.SortFunc(subnets, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	type key struct {
		from, to string
		subnet   netip.Prefix
	}
	results := make(map[key]PairResult, len(matrix))
	for _, r := range matrix {
		results[key{r.From, r.To, r.Subnet}] = r
	}
	for _, s := range subnets {
		es := ends[s]
		for i := range es {
			for j := i + 1; j < len(es); j++ {
				a, b := es[i], es[j]
				if a.node == b.node {
					continue // two ports of one node in one subnet: no cable between nodes
				}
				l := DataLink{A: a.node, B: b.node, Subnet: s, AHCA: a.hca, BHCA: b.hca, AAddr: a.addr, BAddr: b.addr, SpeedMbps: minKnown(a.mbps, b.mbps)}
				var why []string
				for _, d := range [][2]string{{a.node, b.node}, {b.node, a.node}} {
					r, ok := results[key{d[0], d[1], s}]
					switch {
					case !ok:
						why = append(why, fmt.Sprintf("%s → %s not tested", d[0], d[1]))
					case !r.OK:
						why = append(why, fmt.Sprintf("%s cannot reach %s at %s (%s)", d[0], d[1], r.Addr, r.Error))
					}
				}
				if len(why) > 0 {
					l.Reason = strings.Join(why, "; ")
					g.LeftOut = append(g.LeftOut, l)
				} else {
					g.Links = append(g.Links, l)
				}
			}
		}
	}
	return g
}

func minKnown(a, b int) int {
	switch {
	case a <= 0:
		return max(b, 0)
	case b <= 0:
		return a
	}
	return min(a, b)
}

// DataPlaneListenAddrs gives, per node, its addresses on link subnets that ListenAddrs
// leaves out because not every node has one (a cable between two nodes): the reachability
// test measures the data plane's graph by dialling each only from the nodes that have an
// address in the same subnet (ShouldDial).
func DataPlaneListenAddrs(c spec.Cluster, probes []NodeProbe) map[string][]netip.Prefix {
	boot := map[netip.Prefix]bool{}
	listen := ListenAddrs(c, probes)
	for _, n := range c.Nodes { // not the map: the workflow calls this (workflowcheck)
		for _, a := range listen[n.Name] {
			boot[a.Masked()] = true
		}
	}
	// A graph built without a matrix lists every cabled pair as left out: exactly the
	// addresses worth a test.
	out := map[string][]netip.Prefix{}
	for _, l := range BuildGraph(c, probes, nil).LeftOut {
		if boot[l.Subnet] {
			continue
		}
		for _, e := range []struct {
			node string
			addr netip.Addr
		}{{l.A, l.AAddr}, {l.B, l.BAddr}} {
			pfx := netip.PrefixFrom(e.addr, l.Subnet.Bits())
			if !slices.Contains(out[e.node], pfx) {
				out[e.node] = append(out[e.node], pfx)
			}
		}
	}
	return out
}

// ShouldDial says whether the node probed as from dials target t: a link subnet's address
// is dialled only by the nodes in that subnet (any other would wait out its timeout on a
// route it does not have). Every node has an address in a bootstrap candidate, so this
// keeps every dial of the all-pairs test.
func ShouldDial(from NodeProbe, t Target) bool {
	for _, l := range from.Links {
		if _, ok := l.Addr(t.Subnet); ok && !l.Loopback {
			return true
		}
	}
	return false
}

// ReachAddrs are the addresses each node listens on in the reachability test: its
// addresses in the bootstrap candidates (ListenAddrs) and its ends of the data plane's
// cables (DataPlaneListenAddrs), so the matrix holds every link measured in both
// directions and BuildGraph keeps only the cables that connected.
func ReachAddrs(c spec.Cluster, probes []NodeProbe) map[string][]netip.Prefix {
	out := ListenAddrs(c, probes)
	links := DataPlaneListenAddrs(c, probes)
	for _, n := range c.Nodes {
		for _, a := range links[n.Name] {
			if !slices.Contains(out[n.Name], a) {
				out[n.Name] = append(out[n.Name], a)
			}
		}
	}
	return out
}

// DialTargets are the other nodes' listeners that the node probed as from dials: every
// bootstrap candidate, and a cable's address only from the node at its other end (the
// agent refuses a dial outside its own subnets, and a node off the cable has no route).
func DialTargets(from NodeProbe, targets []Target) []Target {
	var out []Target
	for _, t := range targets {
		if t.Node != from.Node && ShouldDial(from, t) {
			out = append(out, t)
		}
	}
	return out
}

// shape names the graph and, for a ring, gives its nodes in cable order from the first.
func shape(g Graph) (string, []string) {
	n := len(g.Nodes)
	adj := map[string][]string{}
	for _, a := range g.Nodes {
		for _, b := range g.Nodes {
			if a != b && g.Linked(a, b) {
				adj[a] = append(adj[a], b)
			}
		}
	}
	full := true
	ring := n >= 4
	for _, a := range g.Nodes {
		full = full && len(adj[a]) == n-1
		ring = ring && len(adj[a]) == 2
	}
	switch {
	case n == 2 && full:
		return "pair", g.Nodes
	case n == 3 && full:
		return "triangle", g.Nodes
	case full && n > 3:
		return "mesh", g.Nodes
	case ring:
		order := []string{g.Nodes[0]}
		for prev, cur := "", g.Nodes[0]; ; {
			next := adj[cur][0]
			if next == prev {
				next = adj[cur][1]
			}
			if next == g.Nodes[0] {
				break
			}
			order = append(order, next)
			prev, cur = cur, next
			if len(order) > n {
				break
			}
		}
		if len(order) == n {
			return "ring", order
		}
	}
	return "partial", g.Nodes
}

// commGroups are the NCCL communicators vLLM opens for tensor × pipeline parallelism, as
// rank lists: a TP group of consecutive ranks per stage, and a PP group of the ranks with
// one TP rank across the stages (vllm/distributed/parallel_state.py; its world group has
// no device communicator, so it opens no NCCL connection).
func commGroups(tp, pp int) [][]int {
	var groups [][]int
	for s := range pp {
		var g []int
		for r := range tp {
			g = append(g, s*tp+r)
		}
		groups = append(groups, g)
	}
	for r := range tp {
		var g []int
		for s := range pp {
			g = append(g, s*tp+r)
		}
		groups = append(groups, g)
	}
	return groups
}

// slotEdges are the pairs of node slots (positions in rank order, counts[i] GPUs in slot
// i) that must share a link: NCCL's ring connects each rank to the next of its
// communicator, node by node in rank order, and the last node back to the first
// (src/graph/connect.cc, connectRings), so every group spanning k > 1 nodes needs the k
// links of its cycle (one for two nodes). groups lists each group's slots in order, for
// the algorithm check; slots is how many slots the ranks fill (0: the counts are short).
func slotEdges(tp, pp int, counts []int) (edges [][2]int, groups [][]int, slots int) {
	var slotOf []int
	for i, n := range counts {
		for range n {
			slotOf = append(slotOf, i)
		}
	}
	if len(slotOf) < tp*pp {
		return nil, nil, 0
	}
	slots = slotOf[tp*pp-1] + 1
	seen := map[[2]int]bool{}
	for _, ranks := range commGroups(tp, pp) {
		var ss []int
		for _, r := range ranks {
			if s := slotOf[r]; !slices.Contains(ss, s) {
				ss = append(ss, s)
			}
		}
		if len(ss) < 2 {
			continue
		}
		groups = append(groups, ss)
		for i := range ss {
			if i == len(ss)-1 && len(ss) == 2 {
				break
			}
			a, b := ss[i], ss[(i+1)%len(ss)]
			e := [2]int{min(a, b), max(a, b)}
			if !seen[e] {
				seen[e] = true
				edges = append(edges, e)
			}
		}
	}
	return edges, groups, slots
}

// placementBudget bounds the search for a rank order; a ring of 16 needs a few dozen steps.
const placementBudget = 1 << 20

// place finds a rank order of nodes (first fixed: the head holds rank 0 under both
// executors) in which every edge's slots are linked, trying nodes in the given order so
// that a spec order that works is kept. A nil movable checks the given order alone.
func place(nodes, movable []string, slots int, edges [][2]int, linked func(a, b string) bool) (order []string, ok, gaveUp bool) {
	if slots > len(nodes) || slots == 0 {
		return nil, false, false
	}
	if movable == nil {
		for _, e := range edges {
			if !linked(nodes[e[0]], nodes[e[1]]) {
				return nil, false, false
			}
		}
		return nodes, true, false
	}
	back := make([][]int, slots) // back[i]: the earlier slots slot i must be linked to
	for _, e := range edges {
		back[e[1]] = append(back[e[1]], e[0])
	}
	order = make([]string, slots)
	used := map[string]bool{}
	steps := 0
	var try func(i int) bool
	try = func(i int) bool {
		if i == slots {
			return true
		}
		for _, n := range nodes {
			if used[n] || (i == 0) != (n == nodes[0]) {
				continue
			}
			if steps++; steps > placementBudget {
				return false
			}
			ok := true
			for _, j := range back[i] {
				if !linked(order[j], n) {
					ok = false
					break
				}
			}
			if !ok {
				continue
			}
			order[i], used[n] = n, true
			if try(i + 1) {
				return true
			}
			used[n] = false
		}
		return false
	}
	if !try(0) {
		return nil, false, steps > placementBudget
	}
	for _, n := range nodes {
		if !used[n] {
			order = append(order, n)
		}
	}
	return order, true, false
}

// planFabric maps the layout onto the graph: the rank order, the pairs that must talk,
// the NCCL algorithms the graph carries. It fails with the pairs, under the spec's order,
// that share no link when no order carries the layout.
func planFabric(c spec.Cluster, g Graph, gpus map[string]int) (Fabric, error) {
	f := Fabric{Graph: g}
	var kind string
	kind, _ = shape(g)
	f.Shape = kind
	nodes := []string{c.Head().Name}
	for _, n := range c.Nodes {
		if n.Name != nodes[0] {
			nodes = append(nodes, n.Name)
		}
	}
	tp, pp := c.Parallel.Tensor, max(c.Parallel.Pipeline, 1)
	counts := make([]int, len(nodes))
	equal := true
	for i, n := range nodes {
		counts[i] = max(gpus[n], 1)
		equal = equal && counts[i] == counts[0]
	}
	edges, groups, slots := slotEdges(tp, pp, counts)
	// With equal nodes the slots' edges hold whichever node sits in them, so the search
	// may move nodes; unequal nodes change the edges with the order, and keep the spec's.
	candidates := nodes
	if !equal {
		candidates = nil
	}
	linked := g.linker()
	order, ok, gaveUp := place(nodes, candidates, slots, edges, linked)
	if !ok {
		return f, &Error{Type: failure.DataPlaneUnreachable, Msg: unreachableMessage(c, g, nodes, counts, equal, gaveUp, edges)}
	}
	f.Order = order
	for _, e := range edges {
		f.Pairs = append(f.Pairs, [2]string{order[e[0]], order[e[1]]})
	}
	f.judgeOrder(groups, slots, linked)
	return f, nil
}

// judgeOrder sets what NCCL may use, and what the layout cannot do, with the ranks in
// f.Order: groups are each communicator's slots, slots how many the ranks fill.
func (f *Fabric) judgeOrder(groups [][]int, slots int, linked func(a, b string) bool) {
	f.Algo, f.AlgoReason, f.Cannot = "", "", nil
	// NCCL's double binary tree (src/graph/trees.cc, ncclGetDtree) and PAT (src/transport/
	// generic.cc, ncclTransportPatConnect, rank ± 2^k with one GPU per node) connect nodes
	// that are not neighbours in rank order: node 0 to node 2 of four. Where a group of
	// three or more nodes is not fully linked, only the ring is safe.
	var notClique []string
	for _, gs := range groups {
		if len(gs) < 3 {
			continue
		}
		for i := range gs {
			for j := i + 1; j < len(gs); j++ {
				if a, b := f.Order[gs[i]], f.Order[gs[j]]; !linked(a, b) {
					notClique = appendNew(notClique, a+" and "+b)
				}
			}
		}
	}
	if len(notClique) > 0 {
		f.Algo = "Ring"
		f.AlgoReason = "NCCL_ALGO=Ring: the ring connects each node only to its neighbours in rank order, which are cabled; NCCL's tree and PAT would also connect " +
			strings.Join(notClique, ", ") + ", which share no link (NCCL 2.28 connects an algorithm when it first uses it, NCCL_RUNTIME_CONNECT=1)"
	} else {
		f.AlgoReason = "every node of each communicator is linked to every other: NCCL may choose its algorithm"
	}
	var unlinked []string
	for i, a := range f.Order[:slots] {
		for _, b := range f.Order[i+1 : slots] {
			if !linked(a, b) {
				unlinked = append(unlinked, a+"-"+b)
			}
		}
	}
	if len(unlinked) > 0 {
		f.Cannot = append(f.Cannot, "no all-to-all (expert parallelism), tree or direct traffic between "+strings.Join(unlinked, ", ")+": they share no link")
	}
}

func unreachableMessage(c spec.Cluster, g Graph, nodes []string, counts []int, equal, gaveUp bool, edges [][2]int) string {
	var missing []string
	for _, e := range edges {
		a, b := nodes[e[0]], nodes[e[1]]
		if !g.Linked(a, b) {
			missing = appendNew(missing, a+" and "+b+" share no link")
		}
	}
	var b strings.Builder
	order := "no order of the nodes has one"
	switch {
	case !equal:
		order = "the spec's order has none (the nodes' GPU counts differ, so it is the only one tried)"
	case gaveUp:
		order = fmt.Sprintf("no order was found within %d steps of the search; under the spec's order", placementBudget)
	}
	fmt.Fprintf(&b, "tensor %d x pipeline %d needs a cable between every pair of nodes that must talk, and %s: %s",
		c.Parallel.Tensor, max(c.Parallel.Pipeline, 1), order, strings.Join(missing, "; "))
	for _, l := range g.LeftOut {
		fmt.Fprintf(&b, "; %s-%s on %s is cabled but left out: %s", l.A, l.B, l.Subnet, l.Reason)
	}
	b.WriteString("\nways out: cable the missing pairs (each cable its own subnet, an ACTIVE HCA port at both ends)")
	if alts := carriedLayouts(c, g, nodes, counts, equal); len(alts) > 0 {
		b.WriteString("; or use a layout these links carry: " + strings.Join(alts, ", "))
	}
	b.WriteString("; or set data_plane: skip to run NCCL over sockets on the bootstrap subnet (slow)")
	return b.String()
}

// carriedLayouts lists the other tensor x pipeline splits of the same GPU count that a
// node order carries on g.
func carriedLayouts(c spec.Cluster, g Graph, nodes []string, counts []int, equal bool) []string {
	world := c.Parallel.Tensor * max(c.Parallel.Pipeline, 1)
	linked := g.linker()
	movable := nodes
	if !equal {
		movable = nil
	}
	var out []string
	for tp := world; tp >= 1; tp-- {
		pp := world / tp
		if world%tp != 0 || (tp == c.Parallel.Tensor && pp == max(c.Parallel.Pipeline, 1)) {
			continue
		}
		edges, _, slots := slotEdges(tp, pp, counts)
		if _, ok, _ := place(nodes, movable, slots, edges, linked); ok {
			out = append(out, fmt.Sprintf("tensor %d x pipeline %d", tp, pp))
		}
	}
	return out
}

// Name is the fabric's shape with its nodes, as status and plan print it: "ring
// node-a-node-b-node-c-node-d" (in cable order), "triangle node-a-node-b-node-c".
func (f Fabric) Name() string {
	switch f.Shape {
	case "ring":
		_, ring := shape(f.Graph)
		return f.Shape + " " + strings.Join(ring, "-")
	case "pair", "triangle", "mesh":
		return f.Shape + " " + strings.Join(f.Graph.Nodes, "-")
	}
	return f.Shape
}

// ProofOrder is the rank order of the data-plane proof's one all_reduce, head first: on a
// ring the cables' cycle, so that NCCL's ring over the whole world crosses every cable and
// no uncabled pair (the layout's own order may not: tensor 2 x pipeline 2 ranks a, b, d, c,
// whose world ring would close over b-d); elsewhere the rank order.
func (f Fabric) ProofOrder(head string) []string {
	if f.Shape != "ring" {
		return f.Order
	}
	_, ring := shape(f.Graph)
	i := slices.Index(ring, head)
	if i < 0 {
		return f.Order
	}
	return append(slices.Clone(ring[i:]), ring[:i]...)
}

// ProofLinks are the node pairs the proof's world ring crosses in order (the last back to
// the first when there are more than two).
func ProofLinks(order []string) [][2]string {
	if len(order) < 2 {
		return nil
	}
	if len(order) == 2 {
		return [][2]string{{order[0], order[1]}}
	}
	var out [][2]string
	for i := range order {
		out = append(out, [2]string{order[i], order[(i+1)%len(order)]})
	}
	return out
}

// Lines draws the data plane for `starter plan`: the shape and links, then the rank
// order, the algorithms and what the layout cannot do.
func (f Fabric) Lines() []string {
	g := f.Graph
	name := f.Name()
	lines := []string{fmt.Sprintf("data plane: %s, %d link(s)", name, len(g.Links))}
	for _, l := range g.Links {
		line := fmt.Sprintf("  %s-%s %s %s<->%s", l.A, l.B, l.Subnet, l.AHCA.HCA(), l.BHCA.HCA())
		if l.SpeedMbps > 0 {
			line += " " + speed(l.SpeedMbps)
		}
		lines = append(lines, line)
	}
	for _, l := range g.LeftOut {
		lines = append(lines, fmt.Sprintf("  left out: %s-%s %s: %s", l.A, l.B, l.Subnet, l.Reason))
	}
	if len(f.Order) > 0 {
		lines = append(lines, "  ranks by node: "+strings.Join(f.Order, ", "))
	}
	if f.Placement != "" && f.Used {
		lines = append(lines, "  placed by: "+f.Placement)
	}
	if len(f.Pairs) > 0 {
		var ps []string
		for _, p := range f.Pairs {
			ps = append(ps, p[0]+"-"+p[1])
		}
		lines = append(lines, "  pairs that talk: "+strings.Join(ps, ", "))
	}
	if f.AlgoReason != "" {
		lines = append(lines, "  "+f.AlgoReason)
	}
	if f.SubnetPrefixLen > 0 {
		lines = append(lines, fmt.Sprintf("  NCCL %s: %s=1 %s=%d: a node's peers sit on different ports, and NCCL %s+ connects each peer over the local HCA on its subnet (src/transport/net_ib/connect.cc ncclIbFindDevBySubnet); NCCL_IB_HCA lists every HCA on the node's links",
			f.NCCL, EnvSubnetRouting, EnvSubnetPrefixLen, f.SubnetPrefixLen, release.NCCLSubnetRoutingSince))
	}
	for _, cn := range f.Cannot {
		lines = append(lines, "  cannot: "+cn)
	}
	if !f.Used {
		lines = append(lines, "  not used: NCCL_IB_HCA lists none of these HCAs, so NCCL runs over sockets on the bootstrap subnet")
	}
	return lines
}

// fabricHCAs are each node's HCA ports on its measured links, in subnet order: NCCL_IB_HCA
// names every one, exactly.
func fabricHCAs(g Graph) map[string][]RDMADevice {
	out := map[string][]RDMADevice{}
	add := func(node string, d RDMADevice) {
		for _, h := range out[node] {
			if h.HCA() == d.HCA() {
				return
			}
		}
		out[node] = append(out[node], d)
	}
	for _, l := range g.Links {
		add(l.A, l.AHCA)
		add(l.B, l.BHCA)
	}
	return out
}

// channelNICs checks that NCCL can use the links for the pairs that talk without
// subnet-aware routing (NCCL before 2.30.7): NCCL 2.28.9 (the modelled images') connects a node of one GPU to every peer of a channel over that
// channel's one NIC, not over the port that faces the peer (docs/network.md, "Which HCA a
// channel uses"; src/graph/search.cc ncclTopoGetNetDev takes graph->inter[channel*2] for
// send and receive alike, src/transport/net.cc), and a CX-7's two ports are one fused NIC
// by default (src/graph/topo.cc ncclTopoAutoMerge). So every HCA NCCL_IB_HCA names on a
// node must reach every peer of that node: on a switchless fabric, a node may talk to one
// cabled peer only. The message names each node whose peers sit on different HCAs.
func channelNICs(f Fabric, gpus map[string]int, nccl string) string {
	peers := map[string][]string{}
	for _, p := range f.Pairs {
		peers[p[0]] = appendNew(peers[p[0]], p[1])
		peers[p[1]] = appendNew(peers[p[1]], p[0])
	}
	over := func(node, peer string) []string {
		var out []string
		for _, l := range f.Graph.Links {
			switch {
			case l.A == node && l.B == peer:
				out = appendNew(out, l.AHCA.HCA())
			case l.B == node && l.A == peer:
				out = appendNew(out, l.BHCA.HCA())
			}
		}
		return out
	}
	var bad []string
	for _, n := range f.Order {
		if len(peers[n]) < 2 || gpus[n] > 1 {
			continue // one peer: NCCL_IB_HCA can name its cables alone; several GPUs: not modelled
		}
		var via []string
		for _, p := range peers[n] {
			via = append(via, p+" only over "+strings.Join(over(n, p), ","))
		}
		bad = append(bad, n+" reaches "+strings.Join(via, " and "))
	}
	if len(bad) == 0 {
		return ""
	}
	version := "the image's NCCL " + nccl
	if nccl == "" {
		version = "the image's NCCL (version unknown)"
	}
	return version + " connects a one-GPU node to all its peers over each channel's one NIC (src/graph/search.cc ncclTopoGetNetDev at v2.28.9-1; " +
		"a CX-7's two ports fused into one by default) and has no subnet-aware routing (NCCL_IB_SUBNET_AWARE_ROUTING, first in NCCL " + release.NCCLSubnetRoutingSince.String() +
		"), so it does not move to the port facing the peer, and a queue pair would cross a port whose cable does not reach the peer (ibv_modify_qp error 110): " +
		strings.Join(bad, "; ")
}

// dataPlaneFabric plans the data plane from the measured graph. Where the rails span
// every node (railHCAs) they stay the data plane and the fabric only draws them. Where no
// rail does but nodes share cables, the layout is mapped onto the cables, and a layout no
// order carries is refused (DataPlaneUnreachable) unless data_plane is skip or warn, which
// plan NCCL on sockets over the bootstrap subnet and say so. Nil: no HCA-backed links.
func dataPlaneFabric(c spec.Cluster, byNode map[string]NodeProbe, matrix []PairResult, probes []NodeProbe, railHCAs map[string][]RDMADevice, nccl string) (*Fabric, error) {
	if len(c.Nodes) < 2 {
		return nil, nil
	}
	g := BuildGraph(c, probes, matrix)
	if len(g.Links)+len(g.LeftOut) == 0 {
		return nil, nil
	}
	gpus := map[string]int{}
	total := 0
	for _, n := range c.Nodes {
		gpus[n.Name] = n.GPUs
		if gpus[n.Name] == 0 {
			gpus[n.Name] = byNode[n.Name].GPUs
		}
		total += gpus[n.Name]
	}
	f, err := planFabric(c, g, gpus)
	f.NCCL = nccl
	if err == nil && len(railHCAs) == 0 {
		why := channelNICs(f, gpus, nccl)
		switch {
		case why == "":
		case subnetRoutingIn(nccl):
			// NCCL ≥ 2.30.7 moves each connection to the HCA on the peer's subnet.
			if f.SubnetPrefixLen, f.NCCLCannot = subnetRouting(g); f.NCCLCannot != "" {
				err = &Error{Type: failure.DataPlaneUnreachable, Msg: "NCCL " + nccl + "'s subnet-aware routing cannot tell the links apart: " + f.NCCLCannot +
					"\nways out: give every cable a subnet of one prefix length, distinct in its first bits; or data_plane: warn (or skip) to run NCCL over sockets on the bootstrap subnet (slow)"}
			}
		default:
			f.NCCLCannot = why
			err = &Error{Type: failure.DataPlaneUnreachable, Msg: f.NCCLCannot +
				"\nways out: an image whose NCCL is " + release.NCCLSubnetRoutingSince.String() + " or later (its NCCL_IB_SUBNET_AWARE_ROUTING connects each peer over the HCA on its subnet, src/transport/net_ib/connect.cc; tpdeploy then plans it); " +
				"a switch, so that each rail is one subnet every node's HCA reaches (then each channel's NIC reaches every peer); " +
				"or data_plane: warn (or skip) to run NCCL over sockets on the bootstrap subnet (slow)"}
		}
	}
	if len(railHCAs) > 0 {
		// The seed's case: the rails carry every pair already; the plan is today's.
		f.Used = true
		return &f, nil
	}
	switch {
	case err == nil:
		f.Used = c.DataPlane != spec.DataPlaneSkip
		return &f, nil
	case total < c.WorldSize():
		return &f, nil // InsufficientGPUs says it better
	case c.DataPlane == spec.DataPlaneSkip || c.DataPlane == spec.DataPlaneWarn:
		return &f, nil // fabricWarnings says what is lost
	default:
		return &f, err
	}
}

// fabricWarnings are what an operator should know about the data plane the plan uses:
// cables it does not use, and settings that undo the algorithm restriction.
func fabricWarnings(c spec.Cluster, f Fabric) []string {
	var out []string
	if !f.Used {
		why := "data_plane: skip"
		switch {
		case c.DataPlane != spec.DataPlaneSkip && f.NCCLCannot != "":
			why = fmt.Sprintf("%s (data_plane: %s)", f.NCCLCannot, c.DataPlane)
		case c.DataPlane != spec.DataPlaneSkip && f.Placement != "":
			why = fmt.Sprintf("%s (data_plane: %s)", f.Placement, c.DataPlane)
		case c.DataPlane != spec.DataPlaneSkip:
			why = fmt.Sprintf("no rank order carries tensor %d x pipeline %d on them (data_plane: %s)", c.Parallel.Tensor, max(c.Parallel.Pipeline, 1), c.DataPlane)
		}
		out = append(out, fmt.Sprintf("the data plane's %d link(s) are not used: %s; NCCL runs over sockets on the bootstrap subnet", len(f.Graph.Links), why))
		return out
	}
	for _, n := range c.Nodes {
		if f.SubnetPrefixLen == 0 {
			break
		}
		for _, kv := range [][2]string{{EnvSubnetRouting, "1"}, {EnvSubnetPrefixLen, strconv.Itoa(f.SubnetPrefixLen)}} {
			k, want := kv[0], kv[1]
			if v, ok := n.Env[k]; ok && strings.TrimSpace(v) != want {
				out = append(out, fmt.Sprintf("%s's env sets %s=%s, but on this %s NCCL connects each peer over the port facing it only with %s=%s", n.Name, k, v, f.Shape, k, want))
			}
		}
	}
	if f.Algo == "" {
		return out
	}
	for _, n := range c.Nodes {
		if v, ok := n.Env["NCCL_ALGO"]; ok && !strings.EqualFold(strings.TrimSpace(v), f.Algo) {
			out = append(out, fmt.Sprintf("%s's env sets NCCL_ALGO=%s, but on this %s only NCCL_ALGO=%s connects cabled pairs alone", n.Name, v, f.Shape, f.Algo))
		}
		if v, ok := n.Env["NCCL_RUNTIME_CONNECT"]; ok && strings.TrimSpace(v) == "0" {
			out = append(out, fmt.Sprintf("%s's env sets NCCL_RUNTIME_CONNECT=0: NCCL then connects its trees at init whatever NCCL_ALGO says (src/init.cc), across pairs with no link", n.Name))
		}
	}
	return out
}
