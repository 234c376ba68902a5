// Package labnet builds the seed's network topology out of Linux network namespaces, for
// tests, the plan benchmark and the demo: N nodes on a fast switched network (MTU 9000,
// interface names differing per node), and only the head on an "external" network that
// carries its default route. Everything is named with a prefix so leftovers of a crashed
// run can be found (`ip netns list | grep PREFIX`) and removed (Destroy).
package labnet

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// Topology is a built lab network.
type Topology struct {
	Prefix string
	Nodes  []Node
	// Switch and Gateway are the namespaces of the fast network's bridge and of the
	// external network's gateway.
	Switch, Gateway string
}

// Node is one simulated GPU node's namespace.
type Node struct {
	Name      string // spec name: node-a, node-b, ...
	NetNS     string
	FastIface string
	FastAddr  netip.Prefix
	ExtIface  string       // head only
	ExtAddr   netip.Prefix // head only
}

// Addresses the lab uses; they exist only inside the lab's namespaces.
var (
	FastNet = netip.MustParsePrefix("192.168.77.0/24")
	ExtNet  = netip.MustParsePrefix("10.77.230.0/24")
	extGW   = netip.MustParseAddr("10.77.230.1")
	extHead = netip.MustParsePrefix("10.77.230.180/24")
)

// NodeName is the spec name of the i-th node: node-a, node-b, ... node-p.
func NodeName(i int) string { return fmt.Sprintf("node-%c", 'a'+i) }

// Seed builds n nodes (2 for the seed itself). Node 0 is the head.
func Seed(prefix string, n int) (*Topology, error) {
	if n < 1 || n > 26 {
		return nil, fmt.Errorf("labnet: %d nodes; 1 to 26 supported", n)
	}
	t := &Topology{Prefix: prefix, Switch: prefix + "-sw", Gateway: prefix + "-gw"}
	if err := t.build(n); err != nil {
		_ = Destroy(prefix)
		return nil, err
	}
	return t, nil
}

func (t *Topology) build(n int) error {
	steps := [][]string{
		{"netns", "add", t.Switch},
		{"-n", t.Switch, "link", "add", "br0", "type", "bridge"},
		{"-n", t.Switch, "link", "set", "br0", "mtu", "9000", "up"},
		{"netns", "add", t.Gateway},
		{"-n", t.Gateway, "link", "set", "lo", "up"},
	}
	for i := range n {
		node := Node{
			Name:  NodeName(i),
			NetNS: fmt.Sprintf("%s-%c", t.Prefix, 'a'+i),
			// Names differ per node, as on real clusters (vethA on the head, ibp1 elsewhere).
			FastIface: "ibp1",
			FastAddr:  netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 168, 77, byte(12 + i)}), 24),
		}
		if i == 0 {
			node.FastIface = "vethA"
			node.ExtIface, node.ExtAddr = "ext0", extHead
		}
		swSide := fmt.Sprintf("sw%d", i)
		steps = append(steps,
			[]string{"netns", "add", node.NetNS},
			[]string{"-n", node.NetNS, "link", "set", "lo", "up"},
			[]string{"-n", node.NetNS, "link", "add", node.FastIface, "mtu", "9000", "type", "veth", "peer", "name", swSide, "mtu", "9000", "netns", t.Switch},
			[]string{"-n", node.NetNS, "addr", "add", node.FastAddr.String(), "dev", node.FastIface},
			[]string{"-n", node.NetNS, "link", "set", node.FastIface, "up"},
			[]string{"-n", t.Switch, "link", "set", swSide, "master", "br0", "up"},
		)
		if i == 0 {
			steps = append(steps,
				[]string{"-n", node.NetNS, "link", "add", "ext0", "type", "veth", "peer", "name", "gw0", "netns", t.Gateway},
				[]string{"-n", node.NetNS, "addr", "add", extHead.String(), "dev", "ext0"},
				[]string{"-n", node.NetNS, "link", "set", "ext0", "up"},
				[]string{"-n", node.NetNS, "route", "add", "default", "via", extGW.String(), "dev", "ext0"},
				[]string{"-n", t.Gateway, "addr", "add", extGW.String() + "/24", "dev", "gw0"},
				[]string{"-n", t.Gateway, "link", "set", "gw0", "up"},
			)
		}
		t.Nodes = append(t.Nodes, node)
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	return nil
}

// Destroy removes every namespace whose name starts with prefix (veths go with them).
func Destroy(prefix string) error {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("ip netns list: %w", err)
	}
	var errs []string
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if name == prefix || strings.HasPrefix(name, prefix+"-") {
			if err := ip("netns", "del", name); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("labnet: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Cut takes a node off the fast network (its fast link goes down), as a pulled cable.
func (t *Topology) Cut(node string) error {
	for _, n := range t.Nodes {
		if n.Name == node {
			return ip("-n", n.NetNS, "link", "set", n.FastIface, "down")
		}
	}
	return fmt.Errorf("labnet: no node %s", node)
}

// Close destroys the topology.
func (t *Topology) Close() error { return Destroy(t.Prefix) }

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
