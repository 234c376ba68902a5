package workflows

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/netplan"
	"github.com/tpdeploy/tpdeploy/spec"
)

// fakeAgents stands in for every node's agent: it answers the node activities from a
// seed-like topology, records each call as "Method node [detail]", and fails the calls
// a test asks it to.
type fakeAgents struct {
	mu    sync.Mutex
	calls []string
	// failures: "Method node" → the error every attempt returns.
	failures map[string]error
	// flaky: "Method node" → how many attempts fail (retryably) before success.
	flaky    map[string]int
	attempts map[string]int
	probes   map[string]netplan.NodeProbe
	// unreachable: "from>to" pairs whose dials fail.
	unreachable map[string]bool
	imageIDs    map[string]string
	// watchSteps are the progress reports WatchServing returns, one per call.
	watchSteps []activities.ServingProgress
	watchCalls int
	// blockWatch makes WatchServing wait for cancellation, heartbeating.
	blockWatch bool
	started    chan string // receives "Method node" when an activity starts, if set
}

func newFakeAgents() *fakeAgents {
	return &fakeAgents{
		failures:    map[string]error{},
		flaky:       map[string]int{},
		attempts:    map[string]int{},
		unreachable: map[string]bool{},
		imageIDs:    map[string]string{},
		probes: map[string]netplan.NodeProbe{
			"node-a": seedProbe("node-a", true),
			"node-b": seedProbe("node-b", false),
		},
		watchSteps: []activities.ServingProgress{
			{Phase: "loading", ShardsLoaded: 8, ShardsTotal: 39, Percent: 21},
			{Phase: "loading", ShardsLoaded: 39, ShardsTotal: 39, Percent: 100},
			{Phase: "serving", ShardsLoaded: 39, ShardsTotal: 39, Percent: 100, Serving: true},
		},
	}
}

// seedProbe is the seed's topology: node-a has the external NIC (default route) and the
// RoCE link; node-b only the RoCE link.
func seedProbe(node string, external bool) netplan.NodeProbe {
	p := netplan.NodeProbe{Node: node, Hostname: node, BootID: "boot-" + node, GPUs: 1, GPUSource: "spec"}
	p.Links = append(p.Links, netplan.Link{Name: "lo", Kind: "device", MTU: 65536, Up: true, Loopback: true,
		Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}})
	fast := map[string]string{"node-a": "192.168.200.12/24", "node-b": "192.168.200.13/24"}[node]
	p.Links = append(p.Links, netplan.Link{Name: "enp1s0f1np1", Kind: "device", MTU: 9000, Up: true, SpeedMbps: 200000,
		Addrs: []netip.Prefix{netip.MustParsePrefix(fast)}})
	if external {
		p.Links = append(p.Links, netplan.Link{Name: "enP7s7", Kind: "device", MTU: 1500, Up: true, SpeedMbps: 10000,
			Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.230.180/24")}})
		p.DefaultRoute = &netplan.DefaultRoute{Interface: "enP7s7", Source: netip.MustParseAddr("10.1.230.180")}
	}
	return p
}

func (f *fakeAgents) record(ctx context.Context, method, node, detail string) error {
	f.mu.Lock()
	key := method + " " + node
	call := key
	if detail != "" {
		call += " " + detail
	}
	f.calls = append(f.calls, call)
	f.attempts[key]++
	attempt := f.attempts[key]
	err := f.failures[key]
	flaky := f.flaky[key]
	started := f.started
	f.mu.Unlock()
	if started != nil {
		select {
		case started <- key:
		default:
		}
	}
	if err != nil {
		return err
	}
	if attempt <= flaky {
		return fmt.Errorf("%s: transient failure %d", key, attempt)
	}
	return nil
}

// callsOf returns the recorded calls of the given methods, in order.
func (f *fakeAgents) callsOf(methods ...string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		for _, m := range methods {
			if strings.HasPrefix(c, m+" ") {
				out = append(out, c)
			}
		}
	}
	return out
}

func (f *fakeAgents) attemptsOf(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts[key]
}

func (f *fakeAgents) ProbeNode(ctx context.Context, req activities.ProbeRequest) (netplan.NodeProbe, error) {
	if err := f.record(ctx, "ProbeNode", req.Node, ""); err != nil {
		return netplan.NodeProbe{}, err
	}
	p, ok := f.probes[req.Node]
	if !ok {
		return p, temporal.NewNonRetryableApplicationError("unknown node "+req.Node, activities.ErrWrongNode, nil)
	}
	return p, nil
}

func (f *fakeAgents) OpenProbeListeners(ctx context.Context, req activities.ListenRequest) (activities.ListenResult, error) {
	if err := f.record(ctx, "OpenProbeListeners", req.Node, ""); err != nil {
		return activities.ListenResult{}, err
	}
	res := activities.ListenResult{Token: "tok-" + req.Node}
	for i, a := range req.Addrs {
		res.Targets = append(res.Targets, netplan.Target{Node: req.Node, Subnet: a.Masked(), Addr: netip.AddrPortFrom(a.Addr(), uint16(40000+i))})
	}
	return res, nil
}

func (f *fakeAgents) DialPeers(ctx context.Context, req activities.DialRequest) ([]netplan.PairResult, error) {
	if err := f.record(ctx, "DialPeers", req.Node, ""); err != nil {
		return nil, err
	}
	var out []netplan.PairResult
	for _, t := range req.Targets {
		r := netplan.PairResult{From: req.Node, To: t.Node, Subnet: t.Subnet, Addr: t.Addr, OK: true, RTT: 100 * time.Microsecond}
		if f.unreachable[req.Node+">"+t.Node] {
			r.OK, r.RTT, r.Error = false, 0, "connect: network is unreachable"
		}
		out = append(out, r)
	}
	return out, nil
}

func (f *fakeAgents) CloseProbeListeners(ctx context.Context, req activities.CloseRequest) error {
	return f.record(ctx, "CloseProbeListeners", req.Node, "")
}

func (f *fakeAgents) PreflightNode(ctx context.Context, req activities.PreflightRequest) (activities.PreflightResult, error) {
	if err := f.record(ctx, "PreflightNode", req.Node, ""); err != nil {
		return activities.PreflightResult{}, err
	}
	id := f.imageIDs[req.Node]
	if id == "" {
		id = "sha256:1111111111111111"
	}
	return activities.PreflightResult{Node: req.Node, ImageID: id}, nil
}

func (f *fakeAgents) StartRayHead(ctx context.Context, req activities.StartRayRequest) (activities.ContainerRef, error) {
	if err := f.record(ctx, "StartRayHead", req.Node, req.Plan.Address.String()); err != nil {
		return activities.ContainerRef{}, err
	}
	return activities.ContainerRef{Node: req.Node, Role: activities.RoleRayHead, Name: "tpdeploy-" + req.Deployment.Cluster + "-ray-head", ID: "c-head"}, nil
}

func (f *fakeAgents) StartRayWorker(ctx context.Context, req activities.StartRayRequest) (activities.ContainerRef, error) {
	if err := f.record(ctx, "StartRayWorker", req.Node, req.Plan.Address.String()+" -> "+req.RayAddress); err != nil {
		return activities.ContainerRef{}, err
	}
	return activities.ContainerRef{Node: req.Node, Role: activities.RoleRayWorker, Name: "tpdeploy-" + req.Deployment.Cluster + "-ray-worker", ID: "c-" + req.Node}, nil
}

func (f *fakeAgents) CheckPlacement(ctx context.Context, req activities.PlacementRequest) (activities.PlacementReport, error) {
	if err := f.record(ctx, "CheckPlacement", req.Node, ""); err != nil {
		return activities.PlacementReport{}, err
	}
	return activities.PlacementReport{GPUs: float64(req.NeedGPUs)}, nil
}

func (f *fakeAgents) LaunchVLLM(ctx context.Context, req activities.LaunchRequest) (activities.ContainerRef, error) {
	if err := f.record(ctx, "LaunchVLLM", req.Node, ""); err != nil {
		return activities.ContainerRef{}, err
	}
	return activities.ContainerRef{Node: req.Node, Role: activities.RoleVLLM, Name: "tpdeploy-" + req.Deployment.Cluster + "-vllm", ID: "c-vllm"}, nil
}

func (f *fakeAgents) WatchServing(ctx context.Context, req activities.WatchRequest) (activities.ServingProgress, error) {
	if err := f.record(ctx, "WatchServing", req.Node, ""); err != nil {
		return activities.ServingProgress{}, err
	}
	if f.blockWatch {
		for {
			activity.RecordHeartbeat(ctx, req.Cursor)
			select {
			case <-ctx.Done():
				return activities.ServingProgress{}, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.watchSteps[min(f.watchCalls, len(f.watchSteps)-1)]
	f.watchCalls++
	return p, nil
}

func (f *fakeAgents) RemoveContainers(ctx context.Context, req activities.RemoveRequest) (activities.RemoveResult, error) {
	if err := f.record(ctx, "RemoveContainers", req.Node, strings.Join(req.Roles, ",")); err != nil {
		return activities.RemoveResult{}, err
	}
	return activities.RemoveResult{Node: req.Node}, nil
}

// agentDown is the error the server gives a task no agent picked up in time.
func agentDown() error {
	return temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
}

func seedSpec() spec.Cluster {
	return spec.Cluster{
		Name:     "seed",
		Image:    "vllm/vllm-openai:v0.17.0",
		Model:    spec.Model{Path: "Qwen/Qwen3.5-122B-A10B-FP8", ServedName: "qwen35"},
		Parallel: spec.Parallel{Tensor: 2},
		Nodes: []spec.Node{
			{Name: "node-a", Role: spec.RoleHead, GPUs: 1},
			{Name: "node-b", Role: spec.RoleWorker, GPUs: 1},
		},
	}.WithDefaults()
}
