package lab

import (
	"fmt"
	"net/netip"
	"strings"
)

// The lab's topologies. Every one has the management network (10.231.I.0/24, internal,
// every node; Temporal at .254) and the head's external network (10.230.I.0/24, its default
// route). Beyond those:
//   - pair: one fast network (10.200.I.0/24, MTU 9000) that every node shares, no RDMA: the
//     seed's two nodes as the first demo had them;
//   - spark: the seed's two DGX Sparks, each CX-7 port two PCIe halves on two rails (fast
//     and fast2, 10.201.I.0/24), a simulated RoCE HCA on each (spark.go);
//   - triangle: three Sparks without a switch, every pair one cable;
//   - ring4: four Sparks, each cabled to its two neighbours (a-b, b-c, c-d, d-a); the
//     opposite corners (a-c, b-d) share no cable.
//
// On a triangle and a ring every cable is its own internal network (10.202+k.I.0/24 for the
// k-th cable, MTU 9000) joining exactly its two nodes, and each node's CX-7 has two ports,
// each a simulated RoCE HCA whose netdev is on one cable: port 1 (rocep1s0f1) to the next
// node, port 0 (rocep1s0f0) to the previous one, the same cabling at every node.
const (
	TopologyPair     = "pair"
	TopologySpark    = "spark"
	TopologyTriangle = "triangle"
	TopologyRing4    = "ring4"
)

// Topologies are the lab's topologies, in the order the docs list them.
var Topologies = []string{TopologyPair, TopologySpark, TopologyTriangle, TopologyRing4}

// Net is one lab network.
type Net struct {
	Name     string // mgmt, ext, fast, fast2, link-ab, ...
	Subnet   netip.Prefix
	Internal bool
	MTU      int // 0: the engine's default
	// Members are the node indices the network joins (nil: every node) and Host the last
	// byte of member i's address (Host(i)).
	Members []int
	host    func(i int) int
}

// addrOf is node i's address on n, if n joins it.
func (n Net) addrOf(i int) (netip.Addr, bool) {
	if n.Members != nil {
		found := false
		for _, m := range n.Members {
			found = found || m == i
		}
		if !found {
			return netip.Addr{}, false
		}
	}
	return host(n.Subnet, n.host(i)), true
}

// Cable is one link network of a switchless fabric: node A's port AHCA to node B's BHCA.
type Cable struct {
	Net        string // the network's name, link-ab
	Subnet     netip.Prefix
	A, B       string
	AHCA, BHCA string
}

// HCA is one simulated RoCE HCA of a node: its name, its verbs device and the lab network
// its netdev is on.
type HCA struct{ HCA, UVerbs, Network string }

// PortHCAs are a Spark's two CX-7 ports as the triangle and ring use them, one HCA per port
// (the first PCIe half of each: rocep1s0f0 ↔ enp1s0f0np0, rocep1s0f1 ↔ enp1s0f1np1, named as
// ibdev2netdev shows them, upstream.md §9): port 0 faces the previous node, port 1 the next.
var PortHCAs = [2]struct{ HCA, UVerbs string }{{"rocep1s0f0", "uverbs0"}, {"rocep1s0f1", "uverbs1"}}

type topology struct {
	name  string
	nodes int  // the default (and, when fixed, the only) node count
	fixed bool // triangle and ring4 are their node count
	ring  bool // nodes cabled in a cycle
}

func topologyOf(name string) (topology, error) {
	switch name {
	case "", TopologyPair:
		return topology{name: TopologyPair, nodes: 2}, nil
	case TopologySpark:
		return topology{name: TopologySpark, nodes: 2}, nil
	case TopologyTriangle:
		return topology{name: TopologyTriangle, nodes: 3, fixed: true, ring: true}, nil
	case TopologyRing4:
		return topology{name: TopologyRing4, nodes: 4, fixed: true, ring: true}, nil
	}
	return topology{}, fmt.Errorf("lab: no topology %q: one of %s (empty is %s)", name, strings.Join(Topologies, ", "), TopologyPair)
}

// CheckTopology says whether name is a lab topology, with the error Up gives.
func CheckTopology(name string) error {
	_, err := topologyOf(name)
	return err
}

// build lays out the topology's networks for nodes nodes at subnet index i.
func (t topology) build(nodes, i int) ([]Net, []Cable) {
	offset := func(base int) func(int) int { return func(n int) int { return base + n } }
	nets := []Net{
		{Name: "mgmt", Subnet: subnet(231, i), Internal: true, host: offset(10)},
		{Name: "ext", Subnet: subnet(230, i), Members: []int{0}, host: func(int) int { return 180 }},
	}
	// ctl is the control plane's own network, which no node joins: Temporal's frontend,
	// the gate's upstream side and the controller (nodes reach Temporal only through the
	// gate on mgmt). Last, so the nodes' interfaces keep their order.
	ctl := Net{Name: "ctl", Subnet: subnet(232, i), Internal: true, Members: []int{}, host: offset(10)}
	if !t.ring {
		nets = append(nets, Net{Name: "fast", Subnet: subnet(200, i), Internal: true, MTU: 9000, host: offset(12)})
		if t.name == TopologySpark {
			nets = append(nets, Net{Name: "fast2", Subnet: subnet(201, i), Internal: true, MTU: 9000, host: offset(12)})
		}
		return append(nets, ctl), nil
	}
	var cables []Cable
	for k := range nodes {
		a, b := k, (k+1)%nodes
		c := Cable{Net: cableNet(a, b), Subnet: subnet(202+k, i), A: NodeName(a), B: NodeName(b), AHCA: PortHCAs[1].HCA, BHCA: PortHCAs[0].HCA}
		cables = append(cables, c)
		nets = append(nets, Net{Name: c.Net, Subnet: c.Subnet, Internal: true, MTU: 9000, Members: []int{a, b}, host: offset(12)})
	}
	return append(nets, ctl), cables
}

// cableNet names the cable between nodes a and b: link-ab.
func cableNet(a, b int) string { return fmt.Sprintf("link-%c%c", 'a'+a, 'a'+b) }

// hcasOf are node i's HCAs: spark's two rails, or a triangle's or ring's two ports, port 1
// on the cable to the next node and port 0 on the cable from the previous one.
func (l *Lab) hcasOf(i int) []HCA {
	if l.Topology == TopologySpark {
		var out []HCA
		for _, h := range SparkHCAs {
			out = append(out, HCA(h))
		}
		return out
	}
	if len(l.Cables) == 0 {
		return nil
	}
	n := len(l.Cables)
	return []HCA{
		{PortHCAs[0].HCA, PortHCAs[0].UVerbs, cableNet((i-1+n)%n, i)},
		{PortHCAs[1].HCA, PortHCAs[1].UVerbs, cableNet(i, (i+1)%n)},
	}
}

// Linked says whether nodes a and b share a cable (a triangle's or ring's), or, on pair
// and spark, a fast network.
func (l *Lab) Linked(a, b string) bool {
	if len(l.Cables) == 0 {
		return a != b
	}
	for _, c := range l.Cables {
		if (c.A == a && c.B == b) || (c.A == b && c.B == a) {
			return true
		}
	}
	return false
}
