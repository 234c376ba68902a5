// Package fakeagents stands in for every node's agent in workflow tests: Temporal's test
// suite and a real dev server alike. Its methods are the node activities; its helpers are
// functions, because every exported method of a registered struct becomes an activity.
package fakeagents

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/dataplane"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/release"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// Agents answers the node activities from a seed-like topology, records each call as
// "Method node [detail]", and fails the calls a test asks it to.
type Agents struct {
	mu    sync.Mutex
	calls []string
	// Failures: "Method node" → the error every attempt returns.
	Failures map[string]error
	// Flaky: "Method node" → how many attempts fail (retryably) before success.
	Flaky    map[string]int
	attempts map[string]int
	Probes   map[string]netplan.NodeProbe
	// Unreachable: "from>to" pairs whose dials fail.
	Unreachable map[string]bool
	// RefusedDials: "from>to" pairs whose dials are refused this many times (the peer's
	// listeners gone with a restarted agent).
	RefusedDials map[string]int
	ImageIDs     map[string]string
	// Images are what the nodes' image holds; a node not listed holds SeedImage (its ID
	// from ImageIDs when set there).
	Images map[string]release.Image
	// Proofs are what each node's data-plane proof reports; a node not listed reports
	// NCCL over IB on every HCA its plan names (Socket when it names none), the sum right.
	Proofs map[string]dataplane.Rank
	// ProofRequests are the data-plane proof requests received, in order.
	ProofRequests []contract.ProofRequest
	// ServerRequests and SyncRequests are the model servers opened and the copies asked
	// for, in order.
	ServerRequests []contract.OpenModelServerRequest
	SyncRequests   []contract.SyncModelRequest
	// copyKeys are the keys each node made (PrepareModelCopy), the last one per node.
	copyKeys map[string]string
	// WatchSteps are the progress reports WatchServing returns, one per call.
	WatchSteps []contract.ServingProgress
	WatchCalls int
	// BlockWatch makes WatchServing wait for cancellation, heartbeating.
	BlockWatch bool
	Started    chan string // receives "Method node" when an activity starts, if set
	// BootIDs are the nodes' boot IDs (default "boot-1").
	BootIDs map[string]string
	// GuardTrips: node → the message its memory guard's trip reports (none: no trip).
	GuardTrips map[string]string
	// TeardownBusy makes TeardownRunning report a running teardown.
	TeardownBusy bool
	// Serving is what ServingDeployment reports serves the cluster (none by default).
	Serving contract.ServingDeployment
	// Manifests are what the nodes hold of the model; a node not listed holds
	// SeedManifest.
	Manifests map[string]weights.Manifest
	// Hub is what the hub holds of a model.source: hub model (ResolveHubModel); nil
	// answers ModelNotFound. HubDownloads are the downloads asked for, in order.
	Hub          *contract.HubModel
	HubDownloads []contract.DownloadHubModelRequest
	// OnCall, if set, runs at the start of every call with its "Method node" key.
	OnCall func(key string)
	// Refuse, if set, is asked first by every acting call (containers, vLLM, model files,
	// removals) with its method, node and intent: an error refuses the call, as an agent
	// whose policy refuses the intent does (a test gives it package intent's checks).
	Refuse func(method, node string, in *contract.Intent) error
	// intents are the signed intents the acting calls carried, by "Method node" (nil for
	// an unsigned one), in order.
	intents map[string][]*contract.Intent
}

// Intents returns what the acting calls (containers, vLLM, model files, removals) carried
// as their signed intent: "Method node" → one entry per call, nil when unsigned.
func Intents(f *Agents) map[string][]*contract.Intent {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]*contract.Intent{}
	for k, v := range f.intents {
		out[k] = append([]*contract.Intent(nil), v...)
	}
	return out
}

// signed records the intent an acting call carried, and refuses the call when Refuse does.
func (f *Agents) signed(method, node string, in *contract.Intent) error {
	f.mu.Lock()
	if f.intents == nil {
		f.intents = map[string][]*contract.Intent{}
	}
	f.intents[method+" "+node] = append(f.intents[method+" "+node], in)
	refuse := f.Refuse
	f.mu.Unlock()
	if refuse != nil {
		if err := refuse(method, node, in); err != nil {
			f.mu.Lock()
			f.calls = append(f.calls, method+" "+node+" refused")
			f.mu.Unlock()
			return err
		}
	}
	return nil
}

// New returns agents for the seed topology where every call succeeds.
func New() *Agents {
	return &Agents{
		Failures:     map[string]error{},
		Flaky:        map[string]int{},
		attempts:     map[string]int{},
		Unreachable:  map[string]bool{},
		RefusedDials: map[string]int{},
		Manifests:    map[string]weights.Manifest{},
		ImageIDs:     map[string]string{},
		Images:       map[string]release.Image{},
		Proofs:       map[string]dataplane.Rank{},
		BootIDs:      map[string]string{},
		Probes: map[string]netplan.NodeProbe{
			"node-a": SeedProbe("node-a", true),
			"node-b": SeedProbe("node-b", false),
		},
		WatchSteps: []contract.ServingProgress{
			{Phase: "loading", ShardsLoaded: 8, ShardsTotal: 39, Percent: 21},
			{Phase: "loading", ShardsLoaded: 39, ShardsTotal: 39, Percent: 100},
			{Phase: "serving", ShardsLoaded: 39, ShardsTotal: 39, Percent: 100, Serving: true},
		},
	}
}

// SeedProbe is one node of the seed's topology: the head (external=true) has the external
// NIC with the default route and the RoCE link; a worker only the RoCE link.
func SeedProbe(node string, external bool) netplan.NodeProbe {
	p := netplan.NodeProbe{Node: node, Hostname: node, BootID: "boot-" + node, GPUs: 1, GPUSource: "spec"}
	p.Links = append(p.Links, netplan.Link{Name: "lo", Kind: "device", MTU: 65536, Up: true, Loopback: true,
		Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}})
	fast := "192.168.200.13/24"
	if external {
		fast = "192.168.200.12/24"
	}
	p.Links = append(p.Links, netplan.Link{Name: "enp1s0f1np1", Kind: "device", MTU: 9000, Up: true, SpeedMbps: 200000,
		Addrs: []netip.Prefix{netip.MustParsePrefix(fast)}})
	if external {
		p.Links = append(p.Links, netplan.Link{Name: "enP7s7", Kind: "device", MTU: 1500, Up: true, SpeedMbps: 10000,
			Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.230.180/24")}})
		p.DefaultRoute = &netplan.DefaultRoute{Interface: "enP7s7", Source: netip.MustParseAddr("10.1.230.180")}
	}
	return p
}

func (f *Agents) record(ctx context.Context, method, node, detail string) error {
	f.mu.Lock()
	key := method + " " + node
	call := key
	if detail != "" {
		call += " " + detail
	}
	f.calls = append(f.calls, call)
	f.attempts[key]++
	attempt := f.attempts[key]
	flaky := f.Flaky[key]
	started := f.Started
	onCall := f.OnCall
	f.mu.Unlock()
	if onCall != nil {
		onCall(key)
	}
	f.mu.Lock()
	err := f.Failures[key]
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

// SetFailure makes every later attempt of "Method node" return err (safe while activities
// run; a function, not a method, since every method of Agents is an activity).
func SetFailure(f *Agents, key string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.Failures, key)
		return
	}
	f.Failures[key] = err
}

// Calls returns the recorded calls of the given methods, in order.
func Calls(f *Agents, methods ...string) []string {
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

// Attempts is how often "Method node" was called.
func Attempts(f *Agents, key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts[key]
}

func (f *Agents) ProbeNode(ctx context.Context, req contract.ProbeRequest) (netplan.NodeProbe, error) {
	if err := f.record(ctx, "ProbeNode", req.Node, ""); err != nil {
		return netplan.NodeProbe{}, err
	}
	p, ok := f.Probes[req.Node]
	if !ok {
		return p, temporal.NewNonRetryableApplicationError("unknown node "+req.Node, contract.ErrWrongNode, nil)
	}
	return p, nil
}

func (f *Agents) OpenProbeListeners(ctx context.Context, req contract.ListenRequest) (contract.ListenResult, error) {
	if err := f.record(ctx, "OpenProbeListeners", req.Node, ""); err != nil {
		return contract.ListenResult{}, err
	}
	res := contract.ListenResult{Token: "tok-" + req.Node}
	for i, a := range req.Addrs {
		res.Targets = append(res.Targets, netplan.Target{Node: req.Node, Subnet: a.Masked(), Addr: netip.AddrPortFrom(a.Addr(), uint16(40000+i))})
	}
	return res, nil
}

func (f *Agents) DialPeers(ctx context.Context, req contract.DialRequest) ([]netplan.PairResult, error) {
	if err := f.record(ctx, "DialPeers", req.Node, ""); err != nil {
		return nil, err
	}
	var out []netplan.PairResult
	for _, t := range req.Targets {
		r := netplan.PairResult{From: req.Node, To: t.Node, Subnet: t.Subnet, Addr: t.Addr, OK: true, RTT: 100 * time.Microsecond}
		pair := req.Node + ">" + t.Node
		f.mu.Lock()
		refused := f.RefusedDials[pair] > 0
		if refused {
			f.RefusedDials[pair]--
		}
		f.mu.Unlock()
		switch {
		case f.Unreachable[pair]:
			r.OK, r.RTT, r.Error = false, 0, "connect: network is unreachable"
		case refused:
			r.OK, r.RTT, r.Error = false, 0, "connect: connection refused"
		}
		out = append(out, r)
	}
	return out, nil
}

func (f *Agents) CloseProbeListeners(ctx context.Context, req contract.CloseRequest) error {
	return f.record(ctx, "CloseProbeListeners", req.Node, "")
}

// SeedImage is the seed's image on a node: vLLM 0.17 with Ray (the legacy Ray executor).
func SeedImage(node string) release.Image {
	return release.Image{Node: node, Ref: "vllm/vllm-openai:v0.17.1", ID: "sha256:1111111111111111", VLLM: "0.17.1",
		Ray: "2.53.0", Torch: "2.10.0+cu129", NCCL: "2.27.5", Python: "3.12", RayBin: true, VLLMBin: true, Verbs: true}
}

func (f *Agents) ReadImage(ctx context.Context, req contract.ImageRequest) (release.Image, error) {
	if err := f.record(ctx, "ReadImage", req.Node, req.Image); err != nil {
		return release.Image{}, err
	}
	img, ok := f.Images[req.Node]
	if !ok {
		img = SeedImage(req.Node)
		if id := f.ImageIDs[req.Node]; id != "" {
			img.ID = id
		}
	}
	img.Node, img.Ref = req.Node, req.Image
	return img, nil
}

// SeedRDMA gives a seed node's fast link an HCA, as the seed's RoCE link has.
func SeedRDMA(p netplan.NodeProbe) netplan.NodeProbe {
	p.RDMA = []netplan.RDMADevice{{Name: "rocep1s0f1", Port: 1, Netdev: "enp1s0f1np1", State: "ACTIVE", LinkLayer: "Ethernet", RateMbps: 200000, UVerbs: "uverbs0"}}
	return p
}

func (f *Agents) ProveDataPlane(ctx context.Context, req contract.ProofRequest) (contract.ProofResult, error) {
	if err := f.record(ctx, "ProveDataPlane", req.Node, req.Master); err != nil {
		return contract.ProofResult{}, err
	}
	if err := f.signed("ProveDataPlane", req.Node, req.Intent); err != nil {
		return contract.ProofResult{}, err
	}
	f.mu.Lock()
	f.ProofRequests = append(f.ProofRequests, req)
	f.mu.Unlock()
	r, ok := f.Proofs[req.Node]
	if !ok {
		r = dataplane.Rank{Rank: req.Rank, World: req.World, Transport: "Socket", Finished: true, SumOK: true, Memlock: "unlimited", BusBW: 1.2}
		for _, d := range req.Plan.RDMA {
			r.Transport, r.LinkLayer = "IB", "RoCE"
			r.HCAs = append(r.HCAs, d.HCA())
			r.UVerbs = append(r.UVerbs, d.UVerbs)
			r.BusBW = 23.7
		}
		if req.World > 1 { // NCCL's ring: each rank sends to the next
			r.Peers = []dataplane.Peer{{Rank: (req.Rank + 1) % req.World, Transport: r.Transport}}
		}
	}
	n := dataplane.Node{Node: req.Node, Rank: req.Rank, Output: r}
	for _, d := range req.Plan.RDMA {
		n.HCAs = append(n.HCAs, d.HCA())
		n.Mapped = append(n.Mapped, "/dev/infiniband/"+d.UVerbs)
	}
	return contract.ProofResult{Rank: n}, nil
}

func (f *Agents) PreflightNode(ctx context.Context, req contract.PreflightRequest) (contract.PreflightResult, error) {
	if err := f.signed("PreflightNode", req.Node, req.Intent); err != nil {
		return contract.PreflightResult{}, err
	}
	if err := f.record(ctx, "PreflightNode", req.Node, ""); err != nil {
		return contract.PreflightResult{}, err
	}
	id := f.ImageIDs[req.Node]
	if id == "" {
		id = "sha256:1111111111111111"
	}
	return contract.PreflightResult{Node: req.Node, ImageID: id}, nil
}

func (f *Agents) StartRayHead(ctx context.Context, req contract.StartRayRequest) (contract.ContainerRef, error) {
	if err := f.signed("StartRayHead", req.Node, req.Intent); err != nil {
		return contract.ContainerRef{}, err
	}
	if err := f.record(ctx, "StartRayHead", req.Node, req.Plan.Address.String()); err != nil {
		return contract.ContainerRef{}, err
	}
	return contract.ContainerRef{Node: req.Node, Role: contract.RoleRayHead, Name: "tpdeploy-" + req.Deployment.Cluster + "-ray-head", ID: "c-head"}, nil
}

func (f *Agents) StartRayWorker(ctx context.Context, req contract.StartRayRequest) (contract.ContainerRef, error) {
	if err := f.signed("StartRayWorker", req.Node, req.Intent); err != nil {
		return contract.ContainerRef{}, err
	}
	if err := f.record(ctx, "StartRayWorker", req.Node, req.Plan.Address.String()+" -> "+req.RayAddress); err != nil {
		return contract.ContainerRef{}, err
	}
	return contract.ContainerRef{Node: req.Node, Role: contract.RoleRayWorker, Name: "tpdeploy-" + req.Deployment.Cluster + "-ray-worker", ID: "c-" + req.Node}, nil
}

func (f *Agents) CheckPlacement(ctx context.Context, req contract.PlacementRequest) (contract.PlacementReport, error) {
	if err := f.record(ctx, "CheckPlacement", req.Node, ""); err != nil {
		return contract.PlacementReport{}, err
	}
	return contract.PlacementReport{GPUs: float64(req.NeedGPUs)}, nil
}

func (f *Agents) LaunchVLLM(ctx context.Context, req contract.LaunchRequest) (contract.ContainerRef, error) {
	detail := ""
	if req.Replace {
		detail = "replace"
	}
	if err := f.signed("LaunchVLLM", req.Node, req.Intent); err != nil {
		return contract.ContainerRef{}, err
	}
	if err := f.record(ctx, "LaunchVLLM", req.Node, detail); err != nil {
		return contract.ContainerRef{}, err
	}
	return contract.ContainerRef{Node: req.Node, Role: contract.RoleVLLM, Name: "tpdeploy-" + req.Deployment.Cluster + "-vllm", ID: "c-vllm"}, nil
}

func (f *Agents) WatchServing(ctx context.Context, req contract.WatchRequest) (contract.ServingProgress, error) {
	if err := f.signed("WatchServing", req.Node, req.Intent); err != nil {
		return contract.ServingProgress{}, err
	}
	if req.Headless {
		// A headless rank's watch: it fails as a test says ("WatchServing node-b headless"),
		// else reports that the rank is still up.
		if err := f.record(ctx, "WatchServing", req.Node, "headless"); err != nil {
			return contract.ServingProgress{}, err
		}
		select {
		case <-ctx.Done():
			return req.Cursor, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		return req.Cursor, nil
	}
	if err := f.record(ctx, "WatchServing", req.Node, ""); err != nil {
		return contract.ServingProgress{}, err
	}
	for blocked(f) {
		activity.RecordHeartbeat(ctx, req.Cursor)
		select {
		case <-ctx.Done():
			return contract.ServingProgress{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.WatchSteps[min(f.WatchCalls, len(f.WatchSteps)-1)]
	f.WatchCalls++
	return p, nil
}

// PrepareMaster opens a "listener" on the head's planned address and the master port.
func (f *Agents) PrepareMaster(ctx context.Context, req contract.RankRequest) (contract.MasterCheck, error) {
	if err := f.signed("PrepareMaster", req.Node, req.Intent); err != nil {
		return contract.MasterCheck{}, err
	}
	if err := f.record(ctx, "PrepareMaster", req.Node, ""); err != nil {
		return contract.MasterCheck{}, err
	}
	np, _ := req.Plan.Node(req.Node)
	return contract.MasterCheck{Listen: contract.ListenResult{Token: "master", Targets: []netplan.Target{{
		Node: req.Node, Addr: netip.AddrPortFrom(np.Address, uint16(req.Spec.Ports.MasterPort())), Subnet: req.Plan.Subnet}}}}, nil
}

// StartVLLMRank "starts" the node's vLLM container for its rank.
func (f *Agents) StartVLLMRank(ctx context.Context, req contract.RankRequest) (contract.ContainerRef, error) {
	if err := f.signed("StartVLLMRank", req.Node, req.Intent); err != nil {
		return contract.ContainerRef{}, err
	}
	if err := f.record(ctx, "StartVLLMRank", req.Node, fmt.Sprintf("rank=%d replace=%v", req.Rank, req.Replace)); err != nil {
		return contract.ContainerRef{}, err
	}
	return contract.ContainerRef{Node: req.Node, Role: contract.RoleVLLM, Name: contract.ContainerName(req.Spec.Name, req.Node, contract.RoleVLLM), ID: "ctr-" + req.Node}, nil
}

func (f *Agents) RemoveContainers(ctx context.Context, req contract.RemoveRequest) (contract.RemoveResult, error) {
	if err := f.signed("RemoveContainers", req.Node, req.Intent); err != nil {
		return contract.RemoveResult{}, err
	}
	if err := f.record(ctx, "RemoveContainers", req.Node, strings.Join(req.Roles, ",")); err != nil {
		return contract.RemoveResult{}, err
	}
	return contract.RemoveResult{Node: req.Node}, nil
}

func blocked(f *Agents) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.BlockWatch
}

// AgentDown is the error the server gives a task no agent picked up in time.
func AgentDown() error {
	return temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
}

// SeedSpec is the seed cluster: node-a head, node-b worker, TP=2.
func SeedSpec() spec.Cluster {
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

func (f *Agents) RayNodesAlive(ctx context.Context, req contract.PlacementRequest) (contract.PlacementReport, error) {
	if err := f.record(ctx, "RayNodesAlive", req.Node, ""); err != nil {
		return contract.PlacementReport{}, err
	}
	return contract.PlacementReport{GPUs: float64(req.NeedGPUs)}, nil
}

func (f *Agents) BootID(ctx context.Context, req contract.BootIDRequest) (string, error) {
	if err := f.record(ctx, "BootID", req.Node, ""); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if id := f.BootIDs[req.Node]; id != "" {
		return id, nil
	}
	return "boot-" + req.Node, nil // what SeedProbe reports
}

// GuardTrip answers whether the node's memory guard stopped the cluster's engines.
func (f *Agents) GuardTrip(ctx context.Context, req contract.GuardTripRequest) (contract.GuardTrip, error) {
	if err := f.record(ctx, "GuardTrip", req.Node, ""); err != nil {
		return contract.GuardTrip{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.GuardTrips[req.Node]; m != "" {
		return contract.GuardTrip{Tripped: true, Message: m}, nil
	}
	return contract.GuardTrip{}, nil
}

// LastOutput answers what a node's containers printed last: one line naming the node.
func (f *Agents) LastOutput(ctx context.Context, req contract.LastOutputRequest) (string, error) {
	if err := f.record(ctx, "LastOutput", req.Node, ""); err != nil {
		return "", err
	}
	return "== tpd_" + req.Cluster + "_" + req.Node + " (running)\nlast line on " + req.Node + "\n", nil
}

// AddressHolds answers from the node's current probe: the planned address on the planned
// interface.
func (f *Agents) AddressHolds(ctx context.Context, req contract.AddressRequest) (contract.AddressCheck, error) {
	if err := f.record(ctx, "AddressHolds", req.Node, ""); err != nil {
		return contract.AddressCheck{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.Probes[req.Node].Links {
		for _, a := range l.Addrs {
			if a.Addr() == req.Address && l.Name == req.Interface {
				return contract.AddressCheck{Holds: true}, nil
			}
			if a.Addr() == req.Address {
				return contract.AddressCheck{Detail: fmt.Sprintf("%s is now on %s, not on the planned %s", req.Address, l.Name, req.Interface)}, nil
			}
		}
	}
	return contract.AddressCheck{Detail: fmt.Sprintf("no interface holds %s", req.Address)}, nil
}

// SeedManifest is a complete three-shard model as a Hugging Face snapshot.
func SeedManifest() weights.Manifest {
	return weights.Manifest{Source: "Qwen/Qwen3.5-122B-A10B-FP8", Revision: "0123456789abcdef0123456789abcdef01234567",
		Dir: "/root/.cache/huggingface/hub/models--Qwen--Qwen3.5-122B-A10B-FP8/snapshots/0123456789abcdef0123456789abcdef01234567",
		Files: []weights.File{{Name: "config.json", Size: 700}, {Name: "model-00001-of-00003.safetensors", Size: 4_900_000_000},
			{Name: "model-00002-of-00003.safetensors", Size: 4_900_000_000}, {Name: "model-00003-of-00003.safetensors", Size: 1_200_000_000},
			{Name: "model.safetensors.index.json", Size: 30_000}}}
}

// ModelManifest answers with the node's manifest, the files req.Hash names hashed
// (FakeSHA256).
func (f *Agents) ModelManifest(ctx context.Context, req contract.ModelManifestRequest) (weights.Manifest, error) {
	if err := f.record(ctx, "ModelManifest", req.Node, strings.Join(req.Hash, ",")); err != nil {
		return weights.Manifest{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.Manifests[req.Node]
	if !ok {
		m = SeedManifest()
	}
	m.Files = append([]weights.File(nil), m.Files...)
	for i, file := range m.Files {
		if slices.Contains(req.Hash, file.Name) {
			m.Files[i].SHA256 = FakeSHA256(file.Name)
		}
	}
	return m, nil
}

// ResolveHubModel answers with Hub.
func (f *Agents) ResolveHubModel(ctx context.Context, req contract.ResolveHubModelRequest) (contract.HubModel, error) {
	if err := f.record(ctx, "ResolveHubModel", req.Node, req.Repo+"@"+req.Revision); err != nil {
		return contract.HubModel{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Hub == nil || f.Hub.Repo != req.Repo {
		return contract.HubModel{}, temporal.NewNonRetryableApplicationError("no repository "+req.Repo+" on the hub", contract.ErrModelNotFound, nil)
	}
	h := *f.Hub
	h.Revision = req.Revision
	return h, nil
}

// DownloadHubModel "downloads" the files: the node's manifest then holds Hub's commit.
func (f *Agents) DownloadHubModel(ctx context.Context, req contract.DownloadHubModelRequest) (contract.SyncResult, error) {
	if err := f.signed("DownloadHubModel", req.Node, req.Intent); err != nil {
		return contract.SyncResult{}, err
	}
	if err := f.record(ctx, "DownloadHubModel", req.Node, req.Commit); err != nil {
		return contract.SyncResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.HubDownloads = append(f.HubDownloads, req)
	res := contract.SyncResult{Seconds: 1}
	for _, file := range req.Files {
		res.Bytes += file.Size
		res.Copied = append(res.Copied, file.Name)
	}
	if f.Manifests == nil {
		f.Manifests = map[string]weights.Manifest{}
	}
	f.Manifests[req.Node] = weights.Manifest{Source: req.Repo, Revision: req.Commit, Dir: req.Root, Files: append([]weights.File(nil), f.Hub.Files...)}
	return res, nil
}

// FakeSHA256 is the sha256 the fake agents report for a file they were asked to hash.
func FakeSHA256(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}

// PrepareModelCopy makes a key for the node's copy, as an agent does (its value says which
// node and how many keys before).
func (f *Agents) PrepareModelCopy(ctx context.Context, req contract.PrepareModelCopyRequest) (contract.ModelCopyKey, error) {
	if err := f.signed("PrepareModelCopy", req.Node, req.Intent); err != nil {
		return contract.ModelCopyKey{}, err
	}
	if err := f.record(ctx, "PrepareModelCopy", req.Node, req.Root); err != nil {
		return contract.ModelCopyKey{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.copyKeys == nil {
		f.copyKeys = map[string]string{}
	}
	key := FakeSHA256(fmt.Sprintf("copy key %d of %s", len(f.copyKeys), req.Node))
	f.copyKeys[req.Node] = key
	return contract.ModelCopyKey{Key: key}, nil
}

func (f *Agents) OpenModelServer(ctx context.Context, req contract.OpenModelServerRequest) (contract.ModelServer, error) {
	if err := f.signed("OpenModelServer", req.Node, req.Intent); err != nil {
		return contract.ModelServer{}, err
	}
	if err := f.record(ctx, "OpenModelServer", req.Node, strings.Join(req.Files, ",")); err != nil {
		return contract.ModelServer{}, err
	}
	f.mu.Lock()
	f.ServerRequests = append(f.ServerRequests, req)
	f.mu.Unlock()
	return contract.ModelServer{Addr: netip.AddrPortFrom(req.Addr, 40000), ID: "server-1"}, nil
}

func (f *Agents) CloseModelServer(ctx context.Context, req contract.CloseModelServerRequest) error {
	return f.record(ctx, "CloseModelServer", req.Node, "")
}

// SyncModel "copies" the files: the node's manifest then holds them.
func (f *Agents) SyncModel(ctx context.Context, req contract.SyncModelRequest) (contract.SyncResult, error) {
	if err := f.signed("SyncModel", req.Node, req.Intent); err != nil {
		return contract.SyncResult{}, err
	}
	if err := f.record(ctx, "SyncModel", req.Node, req.Root); err != nil {
		return contract.SyncResult{}, err
	}
	f.mu.Lock()
	f.SyncRequests = append(f.SyncRequests, req)
	key := f.copyKeys[req.Node]
	f.mu.Unlock()
	res := contract.SyncResult{Seconds: 1}
	if req.Key == "" || req.Key != key { // as an agent holds only the keys it made
		return res, temporal.NewNonRetryableApplicationError(req.Node+" holds no copy key "+req.Key, contract.ErrModelServerGone, nil)
	}
	for _, file := range req.Files {
		if !file.Hashed() { // as an agent refuses it (transfer.ErrUnverifiable)
			return res, temporal.NewNonRetryableApplicationError("copy "+file.Name+": no sha256 or blob id to verify it by", contract.ErrBadRequest, nil)
		}
	}
	for _, file := range req.Files {
		res.Bytes += file.Size
		res.Copied = append(res.Copied, file.Name)
	}
	res.MBps = float64(res.Bytes) / 1e6
	f.mu.Lock()
	delete(f.Manifests, req.Node)
	f.mu.Unlock()
	return res, nil
}

func (f *Agents) RemovePartialModel(ctx context.Context, req contract.RemovePartialModelRequest) (contract.RemovePartialModelResult, error) {
	if err := f.signed("RemovePartialModel", req.Node, req.Intent); err != nil {
		return contract.RemovePartialModelResult{}, err
	}
	return contract.RemovePartialModelResult{}, f.record(ctx, "RemovePartialModel", req.Node, req.Root)
}

// SetManifest makes m what node holds of the model from now on (safe while a workflow
// runs).
func SetManifest(f *Agents, node string, m weights.Manifest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Manifests[node] = m
}

// RenameLink renames one of a node's links, as a link that came back under another name.
func RenameLink(f *Agents, node, from, to string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.Probes[node]
	p.Links = append([]netplan.Link(nil), p.Links...)
	for i := range p.Links {
		if p.Links[i].Name == from {
			p.Links[i].Name = to
		}
	}
	f.Probes[node] = p
}

// TeardownRunning answers for the operations activities every agent serves on the
// workflow queue: no teardown runs unless a test says so ("TeardownRunning <cluster>").
func (f *Agents) TeardownRunning(ctx context.Context, req contract.ClusterRequest) (contract.ClusterBusy, error) {
	if err := f.record(ctx, "TeardownRunning", req.Cluster, ""); err != nil {
		return contract.ClusterBusy{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.TeardownBusy {
		return contract.ClusterBusy{Running: true, WorkflowID: contract.TeardownWorkflowID(req.Cluster), RunID: "run-t"}, nil
	}
	return contract.ClusterBusy{}, nil
}

// ServingDeployment answers which deployment serves the cluster: Serving. The call
// records the task queue it was asked on (a keyed spec's went to its head's agent before
// the checks were split) and, when asked unchecked, hands the serving run on as a Target
// (a keyed spec's, for the head's CheckTarget).
func (f *Agents) ServingDeployment(ctx context.Context, req contract.ServingRequest) (contract.ServingDeployment, error) {
	detail := "on " + activity.GetInfo(ctx).TaskQueue
	if req.Unchecked {
		detail += " unchecked"
	}
	if err := f.record(ctx, "ServingDeployment", req.Cluster, detail); err != nil {
		return contract.ServingDeployment{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	srv := f.Serving
	if req.Unchecked && srv.Serves() {
		srv.Target = &contract.CheckTarget{DeploymentCheck: contract.DeploymentCheck{Exists: true, RunID: srv.RunID, Closed: "Completed",
			SpecHash: srv.SpecHash, Endpoint: srv.Endpoint, Plan: &netplan.Plan{}}}
	}
	return srv, nil
}

// CheckTarget checks a run the controller read: healthy, unless a test fails
// "CheckTarget RUN"; the call records the queue it was asked on.
func (f *Agents) CheckTarget(ctx context.Context, t contract.CheckTarget) (contract.DeploymentCheck, error) {
	if err := f.record(ctx, "CheckTarget", t.RunID, "on "+activity.GetInfo(ctx).TaskQueue); err != nil {
		return contract.DeploymentCheck{}, err
	}
	chk := t.DeploymentCheck
	chk.Healthy = t.Exists && !t.Running && t.Plan != nil
	return chk, nil
}

func (f *Agents) PauseSchedule(ctx context.Context, req contract.PauseRequest) (string, error) {
	if err := f.record(ctx, "PauseSchedule", req.Cluster, ""); err != nil {
		return "", err
	}
	return "no schedule", nil
}

func (f *Agents) WaitClosed(ctx context.Context, req contract.WaitRequest) (string, error) {
	if err := f.record(ctx, "WaitClosed", req.WorkflowID, ""); err != nil {
		return "", err
	}
	return "not found", nil
}

// Reboot gives a node a new boot ID: its probe and its BootID answer report it.
func Reboot(f *Agents, node, bootID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.Probes[node]
	p.BootID = bootID
	f.Probes[node] = p
	f.BootIDs[node] = bootID
	f.BlockWatch = false
}

// EnsureRouter pretends to start the fleet's router at the request's address, port 8080.
func (f *Agents) EnsureRouter(ctx context.Context, req contract.EnsureRouterRequest) (contract.RouterRef, error) {
	if err := f.signed("EnsureRouter", req.Node, req.Intent); err != nil {
		return contract.RouterRef{}, err
	}
	if err := f.record(ctx, "EnsureRouter", req.Node, req.Address.String()); err != nil {
		return contract.RouterRef{}, err
	}
	return contract.RouterRef{Endpoint: "http://" + req.Address.String() + ":8080"}, nil
}

// SetRoute records the cluster's route.
func (f *Agents) SetRoute(ctx context.Context, req contract.RouteRequest) (contract.RouteResult, error) {
	if err := f.signed("SetRoute", req.Node, req.Intent); err != nil {
		return contract.RouteResult{}, err
	}
	return contract.RouteResult{Models: []string{req.Spec.Model.ServedName}}, f.record(ctx, "SetRoute", req.Node, req.Spec.Name+" "+req.Endpoint+map[bool]string{true: " down"}[req.Down])
}

// DrainRoute records the drain of the cluster's old route.
func (f *Agents) DrainRoute(ctx context.Context, req contract.RouteRequest) (contract.RouteResult, error) {
	if err := f.signed("DrainRoute", req.Node, req.Intent); err != nil {
		return contract.RouteResult{}, err
	}
	return contract.RouteResult{}, f.record(ctx, "DrainRoute", req.Node, req.Spec.Name+" "+req.Endpoint)
}
