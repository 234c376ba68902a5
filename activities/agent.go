package activities

import (
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Config is how one node's agent is set up: who it is, where it reads the machine from,
// and its operator's policy.
type Config struct {
	// Name is the node's name in the spec; a task for another node is refused.
	Name string
	Log  *zap.Logger
	// NetNS, when set, is a named network namespace (ip netns) the node's network
	// activities run in. Agents on real nodes leave it empty; tests set it to give one
	// process several nodes.
	NetNS string
	// SysRoot and ProcRoot are where sysfs and procfs are read (default /sys and /proc).
	SysRoot  string
	ProcRoot string
	// BootIDFile overrides the kernel's boot ID (the lab gives each node container its own).
	BootIDFile string
	// CgroupDir is where the agent reads its memory cgroup (default /sys/fs/cgroup, its
	// own in a private cgroup namespace): a node container on a cgroup v2 host that sees
	// the host's hierarchy (cgroupns host, NestCgroupV2) reads its own directory in it.
	CgroupDir string
	// Containers says how this node's containers reach its network and GPUs; zero means
	// DefaultContainerOptions (a real GPU node).
	Containers ContainerOptions
	// Policy is the node operator's limit on what a workflow may make this agent do:
	// images, host paths mounted, Docker engines, ports, the keys it trusts. Nil is
	// policy.Default().
	Policy *policy.Policy
	// unrestricted, for this package's tests alone, is no policy at all: any image, path,
	// engine, port or address (loopback copies, the lab's images), and no signature.
	unrestricted bool
}

// Agent is the activities a node agent runs on its own node, one struct per concern, each
// holding only the clients it uses. The agent registers every one of them on the node's
// task queue (Activities); the workflows name their methods (package contract's names).
// Their exported methods are exactly the activities: the parts they share (nodeBase,
// hostNet, mounts, docker, sysfs) have none, and are held in named fields, never
// embedded in a way that would promote one activity struct's methods into another's.
type Agent struct {
	// Probe describes the node: links, routes, RDMA devices, GPUs, boot ID.
	Probe *Probe
	// Reachability opens listeners and dials peers: which subnet every node reaches.
	Reachability *Reachability
	// Containers checks the node's engine before a deploy and removes the cluster's
	// containers.
	Containers *Containers
	// Images reads what an image holds.
	Images *Images
	// Ray starts Ray's head and workers and proves placement.
	Ray *Ray
	// VLLM launches and watches vLLM, over Ray or in its own multi-node mode.
	VLLM *VLLM
	// DataPlane runs the data-plane proof.
	DataPlane *DataPlane
	// Weights describes, serves, copies and cleans up the model's files.
	Weights *Weights
	// Router runs the fleet's OpenAI router on this node and sets its routes.
	Router *Router

	// base is what they share, for the gate.
	base *nodeBase
}

// New builds the agent of one node.
func New(c Config) *Agent {
	pol := c.Policy
	if pol == nil && !c.unrestricted {
		d := policy.Default()
		pol = &d
	}
	base := &nodeBase{name: c.Name, log: c.Log, policy: pol, guard: &memGuard{}}
	if base.log == nil {
		base.log = zap.NewNop()
	}
	opts := c.Containers
	if opts.Network == "" {
		opts = DefaultContainerOptions()
	}
	sys := sysfs{sysRoot: c.SysRoot, procRoot: c.ProcRoot, bootIDFile: c.BootIDFile, cgroupRoot: c.CgroupDir}
	net := &hostNet{nodeBase: base, netns: c.NetNS, sys: sys}
	mnt := &mounts{nodeBase: base, hostRoot: opts.HostRoot}
	dock := &docker{nodeBase: base, mounts: mnt, sys: sys, opts: opts}
	reach := &Reachability{nodeBase: base, net: net}
	vllm := &VLLM{nodeBase: base, net: net, docker: dock, reach: reach}
	return &Agent{
		Probe:        &Probe{nodeBase: base, net: net, sys: sys, docker: dock},
		Reachability: reach,
		Containers:   &Containers{nodeBase: base, docker: dock, vllm: vllm},
		Images:       &Images{nodeBase: base, docker: dock},
		Ray:          &Ray{nodeBase: base, net: net, docker: dock, vllm: vllm},
		VLLM:         vllm,
		DataPlane:    &DataPlane{nodeBase: base, net: net, docker: dock},
		Weights:      newWeights(base, net, mnt),
		Router:       &Router{nodeBase: base, docker: dock, vllm: vllm, net: net},
		base:         base,
	}
}

// Activities are the structs whose methods are the node's activities, for
// worker.RegisterActivity.
func (a *Agent) Activities() []any {
	return []any{a.Probe, a.Reachability, a.Containers, a.Images, a.Ray, a.VLLM, a.DataPlane, a.Weights, a.Router}
}

// nodeBase is what every part of the agent knows: which node it is, where it logs, and
// its operator's policy. It has no exported method: it is embedded in every activity
// struct, and anything exported would become an activity of each.
type nodeBase struct {
	name string
	log  *zap.Logger
	// policy is nil only for tests' unrestricted agents (Config.unrestricted).
	policy *policy.Policy
	// guard is what the memory guard found (GuardMemory), for the serving watches.
	guard *memGuard
}

// checkNode refuses a task meant for another node: a mis-routed task must not act here.
func (b *nodeBase) checkNode(node string) error {
	if node != b.name {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("task for node %q reached the agent of node %q", node, b.name), contract.ErrWrongNode, nil)
	}
	return nil
}

// allowed applies the node's policy: a refusal is non-retryable, names the node and the
// setting an operator would change.
func (b *nodeBase) allowed(check func(policy.Policy) error) error {
	if b.policy == nil {
		return nil
	}
	if err := check(*b.policy); err != nil {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: %v", b.name, err), contract.ErrPolicyDenied, nil)
	}
	return nil
}

// deny is a refusal of a request outside what any agent does (a bound, a container that
// is not the cluster's), whatever the policy: non-retryable PolicyDenied, naming the node.
func (b *nodeBase) deny(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(b.name+": "+fmt.Sprintf(format, args...), contract.ErrPolicyDenied, nil)
}

// denyPath is a refusal of a path the kernel would not resolve beneath its root (a
// planted symlink): non-retryable, PolicyDenied, naming the path.
func (b *nodeBase) denyPath(what string, err error) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: %s: %v", b.name, what, err), contract.ErrPolicyDenied, nil)
}

func (b *nodeBase) logger() *zap.Logger { return b.log }

// checkSpec re-validates the spec a request carries before the agent acts on it: the
// starter and the workflow validated it, but anyone who can start an activity on the
// node's queue could send any spec (a managed flag in extra_args, a code-running
// variable in a node's env). Then the node's own limit on vLLM's options. A refusal is
// non-retryable PolicyDenied naming the field.
func (b *nodeBase) checkSpec(c spec.Cluster) error {
	if err := c.Validate(); err != nil {
		return b.deny("the request's spec is refused: %v", err)
	}
	return b.allowed(func(p policy.Policy) error { return p.CheckExtraArgs(c.Model.ExtraArgs) })
}
