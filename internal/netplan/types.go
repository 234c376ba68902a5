// Package netplan decides, once for the whole cluster, which subnet every layer (Ray, vLLM,
// c10d, NCCL, Gloo) uses, from facts measured on every node. It is pure: no I/O, so the
// decision can be table-tested and recorded in workflow history.
package netplan

import (
	"net/netip"
	"strconv"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/hostmem"
)

func itoa(i int) string { return strconv.Itoa(i) }

// NodeProbe is what a node agent reports about its node.
type NodeProbe struct {
	Node     string `json:"node"`
	Hostname string `json:"hostname"`
	BootID   string `json:"boot_id"`
	Links    []Link `json:"links"`
	// DefaultRoute is the route Ray's head auto-detection follows (towards 8.8.8.8).
	DefaultRoute *DefaultRoute `json:"default_route,omitempty"`
	RDMA         []RDMADevice  `json:"rdma,omitempty"`
	Docker       DockerInfo    `json:"docker"`
	GPUs         int           `json:"gpus"`
	// GPUSource says where GPUs came from: "detected" or "spec".
	GPUSource string `json:"gpu_source"`
	// Memory is the node's host memory (nil from an agent too old to say).
	Memory *hostmem.Facts `json:"memory,omitempty"`
}

// Link is one network interface.
type Link struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"` // netlink type: device, veth, bridge, vlan, ...
	MTU       int    `json:"mtu"`
	OperState string `json:"oper_state"`
	Up        bool   `json:"up"` // administratively up and carrier present
	Loopback  bool   `json:"loopback,omitempty"`
	MAC       string `json:"mac,omitempty"`
	// SpeedMbps is from sysfs; 0 when the kernel does not report it (virtual links).
	SpeedMbps int            `json:"speed_mbps,omitempty"`
	Addrs     []netip.Prefix `json:"addrs,omitempty"`
}

// DefaultRoute is the interface and source address of the node's route to the internet.
type DefaultRoute struct {
	Interface string     `json:"interface"`
	Source    netip.Addr `json:"source"`
	Gateway   netip.Addr `json:"gateway,omitzero"`
}

// RDMADevice is an InfiniBand/RoCE device port and the netdev it maps to.
type RDMADevice struct {
	Name   string `json:"name"` // mlx5_0
	Port   int    `json:"port"`
	Netdev string `json:"netdev"`
	State  string `json:"state"` // ACTIVE, DOWN
	// LinkLayer is the port's (Ethernet for RoCE, InfiniBand).
	LinkLayer string `json:"link_layer,omitempty"`
	// RateMbps is the port's rate (sysfs ports/N/rate, "100 Gb/sec (4X EDR)"), 0 unknown.
	RateMbps int `json:"rate_mbps,omitempty"`
	// UVerbs is the HCA's verbs device (sysfs device/infiniband_verbs/uverbsN): the
	// /dev/infiniband/uverbsN a container needs to use the HCA.
	UVerbs string `json:"uverbs,omitempty"`
}

// HCA is the device and port as NCCL_IB_HCA names them: "mlx5_0:1".
func (d RDMADevice) HCA() string { return d.Name + ":" + itoa(max(d.Port, 1)) }

// Rail is one subnet NCCL's RDMA transport can use: every node has an ACTIVE HCA port whose
// netdev has an IPv4 address in it, and the reachability test passed over it.
type Rail struct {
	Subnet netip.Prefix `json:"subnet"`
	Used   bool         `json:"used"`
	// Reason says why it is used, or why it was left out.
	Reason  string       `json:"reason"`
	Members []RailMember `json:"members,omitempty"`
}

// RailMember is one node's HCA port on a rail.
type RailMember struct {
	Node   string     `json:"node"`
	Device RDMADevice `json:"device"`
	Addr   netip.Addr `json:"addr"`
}

// DockerInfo reports whether the node's engine answered.
type DockerInfo struct {
	Reachable  bool   `json:"reachable"`
	Version    string `json:"version,omitempty"`
	APIVersion string `json:"api_version,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Addr returns the first address of the link inside subnet.
func (l Link) Addr(subnet netip.Prefix) (netip.Prefix, bool) {
	for _, a := range l.Addrs {
		if subnet.Contains(a.Addr()) {
			return a, true
		}
	}
	return netip.Prefix{}, false
}

// Target is one address a node listens on for the reachability test.
type Target struct {
	Node   string         `json:"node"`
	Subnet netip.Prefix   `json:"subnet"`
	Addr   netip.AddrPort `json:"addr"`
	// Ephemeral marks a listener on a port the kernel picked from the node's ephemeral
	// range (as vLLM's ZMQ sockets bind), beside the one below the range (CheckEphemeral).
	Ephemeral bool `json:"ephemeral,omitempty"`
}

// PairResult is one directed dial: From dialled To's address in Subnet.
type PairResult struct {
	From   string         `json:"from"`
	To     string         `json:"to"`
	Subnet netip.Prefix   `json:"subnet"`
	Addr   netip.AddrPort `json:"addr"`
	OK     bool           `json:"ok"`
	RTT    time.Duration  `json:"rtt,omitempty"`
	Error  string         `json:"error,omitempty"`
	// Ephemeral is a dial to an ephemeral-range port (Target.Ephemeral).
	Ephemeral bool `json:"ephemeral,omitempty"`
}

// Plan is the cluster's network decision and every setting derived from it.
type Plan struct {
	Subnet netip.Prefix `json:"subnet"`
	Head   string       `json:"head"`
	// RayAddress is the head's GCS address, RAY_ADDRESS for every node.
	RayAddress string     `json:"ray_address"`
	Nodes      []NodePlan `json:"nodes"`
	// Decision lists every candidate subnet with its verdict and reason.
	Decision []Candidate `json:"decision"`
	// GPUs is the total the probes found (or the spec declared).
	GPUs int `json:"gpus"`
	// NCCL says how NCCL_SOCKET_IFNAME and NCCL_IB_HCA are given, and why.
	NCCL NCCLEnv `json:"nccl,omitzero"`
	// Warnings are findings that do not stop a deploy but an operator should know.
	Warnings []string `json:"warnings,omitempty"`
	// Rails are the subnets NCCL's RDMA transport may use (NCCL_IB_HCA lists every used
	// rail's HCA on each node), and those left out with why. NCCL_SOCKET_IFNAME stays the
	// chosen subnet's interface: it picks NCCL's bootstrap, not the data path.
	Rails []Rail `json:"rails,omitempty"`
	// DataPlane is the proof's mode for this plan: the spec's data_plane, or require when
	// a rail is used and skip when none is.
	DataPlane string `json:"data_plane,omitempty"`
	// Fabric is the data plane's measured graph of links between HCAs, the nodes in rank
	// order and the NCCL algorithms it carries; nil when no node pair shares an HCA-backed
	// subnet. Where the rails span every node (the seed's pair) it draws them; where they
	// do not (a triangle, a ring), NCCL_IB_HCA lists each node's HCAs on its links.
	Fabric *Fabric `json:"fabric,omitempty"`
}

// UsedRails are the rails NCCL_IB_HCA lists.
func (p Plan) UsedRails() []Rail {
	var out []Rail
	for _, r := range p.Rails {
		if r.Used {
			out = append(out, r)
		}
	}
	return out
}

// NCCL environment forms.
const (
	// NCCLClusterWide gives every node the same value, the exact-name list of every node's
	// chosen interface (and HCAs): it survives vLLM copying the driver's NCCL_* onto its
	// Ray workers, and each node selects its own interface from the list.
	NCCLClusterWide = "cluster-wide"
	// NCCLPerNode gives each node its own value and stops vLLM's copy of those variables
	// (vLLM's ray_non_carry_over_env_vars.json under the driver's VLLM_CONFIG_ROOT).
	NCCLPerNode = "per-node"
)

// NCCLEnv is the form NCCL's interface variables take.
type NCCLEnv struct {
	Form   string `json:"form"`
	Reason string `json:"reason"`
	// NoCarryOver are the variables vLLM's Ray executor must not copy from the driver to
	// its workers (per-node form only).
	NoCarryOver []string `json:"no_carry_over,omitempty"`
}

// NodePlan is one node's share of the plan.
type NodePlan struct {
	Name      string     `json:"name"`
	Role      string     `json:"role"`
	Address   netip.Addr `json:"address"`
	Interface string     `json:"interface"`
	GPUs      int        `json:"gpus"`
	// RDMA are the node's HCA ports on the used rails: the agent maps their verbs devices
	// into the node's containers.
	RDMA []RDMADevice `json:"rdma,omitempty"`
	// Env is the full environment for every container on the node.
	Env map[string]string `json:"env"`
}

// Node returns the named node's plan.
func (p Plan) Node(name string) (NodePlan, bool) {
	for _, n := range p.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return NodePlan{}, false
}

// Verdicts.
const (
	Chosen   = "chosen"
	Viable   = "reachable"
	Rejected = "rejected"
)

// Candidate is one subnet considered by the planner.
type Candidate struct {
	Subnet  netip.Prefix `json:"subnet"`
	Verdict string       `json:"verdict"`
	Rank    int          `json:"rank,omitempty"`
	Reason  string       `json:"reason"`
}
