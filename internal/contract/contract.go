// Package contract is what tpdeploy's workflows and its node agents agree on: task queue
// names, activity names, their requests and results, and the error types operators'
// scripts branch on. It holds no implementation, so the workflows compile without the
// Docker client or netlink (the agent's activities implement it).
package contract

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/dataplane"
	"github.com/tpdeploy/tpdeploy/internal/failure"
	"github.com/tpdeploy/tpdeploy/internal/hostmem"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/release"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// WorkflowQueue is the task queue the workflows run on.
const WorkflowQueue = "tpdeploy"

// NodeQueue is the task queue served by the named node's agent.
func NodeQueue(node string) string { return "tpdeploy.node." + node }

// Error types of application errors: workflows branch on them, the starter prints them,
// and operators' scripts match them. Each is declared once, with its meaning and whether
// it is retryable, in package internal/failure (failure.All); these are its names here.
const (
	ErrWrongNode          = failure.WrongNode
	ErrBadRequest         = failure.BadRequest
	ErrNotImplemented     = failure.NotImplemented
	ErrNodeAgentDown      = failure.NodeAgentUnreachable
	ErrDockerUnreachable  = failure.DockerUnreachable
	ErrDocker             = failure.DockerError
	ErrImageMissing       = failure.ImageMissing
	ErrImageMismatch      = failure.ImageMismatch
	ErrNoViableSubnet     = failure.NoViableSubnet
	ErrInsufficientGPUs   = failure.InsufficientGPUs
	ErrPlacementMismatch  = failure.PlacementMismatch
	ErrDuplicateAddress   = failure.DuplicateAddress
	ErrNodeNotRegistered  = failure.NodeNotRegistered
	ErrPlacementPending   = failure.PlacementGroupPending
	ErrC10dUnreachable    = failure.C10dUnreachable
	ErrNCCLNoInterface    = failure.NCCLNoInterface
	ErrNCCL               = failure.NCCLError
	ErrGlooLoopback       = failure.GlooLoopback
	ErrCUDAOutOfMemory    = failure.CUDAOutOfMemory
	ErrEngineDead         = failure.EngineDead
	ErrGCSUnreachable     = failure.GCSUnreachable
	ErrModelUnsupported   = failure.ModelUnsupported
	ErrModelUnavailable   = failure.ModelUnavailable
	ErrModelNotFound      = failure.ModelNotFound
	ErrModelGated         = failure.ModelGated
	ErrModelOffline       = failure.ModelOffline
	ErrDiskInsufficient   = failure.DiskInsufficient
	ErrGPUsNotVisible     = failure.GPUsNotVisible
	ErrCollectiveTimeout  = failure.CollectiveTimeout
	ErrKVCacheTooSmall    = failure.KVCacheTooSmall
	ErrParallelLayout     = failure.InvalidParallelLayout
	ErrGlooNoInterface    = failure.GlooNoInterface
	ErrResourcesBusy      = failure.ResourcesBusy
	ErrGPUsInUse          = failure.GPUsInUse
	ErrPortInUse          = failure.PortInUse
	ErrRayDriverAttach    = failure.RayDriverAttach
	ErrVersionMismatch    = failure.VersionMismatch
	ErrRayUnreachable     = failure.RayGCSUnreachable
	ErrRayAuthRequired    = failure.RayAuthRequired
	ErrEphemeralBlocked   = failure.EphemeralPortsBlocked
	ErrRayNodeDead        = failure.RayNodeDead
	ErrContainerExited    = failure.ContainerExited
	ErrVLLMExited         = failure.VLLMExited
	ErrPolicyDenied       = failure.PolicyDenied
	ErrDataPlaneDegraded  = failure.DataPlaneDegraded
	ErrDataPlaneFailed    = failure.DataPlaneFailed
	ErrStepTimeout        = failure.StepTimeout
	ErrRetriesExhausted   = failure.RetriesExhausted
	ErrCanceled           = failure.Canceled
	ErrCompensationFailed = failure.CompensationFailed
	ErrHostMemory         = failure.HostMemoryInsufficient
	ErrLoadStalled        = failure.LoadStalled
	ErrHostMemoryPressure = failure.HostMemoryPressure

	// Raised by the workflows themselves, not by an activity.
	ErrSpecInvalid     = failure.SpecInvalid
	ErrWrongWorkflowID = failure.WrongWorkflowID
	ErrClusterBusy     = failure.ClusterBusy
	ErrNodeDown        = failure.NodeDown
	ErrNodeRebooted    = failure.NodeRebooted
	ErrNetworkChanged  = failure.NetworkChanged
	ErrInternal        = failure.Internal
	// ErrWorkflowFailed is how control.Reason reports a run that failed without an
	// application error.
	ErrWorkflowFailed = failure.Failed
)

// ErrDataPlaneUnreachable: the measured links between the nodes' HCAs cannot carry the
// parallel layout (netplan refuses it, naming the pairs with no link).
const ErrDataPlaneUnreachable = failure.DataPlaneUnreachable

// Container roles, also the role label on containers.
const (
	RoleRayHead   = "ray-head"
	RoleRayWorker = "ray-worker"
	RoleVLLM      = "vllm"
	// RoleProof is the one-shot container of the data-plane proof (executor mp).
	RoleProof = "proof"
)

// Intent is an operator's signed spec (package intent): the spec's canonical JSON
// (spec.Cluster.Canonical of the defaulted spec, as `starter` read it) and its ed25519
// signature by the key KeyID names. A deploy carries it unchanged in every request that
// makes an agent act (containers, vLLM, model files, removals); an agent whose policy sets
// trusted_keys verifies it and acts only on what the signed spec says.
//
// SignedAt and NotAfter are signed with the spec: when the operator signed it (whole
// seconds, UTC), and, when set, the instant after which no agent acts on it (`starter
// --sign-valid-for`). A node's policy may refuse intents signed before a time
// (intents_not_before), which revokes every older one. An intent without SignedAt is of
// the first format, which signed the spec alone.
type Intent struct {
	Spec     []byte    `json:"spec"`
	KeyID    string    `json:"key_id"`
	Sig      []byte    `json:"sig"`
	SignedAt time.Time `json:"signed_at,omitzero"`
	NotAfter time.Time `json:"not_after,omitzero"`
	// PublicKey is the signer's ed25519 public key, outside the signed bytes: agents
	// ignore it (they verify with their own trusted_keys); a supervisor takes the key of
	// the signed spec it is started with, once the signature verifies with it, and holds
	// every later deployed signal to it (workflows/supervise.go).
	PublicKey []byte `json:"public_key,omitempty"`
}

// ProbeRequest asks a node agent to describe its node.
type ProbeRequest struct {
	Node string `json:"node"`
	// SpecGPUs is the spec's count, used when detection finds none.
	SpecGPUs   int    `json:"spec_gpus"`
	DockerHost string `json:"docker_host"`
	// UnifiedMemory is the spec's nodes[].unified_memory: when set, it replaces what the
	// agent finds of whether the GPUs compute in host memory.
	UnifiedMemory *bool `json:"unified_memory,omitempty"`
}

// ListenRequest asks a node to open short-lived reachability listeners.
type ListenRequest struct {
	Node string `json:"node"`
	// Addrs are the node's candidate addresses with their prefix length (the subnet).
	Addrs []netip.Prefix `json:"addrs"`
	// Port, when set, is the port to listen on (a service's own port, e.g. the mp master
	// port); 0 is an ephemeral one.
	Port int `json:"port,omitempty"`
	// TTL closes the listeners by itself if the close never arrives.
	TTL time.Duration `json:"ttl"`
	// Ephemeral also opens, on each address, a listener on a port the kernel picks from
	// the node's ephemeral range (ip_local_port_range), as vLLM's ZMQ sockets bind, and
	// puts the other (Port 0) below that range, so that a firewall dropping the range is
	// told from a missing route (netplan.CheckEphemeral).
	Ephemeral bool `json:"ephemeral,omitempty"`
}

// ListenResult is the listeners a node opened, and the token that closes them.
type ListenResult struct {
	Token   string           `json:"token"`
	Targets []netplan.Target `json:"targets"`
}

// DialRequest asks a node to dial every target from its own network namespace.
type DialRequest struct {
	Node    string           `json:"node"`
	Targets []netplan.Target `json:"targets"`
	Timeout time.Duration    `json:"timeout"`
}

// CloseRequest closes listeners opened by OpenProbeListeners.
type CloseRequest struct {
	Node  string `json:"node"`
	Token string `json:"token"`
}

// Deployment identifies what containers belong to.
type Deployment struct {
	Cluster string `json:"cluster"`
	ID      string `json:"id"`
	// SpecHash lets an identical container be adopted instead of replaced.
	SpecHash string `json:"spec_hash"`
}

// PreflightRequest checks a node before anything starts on it.
type PreflightRequest struct {
	Node       string `json:"node"`
	DockerHost string `json:"docker_host"`
	Image      string `json:"image"`
	// Spec, when given, is checked against the node's policy as a whole.
	Spec *spec.Cluster `json:"spec,omitempty"`
	// Plan and Deployment, when given, let the agent build every container it will be
	// asked to start for the plan and check each against its policy now: a refusal is
	// found before anything stops (a redeploy onto a serving cluster stages on it).
	Plan       *netplan.Plan `json:"plan,omitempty"`
	Deployment Deployment    `json:"deployment,omitzero"`
	// Intent is the operator's signed spec (see Intent); the same in every request below.
	Intent *Intent `json:"intent,omitempty"`
}

// PreflightResult reports the image as the node holds it.
type PreflightResult struct {
	Node    string `json:"node"`
	ImageID string `json:"image_id"`
	// Memory is the node's host-memory budget for the spec (nil without a spec, or from
	// an agent too old to make one).
	Memory *hostmem.Budget `json:"memory,omitempty"`
}

// StartRayRequest starts Ray (head or worker) on a node.
type StartRayRequest struct {
	Node       string           `json:"node"`
	Deployment Deployment       `json:"deployment"`
	Spec       spec.Cluster     `json:"spec"`
	Plan       netplan.NodePlan `json:"plan"`
	RayAddress string           `json:"ray_address"`
	// Replace recreates the container even when one with the same spec runs (recovery:
	// a running container may be stale after a node rebooted).
	Replace bool    `json:"replace,omitempty"`
	Intent  *Intent `json:"intent,omitempty"`
}

// ContainerRef names a container an activity started or adopted. For vLLM (role vllm) it
// names the Ray head's container that vLLM runs in, and PID is vLLM's process there.
type ContainerRef struct {
	Node    string `json:"node"`
	Role    string `json:"role"`
	Name    string `json:"name"`
	ID      string `json:"id"`
	Adopted bool   `json:"adopted,omitempty"`
	PID     int    `json:"pid,omitempty"`
}

// PlacementRequest asks the head to prove Ray's view matches the plan.
type PlacementRequest struct {
	Node       string `json:"node"`
	DockerHost string `json:"docker_host,omitempty"`
	// RayHead is the head's Ray container, asked for `ray status` when placement cannot be
	// proven in time.
	RayHead  string       `json:"ray_head,omitempty"`
	Plan     netplan.Plan `json:"plan"`
	NeedGPUs int          `json:"need_gpus"`
	// DashboardPort is kept so that recorded histories decode; placement is read from the
	// GCS at Plan.RayAddress, not from the dashboard.
	DashboardPort int `json:"dashboard_port,omitempty"`
	// RayToken is the spec's secrets.ray_token: a reference the agent resolves on its node
	// to send Ray's token with its GCS calls, never the value.
	RayToken *spec.SecretRef `json:"ray_token,omitempty"`
}

// RegisteredNode is one Ray node as Ray reports it.
type RegisteredNode struct {
	NodeID string     `json:"node_id"`
	IP     netip.Addr `json:"ip"`
	Alive  bool       `json:"alive"`
	GPUs   float64    `json:"gpus"`
	Head   bool       `json:"head"`
	// DeathMessage is Ray's reason for a dead node.
	DeathMessage string `json:"death_message,omitempty"`
}

// PlacementReport is the proven placement.
type PlacementReport struct {
	Nodes []RegisteredNode `json:"nodes"`
	GPUs  float64          `json:"gpus"`
}

// LaunchRequest starts vLLM on the head.
type LaunchRequest struct {
	Node       string       `json:"node"`
	Deployment Deployment   `json:"deployment"`
	Spec       spec.Cluster `json:"spec"`
	Plan       netplan.Plan `json:"plan"`
	Replace    bool         `json:"replace,omitempty"`
	Intent     *Intent      `json:"intent,omitempty"`
}

// RankRequest starts one node's `vllm serve` in vLLM's own multi-node mode (executor mp):
// node rank 0 on the head (with the API server), --headless on the others.
type RankRequest struct {
	Node       string       `json:"node"`
	Deployment Deployment   `json:"deployment"`
	Spec       spec.Cluster `json:"spec"`
	Plan       netplan.Plan `json:"plan"`
	Rank       int          `json:"rank"`
	Replace    bool         `json:"replace,omitempty"`
	Intent     *Intent      `json:"intent,omitempty"`
}

// MasterCheck is PrepareMaster's answer: the head's rank 0 already runs this very launch
// (Adopted: nothing to prove, nothing to start), or a listener on the master address and
// port for the other nodes to dial.
type MasterCheck struct {
	Adopted bool         `json:"adopted,omitempty"`
	Listen  ListenResult `json:"listen"`
}

// WatchRequest follows vLLM until it serves, returning early with progress.
type WatchRequest struct {
	Node      string          `json:"node"`
	Container ContainerRef    `json:"container"`
	Spec      spec.Cluster    `json:"spec"`
	Endpoint  string          `json:"endpoint"`
	Cursor    ServingProgress `json:"cursor"`
	// Plan lets the watch ask Ray (at Plan.RayAddress) about the planned nodes: a node
	// that died, and whether a pending placement group is pinned to a registered node.
	Plan *netplan.Plan `json:"plan,omitempty"`
	// Headless is a node of vLLM's own multi-node mode that runs no API server: the watch
	// follows its output and its end, and never reports serving.
	Headless bool `json:"headless,omitempty"`
	// Engine is how the image's vLLM release behaves: a line classified as a failure its
	// code cannot print is not acted on, and fixes follow its executor.
	Engine *release.Model `json:"engine,omitempty"`
	// DataPlane is the data-plane proof's verdict: vLLM's own NCCL lines (printed when
	// the operator set NCCL_DEBUG=INFO) that name another transport are a warning.
	DataPlane *dataplane.Verdict `json:"data_plane,omitempty"`
	// ReportWithin bounds how long one call runs before it returns its progress, so the
	// workflow's queries stay current without an event per log line.
	ReportWithin time.Duration `json:"report_within"`
	Intent       *Intent       `json:"intent,omitempty"`
}

// ServingProgress is what the workflow knows of vLLM's way to serving.
type ServingProgress struct {
	Phase        string        `json:"phase"` // starting, placement, rendezvous, loading, warming, serving
	ShardsLoaded int           `json:"shards_loaded"`
	ShardsTotal  int           `json:"shards_total"`
	Percent      int           `json:"percent"`
	Elapsed      time.Duration `json:"elapsed"`
	ETA          time.Duration `json:"eta,omitempty"`
	Serving      bool          `json:"serving"`
	// Offset is how many bytes of vLLM's output were read: a resumed watch reads on from
	// there and neither loses nor repeats a line.
	Offset int64 `json:"offset,omitempty"`
	// Since and SeenAtSince are the cursor of watches recorded before vLLM moved into the
	// Ray head's container (a container log followed by timestamp); kept for replay.
	Since       time.Time `json:"since,omitzero"`
	SeenAtSince int       `json:"seen_at_since,omitempty"`
	// Warnings are non-fatal findings in vLLM's output (e.g. Gloo's loopback fallback).
	Warnings []string `json:"warnings,omitempty"`
	// Lines counts vLLM's output lines that say it moved on (every line but the notices
	// a waiting process repeats), and LastLine is the last of them: the workflow ends a
	// load whose count stands still for timeouts.load_stall (LoadStalled).
	Lines    int    `json:"lines,omitempty"`
	LastLine string `json:"last_line,omitempty"`
	// Memory is the watching node's host memory as its guard last sampled it (`starter
	// status` shows it); nil before the guard's first sample.
	Memory *HostMemorySample `json:"memory,omitempty"`
}

// HostMemorySample is a node's host memory as its agent's guard sampled it: available
// now, the lowest seen while its engines ran, the guard's floor and the node's memory.
type HostMemorySample struct {
	Node           string    `json:"node"`
	AvailableBytes int64     `json:"available_bytes"`
	LowestBytes    int64     `json:"lowest_bytes,omitempty"`
	FloorBytes     int64     `json:"floor_bytes"`
	TotalBytes     int64     `json:"total_bytes"`
	At             time.Time `json:"at"`
}

// RemoveRequest removes a cluster's containers on one node, optionally only some roles.
type RemoveRequest struct {
	Node       string   `json:"node"`
	DockerHost string   `json:"docker_host"`
	Cluster    string   `json:"cluster"`
	Roles      []string `json:"roles,omitempty"` // empty: every role
	Intent     *Intent  `json:"intent,omitempty"`
}

// LastOutputRequest asks a node for what the cluster's containers there printed last.
type LastOutputRequest struct {
	Node       string `json:"node"`
	DockerHost string `json:"docker_host"`
	Cluster    string `json:"cluster"`
}

// RemoveResult lists what was removed.
type RemoveResult struct {
	Node    string   `json:"node"`
	Removed []string `json:"removed"`
}

// ActivityCheckDeployment is the operations activity every agent serves on the workflow
// queue: what the cluster's latest deploy is and whether its endpoint serves.
const ActivityCheckDeployment = "CheckDeployment"

// CheckDeploymentRequest asks about a cluster's latest deploy.
type CheckDeploymentRequest struct {
	Cluster string `json:"cluster"`
}

// DeploymentCheck is a cluster's latest deploy as Temporal and its endpoint see it.
type DeploymentCheck struct {
	Exists   bool   `json:"exists"`
	Running  bool   `json:"running"`
	RunID    string `json:"run_id,omitempty"`
	Closed   string `json:"closed,omitempty"` // Completed, Failed, ...
	SpecHash string `json:"spec_hash,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Healthy  bool   `json:"healthy"`
	Detail   string `json:"detail,omitempty"`
	// Plan is the serving deploy's plan (for the Ray check on the head).
	Plan *netplan.Plan `json:"plan,omitempty"`
}

// BootIDRequest asks a node for its boot ID.
type BootIDRequest struct {
	Node string `json:"node"`
}

// GuardTripRequest asks a node whether its memory guard stopped the cluster's engines
// there (within the last ten minutes).
type GuardTripRequest struct {
	Node    string `json:"node"`
	Cluster string `json:"cluster"`
}

// GuardTrip is the answer: Message is the trip as HostMemoryPressure says it.
type GuardTrip struct {
	Tripped bool   `json:"tripped"`
	Message string `json:"message,omitempty"`
}

// AddressRequest asks a node whether its planned address is still on its planned
// interface.
type AddressRequest struct {
	Node      string     `json:"node"`
	Interface string     `json:"interface"`
	Address   netip.Addr `json:"address"`
}

// AddressCheck is the answer: Holds, or what changed.
type AddressCheck struct {
	Holds  bool   `json:"holds"`
	Detail string `json:"detail,omitempty"`
}

// Activity names: the methods of the node agent's activity structs (activities.Agent) and
// of the operations activities every agent serves on the workflow queue (control.Checks).
const (
	ActivityProbeNode           = "ProbeNode"
	ActivityOpenProbeListeners  = "OpenProbeListeners"
	ActivityDialPeers           = "DialPeers"
	ActivityCloseProbeListeners = "CloseProbeListeners"
	ActivityPreflightNode       = "PreflightNode"
	ActivityStartRayHead        = "StartRayHead"
	ActivityStartRayWorker      = "StartRayWorker"
	ActivityCheckPlacement      = "CheckPlacement"
	ActivityLaunchVLLM          = "LaunchVLLM"
	ActivityWatchServing        = "WatchServing"
	ActivityRemoveContainers    = "RemoveContainers"
	ActivityLastOutput          = "LastOutput"
	ActivityBootID              = "BootID"
	ActivityGuardTrip           = "GuardTrip"
	ActivityRayNodesAlive       = "RayNodesAlive"
	ActivityAddressHolds        = "AddressHolds"
	ActivityPrepareMaster       = "PrepareMaster"
	ActivityStartVLLMRank       = "StartVLLMRank"
	ActivityModelManifest       = "ModelManifest"
	ActivityPrepareModelCopy    = "PrepareModelCopy"
	ActivityOpenModelServer     = "OpenModelServer"
	ActivityCloseModelServer    = "CloseModelServer"
	ActivitySyncModel           = "SyncModel"
	ActivityRemovePartialModel  = "RemovePartialModel"
	ActivityProveDataPlane      = "ProveDataPlane"
	// Operations activities served on the workflow queue (control.Checks).
	ActivityTeardownRunning = "TeardownRunning"
	ActivityPauseSchedule   = "PauseSchedule"
	ActivityWaitClosed      = "WaitClosed"
	ActivityWatchCluster    = "WatchCluster"
	// ActivityServingDeployment says which deployment serves the cluster now.
	ActivityServingDeployment = "ServingDeployment"
	// ActivityReportNodeBoot tells the running supervisors and deploys of a node's boot,
	// and ActivityNodeWanted reads what a node should keep of a cluster: the controller's
	// side of an agent's start (NodeStartedWorkflow), so the agent needs no client call
	// for them.
	ActivityReportNodeBoot = "ReportNodeBoot"
	ActivityNodeWanted     = "NodeWanted"
	// ActivityReconcileCluster removes a node's containers of a cluster that its
	// deployment no longer holds (a node activity, signed as a removal).
	ActivityReconcileCluster = "ReconcileCluster"
)

// ActivityDeployTarget reads, on the controller, what a readiness check of a cluster
// checks (contract.CheckTarget); ActivityCheckTarget and ActivityWatchTarget check it on
// the head's agent, which resolves vLLM's API key and reads nothing from Temporal.
const (
	ActivityDeployTarget = "DeployTarget"
	ActivityCheckTarget  = "CheckTarget"
	ActivityWatchTarget  = "WatchTarget"
)

// HeadChecks are the operations activities every agent also serves on its own node's
// queue: a cluster with vLLM's API key (secrets.api_key) has its readiness checks run by
// the head's agent, which resolves the key, rather than by any agent. The controller reads
// what to check (ActivityDeployTarget) and hands it to the head: CheckTarget and
// WatchTarget make no Temporal call. The first three are the checks that read the
// deploy's runs themselves, served for runs begun before the split
// (workflows' headChecksSplitVersion); no run begun since asks for them.
var HeadChecks = []string{ActivityCheckDeployment, ActivityWatchCluster, ActivityServingDeployment, ActivityCheckTarget, ActivityWatchTarget}

// TargetRequest asks the controller what a readiness check of Cluster checks: its latest
// deploy, or, while a deploy of another spec is staged beside the serving one, the serving
// one. With WaitDeploy, a running deploy is waited for (polled every Every) up to that
// long; with MustExist, a cluster with no deploy to read is an error (retried) rather
// than an answer.
type TargetRequest struct {
	Cluster    string        `json:"cluster"`
	WaitDeploy time.Duration `json:"wait_deploy,omitempty"`
	Every      time.Duration `json:"every,omitempty"`
	MustExist  bool          `json:"must_exist,omitempty"`
}

// CheckTarget is a deploy run as a readiness check needs it, read from Temporal by the
// controller: the check's own fields (DeploymentCheck, Healthy false), the spec and the
// intent it was started with, and, when Beside is set, that it is the serving run a staged
// deploy runs beside. Plan (with Endpoint) is the run's result: nil, it has none. The head
// trusts none of it for what it dials: the endpoint is derived again from the spec and
// plan, and the API key goes only to its own address, for a spec signed as its policy
// requires.
type CheckTarget struct {
	DeploymentCheck
	Spec   *spec.Cluster `json:"spec,omitempty"`
	Intent *Intent       `json:"intent,omitempty"`
	Beside string        `json:"beside,omitempty"`
}

// WatchTargetRequest is a watch (WatchClusterRequest) of one CheckTarget: the head's
// agent checks that run's endpoint (and Ray's GCS, and the canary) without asking
// Temporal which run is the latest; the supervisor asks the controller before and after.
type WatchTargetRequest struct {
	WatchClusterRequest
	Target CheckTarget `json:"target"`
}

// ServingRequest asks which deployment serves Cluster (ActivityServingDeployment). With
// Unchecked, the controller answers without the readiness check and hands the serving
// run in ServingDeployment.Target, for the head's agent to check (a keyed spec).
type ServingRequest struct {
	Cluster   string `json:"cluster"`
	Unchecked bool   `json:"unchecked,omitempty"`
}

// WatchClusterRequest asks for a cluster's health to be watched until something happens:
// Unhealthy failed checks in a row (every Every), or For of health.
type WatchClusterRequest struct {
	Cluster   string        `json:"cluster"`
	Every     time.Duration `json:"every"`
	Unhealthy int           `json:"unhealthy"`
	For       time.Duration `json:"for"`
	// Canary is the spec's canary.* (defaults filled); zero Every is no canary.
	Canary CanaryRequest `json:"canary,omitzero"`
}

// CanaryRequest: one one-token completion every Every, each bounded by Timeout; Failures
// in a row are the incident EngineWedged.
type CanaryRequest struct {
	Every    time.Duration `json:"every,omitempty"`
	Timeout  time.Duration `json:"timeout,omitempty"`
	Failures int           `json:"failures,omitempty"`
}

// IncidentEngineWedged is the cause of an incident the canary found: the API server
// answers (/health 200, /v1/models) but the engine produces no token (EngineCore frozen,
// or a rank its collectives wait for).
const IncidentEngineWedged = "EngineWedged"

// ClusterHealth is what a watch saw: serving or not, why, and how many checks it made.
type ClusterHealth struct {
	Healthy   bool      `json:"healthy"`
	Detail    string    `json:"detail"`
	Checks    int       `json:"checks"`
	LastCheck time.Time `json:"last_check"`
	// Deploying says a deploy of the cluster was running at the last check.
	Deploying bool `json:"deploying,omitempty"`
	// Cause names what an unhealthy watch found when it is more than "not serving":
	// IncidentEngineWedged.
	Cause string `json:"cause,omitempty"`
	// Canary is the canary's last verdict, for status.
	Canary string `json:"canary,omitempty"`
}

// PauseRequest pauses a cluster's redeploy schedule, if it has one.
type PauseRequest struct {
	Cluster string `json:"cluster"`
	Note    string `json:"note"`
}

// WaitRequest waits until a workflow (the latest run of an ID) is closed.
type WaitRequest struct {
	WorkflowID string `json:"workflow_id"`
}

// ClusterRequest names a cluster.
type ClusterRequest struct {
	Cluster string `json:"cluster"`
}

// ClusterBusy says whether an operation (a teardown) of the cluster is running.
type ClusterBusy struct {
	Running    bool   `json:"running"`
	WorkflowID string `json:"workflow_id,omitempty"`
	RunID      string `json:"run_id,omitempty"`
}

// ServingDeployment is the deployment that serves a cluster: a deploy run that completed,
// whose endpoint answers. Zero when none does.
type ServingDeployment struct {
	RunID    string `json:"run_id,omitempty"`
	SpecHash string `json:"spec_hash,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	// Executor and Nodes are what runs: ray or mp, on which nodes in which role. A staged
	// deploy removes at its swap what the new deployment will not replace by name.
	Executor string        `json:"executor,omitempty"`
	Nodes    []ServingNode `json:"nodes,omitempty"`
	// Detail says why none serves, when one was known.
	Detail string `json:"detail,omitempty"`
	// Supervised: the cluster's supervisor runs (a deploy served, no teardown since), so
	// none serving is news to the deploy asking (it is not staged, and says why).
	Supervised bool `json:"supervised,omitempty"`
	// Target is the serving run, not yet checked (ServingRequest.Unchecked).
	Target *CheckTarget `json:"target,omitempty"`
}

// ServingNode is one node of a serving deployment.
type ServingNode struct {
	Name       string `json:"name"`
	Role       string `json:"role"`
	DockerHost string `json:"docker_host,omitempty"`
}

// NotServing is the answer for a supervised serving run whose endpoint fails the
// readiness check (why).
func NotServing(runID, why string) ServingDeployment {
	return ServingDeployment{Detail: "deploy run " + runID + " does not serve: " + why, Supervised: true}
}

// Serves says whether a deployment serves.
func (s ServingDeployment) Serves() bool { return s.RunID != "" }

// StagedRefusal is the details of a failed deploy that was staged beside a serving
// deployment and failed before it stopped anything: Serving still serves.
type StagedRefusal struct {
	Serving ServingDeployment `json:"serving"`
}

// ContainerName is the deterministic name of a role's container on a node; a retry
// finds what an earlier attempt created instead of creating a second one. The separator
// is '_', which neither cluster names ([a-z0-9-]) nor node names ([a-z0-9.-]) contain, so
// two clusters can never share a name (`x-node` + `a` and `x` + `node-a` differ).
func ContainerName(cluster, node, role string) string {
	return "tpd_" + cluster + "_" + node + "_" + role
}

// ProofRequest asks a node to run its rank of the data-plane proof (package dataplane) in
// a running container of the cluster (the node's Ray container), with the environment
// that container already holds plus the proof's own.
type ProofRequest struct {
	Node       string           `json:"node"`
	DockerHost string           `json:"docker_host"`
	Container  string           `json:"container"`
	Plan       netplan.NodePlan `json:"plan"`
	Rank       int              `json:"rank"`
	World      int              `json:"world"`
	// Master is rank 0's store address, host:port.
	Master  string        `json:"master"`
	Timeout time.Duration `json:"timeout"`
	// Fresh (executor mp, where no container runs before the ranks) asks for the proof
	// in a one-shot container made as this node's vLLM rank's container would be: the
	// same image, env, network, GPUs and RDMA devices. Container is then unused.
	Fresh *RankRequest `json:"fresh,omitempty"`
	// Intent is the operator's signed spec (see Intent); a Fresh rank's own is used
	// when it is unset (a proof of an older deploy).
	Intent *Intent `json:"intent,omitempty"`
}

// ProofResult is one rank's proof: parsed, with what the agent knows of its container,
// and the NCCL and proof lines it printed (bounded).
type ProofResult struct {
	Rank  dataplane.Node `json:"rank"`
	Lines []string       `json:"lines,omitempty"`
}

// Said is the refusal in words, for the failure's message.
func (r StagedRefusal) Said() string {
	return fmt.Sprintf("staged beside the serving deployment: nothing was stopped, deploy run %s (spec %s) still serves at %s",
		r.Serving.RunID, r.Serving.SpecHash, r.Serving.Endpoint)
}
