//go:build integration

package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// dialFrom dials addr from the network namespace of process pid (the test runs as root).
func dialFrom(pid int, addr string) error {
	return inNetns(pid, func() error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// reached says whether a dial got an answer from the peer's host (a connection or a refusal).
func reached(err error) bool { return err == nil || errors.Is(err, syscall.ECONNREFUSED) }

// TestSwitchlessTopologies brings up the triangle and the ring of four and checks them as
// lab/README.md describes: every cable its own MTU 9000 network with each end's address,
// each node's two port HCAs in its sysfs on the right cable with their verbs device nodes,
// every cabled pair reachable over its cable, and ring4's opposite corners with no path
// between their cable addresses (node-b has no route at all: errno 101).
func TestSwitchlessTopologies(t *testing.T) {
	eng, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	for _, topo := range []string{TopologyTriangle, TopologyRing4} {
		t.Run(topo, func(t *testing.T) {
			b := make([]byte, 3)
			_, _ = rand.Read(b)
			prefix := "tpd-topo-" + hex.EncodeToString(b)
			start := time.Now()
			l, err := Up(context.Background(), eng, "", Config{Prefix: prefix, Topology: topo})
			if err != nil {
				t.Fatalf("lab up: %v", err)
			}
			t.Logf("%s up in %s", topo, time.Since(start).Round(100*time.Millisecond))
			t.Cleanup(func() {
				if err := Down(context.Background(), eng, prefix); err != nil {
					t.Errorf("lab down: %v", err)
				}
				assertNoLeftovers(t, eng, prefix)
			})
			want := map[string]int{TopologyTriangle: 3, TopologyRing4: 4}[topo]
			if len(l.Nodes) != want || len(l.Cables) != want {
				t.Fatalf("%d nodes, %d cables; want %d of each", len(l.Nodes), len(l.Cables), want)
			}
			pids := map[string]int{}
			for _, n := range l.Nodes {
				info, err := eng.ContainerInspect(context.Background(), n.Container, client.ContainerInspectOptions{})
				if err != nil {
					t.Fatal(err)
				}
				pids[n.Name] = info.Container.State.Pid
			}
			for _, c := range l.Cables {
				for _, end := range []struct{ node, hca string }{{c.A, c.AHCA}, {c.B, c.BHCA}} {
					n, _ := l.Node(end.node)
					addr := n.Addr(c.Net)
					if !addr.IsValid() || !c.Subnet.Contains(addr) {
						t.Errorf("%s has no address in %s's %s: %v", end.node, c.Net, c.Subnet, n.Addrs)
						continue
					}
					iface, err := l.Iface(context.Background(), end.node, c.Net)
					if err != nil {
						t.Error(err)
						continue
					}
					h, err := netlinkHandle(pids[end.node])
					if err != nil {
						t.Fatal(err)
					}
					link, err := h.LinkByName(iface)
					h.Close()
					if err != nil || link.Attrs().MTU != 9000 {
						t.Errorf("%s's %s on %s: MTU %v (%v), want 9000", end.node, iface, c.Net, link, err)
					}
					sys := filepath.Join(l.NodeRoot(end.node), "sys/class/infiniband", end.hca, "ports/1")
					ndev, err := os.ReadFile(filepath.Join(sys, "gid_attrs/ndevs/0"))
					if err != nil || strings.TrimSpace(string(ndev)) != iface {
						t.Errorf("%s's %s: netdev %q (%v), want %s (its interface on %s)", end.node, end.hca, ndev, err, iface, c.Net)
					}
					if state, _ := os.ReadFile(filepath.Join(sys, "state")); !strings.Contains(string(state), "ACTIVE") {
						t.Errorf("%s's %s is not ACTIVE: %q", end.node, end.hca, state)
					}
				}
				// The cable carries its pair, both ways.
				a, _ := l.Node(c.A)
				bn, _ := l.Node(c.B)
				for _, d := range [][2]Node{{a, bn}, {bn, a}} {
					if err := dialFrom(pids[d[0].Name], netip.AddrPortFrom(d[1].Addr(c.Net), 9).String()); !reached(err) {
						t.Errorf("%s cannot reach %s over %s: %v", d[0].Name, d[1].Name, c.Net, err)
					}
				}
			}
			for _, n := range l.Nodes {
				hcas, _ := os.ReadDir(filepath.Join(l.NodeRoot(n.Name), "sys/class/infiniband"))
				var names []string
				for _, h := range hcas {
					names = append(names, h.Name())
				}
				if strings.Join(names, ",") != "rocep1s0f0,rocep1s0f1" {
					t.Errorf("%s's sysfs HCAs %v, want rocep1s0f0, rocep1s0f1", n.Name, names)
				}
				for _, uv := range []string{"uverbs0", "uverbs1"} {
					if st, err := os.Stat(filepath.Join(l.NodeRoot(n.Name), "dev/infiniband", uv)); err != nil || st.Mode()&os.ModeCharDevice == 0 {
						t.Errorf("%s's %s is not a character device: %v", n.Name, uv, err)
					}
				}
			}
			if topo != TopologyRing4 {
				for _, a := range l.Nodes {
					for _, b := range l.Nodes {
						if a.Name != b.Name && !l.Linked(a.Name, b.Name) {
							t.Errorf("triangle: %s and %s share no cable", a.Name, b.Name)
						}
					}
				}
				return
			}
			// The opposite corners: no data-plane path between their cable addresses.
			for _, d := range [][2]string{{"node-a", "node-c"}, {"node-c", "node-a"}, {"node-b", "node-d"}, {"node-d", "node-b"}} {
				if l.Linked(d[0], d[1]) {
					t.Errorf("ring4: %s and %s share a cable", d[0], d[1])
				}
				to, _ := l.Node(d[1])
				for net, addr := range to.Addrs {
					if !strings.HasPrefix(net, "link-") {
						continue
					}
					err := dialFrom(pids[d[0]], netip.AddrPortFrom(addr, 9).String())
					if reached(err) {
						t.Errorf("ring4: %s reaches %s's %s address %s", d[0], d[1], net, addr)
					}
					if d[0] != "node-a" && !errors.Is(err, syscall.ENETUNREACH) {
						t.Errorf("ring4: %s to %s's %s: %v, want errno 101 (no route)", d[0], d[1], addr, err)
					}
					t.Logf("%s -> %s %s (%s): %v", d[0], d[1], addr, net, err)
				}
			}
		})
	}
}
