package workflows

import (
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/searchattr"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// RedeployRequest is RedeployCluster's input: the spec the cluster should run.
type RedeployRequest struct {
	Spec    spec.Cluster `json:"spec"`
	Trigger string       `json:"trigger,omitempty"`
	// Intent is the operator's signature of Spec, which the deploys it starts carry.
	Intent *contract.Intent `json:"intent,omitempty"`
}

// Redeploy actions.
const (
	RedeployNoop     = "noop"     // the latest deploy serves this very spec
	RedeployDeployed = "deployed" // a deploy ran to serving
	RedeploySkipped  = "skipped"  // a deploy of the cluster was already running
)

// RedeployResult says what a trigger did and why.
type RedeployResult struct {
	Cluster     string `json:"cluster"`
	Action      string `json:"action"`
	Reason      string `json:"reason"`
	DeployRunID string `json:"deploy_run_id,omitempty"`
}

// checkLatest is the trigger's look at the cluster's latest deploy and its endpoint: one
// check on the controller, or, for a keyed spec, the controller's read of the run and the
// head's check of it (headChecksSplit).
func checkLatest(ctx workflow.Context, s spec.Cluster) (contract.DeploymentCheck, error) {
	var chk contract.DeploymentCheck
	if !headChecksSplit(ctx, s) {
		actx := onChecksQueue(ctx, s, "check the latest deploy of "+s.Name, deploymentCheck(s))
		err := workflow.ExecuteActivity(actx, contract.ActivityCheckDeployment, contract.CheckDeploymentRequest{Cluster: s.Name}).Get(ctx, &chk)
		return chk, err
	}
	var t contract.CheckTarget
	rctx := onWorkflowQueue(ctx, "read the latest deploy of "+s.Name, deploymentCheck(s))
	if err := workflow.ExecuteActivity(rctx, contract.ActivityDeployTarget, contract.TargetRequest{Cluster: s.Name}).Get(ctx, &t); err != nil {
		return chk, err
	}
	if !t.Exists || t.Running || t.Plan == nil {
		return t.DeploymentCheck, nil
	}
	actx := onChecksQueue(ctx, s, "check the latest deploy of "+s.Name, deploymentCheck(s))
	err := workflow.ExecuteActivity(actx, contract.ActivityCheckTarget, t).Get(ctx, &chk)
	return chk, err
}

// RedeployCluster is what schedules (and recovery) start: it converges on the cluster's
// one deploy workflow ID, so it can never run a second deploy beside one started from the
// UI or the CLI. A deploy that serves the same spec and answers is left alone (a no-op,
// recorded); otherwise DeployCluster runs as a child under contract.DeployWorkflowID and this run
// fails if it fails (a schedule then pauses).
func RedeployCluster(ctx workflow.Context, req RedeployRequest) (RedeployResult, error) {
	s := req.Spec.WithDefaults()
	res := RedeployResult{Cluster: s.Name}
	if err := s.Validate(); err != nil {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrSpecInvalid, nil)
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, searchattr.ClusterName.ValueSet(s.Name)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
	chk, err := checkLatest(ctx, s)
	if err != nil {
		return res, err
	}
	done := func(action, reason string) (RedeployResult, error) {
		res.Action, res.Reason = action, reason
		workflow.SetCurrentDetails(ctx, action+": "+reason)
		workflow.GetLogger(ctx).Info("redeploy "+action, "cluster", s.Name, "reason", reason)
		return res, nil
	}
	switch {
	case chk.Running:
		return done(RedeploySkipped, "deploy "+chk.RunID+" is running")
	case chk.Closed == "Completed" && chk.SpecHash == s.Hash() && chk.Healthy:
		res.DeployRunID = chk.RunID
		return done(RedeployNoop, fmt.Sprintf("deploy %s serves spec %s at %s", chk.RunID, s.Hash(), chk.Endpoint))
	}
	why := "never deployed"
	switch {
	case !chk.Exists:
	case chk.Closed != "Completed":
		why = "latest deploy ended " + chk.Closed
	case chk.SpecHash != s.Hash():
		why = fmt.Sprintf("spec changed (%s -> %s)", chk.SpecHash, s.Hash())
	default:
		why = "not serving: " + chk.Detail
	}
	workflow.SetCurrentDetails(ctx, "redeploying: "+why)
	child := workflow.ExecuteChildWorkflow(clusterChild(ctx, contract.DeployWorkflowID(s.Name)), DeployCluster, DeployRequest{Spec: s, Trigger: req.Trigger, Intent: req.Intent})
	var exec workflow.Execution
	if err := child.GetChildWorkflowExecution().Get(ctx, &exec); err != nil {
		if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
			return done(RedeploySkipped, "a deploy of "+s.Name+" started meanwhile")
		}
		return res, err
	}
	res.DeployRunID = exec.RunID
	if err := child.Get(ctx, nil); err != nil {
		return res, err
	}
	return done(RedeployDeployed, why)
}

// clusterChild sets ctx to start a workflow that belongs to the cluster, not to the
// workflow starting it: under the cluster's fixed ID (so a second one is refused while one
// runs), reusable once closed, and left running if the starter ends.
func clusterChild(ctx workflow.Context, id string) workflow.Context {
	return workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            id,
		TaskQueue:             contract.WorkflowQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
	})
}
