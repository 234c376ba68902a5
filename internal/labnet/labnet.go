// Package labnet builds the seed's network topology out of Linux network namespaces, for
// tests, the plan benchmark and the demo: N nodes on a fast switched network (MTU 9000,
// interface names differing per node), and only the head on an "external" network that
// carries its default route. Everything is named with a prefix so leftovers of a crashed
// run can be found (`ip netns list | grep PREFIX`) and removed (Destroy).
package labnet

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
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
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return nil, fmt.Errorf("labnet: %w", err)
	}
	if err := t.build(n); err != nil {
		_ = Destroy(prefix)
		return nil, err
	}
	return t, nil
}

func (t *Topology) build(n int) error {
	sw, err := newNamed(t.Switch)
	if err != nil {
		return err
	}
	defer sw.close()
	gw, err := newNamed(t.Gateway)
	if err != nil {
		return err
	}
	defer gw.close()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0", MTU: 9000}}
	if err := sw.h.LinkAdd(br); err != nil {
		return fmt.Errorf("labnet: %s: add bridge: %w", t.Switch, err)
	}
	if err := errors.Join(sw.h.LinkSetUp(br), gw.up("lo")); err != nil {
		return fmt.Errorf("labnet: %w", err)
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
		if err := t.addNode(node, sw, gw, br, i); err != nil {
			return err
		}
		t.Nodes = append(t.Nodes, node)
	}
	return t.waitRunning(5 * time.Second)
}

// waitRunning waits until every node's links have carrier: the kernel reports a veth's
// operational state a moment after both ends are up (linkwatch), and a probe before that
// would see the link down.
func (t *Topology) waitRunning(within time.Duration) error {
	deadline := time.Now().Add(within)
	links := map[string][]string{t.Switch: {"br0"}}
	for i, n := range t.Nodes {
		links[n.NetNS] = []string{n.FastIface}
		links[t.Switch] = append(links[t.Switch], fmt.Sprintf("sw%d", i))
		if n.ExtIface != "" {
			links[n.NetNS] = append(links[n.NetNS], n.ExtIface)
			links[t.Gateway] = []string{"gw0"}
		}
	}
	for space, names := range links {
		ns, err := openNamed(space)
		if err != nil {
			return err
		}
		for _, name := range names {
			for {
				l, err := ns.h.LinkByName(name)
				if err == nil && l.Attrs().RawFlags&unix.IFF_RUNNING != 0 && l.Attrs().OperState == netlink.OperUp {
					break
				}
				if time.Now().After(deadline) {
					ns.close()
					return fmt.Errorf("labnet: %s: %s not running after %s", space, name, within)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		ns.close()
	}
	return nil
}

// addNode makes a node's namespace: its fast link on the switch's bridge and, for the head,
// the external link to the gateway with the default route.
func (t *Topology) addNode(node Node, sw, gw *namespace, br *netlink.Bridge, i int) error {
	ns, err := newNamed(node.NetNS)
	if err != nil {
		return err
	}
	defer ns.close()
	swSide := fmt.Sprintf("sw%d", i)
	fast := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: node.FastIface, MTU: 9000}, PeerName: swSide, PeerNamespace: netlink.NsFd(sw.fd)}
	if err := ns.h.LinkAdd(fast); err != nil {
		return fmt.Errorf("labnet: %s: add %s: %w", node.NetNS, node.FastIface, err)
	}
	if err := errors.Join(ns.up("lo"), ns.addr(node.FastIface, node.FastAddr), ns.up(node.FastIface)); err != nil {
		return fmt.Errorf("labnet: %s: %w", node.NetNS, err)
	}
	peer, err := sw.h.LinkByName(swSide)
	if err != nil {
		return fmt.Errorf("labnet: %s: %s: %w", t.Switch, swSide, err)
	}
	if err := errors.Join(sw.h.LinkSetMTU(peer, 9000), sw.h.LinkSetMaster(peer, br), sw.h.LinkSetUp(peer)); err != nil {
		return fmt.Errorf("labnet: %s: %s: %w", t.Switch, swSide, err)
	}
	if node.ExtIface == "" {
		return nil
	}
	ext := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: node.ExtIface}, PeerName: "gw0", PeerNamespace: netlink.NsFd(gw.fd)}
	if err := ns.h.LinkAdd(ext); err != nil {
		return fmt.Errorf("labnet: %s: add %s: %w", node.NetNS, node.ExtIface, err)
	}
	if err := errors.Join(ns.addr(node.ExtIface, node.ExtAddr), ns.up(node.ExtIface),
		gw.addr("gw0", netip.PrefixFrom(extGW, 24)), gw.up("gw0")); err != nil {
		return fmt.Errorf("labnet: %w", err)
	}
	link, err := ns.h.LinkByName(node.ExtIface)
	if err != nil {
		return err
	}
	if err := ns.h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: extGW.AsSlice()}); err != nil {
		return fmt.Errorf("labnet: %s: default route: %w", node.NetNS, err)
	}
	return nil
}

// namespace is a named network namespace (/run/netns/NAME, as `ip netns add` makes it)
// with a netlink handle inside it.
type namespace struct {
	name string
	fd   int
	h    *netlink.Handle
}

// newNamed creates a named network namespace without leaving this thread in it.
func newNamed(name string) (*namespace, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if err != nil {
		_ = netns.Set(orig)
		return nil, fmt.Errorf("labnet: add netns %s: %w", name, err)
	}
	if err := netns.Set(orig); err != nil {
		return nil, fmt.Errorf("labnet: back from netns %s: %w", name, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("labnet: netlink in %s: %w", name, err)
	}
	return &namespace{name: name, fd: int(ns), h: h}, nil
}

// openNamed opens an existing named namespace.
func openNamed(name string) (*namespace, error) {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("labnet: netns %s: %w", name, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("labnet: netlink in %s: %w", name, err)
	}
	return &namespace{name: name, fd: int(ns), h: h}, nil
}

func (n *namespace) close() {
	n.h.Close()
	h := netns.NsHandle(n.fd)
	_ = h.Close()
}

func (n *namespace) up(link string) error {
	l, err := n.h.LinkByName(link)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", n.name, link, err)
	}
	return n.h.LinkSetUp(l)
}

func (n *namespace) addr(link string, p netip.Prefix) error {
	l, err := n.h.LinkByName(link)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", n.name, link, err)
	}
	a, err := netlink.ParseAddr(p.String())
	if err != nil {
		return err
	}
	return n.h.AddrAdd(l, a)
}

// Destroy removes every namespace whose name starts with prefix (veths go with them).
func Destroy(prefix string) error {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("labnet: %w", err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if name == prefix || strings.HasPrefix(name, prefix+"-") {
			if err := netns.DeleteNamed(name); err != nil {
				errs = append(errs, fmt.Errorf("delete netns %s: %w", name, err))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("labnet: %w", errors.Join(errs...))
	}
	return nil
}

// netnsDir is where named network namespaces live (iproute2's convention).
const netnsDir = "/run/netns"

// Cut takes a node off the fast network (its fast link goes down), as a pulled cable.
func (t *Topology) Cut(node string) error {
	for _, n := range t.Nodes {
		if n.Name != node {
			continue
		}
		ns, err := openNamed(n.NetNS)
		if err != nil {
			return err
		}
		defer ns.close()
		l, err := ns.h.LinkByName(n.FastIface)
		if err != nil {
			return err
		}
		return ns.h.LinkSetDown(l)
	}
	return fmt.Errorf("labnet: no node %s", node)
}

// Cable joins two nodes by a veth pair of their own, as a direct cable between two
// switchless Sparks: its own subnet (a's end first address, b's the second), MTU 9000,
// named by the caller (interface names are per namespace). It returns when both ends run.
func (t *Topology) Cable(a, b int, ifA, ifB string, subnet netip.Prefix) error {
	if a == b || a < 0 || b < 0 || a >= len(t.Nodes) || b >= len(t.Nodes) {
		return fmt.Errorf("labnet: cable %d-%d: no such pair of nodes", a, b)
	}
	na, err := openNamed(t.Nodes[a].NetNS)
	if err != nil {
		return err
	}
	defer na.close()
	nb, err := openNamed(t.Nodes[b].NetNS)
	if err != nil {
		return err
	}
	defer nb.close()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ifA, MTU: 9000}, PeerName: ifB, PeerNamespace: netlink.NsFd(nb.fd)}
	if err := na.h.LinkAdd(v); err != nil {
		return fmt.Errorf("labnet: %s: add %s: %w", na.name, ifA, err)
	}
	first := subnet.Masked().Addr().Next()
	if err := errors.Join(na.addr(ifA, netip.PrefixFrom(first, subnet.Bits())), na.up(ifA),
		nb.addr(ifB, netip.PrefixFrom(first.Next(), subnet.Bits())), nb.up(ifB)); err != nil {
		return fmt.Errorf("labnet: cable %s-%s: %w", t.Nodes[a].Name, t.Nodes[b].Name, err)
	}
	peer, err := nb.h.LinkByName(ifB)
	if err != nil {
		return err
	}
	if err := nb.h.LinkSetMTU(peer, 9000); err != nil {
		return fmt.Errorf("labnet: %s: %s: %w", nb.name, ifB, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, end := range []struct {
		ns   *namespace
		name string
	}{{na, ifA}, {nb, ifB}} {
		for {
			l, err := end.ns.h.LinkByName(end.name)
			if err == nil && l.Attrs().RawFlags&unix.IFF_RUNNING != 0 && l.Attrs().OperState == netlink.OperUp {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("labnet: %s: %s not running after 5s", end.ns.name, end.name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// Close destroys the topology.
func (t *Topology) Close() error { return Destroy(t.Prefix) }

// Exec runs argv inside the named network namespace, replacing this process (as `ip netns
// exec` does, without its /etc/netns bind mounts): a machine without iproute2 can run it.
func Exec(name string, argv []string) error {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	ns, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("labnet: netns %s: %w", name, err)
	}
	if err := netns.Set(ns); err != nil {
		return fmt.Errorf("labnet: enter netns %s: %w", name, err)
	}
	return syscall.Exec(path, argv, os.Environ())
}
