package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// stepOptions are the timeouts and retries of one kind of activity. Every workflow builds
// them with the functions below, one per kind, so that deploy steps, compensations,
// checks and teardown each wait for an agent as long as their kind should.
type stepOptions struct {
	startToClose time.Duration
	heartbeat    time.Duration
	attempts     int32
	// agentWait is how long a task may wait for its node's agent (ScheduleToStart); zero
	// is the spec's timeouts.node_agent.
	agentWait time.Duration
	// maxBackoff caps the wait between attempts (15 s when zero).
	maxBackoff time.Duration
	// unwaited: a cancelled step is not waited for, the workflow goes on at once. Only for
	// steps that start and remove nothing (the supervisor's watch and looks, a trigger's
	// check); a container step must finish or acknowledge a cancel first.
	unwaited bool
}

// stepAttempts is how many times a deploy step on a node runs before its retryable failure
// fails the deploy. With the retry policy's backoff (1, 2, 4, 8 s) five attempts span about
// 15 s: an engine that answers 500 or refuses connections for that long (dockerd
// restarting, an overloaded engine) is survived; the fault matrix showed three attempts
// (3 s) were not. Failures that retrying cannot fix are non-retryable and end at once.
const stepAttempts = 5

// deployStep is a step of a deploy on a node: an agent that does not pick it up within
// timeouts.node_agent is down (found in seconds, not minutes).
func deployStep(startToClose time.Duration, attempts int32) stepOptions {
	return stepOptions{startToClose: startToClose, attempts: attempts, heartbeat: stepHeartbeat}
}

// stepHeartbeat is how soon an agent that died mid-step is noticed: every agent heartbeats
// for its running activities (internal/liveness), so a step that stops heartbeating is
// retried, on the agent once it is back, after this long rather than after the step's
// start-to-close timeout. Agents and workflows ship as one binary; an agent without the
// heartbeat (older than this) would see its steps time out — upgrade every agent together.
const stepHeartbeat = 15 * time.Second

// watchStep is the serving watch: long, heartbeating, and it waits for an agent that
// restarts mid-load (systemd, a crash) rather than failing the deploy.
func watchStep(c spec.Cluster, every time.Duration) stepOptions {
	return stepOptions{startToClose: every + time.Minute, heartbeat: 15 * time.Second, attempts: 10,
		agentWait: max(3*c.Timeouts.NodeAgent.D(), 30*time.Second)}
}

// cleanupStep is a removal (a compensation or a teardown): idempotent, so it retries more
// and waits longer for an agent that is restarting; an agent still down after that is left
// to remove the containers itself when it starts (it reconciles on start-up).
func cleanupStep(c spec.Cluster) stepOptions {
	return stepOptions{startToClose: c.Timeouts.Teardown.D(), attempts: 5, heartbeat: stepHeartbeat,
		agentWait: max(3*c.Timeouts.NodeAgent.D(), 30*time.Second)}
}

// routerStep is a router activity (start it, set or drain a route): a drain waits for the
// requests in flight, up to routerDrainTimeout, heartbeating.
func routerStep() stepOptions {
	return stepOptions{startToClose: routerDrainTimeout + time.Minute, attempts: 3, heartbeat: 30 * time.Second}
}

// routerDrainTimeout bounds a drain's wait for the old engine's requests in flight (a
// long completion); past it the engine stops under them, and the swap goes on.
const routerDrainTimeout = 2 * time.Minute

// checkStep is a cheap look (boot IDs, Ray's nodes): one attempt; a failure is an answer.
func checkStep(c spec.Cluster) stepOptions {
	return stepOptions{startToClose: 10 * time.Second, attempts: 1, agentWait: c.Timeouts.NodeAgent.D()}
}

// healthWatch is the supervisor's watch of a serving cluster (WatchCluster): one watch's
// length and a margin, heartbeating, retried without end (backing off to a minute), since
// the watch is what the supervisor is for; cancelled when a signal arrives, and left to
// end on its own then.
func healthWatch(watchFor time.Duration) stepOptions {
	return stepOptions{startToClose: watchFor + 2*time.Minute, heartbeat: 30 * time.Second, maxBackoff: time.Minute, unwaited: true}
}

// supervisorLook is a look the supervisor takes at a node (its boot ID, what its
// containers printed last): a failure is an answer, so few attempts.
func supervisorLook(startToClose time.Duration, attempts int32) stepOptions {
	return stepOptions{startToClose: startToClose, attempts: attempts, unwaited: true}
}

// deploymentCheck is a trigger's look at the cluster's latest deploy and its endpoint
// (RedeployCluster). On the head's agent (checksQueue), an agent that is down fails the
// run in bounded time.
func deploymentCheck(c spec.Cluster) stepOptions {
	return stepOptions{startToClose: 30 * time.Second, attempts: 3, agentWait: max(3*c.Timeouts.NodeAgent.D(), 30*time.Second), unwaited: true}
}

// asDecision returns ctx set to run a pure decision (validating the spec, the release's
// model, the plan) as a local activity: its verdict is recorded in history, so a later
// release's rules cannot change a run on replay; one attempt, as a retry would decide the
// same.
func asDecision(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
}

// onNode returns ctx set to run an activity of kind o on node's own task queue.
func onNode(ctx workflow.Context, c spec.Cluster, node, summary string, o stepOptions) workflow.Context {
	wait := c.Timeouts.NodeAgent.D()
	if o.agentWait > 0 {
		wait = o.agentWait
	}
	return withStep(ctx, contract.NodeQueue(node), wait, summary, o)
}

// checksQueue is where a cluster's readiness checks run (the supervisor's watch, a
// redeploy's look at the deploy that serves): on the controller, or, when the spec has vLLM's
// API key, on the head's agent, which resolves the key (contract.HeadChecks). The head's
// agent being down then leaves the check waiting for it; its reboot is an incident anyway.
func checksQueue(c spec.Cluster) string {
	if c.Secrets.APIKey != nil {
		return contract.NodeQueue(c.Head().Name)
	}
	return contract.WorkflowQueue
}

// headChecksSplitVersion: from here on the readiness checks of a spec with vLLM's API key
// read what to check on the controller (DeployTarget; ServingDeployment unchecked) and check
// it on the head's agent (CheckTarget, WatchTarget), which then makes no Temporal call, so
// an agent's credentials need no read of any workflow (docs/security.md, "the calls an
// agent makes"). Runs from before had the head's agent read the deploy's runs itself.
// Asked only for keyed specs, so the histories of specs without a key take no new command.
const headChecksSplitVersion = "head-checks-split"

// headChecksSplit says whether c's checks run split (headChecksSplitVersion).
func headChecksSplit(ctx workflow.Context, c spec.Cluster) bool {
	return c.Secrets.APIKey != nil && workflow.GetVersion(ctx, headChecksSplitVersion, workflow.DefaultVersion, 1) == 1
}

// onChecksQueue returns ctx set to run a readiness check on checksQueue(c): on the
// workflow queue the controller answers, with no bound on the wait; on the head's queue the
// kind's agentWait bounds it (zero: none either; the watch waits for the head's agent).
func onChecksQueue(ctx workflow.Context, c spec.Cluster, summary string, o stepOptions) workflow.Context {
	queue, wait := checksQueue(c), o.agentWait
	if queue == contract.WorkflowQueue {
		wait = 0
	}
	return withStep(ctx, queue, wait, summary, o)
}

// onWorkflowQueue returns ctx set to run an operations activity (served by the controller).
func onWorkflowQueue(ctx workflow.Context, summary string, o stepOptions) workflow.Context {
	return withStep(ctx, contract.WorkflowQueue, 0, summary, o)
}

func withStep(ctx workflow.Context, queue string, agentWait time.Duration, summary string, o stepOptions) workflow.Context {
	maxBackoff := 15 * time.Second
	if o.maxBackoff > 0 {
		maxBackoff = o.maxBackoff
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              queue,
		ScheduleToStartTimeout: agentWait,
		StartToCloseTimeout:    o.startToClose,
		HeartbeatTimeout:       o.heartbeat,
		// Container steps must finish or acknowledge a cancel before compensations run, or
		// a teardown could race a container still being created.
		WaitForCancellation: !o.unwaited,
		Summary:             summary,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        maxBackoff,
			MaximumAttempts:        o.attempts,
			NonRetryableErrorTypes: nonRetryable,
		},
	})
}
