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

// topo is a compact topology description for table tests: node → links.
type topo map[string][]Link

func link(name, cidr string, mtu int, opts ...func(*Link)) Link {
	l := Link{Name: name, Kind: "device", MTU: mtu, Up: true}
	if cidr != "" {
		l.Addrs = []netip.Prefix{netip.MustParsePrefix(cidr)}
	}
	for _, o := range opts {
		o(&l)
	}
	return l
}

func down(l *Link)                { l.Up = false }
func speedMbps(s int) func(*Link) { return func(l *Link) { l.SpeedMbps = s } }

func clusterOf(nodes ...string) spec.Cluster {
	c := spec.Cluster{Name: "t", Image: "img", Model: spec.Model{Path: "m"}, Parallel: spec.Parallel{Tensor: len(nodes)}}
	for i, n := range nodes {
		role := spec.RoleWorker
		if i == 0 {
			role = spec.RoleHead
		}
		c.Nodes = append(c.Nodes, spec.Node{Name: n, Role: role, GPUs: 1})
	}
	return c.WithDefaults()
}

func probesOf(c spec.Cluster, t topo, defaults map[string]string) []NodeProbe {
	var out []NodeProbe
	for _, n := range c.Nodes {
		p := NodeProbe{Node: n.Name, GPUs: 1, GPUSource: "spec", Links: t[n.Name]}
		if dl, ok := defaults[n.Name]; ok {
			for _, l := range p.Links {
				if l.Name == dl {
					p.DefaultRoute = &DefaultRoute{Interface: dl, Source: l.Addrs[0].Addr()}
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// fullMatrix dials every listen address from every other node; blocked "from>to@subnet"
// pairs fail.
func fullMatrix(c spec.Cluster, probes []NodeProbe, blocked map[string]bool) []PairResult {
	addrs := ListenAddrs(c, probes)
	var out []PairResult
	for _, from := range c.Nodes {
		for _, to := range c.Nodes {
			if from.Name == to.Name {
				continue
			}
			for _, a := range addrs[to.Name] {
				r := PairResult{From: from.Name, To: to.Name, Subnet: a.Masked(), Addr: netip.AddrPortFrom(a.Addr(), 40000), OK: true, RTT: 200 * time.Microsecond}
				if blocked[from.Name+">"+to.Name+"@"+a.Masked().String()] {
					r.OK, r.RTT, r.Error = false, 0, "i/o timeout"
				}
				out = append(out, r)
			}
		}
	}
	return out
}

var seedTopo = topo{
	"node-a": {link("lo", "127.0.0.1/8", 65536, func(l *Link) { l.Loopback = true }), link("enP7s7", "10.1.230.180/24", 1500), link("enp1s0f1np1", "192.168.200.12/24", 9000)},
	"node-b": {link("lo", "127.0.0.1/8", 65536, func(l *Link) { l.Loopback = true }), link("enp1s0f1np1", "192.168.200.13/24", 9000)},
}

func TestChoose(t *testing.T) {
	two := clusterOf("node-a", "node-b")
	tests := []struct {
		name     string
		c        spec.Cluster
		topo     topo
		defaults map[string]string
		blocked  map[string]bool
		rdma     map[string][]RDMADevice
		want     string   // chosen subnet, or "" for an error
		wantErr  []string // substrings of the error
		reasons  []string // substrings of the decision, joined
		env      map[string]map[string]string
		nccl     string // the NCCL env form, when the case is about it
	}{
		{
			name: "seed: the shared RoCE subnet wins, external rejected", c: two, topo: seedTopo,
			defaults: map[string]string{"node-a": "enP7s7"},
			want:     "192.168.200.0/24",
			reasons:  []string{"10.1.230.0/24 rejected: node-b has no address in it", "192.168.200.0/24 chosen: reachable between all 2 nodes in both directions"},
			env: map[string]map[string]string{
				"node-a": {"VLLM_HOST_IP": "192.168.200.12", "NCCL_SOCKET_IFNAME": "=enp1s0f1np1", "RAY_ADDRESS": "192.168.200.12:6379"},
				"node-b": {"VLLM_HOST_IP": "192.168.200.13", "GLOO_SOCKET_IFNAME": "enp1s0f1np1", "TP_SOCKET_IFNAME": "enp1s0f1np1", "RAY_ADDRESS": "192.168.200.12:6379"},
			},
		},
		{
			name: "interface names differ per node",
			c:    two,
			topo: topo{"node-a": {link("vethA", "192.168.77.12/24", 9000)}, "node-b": {link("ibp1", "192.168.77.13/24", 9000)}},
			want: "192.168.77.0/24",
			// One value survives vLLM's copy of the driver's NCCL_* (measured, upstream.md
			// §6); Gloo wants a name that exists, so it stays per node.
			env: map[string]map[string]string{
				"node-a": {"NCCL_SOCKET_IFNAME": "=vethA,ibp1", "GLOO_SOCKET_IFNAME": "vethA", "TP_SOCKET_IFNAME": "vethA"},
				"node-b": {"NCCL_SOCKET_IFNAME": "=vethA,ibp1", "GLOO_SOCKET_IFNAME": "ibp1", "TP_SOCKET_IFNAME": "ibp1"}},
			nccl: NCCLClusterWide,
		},
		{
			name: "the names' list would select a second interface: per node, copy stopped",
			c:    two,
			topo: topo{"node-a": {link("vethA", "192.168.77.12/24", 9000), link("ibp1", "10.9.0.1/24", 1500)}, "node-b": {link("ibp1", "192.168.77.13/24", 9000)}},
			want: "192.168.77.0/24",
			env: map[string]map[string]string{
				"node-a": {"NCCL_SOCKET_IFNAME": "=vethA", "GLOO_SOCKET_IFNAME": "vethA"},
				"node-b": {"NCCL_SOCKET_IFNAME": "=ibp1", "GLOO_SOCKET_IFNAME": "ibp1"}},
			nccl: NCCLPerNode,
		},
		{
			name: "an interface of that name without an address selects nothing: one value",
			c:    two,
			topo: topo{"node-a": {link("vethA", "192.168.77.12/24", 9000), link("ibp1", "", 1500)}, "node-b": {link("ibp1", "192.168.77.13/24", 9000)}},
			want: "192.168.77.0/24",
			env:  map[string]map[string]string{"node-a": {"NCCL_SOCKET_IFNAME": "=vethA,ibp1"}},
			nccl: NCCLClusterWide,
		},
		{
			name: "same names everywhere: one value",
			c:    two,
			topo: topo{"node-a": {link("eth1", "192.168.77.12/24", 9000)}, "node-b": {link("eth1", "192.168.77.13/24", 9000)}},
			want: "192.168.77.0/24",
			env:  map[string]map[string]string{"node-a": {"NCCL_SOCKET_IFNAME": "=eth1"}, "node-b": {"NCCL_SOCKET_IFNAME": "=eth1"}},
			nccl: NCCLClusterWide,
		},
		{
			name:    "MTU ranks a shared management network second",
			c:       two,
			topo:    topo{"node-a": {link("eth0", "172.20.0.2/16", 1500), link("eth1", "192.168.77.12/24", 9000)}, "node-b": {link("eth0", "172.20.0.3/16", 1500), link("eth1", "192.168.77.13/24", 9000)}},
			want:    "192.168.77.0/24",
			reasons: []string{"172.20.0.0/16 reachable, ranked 2nd: MTU 1500 < 9000"},
		},
		{
			name:    "one-way unreachable pair rejects the subnet",
			c:       two,
			topo:    topo{"node-a": {link("eth0", "172.20.0.2/16", 1500), link("eth1", "192.168.77.12/24", 9000)}, "node-b": {link("eth0", "172.20.0.3/16", 1500), link("eth1", "192.168.77.13/24", 9000)}},
			blocked: map[string]bool{"node-b>node-a@192.168.77.0/24": true},
			want:    "172.20.0.0/16",
			reasons: []string{"192.168.77.0/24 rejected: node-b cannot reach node-a at 192.168.77.12:40000 (i/o timeout)"},
		},
		{
			name:    "link-local is never chosen",
			c:       two,
			topo:    topo{"node-a": {link("eth1", "169.254.3.1/16", 9000), link("eth0", "172.20.0.2/16", 1500)}, "node-b": {link("eth1", "169.254.3.2/16", 9000), link("eth0", "172.20.0.3/16", 1500)}},
			want:    "172.20.0.0/16",
			reasons: []string{"169.254.0.0/16 rejected: link-local"},
		},
		{
			name:    "duplicate addresses reject the subnet",
			c:       two,
			topo:    topo{"node-a": {link("eth1", "10.9.0.5/24", 9000), link("eth0", "172.20.0.2/16", 1500)}, "node-b": {link("eth1", "10.9.0.5/24", 9000), link("eth0", "172.20.0.3/16", 1500)}},
			want:    "172.20.0.0/16",
			reasons: []string{"10.9.0.0/24 rejected: node-a and node-b both have 10.9.0.5"},
		},
		{
			name:    "a down link does not count",
			c:       two,
			topo:    topo{"node-a": {link("eth1", "192.168.77.12/24", 9000), link("eth0", "172.20.0.2/16", 1500)}, "node-b": {link("eth1", "192.168.77.13/24", 9000, down), link("eth0", "172.20.0.3/16", 1500)}},
			want:    "172.20.0.0/16",
			reasons: []string{"192.168.77.0/24 rejected: node-b: 192.168.77.13 on eth1 is down"},
		},
		{
			name:    "docker bridges are skipped unless preferred",
			c:       two,
			topo:    topo{"node-a": {link("docker0", "172.17.0.1/16", 1500), link("eth0", "10.0.0.2/24", 1500)}, "node-b": {link("docker0", "172.17.0.2/16", 1500), link("eth0", "10.0.0.3/24", 1500)}},
			want:    "10.0.0.0/24",
			reasons: []string{"172.17.0.0/16 rejected: node-a: docker0 is a Docker bridge"},
		},
		{
			name: "prefer_cidrs beats MTU",
			c: func() spec.Cluster {
				c := clusterOf("node-a", "node-b")
				c.Network.PreferCIDRs = []string{"172.20.0.0/16"}
				return c
			}(),
			topo:    topo{"node-a": {link("eth0", "172.20.0.2/16", 1500), link("eth1", "192.168.77.12/24", 9000)}, "node-b": {link("eth0", "172.20.0.3/16", 1500), link("eth1", "192.168.77.13/24", 9000)}},
			want:    "172.20.0.0/16",
			reasons: []string{"192.168.77.0/24 reachable, ranked 2nd: not first in network.prefer_cidrs"},
		},
		{
			name: "exclude_cidrs removes a subnet",
			c: func() spec.Cluster {
				c := clusterOf("node-a", "node-b")
				c.Network.ExcludeCIDRs = []string{"192.168.0.0/16"}
				return c
			}(),
			topo:    topo{"node-a": {link("eth0", "172.20.0.2/16", 1500), link("eth1", "192.168.77.12/24", 9000)}, "node-b": {link("eth0", "172.20.0.3/16", 1500), link("eth1", "192.168.77.13/24", 9000)}},
			want:    "172.20.0.0/16",
			reasons: []string{"192.168.77.0/24 rejected: excluded by network.exclude_cidrs"},
		},
		{
			name: "exclude_interfaces removes a link",
			c: func() spec.Cluster {
				c := clusterOf("node-a", "node-b")
				c.Network.ExcludeInterfaces = []string{"eth1"}
				return c
			}(),
			topo:    topo{"node-a": {link("eth0", "172.20.0.2/16", 1500), link("eth1", "192.168.77.12/24", 9000)}, "node-b": {link("eth0", "172.20.0.3/16", 1500), link("eth1", "192.168.77.13/24", 9000)}},
			want:    "172.20.0.0/16",
			reasons: []string{"eth1 is excluded by network.exclude_interfaces"},
		},
		{
			name:    "RDMA beats speed, and sets NCCL_IB_HCA",
			c:       two,
			topo:    topo{"node-a": {link("eth0", "172.20.0.2/16", 9000, speedMbps(400000)), link("roce0", "192.168.77.12/24", 9000, speedMbps(200000))}, "node-b": {link("eth0", "172.20.0.3/16", 9000, speedMbps(400000)), link("roce0", "192.168.77.13/24", 9000, speedMbps(200000))}},
			rdma:    map[string][]RDMADevice{"node-a": {{Name: "mlx5_1", Port: 1, Netdev: "roce0", State: "ACTIVE"}}, "node-b": {{Name: "mlx5_0", Port: 1, Netdev: "roce0", State: "ACTIVE"}}},
			want:    "192.168.77.0/24",
			reasons: []string{"172.20.0.0/16 reachable, ranked 2nd: not RDMA-capable on every node", "RDMA-capable"},
			env:     map[string]map[string]string{"node-a": {"NCCL_IB_HCA": "=mlx5_1:1,mlx5_0:1"}, "node-b": {"NCCL_IB_HCA": "=mlx5_1:1,mlx5_0:1"}},
			nccl:    NCCLClusterWide,
		},
		{
			name: "an HCA list that would add a second HCA on a node: per node",
			c:    two,
			topo: topo{"node-a": {link("roce0", "192.168.77.12/24", 9000)}, "node-b": {link("roce0", "192.168.77.13/24", 9000), link("roce1", "10.8.0.3/24", 9000)}},
			rdma: map[string][]RDMADevice{"node-a": {{Name: "mlx5_1", Port: 1, Netdev: "roce0", State: "ACTIVE"}}, "node-b": {{Name: "mlx5_0", Port: 1, Netdev: "roce0", State: "ACTIVE"}, {Name: "mlx5_1", Port: 1, Netdev: "roce1", State: "ACTIVE"}}},
			want: "192.168.77.0/24",
			env:  map[string]map[string]string{"node-a": {"NCCL_IB_HCA": "=mlx5_1:1", "NCCL_SOCKET_IFNAME": "=roce0"}, "node-b": {"NCCL_IB_HCA": "=mlx5_0:1"}},
			nccl: NCCLPerNode,
		},
		{
			name:    "link speed ranks",
			c:       two,
			topo:    topo{"node-a": {link("eth0", "172.20.0.2/16", 9000, speedMbps(10000)), link("eth1", "192.168.77.12/24", 9000, speedMbps(100000))}, "node-b": {link("eth0", "172.20.0.3/16", 9000, speedMbps(10000)), link("eth1", "192.168.77.13/24", 9000, speedMbps(100000))}},
			want:    "192.168.77.0/24",
			reasons: []string{"ranked 2nd: link speed 10 Gb/s < 100 Gb/s"},
		},
		{
			name:    "no common subnet says what each node has",
			c:       two,
			topo:    topo{"node-a": {link("eth0", "10.1.0.2/24", 1500)}, "node-b": {link("eth0", "10.2.0.3/24", 1500)}},
			wantErr: []string{"no subnet is shared and reachable by every node", "10.1.0.0/24 rejected: node-b has no address in it", "node-a: eth0 10.1.0.2/24 (up, mtu 1500)", "node-b: eth0 10.2.0.3/24"},
		},
		{
			name: "too few GPUs after probing",
			c: func() spec.Cluster {
				c := clusterOf("node-a", "node-b")
				c.Parallel.Tensor = 4
				c.Nodes[0].GPUs, c.Nodes[1].GPUs = 0, 0
				return c
			}(),
			topo:    seedTopo,
			wantErr: []string{"parallel: tensor 4 x pipeline 1 = 4 GPUs, nodes provide 2 (node-a: 1 (spec), node-b: 1 (spec))"},
		},
		{
			name: "node interface hint picks between two addresses in one subnet",
			c: func() spec.Cluster {
				c := clusterOf("node-a", "node-b")
				c.Nodes[0].Interfaces = []string{"bond*"}
				return c
			}(),
			topo: topo{"node-a": {link("eth1", "192.168.77.12/24", 9000), link("bond0", "192.168.77.22/24", 9000)}, "node-b": {link("eth1", "192.168.77.13/24", 9000)}},
			want: "192.168.77.0/24",
			env:  map[string]map[string]string{"node-a": {"VLLM_HOST_IP": "192.168.77.22", "NCCL_SOCKET_IFNAME": "=bond0"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probes := probesOf(tt.c, tt.topo, tt.defaults)
			for i := range probes {
				probes[i].RDMA = tt.rdma[probes[i].Node]
			}
			plan, err := Choose(tt.c, probes, fullMatrix(tt.c, probes, tt.blocked))
			if tt.want == "" {
				if err == nil {
					t.Fatalf("chose %s, want an error", plan.Subnet)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if plan.Subnet.String() != tt.want {
				t.Errorf("chose %s, want %s\n%s", plan.Subnet, tt.want, decisionText(plan))
			}
			for _, w := range tt.reasons {
				if !strings.Contains(decisionText(plan), w) {
					t.Errorf("decision lacks %q:\n%s", w, decisionText(plan))
				}
			}
			if tt.nccl != "" && plan.NCCL.Form != tt.nccl {
				t.Errorf("NCCL form %q (%s), want %q", plan.NCCL.Form, plan.NCCL.Reason, tt.nccl)
			}
			if plan.NCCL.Form == NCCLPerNode && !slices.Contains(plan.NCCL.NoCarryOver, "NCCL_SOCKET_IFNAME") {
				t.Errorf("per-node form without NCCL_SOCKET_IFNAME in no_carry_over: %+v", plan.NCCL)
			}
			for node, want := range tt.env {
				np, _ := plan.Node(node)
				for k, v := range want {
					if np.Env[k] != v {
						t.Errorf("%s %s = %q, want %q", node, k, np.Env[k], v)
					}
				}
			}
		})
	}
}

func decisionText(p Plan) string {
	var b strings.Builder
	for _, d := range p.Decision {
		fmt.Fprintf(&b, "%s %s\n", d.Subnet, d.Reason)
	}
	return b.String()
}

func TestChooseIsDeterministic(t *testing.T) {
	c := clusterOf("node-a", "node-b")
	tp := topo{"node-a": {link("eth0", "172.20.0.2/16", 1500), link("eth1", "172.21.0.2/16", 1500)}, "node-b": {link("eth0", "172.20.0.3/16", 1500), link("eth1", "172.21.0.3/16", 1500)}}
	probes := probesOf(c, tp, nil)
	first, err := Choose(c, probes, fullMatrix(c, probes, nil))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, _ := Choose(c, probes, fullMatrix(c, probes, nil))
		if again.Subnet != first.Subnet || decisionText(again) != decisionText(first) {
			t.Fatalf("plan changed between runs:\n%s\nvs\n%s", decisionText(first), decisionText(again))
		}
	}
	if !strings.Contains(decisionText(first), "tie, broken by address order") {
		t.Errorf("tie not explained:\n%s", decisionText(first))
	}
}

// TestChooseProperty checks random topologies: whatever is chosen contains every node and
// passed all-pairs reachability, and the chosen addresses are distinct.
func TestChooseProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	chosen := 0
	subnets := []string{"10.0.0.%d/24", "172.20.0.%d/24", "192.168.77.%d/24", "169.254.0.%d/16"}
	for iter := range 2000 {
		n := 1 + rng.IntN(5)
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("n%d", i))
		}
		c := clusterOf(names...)
		tp := topo{}
		for i, name := range names {
			for si, s := range subnets {
				if rng.IntN(3) == 0 {
					continue
				}
				host := 10 + i
				if rng.IntN(20) == 0 {
					host = 10 // occasional duplicate
				}
				l := link(fmt.Sprintf("eth%d", si), fmt.Sprintf(s, host), []int{1500, 9000}[rng.IntN(2)])
				l.Up = rng.IntN(10) != 0
				tp[name] = append(tp[name], l)
			}
		}
		probes := probesOf(c, tp, nil)
		blocked := map[string]bool{}
		for _, a := range names {
			for _, b := range names {
				for _, s := range subnets {
					if rng.IntN(8) == 0 {
						blocked[a+">"+b+"@"+netip.MustParsePrefix(fmt.Sprintf(s, 0)).Masked().String()] = true
					}
				}
			}
		}
		matrix := fullMatrix(c, probes, blocked)
		plan, err := Choose(c, probes, matrix)
		if err != nil {
			continue
		}
		chosen++
		if linkLocal.Overlaps(plan.Subnet) || len(plan.Nodes) != n {
			t.Fatalf("iter %d: chose %s for %d nodes", iter, plan.Subnet, len(plan.Nodes))
		}
		seen := map[netip.Addr]bool{}
		for _, np := range plan.Nodes {
			if !plan.Subnet.Contains(np.Address) || seen[np.Address] {
				t.Fatalf("iter %d: node %s address %s in %s (dup %v)", iter, np.Name, np.Address, plan.Subnet, seen[np.Address])
			}
			seen[np.Address] = true
		}
		ok := map[string]bool{}
		for _, r := range matrix {
			if r.Subnet == plan.Subnet && r.OK {
				ok[r.From+">"+r.To] = true
			}
		}
		for _, a := range names {
			for _, b := range names {
				if a != b && !ok[a+">"+b] {
					t.Fatalf("iter %d: chose %s though %s → %s failed", iter, plan.Subnet, a, b)
				}
			}
		}
	}
	// Guard against a generator that never yields a plan, which would prove nothing.
	if chosen < 200 {
		t.Fatalf("only %d of 2000 random topologies had a plan", chosen)
	}
	t.Logf("%d of 2000 random topologies had a plan", chosen)
}

func TestWarnsWhenVLLMWouldCopyTheHeadsEnvOverAWorkers(t *testing.T) {
	c := clusterOf("node-a", "node-b")
	c.Nodes[0].Env = map[string]string{"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "4"}
	c.Nodes[1].Env = map[string]string{"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1", "OMP_NUM_THREADS": "8"}
	probes := []NodeProbe{{Node: "node-a", GPUs: 1, Links: []Link{link("eth1", "192.168.77.12/24", 9000)}}, {Node: "node-b", GPUs: 1, Links: []Link{link("eth1", "192.168.77.13/24", 9000)}}}
	plan, err := Choose(c, probes, fullMatrix(c, probes, nil))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan.Warnings, "\n")
	for _, w := range []string{`node-b sets NCCL_DEBUG="INFO" but the head sets "WARN"`, `node-b sets NCCL_P2P_DISABLE="1" but the head does not set it`} {
		if !strings.Contains(text, w) {
			t.Errorf("warnings lack %q:\n%s", w, text)
		}
	}
	if strings.Contains(text, "OMP_NUM_THREADS") {
		t.Errorf("warned about a variable vLLM does not copy:\n%s", text)
	}
}

// In vLLM's own multi-node mode there is no Ray: no Ray address, no RAY_ADDRESS, and each
// node names exactly its own interface (nothing copies the head's environment), even where
// the Ray form would be one list for every node.
func TestChooseForMP(t *testing.T) {
	c := clusterOf("node-a", "node-b")
	c.Executor = spec.ExecutorMP
	tp := topo{"node-a": {link("eth0", "172.20.0.2/16", 1500), link("eth1", "172.21.0.2/16", 1500)},
		"node-b": {link("eth0", "172.20.0.3/16", 1500), link("eth1", "172.21.0.3/16", 1500)}}
	probes := probesOf(c, tp, nil)
	plan, err := Choose(c, probes, fullMatrix(c, probes, nil))
	if err != nil {
		t.Fatal(err)
	}
	if plan.RayAddress != "" || plan.NCCL.Form != NCCLPerNode || len(plan.NCCL.NoCarryOver) != 0 {
		t.Errorf("ray %q, nccl %+v; want none and per node", plan.RayAddress, plan.NCCL)
	}
	for _, np := range plan.Nodes {
		if _, ok := np.Env["RAY_ADDRESS"]; ok {
			t.Errorf("%s has RAY_ADDRESS", np.Name)
		}
		if got := np.Env["NCCL_SOCKET_IFNAME"]; got != "="+np.Interface {
			t.Errorf("%s NCCL_SOCKET_IFNAME %q, want =%s", np.Name, got, np.Interface)
		}
	}
}

// TestChooseKeeping: a deploy that starts over keeps its subnet. A NIC back under another
// name is planned again in it; a fast link still down fails with the reason, even though
// the management network would do.
func TestChooseKeeping(t *testing.T) {
	two := clusterOf("node-a", "node-b")
	fast := netip.MustParsePrefix("10.200.2.0/24")
	mgmt := func(addr string) Link { return link("eth0", addr, 1500) }
	tests := []struct {
		name    string
		topo    topo
		keep    netip.Prefix
		want    string
		wantErr []string
	}{
		{"no keep: the management network when the fast link is gone",
			topo{"node-a": {mgmt("10.231.2.10/24"), link("eth2", "10.200.2.12/24", 9000)}, "node-b": {mgmt("10.231.2.11/24")}},
			netip.Prefix{}, "10.231.2.0/24", nil},
		{"keep: the fast link back under another name",
			topo{"node-a": {mgmt("10.231.2.10/24"), link("eth2", "10.200.2.12/24", 9000)}, "node-b": {mgmt("10.231.2.11/24"), link("eth3", "10.200.2.13/24", 9000)}},
			fast, "10.200.2.0/24", nil},
		{"keep: the fast link still gone",
			topo{"node-a": {mgmt("10.231.2.10/24"), link("eth2", "10.200.2.12/24", 9000)}, "node-b": {mgmt("10.231.2.11/24")}},
			fast, "", []string{"10.200.2.0/24 rejected: node-b has no address in it", "10.231.2.0/24 rejected: this deploy planned on 10.200.2.0/24 before it started over"}},
		{"keep: gone from every node",
			topo{"node-a": {mgmt("10.231.2.10/24")}, "node-b": {mgmt("10.231.2.11/24")}},
			fast, "", []string{"10.200.2.0/24 rejected: node-a has no address in it"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			probes := probesOf(two, tc.topo, nil)
			plan, err := ChooseKeeping(two, probes, fullMatrix(two, probes, nil), tc.keep)
			if tc.want != "" {
				if err != nil || plan.Subnet.String() != tc.want {
					t.Fatalf("plan %s, %v; want %s", plan.Subnet, err, tc.want)
				}
				return
			}
			var pe *Error
			if !errors.As(err, &pe) || pe.Type != failure.NoViableSubnet {
				t.Fatalf("err %v, want %s", err, failure.NoViableSubnet)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%s", w, err)
				}
			}
		})
	}
}

// The NCCL variables follow the release's env rule: only the legacy executor's copy that
// overwrites the workers' values needs one list for all nodes (and warns about a worker's
// own NCCL_*); V2's setdefault and the pre-0.17 copy of VLLM_* alone keep each node's own.
func TestChooseFollowsTheReleasesEnvRule(t *testing.T) {
	c := clusterOf("node-a", "node-b")
	c.Nodes[1].Env = map[string]string{"NCCL_DEBUG": "INFO"}
	probes := []NodeProbe{{Node: "node-a", GPUs: 1, Links: []Link{link("vethA", "192.168.77.12/24", 9000)}}, {Node: "node-b", GPUs: 1, Links: []Link{link("ibp1", "192.168.77.13/24", 9000)}}}
	for _, tc := range []struct {
		name, copy string
		form       string
		nodeA      string
		warns      bool
	}{
		{"legacy 0.17 overwrites", release.EnvCopyPrefixesOverwrite, NCCLClusterWide, "=vethA,ibp1", true},
		{"V2 keeps the worker's own", release.EnvCopyAllSetdefault, NCCLPerNode, "=vethA", false},
		{"legacy 0.11 copies VLLM_* only", release.EnvCopyVLLMOnly, NCCLPerNode, "=vethA", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := ChooseFor(c, probes, fullMatrix(c, probes, nil), Options{Engine: &release.Model{VLLM: "x", Executor: "ray", EnvCopy: tc.copy}})
			if err != nil {
				t.Fatal(err)
			}
			a, _ := plan.Node("node-a")
			b, _ := plan.Node("node-b")
			if plan.NCCL.Form != tc.form || a.Env["NCCL_SOCKET_IFNAME"] != tc.nodeA || len(plan.NCCL.NoCarryOver) != 0 {
				t.Errorf("form %q (%s), node-a %q; want %q, %q", plan.NCCL.Form, plan.NCCL.Reason, a.Env["NCCL_SOCKET_IFNAME"], tc.form, tc.nodeA)
			}
			if tc.form == NCCLPerNode && b.Env["NCCL_SOCKET_IFNAME"] != "=ibp1" {
				t.Errorf("node-b %q, want =ibp1", b.Env["NCCL_SOCKET_IFNAME"])
			}
			if got := len(plan.Warnings) > 0; got != tc.warns {
				t.Errorf("warnings %q, want some: %v", plan.Warnings, tc.warns)
			}
			if plan.RayAddress == "" {
				t.Error("no Ray address under the Ray executor")
			}
		})
	}
}

// sparkPair is two DGX Sparks cabled as NVIDIA's playbook sets them up: each CX-7 port is
// two PCIe x4 endpoints, each its own netdev, HCA and subnet (upstream.md §9).
func sparkPair() (spec.Cluster, []NodeProbe) {
	c := clusterOf("spark-a", "spark-b")
	var probes []NodeProbe
	for i, n := range []string{"spark-a", "spark-b"} {
		probes = append(probes, NodeProbe{Node: n, GPUs: 1, Links: []Link{
			link("enP7s7", fmt.Sprintf("10.1.230.%d/24", 180+i), 1500),
			link("enp1s0f1np1", fmt.Sprintf("192.168.100.%d/24", 10+i), 9000, speedMbps(100000)),
			link("enP2p1s0f1np1", fmt.Sprintf("192.168.101.%d/24", 10+i), 9000, speedMbps(100000)),
		}, RDMA: []RDMADevice{
			{Name: "rocep1s0f1", Port: 1, Netdev: "enp1s0f1np1", State: "ACTIVE", RateMbps: 100000, UVerbs: "uverbs1"},
			{Name: "roceP2p1s0f1", Port: 1, Netdev: "enP2p1s0f1np1", State: "ACTIVE", RateMbps: 100000, UVerbs: "uverbs3"},
			{Name: "rocep1s0f0", Port: 1, Netdev: "enp1s0f0np0", State: "DOWN"},
		}})
	}
	return c, probes
}

func TestSparkPairUsesBothRails(t *testing.T) {
	c, probes := sparkPair()
	plan, err := Choose(c, probes, fullMatrix(c, probes, nil))
	if err != nil {
		t.Fatal(err)
	}
	used := plan.UsedRails()
	if len(used) != 2 || used[0].Subnet.String() != "192.168.100.0/24" || used[1].Subnet.String() != "192.168.101.0/24" {
		t.Fatalf("rails %+v", plan.Rails)
	}
	for _, n := range plan.Nodes {
		if n.Env["NCCL_IB_HCA"] != "=rocep1s0f1:1,roceP2p1s0f1:1" || len(n.RDMA) != 2 {
			t.Errorf("%s: NCCL_IB_HCA %q, rdma %v", n.Name, n.Env["NCCL_IB_HCA"], n.RDMA)
		}
		if !strings.HasPrefix(n.Env["NCCL_SOCKET_IFNAME"], "=enp1s0f1np1") {
			t.Errorf("%s: NCCL_SOCKET_IFNAME %q: the bootstrap stays on one interface", n.Name, n.Env["NCCL_SOCKET_IFNAME"])
		}
	}
	if plan.DataPlane != spec.DataPlaneRequire {
		t.Errorf("data plane %q, want require by default when RDMA is planned", plan.DataPlane)
	}

	// A rail that does not pass the reachability test is left out, and says why.
	blocked := map[string]bool{"spark-a>spark-b@192.168.101.0/24": true}
	plan, err = Choose(c, probes, fullMatrix(c, probes, blocked))
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.UsedRails()) != 1 || plan.Nodes[0].Env["NCCL_IB_HCA"] != "=rocep1s0f1:1" {
		t.Fatalf("one rail: %+v %q", plan.Rails, plan.Nodes[0].Env["NCCL_IB_HCA"])
	}
	if r := plan.Rails[1]; r.Used || !strings.Contains(r.Reason, "left out: spark-a cannot reach spark-b") {
		t.Fatalf("left-out rail: %+v", r)
	}

	// A node's HCA that is down is no rail.
	probes[1].RDMA[1].State = "DOWN"
	plan, _ = Choose(c, probes, fullMatrix(c, probes, nil))
	if len(plan.UsedRails()) != 1 || !strings.Contains(plan.Rails[1].Reason, "spark-b has no ACTIVE HCA port") {
		t.Fatalf("down HCA: %+v", plan.Rails)
	}
}

func TestEnvThatDisablesRDMA(t *testing.T) {
	c, probes := sparkPair()
	c.Nodes[1].Env = map[string]string{"NCCL_IB_DISABLE": "1"}
	_, err := Choose(c, probes, fullMatrix(c, probes, nil))
	var pe *Error
	if !errors.As(err, &pe) || pe.Type != failure.DataPlaneDegraded || !strings.Contains(pe.Msg, "spark-b's env sets NCCL_IB_DISABLE=1") {
		t.Fatalf("err %v", err)
	}
	c.DataPlane = spec.DataPlaneWarn
	c.Nodes[1].Env = map[string]string{"NCCL_NET": "Socket"}
	plan, err := Choose(c, probes, fullMatrix(c, probes, nil))
	if err != nil || !strings.Contains(strings.Join(plan.Warnings, "\n"), "spark-b's env sets NCCL_NET=Socket") {
		t.Fatalf("warn: %v %q", err, plan.Warnings)
	}
}

func TestRailsKeepTheReleasesEnvRule(t *testing.T) {
	c, probes := sparkPair()
	for _, copy := range []string{release.EnvCopyPrefixesOverwrite, release.EnvCopyAllSetdefault} {
		plan, err := ChooseFor(c, probes, fullMatrix(c, probes, nil), Options{Engine: &release.Model{VLLM: "x", Executor: "ray", EnvCopy: copy}})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range plan.Nodes {
			if n.Env["NCCL_IB_HCA"] != "=rocep1s0f1:1,roceP2p1s0f1:1" {
				t.Errorf("%s %s: %q", copy, n.Name, n.Env["NCCL_IB_HCA"])
			}
		}
	}
}

// network.subnet and nodes[].address bind the plan: only a subnet overlapping the pinned
// one is chosen, each pinned node gets exactly its address, and a topology that cannot
// meet the pins is NoViableSubnet saying which pin.
func TestChooseHonoursPinnedAddresses(t *testing.T) {
	// Both nodes share two subnets; node-b has two addresses on the fast one.
	tp := topo{
		"node-a": {link("mgmt0", "10.1.0.11/24", 1500), link("fast0", "192.168.200.12/24", 9000, speedMbps(200000))},
		"node-b": {link("mgmt0", "10.1.0.12/24", 1500), link("fast0", "192.168.200.13/24", 9000, speedMbps(200000)),
			link("fast1", "192.168.200.14/24", 9000, speedMbps(100000))},
	}
	choose := func(c spec.Cluster) (Plan, error) {
		probes := probesOf(c, tp, nil)
		return Choose(c, probes, fullMatrix(c, probes, nil))
	}
	c := clusterOf("node-a", "node-b")
	c.Network.Subnet = "10.1.0.0/24" // not the fast one the scores would pick
	plan, err := choose(c)
	if err != nil || plan.Subnet.String() != "10.1.0.0/24" || plan.RayAddress != "10.1.0.11:6379" {
		t.Fatalf("network.subnet 10.1.0.0/24: subnet %s, ray %s, %v", plan.Subnet, plan.RayAddress, err)
	}
	if !strings.Contains(fmt.Sprint(plan.Decision), "rejected: outside network.subnet 10.1.0.0/24") {
		t.Errorf("the decision does not say why the fast subnet was left: %+v", plan.Decision)
	}
	c = clusterOf("node-a", "node-b")
	c.Nodes[1].Address = "192.168.200.14" // the slower of node-b's two
	plan, err = choose(c)
	if np, _ := plan.Node("node-b"); err != nil || np.Address.String() != "192.168.200.14" || np.Interface != "fast1" {
		t.Fatalf("nodes[1].address 192.168.200.14: %+v, %v", np, err)
	}
	c.Nodes[1].Address = "192.168.200.99"
	if _, err := choose(c); err == nil || !strings.Contains(err.Error(), "node-b's address in it is 192.168.200.13, 192.168.200.14, not its nodes[].address 192.168.200.99") {
		t.Errorf("a pinned address the node does not hold: %v", err)
	}
}

func TestRanksOn(t *testing.T) {
	c := spec.Cluster{Parallel: spec.Parallel{Tensor: 4, Pipeline: 1}, Nodes: []spec.Node{{Name: "a"}, {Name: "b"}, {Name: "c"}}}
	plan := &Plan{Nodes: []NodePlan{{Name: "a", GPUs: 2}, {Name: "b", GPUs: 8}, {Name: "c", GPUs: 8}}}
	for node, want := range map[string]int{"a": 2, "b": 2, "c": 0, "x": 0} {
		if got := RanksOn(c, plan, node); got != want {
			t.Errorf("%s: %d ranks, want %d", node, got, want)
		}
	}
	if got := RanksOn(c, nil, "a"); got != 1 {
		t.Errorf("without a plan: %d", got)
	}
}

// GPU indices the spec lists are checked against the GPUs the node's agent detected, the
// error naming the node and the index; a node whose GPUs were not detected is taken at the
// spec's word.
func TestGPUIndicesMustBeTheNodesOwn(t *testing.T) {
	c := clusterOf("node-a", "node-b")
	c.Nodes[1].GPUIndices = []int{0, 1}
	c = c.WithDefaults()
	for _, tt := range []struct {
		name     string
		detected int
		want     string
	}{
		{"node-b has both", 2, ""},
		{"node-b has one", 1, "nodes[1].gpus[1]: node-b has no GPU 1: its agent detected 1 (indices 0 to 0)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			probes := probesOf(c, seedTopo, nil)
			probes[1].GPUs, probes[1].GPUSource = tt.detected, "detected"
			_, err := Choose(c, probes, fullMatrix(c, probes, nil))
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
			var pe *Error
			if tt.want != "" && (!errors.As(err, &pe) || pe.Type != failure.InsufficientGPUs) {
				t.Errorf("error type: %v", err)
			}
		})
	}
	probes := probesOf(c, seedTopo, nil) // both "spec": the operator's word
	if _, err := Choose(c, probes, fullMatrix(c, probes, nil)); err != nil {
		t.Errorf("undetected GPUs: %v", err)
	}
}
