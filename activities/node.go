package activities

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/vishvananda/netns"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
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

	listeners listenerSet
	engines   engines
}

// checkNode refuses a task meant for another node: a mis-routed task must not act here.
func (a *Node) checkNode(node string) error {
	if node != a.Name {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("task for node %q reached the agent of node %q", node, a.Name), ErrWrongNode, nil)
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

// PreflightNode checks that the node's engine answers and holds the image; it never pulls
// (a multi-gigabyte pull belongs to the operator, and an implicit one hides a typo).
func (a *Node) PreflightNode(ctx context.Context, req PreflightRequest) (PreflightResult, error) {
	if err := a.checkNode(req.Node); err != nil {
		return PreflightResult{}, err
	}
	eng, addr, err := a.engines.engine(req.DockerHost)
	if err != nil {
		return PreflightResult{}, err
	}
	img, err := eng.ImageInspect(ctx, req.Image)
	if cerrdefs.IsNotFound(err) {
		return PreflightResult{}, imageMissing(req.Image)
	}
	if err != nil {
		return PreflightResult{}, engineError(addr, "inspect image "+req.Image, err)
	}
	return PreflightResult{Node: a.Name, ImageID: img.ID}, nil
}

// StartRayHead starts (or adopts) the Ray head container.
func (a *Node) StartRayHead(ctx context.Context, req StartRayRequest) (ContainerRef, error) {
	if err := a.checkNode(req.Node); err != nil {
		return ContainerRef{}, err
	}
	n, _ := req.Spec.Node(req.Node)
	return a.ensureContainer(ctx, n.DockerHost, rayHeadSpec(req, a.containerOptions()), req.Replace)
}

// StartRayWorker starts (or adopts) a Ray worker container joined to the head.
func (a *Node) StartRayWorker(ctx context.Context, req StartRayRequest) (ContainerRef, error) {
	if err := a.checkNode(req.Node); err != nil {
		return ContainerRef{}, err
	}
	n, _ := req.Spec.Node(req.Node)
	return a.ensureContainer(ctx, n.DockerHost, rayWorkerSpec(req, a.containerOptions()), req.Replace)
}

// LaunchVLLM starts (or adopts) the vLLM container on the head.
func (a *Node) LaunchVLLM(ctx context.Context, req LaunchRequest) (ContainerRef, error) {
	if err := a.checkNode(req.Node); err != nil {
		return ContainerRef{}, err
	}
	secrets, err := secretEnv(req.Spec.Secrets)
	if err != nil {
		return ContainerRef{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrBadRequest, nil)
	}
	n, _ := req.Spec.Node(req.Node)
	return a.ensureContainer(ctx, n.DockerHost, vllmSpec(req, a.containerOptions(), secrets), req.Replace)
}

// RemoveContainers stops and removes the cluster's containers on this node (only the
// given roles, when set), found by their labels. Nothing to remove is not an error.
func (a *Node) RemoveContainers(ctx context.Context, req RemoveRequest) (RemoveResult, error) {
	res := RemoveResult{Node: a.Name, Removed: []string{}}
	if err := a.checkNode(req.Node); err != nil {
		return res, err
	}
	eng, addr, err := a.engines.engine(req.DockerHost)
	if err != nil {
		return res, err
	}
	f := client.Filters{}
	f.Add("label", LabelCluster+"="+req.Cluster, LabelNode+"="+a.Name)
	list, err := eng.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return res, engineError(addr, "list containers", err)
	}
	// vLLM first, the Ray head last: the order a hand teardown would use.
	order := map[string]int{RoleVLLM: 0, RoleRayWorker: 1, RoleRayHead: 2}
	sort.SliceStable(list.Items, func(i, j int) bool {
		return order[list.Items[i].Labels[LabelRole]] < order[list.Items[j].Labels[LabelRole]]
	})
	for _, c := range list.Items {
		if len(req.Roles) > 0 && !slices.Contains(req.Roles, c.Labels[LabelRole]) {
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

// BootID reports the node's boot ID; the supervisor compares it to notice reboots.
func (a *Node) BootID(ctx context.Context, req BootIDRequest) (string, error) {
	if err := a.checkNode(req.Node); err != nil {
		return "", err
	}
	return a.bootID()
}
