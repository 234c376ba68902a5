package activities

import (
	"context"
	"fmt"
	"runtime"

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

	listeners listenerSet
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

func notImplemented() error {
	return temporal.NewNonRetryableApplicationError(
		"not implemented in this agent build (open issues: containers, serving, lab)", ErrNotImplemented, nil)
}

// PreflightNode checks the image is present on the node's engine.
func (a *Node) PreflightNode(ctx context.Context, req PreflightRequest) (PreflightResult, error) {
	if err := a.checkNode(req.Node); err != nil {
		return PreflightResult{}, err
	}
	return PreflightResult{}, notImplemented()
}

// StartRayHead starts (or adopts) the Ray head container.
func (a *Node) StartRayHead(ctx context.Context, req StartRayRequest) (ContainerRef, error) {
	if err := a.checkNode(req.Node); err != nil {
		return ContainerRef{}, err
	}
	return ContainerRef{}, notImplemented()
}

// StartRayWorker starts (or adopts) a Ray worker container joined to the head.
func (a *Node) StartRayWorker(ctx context.Context, req StartRayRequest) (ContainerRef, error) {
	if err := a.checkNode(req.Node); err != nil {
		return ContainerRef{}, err
	}
	return ContainerRef{}, notImplemented()
}

// CheckPlacement proves every planned node registered with Ray under its planned address.
func (a *Node) CheckPlacement(ctx context.Context, req PlacementRequest) (PlacementReport, error) {
	if err := a.checkNode(req.Node); err != nil {
		return PlacementReport{}, err
	}
	return PlacementReport{}, notImplemented()
}

// LaunchVLLM starts (or adopts) the vLLM container on the head.
func (a *Node) LaunchVLLM(ctx context.Context, req LaunchRequest) (ContainerRef, error) {
	if err := a.checkNode(req.Node); err != nil {
		return ContainerRef{}, err
	}
	return ContainerRef{}, notImplemented()
}

// WatchServing follows vLLM's output and health until it serves or ReportWithin passes.
func (a *Node) WatchServing(ctx context.Context, req WatchRequest) (ServingProgress, error) {
	if err := a.checkNode(req.Node); err != nil {
		return ServingProgress{}, err
	}
	return ServingProgress{}, notImplemented()
}

// RemoveContainers stops and removes the cluster's containers on this node.
func (a *Node) RemoveContainers(ctx context.Context, req RemoveRequest) (RemoveResult, error) {
	if err := a.checkNode(req.Node); err != nil {
		return RemoveResult{}, err
	}
	return RemoveResult{Node: a.Name}, notImplemented()
}
