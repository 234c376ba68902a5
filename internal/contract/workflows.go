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
