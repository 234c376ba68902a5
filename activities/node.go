package activities

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/vishvananda/netns"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/netplan"
	"github.com/tpdeploy/tpdeploy/policy"
	"github.com/tpdeploy/tpdeploy/spec"
)

// Node holds the activities a node agent runs on its own node. The agent registers one
// Node on the node's task queue; the workflow names its methods.
type Node struct {
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
	// Containers says how this node's containers reach its network and GPUs; zero means
	// DefaultContainerOptions (a real GPU node).
	Containers ContainerOptions
	// Policy is the node operator's limit on what a workflow may make this agent do:
	// images, host paths mounted, Docker engines, ports. The agent always sets one (the
	// defaults are safe); nil, for tests that build a Node by hand, allows everything.
	Policy *policy.Policy

	listeners listenerSet
	engines   engines
	images    imageCache
}

// checkNode refuses a task meant for another node: a mis-routed task must not act here.
func (a *Node) checkNode(node string) error {
	if node != a.Name {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("task for node %q reached the agent of node %q", node, a.Name), contract.ErrWrongNode, nil)
	}
	return nil
}

// inNetNS runs fn with the calling goroutine in the node's network namespace. Sockets
// created inside stay in that namespace after fn returns.
func (a *Node) inNetNS(fn func() error) error {
	if a.NetNS == "" {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(a.NetNS)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns %s: %w", a.NetNS, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", a.NetNS, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread is stuck in the wrong namespace: keep it locked so the runtime
		// discards it when this goroutine ends.
		return fmt.Errorf("leave netns %s: %w", a.NetNS, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// allowed applies the node's policy: a refusal is non-retryable, names the node and the
// setting an operator would change.
func (a *Node) allowed(check func(policy.Policy) error) error {
	if a.Policy == nil {
		return nil
	}
	if err := check(*a.Policy); err != nil {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: %v", a.Name, err), contract.ErrPolicyDenied, nil)
	}
	return nil
}

// deny is a refusal of a request outside what any agent does (a bound, a container that
// is not the cluster's), whatever the policy: non-retryable PolicyDenied, naming the node.
func (a *Node) deny(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(a.Name+": "+fmt.Sprintf(format, args...), contract.ErrPolicyDenied, nil)
}

// specAllowed checks everything a spec would make this node do, so that preflight refuses
// a spec outside the policy before anything starts (each action checks its part again).
func (a *Node) specAllowed(c spec.Cluster) error {
	n, _ := c.Node(a.Name)
	return a.allowed(func(p policy.Policy) error {
		var hostDir error
		if c.Model.HostDir != "" {
			hostDir = p.CheckMount(c.Model.HostDir)
		}
		return errors.Join(p.CheckImage(c.Image), p.CheckDockerHost(n.DockerHost), p.CheckMount(c.HFCache), hostDir,
			p.CheckPorts(c.Ports.VLLM, c.Ports.Ray, c.Ports.Dashboard))
	})
}

// hostPath is a path of the node's filesystem as this agent reads it (under its host root,
// in the lab); empty stays empty.
func (a *Node) hostPath(p string) string {
	if p == "" {
		return ""
	}
	return a.containerOptions().HostPath(p)
}

// nodePath is hostPath's inverse, for paths the agent reports.
func (a *Node) nodePath(p string) string {
	root := a.containerOptions().HostRoot
	if root == "" || p == "" {
		return p
	}
	if rel, err := filepath.Rel(root, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return "/" + filepath.ToSlash(rel)
	}
	return p
}

func (a *Node) logger() *zap.Logger {
	if a.Log == nil {
		return zap.NewNop()
	}
	return a.Log
}

func (a *Node) containerOptions() ContainerOptions {
	if a.Containers.Network == "" {
		return DefaultContainerOptions()
	}
	return a.Containers
}

// PreflightNode checks that the node's engine answers and holds the image, and that the
// head's fixed ports are free (ports.go); it never pulls (a multi-gigabyte pull belongs to
// the operator, and an implicit one hides a typo).
func (a *Node) PreflightNode(ctx context.Context, req contract.PreflightRequest) (contract.PreflightResult, error) {
	if err := a.checkNode(req.Node); err != nil {
		return contract.PreflightResult{}, err
	}
	var signed *spec.Cluster
	if a.enforced() {
		if req.Spec == nil {
			return contract.PreflightResult{}, a.deny("signed intent: a preflight without the spec")
		}
		c, err := a.signedSpec(req.Intent, *req.Spec)
		if err != nil {
			return contract.PreflightResult{}, err
		}
		signed = c
		if req.Image != c.Image {
			return contract.PreflightResult{}, a.deny("signed intent: image %s is not the signed spec's %s", req.Image, c.Image)
		}
		if err := a.signedDockerHost(c, req.DockerHost); err != nil {
			return contract.PreflightResult{}, err
		}
	}
	if req.Spec != nil {
		if err := a.specAllowed(*req.Spec); err != nil {
			return contract.PreflightResult{}, err
		}
		if req.Plan != nil {
			if err := a.plannedAllowed(*req.Spec, *req.Plan, req.Deployment, signed); err != nil {
				return contract.PreflightResult{}, err
			}
		}
	}
	eng, addr, err := a.engine(req.DockerHost)
	if err != nil {
		return contract.PreflightResult{}, err
	}
	id, _, err := a.resolveImage(ctx, eng, addr, req.Image) // pinned.go
	if err != nil {
		return contract.PreflightResult{}, err
	}
	if req.Spec != nil {
		if err := a.checkPortsFree(ctx, eng, addr, *req.Spec); err != nil {
			return contract.PreflightResult{}, err
		}
	}
	return contract.PreflightResult{Node: a.Name, ImageID: id}, nil
}

// StartRayHead starts (or adopts) the Ray head container.
func (a *Node) StartRayHead(ctx context.Context, req contract.StartRayRequest) (contract.ContainerRef, error) {
	if err := a.checkNode(req.Node); err != nil {
		return contract.ContainerRef{}, err
	}
	c, err := a.signedRay(req)
	if err != nil {
		return contract.ContainerRef{}, err
	}
	n, _ := req.Spec.Node(req.Node)
	if err := a.allowed(func(p policy.Policy) error { return p.CheckPorts(req.Spec.Ports.Ray, req.Spec.Ports.Dashboard) }); err != nil {
		return contract.ContainerRef{}, err
	}
	return a.ensureContainer(ctx, n.DockerHost, labelled(a.withRDMA(rayHeadSpec(req, a.containerOptions()), req.Plan), c), req.Replace)
}

// StartRayWorker starts (or adopts) a Ray worker container joined to the head.
func (a *Node) StartRayWorker(ctx context.Context, req contract.StartRayRequest) (contract.ContainerRef, error) {
	if err := a.checkNode(req.Node); err != nil {
		return contract.ContainerRef{}, err
	}
	c, err := a.signedRay(req)
	if err != nil {
		return contract.ContainerRef{}, err
	}
	if c != nil {
		if err := a.checkDialString(req.RayAddress); err != nil {
			return contract.ContainerRef{}, err
		}
	}
	n, _ := req.Spec.Node(req.Node)
	return a.ensureContainer(ctx, n.DockerHost, labelled(a.withRDMA(rayWorkerSpec(req, a.containerOptions()), req.Plan), c), req.Replace)
}

// signedRay checks a Ray start against the signed spec: the spec and deployment signed,
// the planned address the node's own and as pinned, the head to join as pinned.
func (a *Node) signedRay(req contract.StartRayRequest) (*spec.Cluster, error) {
	c, err := a.signedDeployment(req.Intent, req.Spec, req.Deployment)
	if c == nil || err != nil {
		return c, err
	}
	return c, a.signedNodePlan(c, req.Plan, req.RayAddress, c.WithDefaults().Ports.Ray)
}

// LaunchVLLM starts `vllm serve` inside the Ray head's container (vllmproc.go), or adopts
// the vLLM already running there: a retried launch never starts a second one.
func (a *Node) LaunchVLLM(ctx context.Context, req contract.LaunchRequest) (contract.ContainerRef, error) {
	if err := a.checkNode(req.Node); err != nil {
		return contract.ContainerRef{}, err
	}
	if _, err := a.signedDeployment(req.Intent, req.Spec, req.Deployment); err != nil {
		return contract.ContainerRef{}, err
	}
	secrets, err := a.secretEnv(req.Spec.Secrets, true)
	if err != nil {
		return contract.ContainerRef{}, err
	}
	n, _ := req.Spec.Node(req.Node)
	if err := a.allowed(func(p policy.Policy) error { return p.CheckPorts(req.Spec.Ports.VLLM) }); err != nil {
		return contract.ContainerRef{}, err
	}
	eng, addr, err := a.engine(n.DockerHost)
	if err != nil {
		return contract.ContainerRef{}, err
	}
	head := contract.ContainerName(req.Spec.Name, req.Node, contract.RoleRayHead)
	info, err := eng.ContainerInspect(ctx, head, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return contract.ContainerRef{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("the ray head container %s is not there: vllm runs inside it, so ray must be started first", head), contract.ErrContainerExited, nil)
	}
	if err != nil {
		return contract.ContainerRef{}, engineError(addr, "inspect "+head, err)
	}
	if err := a.ownContainer(head, info.Container.Config, req.Spec.Name, contract.RoleRayHead); err != nil {
		return contract.ContainerRef{}, err
	}
	if st := info.Container.State; st == nil || !st.Running {
		return contract.ContainerRef{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("the ray head container %s is not running: vllm runs inside it", head), contract.ErrContainerExited, nil)
	}
	env := secretList(secrets)
	noCarry := req.Plan.NCCL.NoCarryOver
	if len(noCarry) > 0 {
		env = append(env, "VLLM_CONFIG_ROOT="+vllmConfigRoot)
	}
	ref := contract.ContainerRef{Node: a.Name, Role: contract.RoleVLLM, Name: head, ID: info.Container.ID}
	ref.PID, ref.Adopted, err = a.launchVLLM(ctx, eng, addr, head, vllmArgs(req.Spec), env, noCarry, req.Replace)
	return ref, err
}

// secretList is the resolved secrets as an exec's KEY=VALUE environment, sorted.
func secretList(secrets map[string]string) []string {
	env := make([]string, 0, len(secrets))
	for k, v := range secrets {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// launchVLLM starts argv (`vllm serve ...`) in container through the wrapper
// (vllmproc.go), by an exec whose environment is env (the secrets, which are thus in no
// container's configuration), or adopts the vLLM running there with the same launch hash
// (never when replace): a retried launch never starts a second vLLM. It returns vLLM's pid
// (0 when it ended at once: the watch reads why).
func (a *Node) launchVLLM(ctx context.Context, eng containerEngine, addr, container string, argv, env, noCarry []string, replace bool) (int, bool, error) {
	mu := launchLock(container)
	mu.Lock()
	defer mu.Unlock()
	hash := launchHash(argv, env, noCarry)
	st, err := vllmProcStatus(ctx, eng, container)
	if err != nil {
		return 0, false, engineError(addr, "vllm status in "+container, err)
	}
	if st.State == "running" {
		if !replace && st.Hash == hash {
			return st.PID, true, nil
		}
		// Another launch (a changed spec), or a forced replacement.
		if err := a.stopVLLM(ctx, eng, addr, container); err != nil {
			return 0, false, err
		}
		a.logger().Info("vllm replaced", zap.String("container", container), zap.Bool("forced", replace))
	}
	if len(noCarry) > 0 {
		tarball, err := nonCarryOverArchive(noCarry)
		if err != nil {
			return 0, false, err
		}
		if _, err := eng.CopyToContainer(ctx, container, client.CopyToContainerOptions{DestinationPath: "/", Content: bytes.NewReader(tarball)}); err != nil {
			return 0, false, engineError(addr, "write ray_non_carry_over_env_vars.json in "+container, err)
		}
	}
	if err := execDetached(ctx, eng, container, shScript(vllmLaunchScript, append([]string{hash}, argv...)...), env); err != nil {
		return 0, false, engineError(addr, "launch vllm in "+container, err)
	}
	// The wrapper records vLLM's pid at once; wait for it so the result names the process.
	for i := 0; i < 50; i++ {
		st, err := vllmProcStatus(ctx, eng, container)
		if err != nil {
			return 0, false, engineError(addr, "vllm status in "+container, err)
		}
		switch st.State {
		case "running":
			a.logger().Info("vllm launched", zap.String("container", container), zap.Int("pid", st.PID))
			return st.PID, false, nil
		case "exited":
			// Ended at once; the watch reads why.
			return 0, false, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, false, fmt.Errorf("vllm in %s: no process recorded 5 s after the launch", container)
}

// stopVLLM stops vLLM in the head's container (SIGTERM, then SIGKILL after the stop
// timeout) and reports whether one was running.
func (a *Node) stopVLLM(ctx context.Context, eng containerEngine, addr, head string) error {
	secs := max(int(a.containerOptions().StopTimeout.Seconds()), 1)
	r, err := execIn(ctx, eng, head, shScript(vllmStopScript, strconv.Itoa(secs)), nil)
	if err != nil {
		return engineError(addr, "stop vllm in "+head, err)
	}
	if r.ExitCode != 0 {
		return temporal.NewApplicationError(fmt.Sprintf("stop vllm in %s: exit %d: %s", head, r.ExitCode, strings.TrimSpace(r.Stderr)), contract.ErrDocker)
	}
	return nil
}

// RemoveContainers stops and removes the cluster's containers on this node (only the
// given roles, when set), found by their labels. vLLM goes first, stopped gracefully in
// the Ray head's container, then the workers, then the head. Nothing to remove is not an
// error.
func (a *Node) RemoveContainers(ctx context.Context, req contract.RemoveRequest) (contract.RemoveResult, error) {
	res := contract.RemoveResult{Node: a.Name, Removed: []string{}}
	if err := a.checkNode(req.Node); err != nil {
		return res, err
	}
	if c, err := a.signedRemoval(req.Intent); err != nil {
		return res, err
	} else if c != nil {
		if req.Cluster != c.Name {
			return res, a.deny("signed intent: a removal of cluster %s with the signed spec of cluster %s", req.Cluster, c.Name)
		}
		if err := a.signedDockerHost(c, req.DockerHost); err != nil {
			return res, err
		}
	}
	return a.removeCluster(ctx, req)
}

// removeCluster removes the cluster's containers on this node (RemoveContainers once the
// request is checked). The agent's own reconcile calls it directly: that removal is the
// agent's decision from Temporal's record, not a request anyone signed.
func (a *Node) removeCluster(ctx context.Context, req contract.RemoveRequest) (contract.RemoveResult, error) {
	res := contract.RemoveResult{Node: a.Name, Removed: []string{}}
	eng, addr, err := a.engine(req.DockerHost)
	if err != nil {
		return res, err
	}
	list, err := eng.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: a.clusterFilter(req.Cluster)})
	if err != nil {
		return res, engineError(addr, "list containers", err)
	}
	wants := func(role string) bool { return len(req.Roles) == 0 || slices.Contains(req.Roles, role) }
	if wants(contract.RoleVLLM) {
		for _, c := range list.Items {
			if c.Labels[LabelRole] != contract.RoleRayHead || c.State != "running" {
				continue
			}
			name := strings.TrimPrefix(c.Names[0], "/")
			st, err := vllmProcStatus(ctx, eng, name)
			if err != nil || st.State != "running" {
				continue // no vLLM there (or no shell to ask): stopping the container ends it
			}
			if err := a.stopVLLM(ctx, eng, addr, name); err != nil {
				return res, err
			}
			res.Removed = append(res.Removed, "vllm in "+name)
			a.logger().Info("vllm stopped", zap.String("container", name))
		}
	}
	// The workers before the head: the order a hand teardown would use. (A container of
	// role vllm is one an older tpdeploy ran vLLM in.)
	order := map[string]int{contract.RoleVLLM: 0, contract.RoleRayWorker: 1, contract.RoleRayHead: 2}
	sort.SliceStable(list.Items, func(i, j int) bool {
		return order[list.Items[i].Labels[LabelRole]] < order[list.Items[j].Labels[LabelRole]]
	})
	for _, c := range list.Items {
		if !wants(c.Labels[LabelRole]) {
			continue
		}
		if err := a.removeContainer(ctx, eng, addr, c.ID, a.containerOptions().StopTimeout); err != nil {
			return res, err
		}
		name := c.ID
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		res.Removed = append(res.Removed, name)
		a.logger().Info("container removed", zap.String("name", name))
	}
	return res, nil
}

// AddressHolds says whether the node's planned address is still on its planned
// interface, up: a link that flapped can come back renamed or renumbered (a hot-plugged
// NIC, a DHCP lease, a recreated bond), and then the plan's interface names and addresses
// (NCCL_SOCKET_IFNAME, --node-ip-address) are wrong although the node never rebooted.
func (a *Node) AddressHolds(ctx context.Context, req contract.AddressRequest) (contract.AddressCheck, error) {
	if err := a.checkNode(req.Node); err != nil {
		return contract.AddressCheck{}, err
	}
	h, err := a.netlinkHandle()
	if err != nil {
		return contract.AddressCheck{}, err
	}
	defer h.Close()
	links, err := a.links(h)
	if err != nil {
		return contract.AddressCheck{}, err
	}
	return addressHolds(links, req.Interface, req.Address), nil
}

// addressHolds decides AddressHolds from the node's links.
func addressHolds(links []netplan.Link, iface string, addr netip.Addr) contract.AddressCheck {
	var now []string
	for _, l := range links {
		for _, p := range l.Addrs {
			if p.Addr() == addr {
				if l.Name == iface {
					if !l.Up {
						return contract.AddressCheck{Detail: fmt.Sprintf("%s holds %s but is down (%s)", iface, addr, l.OperState)}
					}
					return contract.AddressCheck{Holds: true}
				}
				now = append(now, l.Name)
			}
		}
	}
	if len(now) > 0 {
		return contract.AddressCheck{Detail: fmt.Sprintf("%s is now on %s, not on the planned %s", addr, strings.Join(now, ", "), iface)}
	}
	for _, l := range links {
		if l.Name == iface {
			return contract.AddressCheck{Detail: fmt.Sprintf("%s no longer holds %s", iface, addr)}
		}
	}
	return contract.AddressCheck{Detail: fmt.Sprintf("%s is gone and no interface holds %s", iface, addr)}
}

// BootID reports the node's boot ID; the supervisor compares it to notice reboots.
func (a *Node) BootID(ctx context.Context, req contract.BootIDRequest) (string, error) {
	if err := a.checkNode(req.Node); err != nil {
		return "", err
	}
	return a.bootID()
}
