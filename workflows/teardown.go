package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/searchattr"
	"github.com/tpdeploy/tpdeploy/spec"
)

// TeardownRequest is TeardownCluster's input.
type TeardownRequest struct {
	Spec spec.Cluster `json:"spec"`
}

// TeardownResult lists what was removed on each node.
type TeardownResult struct {
	Removed []contract.RemoveResult `json:"removed"`
	// NeverDeployed says the cluster had no deploy to tear down (nothing was done).
	NeverDeployed bool `json:"never_deployed,omitempty"`
	// Notes say what else the teardown did (the schedule paused, a deploy cancelled).
	Notes []string `json:"notes,omitempty"`
}

// TeardownCluster removes every container of the cluster on every node (all roles, any
// deployment). Removing a cluster that runs nothing is a no-op, not an error.
func TeardownCluster(ctx workflow.Context, req TeardownRequest) (TeardownResult, error) {
	d := newDeployment(ctx, DeployRequest{Spec: req.Spec, Trigger: "teardown"})
	if err := d.validate(ctx); err != nil {
		var se *stepError
		errors.As(err, &se)
		return TeardownResult{}, toFailure(se, nil)
	}
	var res TeardownResult
	if err := d.takeOver(ctx, &res); err != nil {
		return res, toFailure(err, nil)
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("removing cluster %s from %d nodes", d.spec.Name, len(d.spec.Nodes)))
	o := cleanupStep(d.spec)
	err := forEachNode(ctx, "teardown", nodeNames(d.spec.Nodes), func(node string) workflow.Future {
		n, _ := d.spec.Node(node)
		return workflow.ExecuteActivity(d.onNode(ctx, node, "remove cluster containers on "+node, o), contract.ActivityRemoveContainers,
			contract.RemoveRequest{Node: node, DockerHost: n.DockerHost, Cluster: d.spec.Name})
	}, func(_ string, r contract.RemoveResult) { res.Removed = append(res.Removed, r) })
	if err != nil {
		var se *stepError
		if errors.As(err, &se) {
			return res, toFailure(se, nil)
		}
		return res, err
	}
	return res, nil
}

// takeOver makes the teardown the cluster's one owner, whatever started it (the CLI, the
// UI): it runs under the cluster's teardown ID (a deploy checks that ID before it starts),
// stops the supervisor (which would redeploy), pauses the redeploy schedule (whose next
// run would), and cancels a running deploy and waits until its compensations are done.
func (d *deployment) takeOver(ctx workflow.Context, res *TeardownResult) *stepError {
	name := d.spec.Name
	if got := workflow.GetInfo(ctx).WorkflowExecution.ID; got != TeardownWorkflowID(name) {
		return &stepError{Step: "claim the cluster", Type: ErrWrongWorkflowID,
			Msg: fmt.Sprintf("the teardown of cluster %s runs under workflow ID %s (so that a deploy can see it), not %s: start it again with that ID", name, TeardownWorkflowID(name), got)}
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, searchattr.ClusterName.ValueSet(name)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
	_ = workflow.RequestCancelExternalWorkflow(ctx, SuperviseWorkflowID(name), "").Get(ctx, nil)
	ops := deployStep(30*time.Second, 5)
	var paused string
	if err := workflow.ExecuteActivity(onWorkflowQueue(ctx, "pause the schedule of "+name, ops), contract.ActivityPauseSchedule,
		contract.PauseRequest{Cluster: name, Note: "paused by the teardown of " + name}).Get(ctx, &paused); err != nil {
		return classify("pause the schedule", "", err)
	}
	res.Notes = append(res.Notes, paused)
	if err := workflow.RequestCancelExternalWorkflow(ctx, DeployWorkflowID(name), "").Get(ctx, nil); err == nil {
		res.Notes = append(res.Notes, "cancelled the running deploy")
	}
	wait := ops
	wait.startToClose, wait.heartbeat = d.spec.Timeouts.Teardown.D()+5*time.Minute, 30*time.Second
	var closed string
	if err := workflow.ExecuteActivity(onWorkflowQueue(ctx, "wait for the deploy of "+name+" to end", wait), contract.ActivityWaitClosed,
		contract.WaitRequest{WorkflowID: DeployWorkflowID(name)}).Get(ctx, &closed); err != nil {
		return classify("wait for the deploy to end", "", err)
	}
	return nil
}
