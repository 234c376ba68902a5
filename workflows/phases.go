package workflows

// The phases of a deploy. The values are what operators see: the state query, the UI's
// current details, `starter status` and the DeployPhase search attribute (the UI's and
// scripts' filters), so a released value never changes. Each is declared here once; its
// meaning is in DeployPhases.
const (
	PhaseValidating          = "validating"
	PhaseImages              = "reading images"
	PhaseProbing             = "probing"
	PhaseReachability        = "testing reachability"
	PhasePlanning            = "planning"
	PhaseModelResolve        = "resolving the model"
	PhasePreflight           = "preflight"
	PhaseModel               = "checking the model"
	PhaseModelDownload       = "downloading the model"
	PhaseModelCopy           = "copying the model"
	PhaseSwap                = "replacing the serving deployment"
	PhaseRayHead             = "starting ray head"
	PhaseRayWorkers          = "joining ray workers"
	PhasePlacement           = "checking placement"
	PhaseMaster              = "checking the master address"
	PhaseDataPlane           = "proving the data plane"
	PhaseRanks               = "starting headless ranks"
	PhaseAllRanks            = "starting ranks"
	PhaseLaunch              = "launching vllm"
	PhaseLaunchMP            = "launching rank 0"
	PhaseWaitingUntilServing = "waiting until serving"
	PhaseServed              = "serving"
	PhaseCompensating        = "compensating"
	PhaseFailed              = "failed"
)

// DeployPhase is one phase of a deploy and what it means to an operator.
type DeployPhase struct {
	Name    string
	Meaning string
}

// DeployPhases is every phase, in the order a deploy passes them (an executor's own
// phases in its order), as docs/operations.md lists them.
var DeployPhases = []DeployPhase{
	{PhaseValidating, "the spec (and the signed intent, if any) is checked; nothing is asked of a node yet"},
	{PhaseImages, "what the spec's image holds is read on every node; its vLLM release decides the executor, so an image that cannot run the spec fails here, before any container starts"},
	{PhaseModelResolve, "`model.source: hub`: the head's agent resolves the revision to a commit on the hub and lists the files vLLM needs; a gated, missing or unreachable model is refused here"},
	{PhaseProbing, "every node's agent describes its interfaces, GPUs and boot ID"},
	{PhaseReachability, "every pair of nodes dials each other on every candidate subnet, both ways"},
	{PhasePlanning, "one subnet is chosen and every layer's setting derived from it"},
	{PhasePreflight, "each node checks that the image is there, the plan's ports are free and its operator policy allows every container the plan will start"},
	{PhaseModel, "the model's files on every node are compared with the head's"},
	{PhaseModelDownload, "`model.source: hub`: the head's agent downloads the files it lacks of the resolved commit into its hf_cache"},
	{PhaseModelCopy, "`model.sync: from-head`: the files a node lacks are copied along a chain from the head, each node relaying to the next; `starter status` shows one line per receiving node, `copying the model to node-c from node-b: 1.2 GB of 4.9 GB (24%) at 610 MB/s` (the bytes in place of the total, from the copy's heartbeat, which reaches the server every 12 s)"},
	{PhaseSwap, "a staged deploy stops the deployment that served while it was checked, and takes its place"},
	{PhaseRayHead, "executor ray: the Ray head starts on the head node"},
	{PhaseRayWorkers, "executor ray: the other nodes join Ray as workers"},
	{PhasePlacement, "executor ray: Ray's node table is read from the GCS and must match the plan before vLLM starts"},
	{PhaseMaster, "executor mp: every node must reach the head's master address and port"},
	{PhaseDataPlane, "one NCCL all_reduce across the nodes proves the data path the plan expects (RDMA or sockets)"},
	{PhaseAllRanks, "executor mp: `vllm serve` starts on every node at once, rank 0 on the head and a headless rank on each other node (runs begun before this release take the next two steps instead)"},
	{PhaseRanks, "executor mp, runs begun before ranks started at once: the headless ranks start on the nodes other than the head"},
	{PhaseLaunch, "executor ray: `vllm serve` starts in the Ray head's container"},
	{PhaseLaunchMP, "executor mp, runs begun before ranks started at once: `vllm serve` rank 0 starts on the head"},
	{PhaseWaitingUntilServing, "vLLM's output is followed (placement, rendezvous, weight loading) until the endpoint answers"},
	{PhaseServed, "the deploy reached serving; the cluster's supervisor watches it from here"},
	{PhaseCompensating, "a step failed (or a node rebooted): what the deploy made is being removed, last first"},
	{PhaseFailed, "the deploy failed; the state's error is the failure type and its message"},
}
