package contract

// The workflows' names: the workflow ID of each kind of run, the signals and the queries.
// They live here, not in package workflows, because the workflows are not their only
// users: node agents signal (SignalNodeBooted) and their operations activities look runs
// up by ID (CheckDeployment, TeardownRunning, WaitClosed); the starter and control
// query and signal them; the Temporal UI, schedules and operators' scripts address runs
// by these IDs. Like the queue names and error types, they are a contract between parts
// built and upgraded apart, and this light package is what every one of them imports.

// DeployWorkflowID is the one workflow ID a cluster's deploy runs under, whatever started
// it, so two deploys of one cluster can never run at once.
func DeployWorkflowID(cluster string) string { return "tpdeploy-deploy-" + cluster }

// PlanWorkflowID is the ID of a cluster's dry-run plan (control appends the spec's hash).
func PlanWorkflowID(cluster string) string { return "tpdeploy-plan-" + cluster }

// TeardownWorkflowID is the ID of a cluster's teardown; a deploy checks it before it starts.
func TeardownWorkflowID(cluster string) string { return "tpdeploy-teardown-" + cluster }

// SuperviseWorkflowID is the one supervisor of a cluster.
func SuperviseWorkflowID(cluster string) string { return "tpdeploy-supervise-" + cluster }

// RedeployWorkflowID is the ID a schedule gives its trigger runs (Temporal appends the
// time of each run).
func RedeployWorkflowID(cluster string) string { return "tpdeploy-redeploy-" + cluster }

// Signals.
const (
	// SignalNodeBooted carries a NodeBoot; node agents send it at start-up to the cluster's
	// supervisor and to its running deploy.
	SignalNodeBooted = "node-booted"
	// SignalDeployed carries the spec of a deploy that reached serving (to the supervisor).
	SignalDeployed = "deployed"
	// SignalRedeploy asks the supervisor for a recovery redeploy now (an operator, a test).
	SignalRedeploy = "redeploy"
	// SignalDeployFailed tells a cluster's supervisor that a deploy which had touched the
	// cluster failed (it may roll back to the spec that served).
	SignalDeployFailed = "deploy-failed"
)

// NodeBoot is what an agent tells the workflows when it starts (SignalNodeBooted).
type NodeBoot struct {
	Node   string `json:"node"`
	BootID string `json:"boot_id"`
}

// Queries.
const (
	// QueryPhase, QueryPlan, QueryProgress and QueryState are the deploy's (and the plan's):
	// its phase, its network plan, vLLM's serving progress, and everything it knows.
	QueryPhase    = "phase"
	QueryPlan     = "plan"
	QueryProgress = "progress"
	QueryState    = "state"
	// QuerySupervision returns the supervisor's state.
	QuerySupervision = "supervision"
)

// NodeStartedWorkflowID is the ID of the run a node agent starts when it starts
// (NodeStartedWorkflow): one per node, so a restarting agent's new run replaces its last.
// The ID is what a server's authorizer can hold the agent's credentials to.
func NodeStartedWorkflowID(node string) string { return "tpdeploy-node-started-" + node }

// NodeStartedWorkflow is the workflow type of that run.
const NodeStartedWorkflow = "NodeStarted"

// NodeStartRequest is what an agent reports when it starts: its boot ID, and the clusters
// it holds containers of (read from their labels), which the controller reconciles.
type NodeStartRequest struct {
	Node     string   `json:"node"`
	BootID   string   `json:"boot_id"`
	Clusters []string `json:"clusters,omitempty"`
}

// NodeStartResult is what that run did: which workflows it told of the boot, and what the
// node removed per cluster (or why it left a cluster alone).
type NodeStartResult struct {
	Told       []string          `json:"told,omitempty"`
	Removed    []string          `json:"removed,omitempty"`
	LeftAlone  map[string]string `json:"left_alone,omitempty"`
	Reconciled []string          `json:"reconciled,omitempty"`
}

// WantedRequest asks the controller which of a cluster's containers on a node should
// exist (ActivityNodeWanted).
type WantedRequest struct {
	Node    string `json:"node"`
	Cluster string `json:"cluster"`
}

// Wanted is the controller's answer, read from the cluster's runs: Known is false when no
// run of the cluster exists, Running while a deploy or teardown acts on it (the node then
// keeps everything); otherwise Keep are the IDs of the containers the serving deployment
// holds (none when it was torn down or failed), and Intent the operator's signature of
// the run that says so (the teardown's or the deploy's), which a node with trusted_keys
// checks before it removes anything (ReconcileRequest).
type Wanted struct {
	Known   bool     `json:"known"`
	Running bool     `json:"running"`
	Keep    []string `json:"keep,omitempty"`
	Intent  *Intent  `json:"intent,omitempty"`
	// Run is the workflow run the answer was read from, for the node's log.
	Run string `json:"run,omitempty"`
}

// ReconcileRequest asks a node to remove its containers of Cluster except Keep
// (ActivityReconcileCluster), on the signature of the run that says so.
type ReconcileRequest struct {
	Node    string   `json:"node"`
	Cluster string   `json:"cluster"`
	Keep    []string `json:"keep,omitempty"`
	Intent  *Intent  `json:"intent,omitempty"`
	Run     string   `json:"run,omitempty"`
}
