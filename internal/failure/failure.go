// Package failure is the one list of tpdeploy's failure types: the type of every
// application error an activity or a workflow fails with, which the workflows branch on,
// `starter` prints and operators' scripts match. Each type is declared here once, with
// what it means to an operator and whether a retry of the step can fix it (All); package
// contract names them contract.ErrX for the workflows and the agents, and the packages
// below contract (logscan, netplan, release, dataplane) use them from here, since
// contract imports them.
//
// Modelled on upspin's errors.Kind list and the Temporal SDK's application error types:
// the string is the wire value (temporal.ApplicationError.Type), so it never changes once
// released.
package failure

// The failure types; each constant's name is its value. Meanings are in All.
const (
	// Refused before anything starts.
	SpecInvalid     = "SpecInvalid"
	PolicyDenied    = "PolicyDenied"
	WrongWorkflowID = "WrongWorkflowID"
	ClusterBusy     = "ClusterBusy"
	WrongNode       = "WrongNode"
	BadRequest      = "BadRequest"
	NotImplemented  = "NotImplemented"

	// Node agents and their Docker engines.
	NodeAgentUnreachable = "NodeAgentUnreachable"
	NodeDown             = "NodeDown"
	NodeRebooted         = "NodeRebooted"
	NetworkChanged       = "NetworkChanged"
	DockerUnreachable    = "DockerUnreachable"
	DockerError          = "DockerError"

	// The image and what its vLLM release can run (package release).
	ImageMissing        = "ImageMissing"
	ImageMismatch       = "ImageMismatch"
	ImageUnreadable     = "ImageUnreadable"
	ImageLacksRay       = "ImageLacksRay"
	ImageLacksNnodes    = "ImageLacksNnodes"
	ImageNICSelection   = "ImageNICSelection"
	ExecutorUnavailable = "ExecutorUnavailable"
	VersionMismatch     = "VersionMismatch"

	// The plan (package netplan).
	NoViableSubnet        = "NoViableSubnet"
	InsufficientGPUs      = "InsufficientGPUs"
	GPUsNotVisible        = "GPUsNotVisible"
	DataPlaneUnreachable  = "DataPlaneUnreachable"
	EphemeralPortsBlocked = "EphemeralPortsBlocked"

	// The model's files.
	ModelIncomplete  = "ModelIncomplete"
	ModelCorrupt     = "ModelCorrupt"
	ModelServerGone  = "ModelServerGone"
	ModelUnavailable = "ModelUnavailable"
	ModelNotFound    = "ModelNotFound"
	ModelGated       = "ModelGated"
	ModelOffline     = "ModelOffline"
	ModelUnsupported = "ModelUnsupported"
	DiskInsufficient = "DiskInsufficient"

	// Host memory and the load (package hostmem).
	HostMemoryInsufficient = "HostMemoryInsufficient"
	LoadStalled            = "LoadStalled"
	HostMemoryPressure     = "HostMemoryPressure"

	// Ray and placement.
	RayGCSUnreachable     = "RayGCSUnreachable"
	RayAuthRequired       = "RayAuthRequired"
	PlacementMismatch     = "PlacementMismatch"
	DuplicateAddress      = "DuplicateAddress"
	NodeNotRegistered     = "NodeNotRegistered"
	PlacementGroupPending = "PlacementGroupPending"
	ResourcesBusy         = "ResourcesBusy"
	GPUsInUse             = "GPUsInUse"
	PortInUse             = "PortInUse"
	RayDriverAttach       = "RayDriverAttach"
	GCSUnreachable        = "GCSUnreachable"
	RayNodeDead           = "RayNodeDead"
	ContainerExited       = "ContainerExited"

	// vLLM's own output (package logscan classifies it).
	C10dUnreachable       = "C10dUnreachable"
	NCCLNoInterface       = "NCCLNoInterface"
	NCCLError             = "NCCLError"
	CollectiveTimeout     = "CollectiveTimeout"
	GlooLoopback          = "GlooLoopback"
	GlooNoInterface       = "GlooNoInterface"
	CUDAOutOfMemory       = "CUDAOutOfMemory"
	KVCacheTooSmall       = "KVCacheTooSmall"
	InvalidParallelLayout = "InvalidParallelLayout"
	EngineDead            = "EngineDead"
	VLLMExited            = "VLLMExited"

	// The data-plane proof (package dataplane).
	DataPlaneDegraded = "DataPlaneDegraded"
	DataPlaneFailed   = "DataPlaneFailed"

	// How a step or the workflow ended, as the workflow classifies it.
	StepTimeout        = "StepTimeout"
	RetriesExhausted   = "RetriesExhausted"
	Canceled           = "Canceled"
	CompensationFailed = "CompensationFailed"
	Internal           = "Internal"
	Failed             = "Failed"
)

// Failure is one failure type.
type Failure struct {
	Type string
	// Retryable: a later attempt of the same step can succeed, so the step's retry policy
	// retries it (up to the step's attempts). Every other type ends its step at once:
	// activities raise it non-retryable, and the retry policies list it (NonRetryable) so
	// that one raised retryable by mistake cannot slip through.
	Retryable bool
	// Meaning is what it says to an operator, in one line.
	Meaning string
}

// All is every failure type, each once, in the order docs/diagnosis.md lists them.
var All = []Failure{
	{SpecInvalid, false, "the spec, or the executor its image decided, fails validation; the field is named"},
	{PolicyDenied, false, "a node's operator policy refuses the request (the image, a host path, the engine, a port, an unsigned or wrongly signed spec); the node and the setting are named"},
	{WrongWorkflowID, false, "a deploy or teardown was started under another workflow ID than the cluster's one, which would escape the one-deploy-per-cluster rule"},
	{ClusterBusy, false, "a teardown of the cluster is running; deploy again once it has ended"},
	{WrongNode, false, "a task reached another node's agent: two agents run with the same `--node`, or a queue is misnamed"},
	{BadRequest, false, "an agent was asked something it cannot act on (a path that is not absolute, an unreadable secret file, a name another's container holds, a held master port); the message says what"},
	{NotImplemented, false, "this agent's build lacks the capability asked for: upgrade every agent together"},

	{NodeAgentUnreachable, false, "no agent picked the node's task up within `timeouts.node_agent`: is `worker --node NAME` running and connected?"},
	{NodeDown, false, "a node's agent answered earlier in the deploy, then stopped, and did not come back with a new boot ID"},
	{NodeRebooted, false, "a planned node rebooted (or its planned address moved) more often than the deploy restarts for, default 3"},
	{NetworkChanged, false, "a planned address is no longer on its planned interface; the deploy starts over from probing (a restart)"},
	{DockerUnreachable, true, "the node's Docker engine did not answer"},
	{DockerError, true, "the node's Docker engine refused an operation (the engine's words are in the message)"},

	{ImageMissing, false, "the spec's image is not on a node (tpdeploy never pulls implicitly)"},
	{ImageMismatch, false, "the nodes hold different builds of the image (`image_mismatch: fail`); the versions or IDs that differ are named with both nodes"},
	{ImageUnreadable, false, "the image has no shell or no vLLM installation tpdeploy can read"},
	{ImageLacksRay, false, "the deploy needs Ray and the image has none (stock vllm/vllm-openai images since v0.18.0); the message gives the ways out"},
	{ImageLacksNnodes, false, "`executor: mp` on a vLLM older than 0.11.1, which lacks `--nnodes`"},
	{ImageNICSelection, false, "the image's own ENV sets vLLM's per-GPU NIC selection (`VLLM_GPU_NIC_PCIE_MAPPING`, `VLLM_NIC_SELECTION_VARS`), which would prepend other HCAs to the plan's `NCCL_IB_HCA`; the message names the image and the fix"},
	{ExecutorUnavailable, false, "`executor: auto` found neither Ray in the image nor a layout vLLM's own multi-node mode can run"},
	{VersionMismatch, false, "a Ray process joined a cluster started with another Ray or Python version: the nodes run different images"},

	{NoViableSubnet, false, "no subnet is reachable in both directions between every pair of nodes; the plan says why each was rejected"},
	{InsufficientGPUs, false, "the nodes, Ray, or vLLM's engine offer fewer free GPUs than tensor × pipeline needs"},
	{GPUsNotVisible, false, "a container sees no GPU, or fewer than tensor × pipeline: Docker has no NVIDIA runtime for GPU requests (install the NVIDIA container toolkit and register it with Docker), or the container was given too few devices; not fixed by a retry"},
	{EphemeralPortsBlocked, false, "a node cannot reach another's high ephemeral port (Linux's default 32768–60999) on the planned address, though the fixed ports pass: vLLM's ZMQ queues and message-queue broadcasters bind random ports and wait for them without a timeout; the pair, port and address are named; open the range between the nodes"},
	{DataPlaneUnreachable, false, "the measured links between the nodes' HCAs (a triangle, a ring) cannot carry the parallel layout in any rank order, or NCCL cannot use them (a one-GPU node reaches all its peers over each channel's one NIC, so on a switchless fabric a queue pair would cross a port with no cable to the peer): the message names the pairs or the nodes' ports, and the ways out (cable them, a switch, another tensor × pipeline split, or data_plane: warn/skip for sockets)"},

	{ModelIncomplete, false, "a node lacks files or weights of the model (a partial download or copy), or a copy's source lacks a file it was asked for"},
	{ModelCorrupt, false, "a copied file's size or hash is not the head's manifest's (the partial copy is removed), or the model's files cannot be read as a model (a truncated safetensors header, a Git LFS pointer): copy or download the broken files again"},
	{ModelServerGone, false, "the head's model server or the copy's key is gone (closed, expired, an agent restarted); the deploy copies again with new keys, up to three times"},
	{ModelUnavailable, false, "the weights cannot be had: Hugging Face refused the token itself (expired or invalid credentials, a 403), or the path lacks config.json or weight files"},
	{ModelNotFound, false, "the model is neither a directory on the node nor a Hugging Face repository: a misspelt id, or a path not mounted on that node (it was then taken for a repository id), or a Hugging Face 401 for the repository, which the Hub gives for a missing one and for a private or gated one without a valid token; fix the spec's model or mount the path on every node (pass HF_TOKEN for a private repository)"},
	{ModelGated, false, "the model's Hugging Face repository is gated and the token has no access: accept its terms on huggingface.co with the account whose HF_TOKEN every node's container gets, or serve downloaded weights"},
	{ModelOffline, false, "Hugging Face is off (HF_HUB_OFFLINE) or unreachable from the node and the model is not in its cache: fill every node's cache first, or serve a mounted local path"},
	{ModelUnsupported, false, "the image's vLLM (or transformers) does not know the model's architecture: use a newer image"},
	{DiskInsufficient, false, "a node's model directory has less free space than the model's files it must receive (a download from the hub or a copy from the head): refused before anything is written; the node, the bytes it needs and the bytes free are named; free space there or point the node's mount at a larger disk"},

	{HostMemoryInsufficient, false, "a node's host memory cannot hold what the deploy would put on it (its share of the weights and, on unified memory, the KV cache `--gpu-memory-utilization` takes, the engine's and NCCL's buffers, the node policy's host_reserve): refused at preflight, before any container starts; the node, what it needs and what is available are named"},
	{HostMemoryPressure, false, "a node's available host memory fell below its agent's guard floor (policy memory_floor, default max(1 GiB, 2 %)) while its engine ran: the agent stopped the engine containers (SIGTERM, then SIGKILL) before the host could wedge; the lowest MemAvailable seen is named. Also Ray's own memory monitor killing workers on a node (its raylet's OOM-kill summary in vLLM's output): free host memory there or give the node more"},
	{LoadStalled, false, "vLLM made no progress while loading (no output line, no shard, no phase) for `timeouts.load_stall`, default 5m: the node and the last progress seen are named (a wedged engine, a hung rank)"},

	{RayGCSUnreachable, true, "the agent could not read Ray's node table from the head's GCS"},
	{RayAuthRequired, false, "Ray's GCS refuses tpdeploy's calls (`Unauthenticated`): the cluster runs Ray's token authentication (Ray ≥ 2.59 turns it on at `ray start --head` whenever a token exists: `RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH` or `~/.ray/auth_token` in the image) and the spec gives no token, or another one; set `secrets.ray_token` to the cluster's token"},
	{PlacementMismatch, false, "a node registered with Ray under another address than the plan's (vLLM would wait about 42 minutes for its placement group)"},
	{DuplicateAddress, false, "two Ray nodes, or vLLM's workers on one node, report one address: VLLM_HOST_IP differs from the --node-ip-address Ray registered"},
	{NodeNotRegistered, false, "planned nodes did not register with Ray within `timeouts.placement`; they and `ray status` are named"},
	{PlacementGroupPending, false, "vLLM's placement group is pinned to an address no Ray node has"},
	{ResourcesBusy, false, "the GPUs or ports exist but something else holds them (another process or container, a stale placement group)"},
	{GPUsInUse, false, "another tpdeploy cluster's containers on the node hold GPUs this deploy needs (an engine container takes every GPU its node's spec gives it): refused at preflight, naming the other cluster, the node and the GPUs; place the clusters on other nodes, or give each its share of the node's GPUs"},
	{PortInUse, false, "another tpdeploy cluster's containers on the node listen on a port this deploy's head would bind (ports.vllm, ports.ray, ports.master): refused at preflight, naming the other cluster, the node and the port; choose another port in the spec"},
	{RayDriverAttach, false, "the Ray driver (`vllm serve`) cannot attach to its node's raylet: it runs outside the Ray node's container or under an address Ray does not know"},
	{GCSUnreachable, false, "a Ray process in vLLM's output cannot reach the GCS at the address it was given"},
	{RayNodeDead, false, "a planned node is DEAD in Ray's node table while vLLM is silent or waits"},
	{ContainerExited, false, "the Ray head's container, where vLLM runs, stopped"},

	{C10dUnreachable, false, "a rank cannot reach torch's c10d rendezvous or the master address: it has no route to the address the head advertises"},
	{NCCLNoInterface, false, "NCCL_SOCKET_IFNAME names no interface on a node, or the nodes run different NCCL builds"},
	{NCCLError, false, "NCCL failed a collective or its setup (invalid usage, a lost peer); the diagnosis names the likely setting"},
	{CollectiveTimeout, false, "a collective ran past torch's watchdog timeout: a peer rank died or hangs, or the link between the nodes stalls; find the rank that failed first (its node's earlier lines), check the link; the deploy asks every node whether it rebooted"},
	{GlooLoopback, false, "Gloo could not connect its mesh: a rank advertises an address its peers cannot reach (loopback, the wrong interface)"},
	{GlooNoInterface, false, "GLOO_SOCKET_IFNAME names an interface the node does not have"},
	{CUDAOutOfMemory, false, "a GPU ran out of memory: lower --gpu-memory-utilization or --max-model-len, or use more GPUs"},
	{KVCacheTooSmall, false, "the memory left after the weights holds less KV cache than one request of --max-model-len needs"},
	{InvalidParallelLayout, false, "the model cannot be split the requested way (attention heads not divisible by the tensor-parallel size, and the like)"},
	{EngineDead, false, "vLLM's engine died; the lines before it say why (a lost rank is the usual cause)"},
	{VLLMExited, false, "vLLM's process ended without a classified line; its exit code and last lines are in the message"},

	{DataPlaneDegraded, false, "RDMA is planned but a rank's NCCL is on sockets (or a node's own env turns RDMA off); the node and the likely cause are named"},
	{DataPlaneFailed, false, "the data-plane proof's collective did not complete, or its sum was wrong"},

	{StepTimeout, true, "a step ran past its timeout on its last attempt, or vLLM did not serve within `timeouts.serving`"},
	{RetriesExhausted, true, "a retryable failure outlived the step's retry policy; the message is the last attempt's"},
	{Canceled, false, "the deploy was canceled (the UI, `starter teardown`); the compensations ran"},
	{CompensationFailed, false, "a canceled deploy's compensation failed: something it made may be left; the message names it"},
	{Internal, false, "tpdeploy reached a state it should not (a bug); the message says which"},
	{Failed, false, "the workflow failed without a classified type; the message is Temporal's"},
}

// NonRetryable is every type no retry can fix, for a retry policy's
// NonRetryableErrorTypes.
func NonRetryable() []string {
	var types []string
	for _, f := range All {
		if !f.Retryable {
			types = append(types, f.Type)
		}
	}
	return types
}
