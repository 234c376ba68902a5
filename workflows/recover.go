package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/metrics"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Recovery: an incident is answered by redeploying the spec that serves under the
// cluster's one deploy ID, with backoff, at most MaxAttempts times. A circuit breaker
// bounds the redeploys across incidents: once a recovery gives up, the cluster is degraded
// and gets one try per cool-down (doubling, up to 4 h) until something changes — a node
// reboots, a new spec serves, an operator asks (rearm).

// rollbackWait is how long a rollback waits for the failed deploy that signalled it to
// close before starting the deploy that puts the spec back: the failed run signals and
// then completes, and the supervisor could see it still running.
const rollbackWait = time.Minute

// maxCooldown bounds the degraded cluster's doubling wait.
const maxCooldown = 4 * time.Hour

// recover redeploys with backoff until it serves or MaxAttempts is spent, and records
// the incident. A deploy already running (from the UI, the CLI or a schedule) is left to
// finish: there is never a second one.
func (sv *supervisor) recover(ctx workflow.Context, inc *Incident) {
	workflow.SetCurrentDetails(ctx, "incident: "+inc.Seen+"; redeploying")
	sv.routeDown(ctx, inc)
	if inc.Cause.engineOutputTells() {
		inc.LastOutput = sv.lastOutput(ctx)
	}
	backoff := 10 * time.Second
	budget := sv.maxAttempts
	if sv.state.Degraded {
		budget = 1 // a degraded cluster gets one try per cool-down or change
	}
	for inc.Attempts < budget {
		inc.Attempts++
		sv.state.Redeploys++
		child := workflow.ExecuteChildWorkflow(clusterChild(ctx, contract.DeployWorkflowID(sv.spec.Name)), DeployCluster, DeployRequest{Spec: sv.spec, Intent: sv.intent, Trigger: "recovery", Replace: true})
		if err := child.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
			if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
				if inc.rollbackOf != "" && workflow.Now(ctx).Sub(inc.At) < rollbackWait {
					// Most likely the failed run itself, still closing after its signal.
					inc.Attempts--
					sv.state.Redeploys--
					_ = workflow.Sleep(ctx, time.Second)
					continue
				}
				inc.Action, inc.Outcome, inc.Error = "none: a deploy was already running", OutcomeLeftToDeploy, ""
				break
			}
			inc.Outcome, inc.Error = OutcomeNotStarted, err.Error()
		} else if err := child.Get(ctx, nil); err != nil {
			inc.Outcome, inc.Error = OutcomeFailed, err.Error()
		} else {
			inc.Action = fmt.Sprintf("redeployed (re-probed, containers recreated) in %d attempt(s)", inc.Attempts)
			inc.Outcome, inc.Error = OutcomeServing, ""
			sv.state.Healthy, sv.state.Failures = true, 0
			break
		}
		if inc.Attempts < budget {
			_ = workflow.Sleep(ctx, backoff)
			backoff = min(2*backoff, 2*time.Minute)
		}
	}
	if inc.Action == "" {
		inc.Action = fmt.Sprintf("gave up after %d redeploys", inc.Attempts)
	}
	sv.breaker(ctx, inc)
	inc.Took = workflow.Now(ctx).Sub(inc.At)
	sv.state.Incidents = append(sv.state.Incidents, *inc)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("%s at %s: %s; %s (%s)", inc.Seen, inc.At.Format(time.RFC3339), inc.Action, inc.OutcomeText(), inc.Took.Round(time.Second)))
	sv.baseline(ctx)
}

// breaker opens after a recovery that gave up (the cluster is degraded, with its cause)
// and closes after one that served.
func (sv *supervisor) breaker(ctx workflow.Context, inc *Incident) {
	metrics.Workflow(ctx).Incident(sv.spec.Name, inc.Node, string(inc.Cause))
	if inc.Outcome.closesBreaker() {
		sv.rearm(ctx, string(inc.Outcome))
		return
	}
	if sv.state.Degraded {
		sv.state.NextCooldown = spec.Duration(min(2*sv.state.NextCooldown.D(), maxCooldown))
	}
	sv.state.Degraded, sv.state.LastCause = true, inc.OutcomeText()
	sv.state.Healthy = false
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("%s degraded: %s; next try in %s unless a node reboots, a new spec serves or `starter redeploy %s`",
		sv.spec.Name, inc.OutcomeText(), sv.state.NextCooldown.D(), sv.spec.Name))
}

// rearm closes the circuit breaker after a change: recovery gets its full budget again.
func (sv *supervisor) rearm(ctx workflow.Context, why string) {
	if sv.state.Degraded {
		workflow.GetLogger(ctx).Info("supervisor re-armed", "cluster", sv.spec.Name, "why", why)
	}
	sv.state.Degraded, sv.state.NextTry = false, time.Time{}
	sv.state.NextCooldown = spec.Duration(sv.cooldown)
}

// lastOutput asks every node for what the cluster's containers printed last, before the
// recovery's redeploy replaces them; a node that does not answer is left out.
func (sv *supervisor) lastOutput(ctx workflow.Context) map[string]string {
	futures := map[string]workflow.Future{}
	for _, n := range sv.spec.Nodes {
		actx := onNode(ctx, sv.spec, n.Name, "last output on "+n.Name, supervisorLook(30*time.Second, 1))
		futures[n.Name] = workflow.ExecuteActivity(actx, contract.ActivityLastOutput, contract.LastOutputRequest{
			Node: n.Name, DockerHost: n.DockerHost, Cluster: sv.spec.Name})
	}
	out := map[string]string{}
	for _, n := range sv.spec.Nodes {
		var s string
		if err := futures[n.Name].Get(ctx, &s); err != nil {
			out[n.Name] = "not collected: " + err.Error()
			continue
		}
		out[n.Name] = s
	}
	return out
}

// DeployFailure is what contract.SignalDeployFailed carries from a failed deploy to the
// cluster's supervisor (both ends are workflows, so it lives here).
type DeployFailure struct {
	SpecHash string `json:"spec_hash"`
	Type     string `json:"type"`
	RunID    string `json:"run_id"`
}

// tellSupervisorFailed tells the cluster's supervisor, if one runs, that this deploy failed
// after touching the cluster, so it can put the spec that served back.
func (d *deployment) tellSupervisorFailed(ctx workflow.Context, typ string) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	err := workflow.SignalExternalWorkflow(dctx, contract.SuperviseWorkflowID(d.spec.Name), "", contract.SignalDeployFailed,
		DeployFailure{SpecHash: d.specHash(), Type: typ, RunID: d.id}).Get(dctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Info("no supervisor told of the failure", "error", err)
	}
}
