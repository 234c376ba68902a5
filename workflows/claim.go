package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/searchattr"
)

// A cluster has one owner at a time: the deploy that claimed it, or the teardown that took
// it over. Each runs under the cluster's one workflow ID of its kind, so Temporal refuses a
// second one whatever starts it; a teardown cancels the running deploy and waits for its
// compensations before it removes anything, and a deploy refuses a cluster being torn down.

// claim makes sure this run may act on the cluster's containers: it runs under the
// cluster's one deploy ID (so Temporal refuses a second one, whatever starts it), and no
// teardown of the cluster is running. A teardown cancels the running deploy before it
// removes anything, and a deploy started after the teardown began sees it here: between
// the two, the cluster has one owner at a time.
func (d *deployment) claim(ctx workflow.Context) error {
	want := contract.DeployWorkflowID(d.spec.Name)
	if got := workflow.GetInfo(ctx).WorkflowExecution.ID; got != want {
		return &stepError{Step: "claim the cluster", Type: contract.ErrWrongWorkflowID,
			Msg: fmt.Sprintf("a deploy of cluster %s runs under workflow ID %s (one deploy per cluster at a time), not %s: start it again with that ID", d.spec.Name, want, got)}
	}
	var busy contract.ClusterBusy
	err := workflow.ExecuteActivity(onWorkflowQueue(ctx, "is "+d.spec.Name+" being torn down", deployStep(30*time.Second, 3)),
		contract.ActivityTeardownRunning, contract.ClusterRequest{Cluster: d.spec.Name}).Get(ctx, &busy)
	if err != nil {
		return classify("claim the cluster", "", err)
	}
	if busy.Running {
		return &stepError{Step: "claim the cluster", Type: contract.ErrClusterBusy,
			Msg: fmt.Sprintf("cluster %s is being torn down (workflow %s, run %s); deploy again once it ends", d.spec.Name, busy.WorkflowID, busy.RunID)}
	}
	d.findServing(ctx)
	return nil
}

// takeOver makes the teardown the cluster's one owner, whatever started it (the CLI, the
// UI): it runs under the cluster's teardown ID (a deploy checks that ID before it starts),
// stops the supervisor (which would redeploy), pauses the redeploy schedule (whose next
// run would), and cancels a running deploy and waits until its compensations are done.
func (d *deployment) takeOver(ctx workflow.Context, res *TeardownResult) *stepError {
	name := d.spec.Name
	if got := workflow.GetInfo(ctx).WorkflowExecution.ID; got != contract.TeardownWorkflowID(name) {
		return &stepError{Step: "claim the cluster", Type: contract.ErrWrongWorkflowID,
			Msg: fmt.Sprintf("the teardown of cluster %s runs under workflow ID %s (so that a deploy can see it), not %s: start it again with that ID", name, contract.TeardownWorkflowID(name), got)}
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, searchattr.ClusterName.ValueSet(name)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
	_ = workflow.RequestCancelExternalWorkflow(ctx, contract.SuperviseWorkflowID(name), "").Get(ctx, nil)
	ops := deployStep(30*time.Second, 5)
	var paused string
	if err := workflow.ExecuteActivity(onWorkflowQueue(ctx, "pause the schedule of "+name, ops), contract.ActivityPauseSchedule,
		contract.PauseRequest{Cluster: name, Note: "paused by the teardown of " + name}).Get(ctx, &paused); err != nil {
		return classify("pause the schedule", "", err)
	}
	res.Notes = append(res.Notes, paused)
	if err := workflow.RequestCancelExternalWorkflow(ctx, contract.DeployWorkflowID(name), "").Get(ctx, nil); err == nil {
		res.Notes = append(res.Notes, "cancelled the running deploy")
	}
	wait := ops
	wait.startToClose, wait.heartbeat = d.spec.Timeouts.Teardown.D()+5*time.Minute, 30*time.Second
	var closed string
	if err := workflow.ExecuteActivity(onWorkflowQueue(ctx, "wait for the deploy of "+name+" to end", wait), contract.ActivityWaitClosed,
		contract.WaitRequest{WorkflowID: contract.DeployWorkflowID(name)}).Get(ctx, &closed); err != nil {
		return classify("wait for the deploy to end", "", err)
	}
	return nil
}
