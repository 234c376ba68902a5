package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/netplan"
	"github.com/tpdeploy/tpdeploy/spec"
)

// SignalDeployFailed tells a cluster's supervisor that a deploy which had touched the
// cluster failed (it may roll back to the spec that served).
const SignalDeployFailed = "deploy-failed"

// DeployFailure is what SignalDeployFailed carries.
type DeployFailure struct {
	SpecHash string `json:"spec_hash"`
	Type     string `json:"type"`
	RunID    string `json:"run_id"`
}

// Error types of ownership and node loss.
const (
	// ErrWrongWorkflowID refuses a deploy started under an ID other than the cluster's one.
	ErrWrongWorkflowID = "WrongWorkflowID"
	// ErrClusterBusy refuses a deploy while the cluster is being torn down.
	ErrClusterBusy = "ClusterBusy"
	// ErrNodeDown is a deploy that lost a node: its agent answered earlier and stopped.
	ErrNodeDown = "NodeDown"
	// ErrNodeRebooted is a deploy that ran out of restarts after reboots.
	ErrNodeRebooted = "NodeRebooted"
	// ErrNetworkChanged is a planned address no longer on its planned interface, found
	// before anything started: the deploy starts over from probing.
	ErrNetworkChanged = "NetworkChanged"
)

// nodeLoss are the failure types a lost or rebooted node can cause; after one of them the
// deploy asks every node for its boot ID before it decides.
var nodeLoss = []string{
	contract.ErrEngineDead, contract.ErrRayNodeDead, contract.ErrContainerExited, contract.ErrVLLMExited,
	contract.ErrNodeAgentDown, contract.ErrStepTimeout, contract.ErrRetriesExhausted, contract.ErrNCCL,
	contract.ErrC10dUnreachable, contract.ErrDockerUnreachable, contract.ErrNodeNotRegistered, contract.ErrCanceled,
}

// claim makes sure this run may act on the cluster's containers: it runs under the
// cluster's one deploy ID (so Temporal refuses a second one, whatever starts it), and no
// teardown of the cluster is running. A teardown cancels the running deploy before it
// removes anything, and a deploy started after the teardown began sees it here: between
// the two, the cluster has one owner at a time.
func (d *deployment) claim(ctx workflow.Context) error {
	want := DeployWorkflowID(d.spec.Name)
	if got := workflow.GetInfo(ctx).WorkflowExecution.ID; got != want {
		return &stepError{Step: "claim the cluster", Type: ErrWrongWorkflowID,
			Msg: fmt.Sprintf("a deploy of cluster %s runs under workflow ID %s (one deploy per cluster at a time), not %s: start it again with that ID", d.spec.Name, want, got)}
	}
	var busy contract.ClusterBusy
	err := workflow.ExecuteActivity(onWorkflowQueue(ctx, "is "+d.spec.Name+" being torn down", deployStep(30*time.Second, 3)),
		contract.ActivityTeardownRunning, contract.ClusterRequest{Cluster: d.spec.Name}).Get(ctx, &busy)
	if err != nil {
		return classify("claim the cluster", "", err)
	}
	if busy.Running {
		return &stepError{Step: "claim the cluster", Type: ErrClusterBusy,
			Msg: fmt.Sprintf("cluster %s is being torn down (workflow %s, run %s); deploy again once it ends", d.spec.Name, busy.WorkflowID, busy.RunID)}
	}
	return nil
}

// validate checks the spec as a local activity, so that its verdict is recorded and a
// later release's stricter rules cannot change this run on replay.
func (d *deployment) validate(ctx workflow.Context) error {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	if err := workflow.ExecuteLocalActivity(lctx, ValidateSpec, d.spec).Get(ctx, nil); err != nil {
		return &stepError{Step: "validate spec", Type: ErrSpecInvalid, Msg: message(err)}
	}
	return nil
}

// ValidateSpec is spec validation as a local activity: its verdict is recorded in history.
func ValidateSpec(_ context.Context, c spec.Cluster) error {
	if err := c.WithDefaults().Validate(); err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrSpecInvalid, nil)
	}
	return nil
}

// listenForReboots follows the boot reports node agents send when they start: a planned
// node whose boot ID differs from the one its probe reported has rebooted, so the steps in
// flight are cancelled and the deploy starts over.
func (d *deployment) listenForReboots(ctx workflow.Context) {
	ch := workflow.GetSignalChannel(ctx, SignalNodeBooted)
	workflow.Go(ctx, func(gctx workflow.Context) {
		for {
			var b NodeBoot
			if !ch.Receive(gctx, &b) {
				return
			}
			known := d.bootID(b.Node)
			if known == "" || b.BootID == "" || b.BootID == known || d.reboot != "" {
				continue // not probed yet, or an agent restart without a reboot
			}
			d.reboot = fmt.Sprintf("%s rebooted (boot ID %s -> %s)", b.Node, short(known), short(b.BootID))
			workflow.GetLogger(ctx).Warn("planned node rebooted during the deploy", "node", b.Node)
			if d.cancelRun != nil {
				d.cancelRun()
			}
		}
	})
}

// bootID is the boot ID the node's probe reported in this attempt, or "".
func (d *deployment) bootID(node string) string {
	for _, p := range d.probes {
		if p.Node == node {
			return p.BootID
		}
	}
	return ""
}

// addressLoss are the failure types a node whose interface came back renamed or
// renumbered causes (the plan's NCCL/Gloo interface names and addresses are then wrong).
var addressLoss = []string{contract.ErrNCCLNoInterface, contract.ErrGlooNoInterface, contract.ErrGlooLoopback}

// rebootedMeanwhile says which planned node rebooted or changed its network while the
// attempt ran, or "": a reboot its agent reported, or — after a failure a lost node or a
// changed network can cause — a node whose boot ID changed when asked, or whose planned
// address is no longer on its planned interface. A node whose agent does not answer then
// is recorded as down.
func (d *deployment) rebootedMeanwhile(ctx workflow.Context, err error) string {
	if d.reboot != "" {
		return d.reboot
	}
	var se *stepError
	if !errors.As(err, &se) || len(d.probes) == 0 {
		return ""
	}
	if se.Type == ErrNetworkChanged {
		return se.Msg
	}
	if !slices.Contains(nodeLoss, se.Type) && !slices.Contains(addressLoss, se.Type) {
		return ""
	}
	futures := map[string]workflow.Future{}
	addrs := map[string]workflow.Future{}
	for _, n := range d.spec.Nodes {
		actx := onNode(ctx, d.spec, n.Name, "boot ID of "+n.Name, checkStep(d.spec))
		futures[n.Name] = workflow.ExecuteActivity(actx, contract.ActivityBootID, contract.BootIDRequest{Node: n.Name})
		if np, ok := d.plannedNode(n.Name); ok {
			addrs[n.Name] = d.askAddressHolds(ctx, np, checkStep(d.spec))
		}
	}
	var rebooted []string
	for _, n := range d.spec.Nodes {
		var id string
		if err := futures[n.Name].Get(ctx, &id); err != nil {
			if classify("boot ID", n.Name, err).Type == contract.ErrNodeAgentDown {
				d.down[n.Name] = "its agent stopped answering"
			}
			continue
		}
		if known := d.bootID(n.Name); known != "" && id != known {
			rebooted = append(rebooted, fmt.Sprintf("%s rebooted (boot ID %s -> %s)", n.Name, short(known), short(id)))
			continue
		}
		if f, ok := addrs[n.Name]; ok {
			var chk contract.AddressCheck
			if err := f.Get(ctx, &chk); err == nil && !chk.Holds {
				rebooted = append(rebooted, fmt.Sprintf("%s's network changed (%s)", n.Name, chk.Detail))
			}
		}
	}
	return strings.Join(rebooted, "; ")
}

// plannedNode is the node's plan in this attempt, if planning got that far.
func (d *deployment) plannedNode(name string) (netplan.NodePlan, bool) {
	if d.state.Plan == nil {
		return netplan.NodePlan{}, false
	}
	return d.state.Plan.Node(name)
}

func (d *deployment) maxRestarts() int {
	if d.req.MaxRestarts > 0 {
		return d.req.MaxRestarts
	}
	return 3
}

// restart compensates what this attempt started and begins again from probing, with every
// container recreated (those on a rebooted node are stale).
func (d *deployment) restart(ctx workflow.Context, why string) {
	d.restarts++
	d.state.Restarts = append(d.state.Restarts, why)
	d.setPhase(ctx, PhaseCompensating, fmt.Sprintf("%s; starting over (restart %d of %d)", why, d.restarts, d.maxRestarts()))
	if err := d.saga.compensate(ctx); err != nil {
		d.state.Warnings = append(d.state.Warnings, "before restarting: "+err.Error())
	}
	d.state.Compensations = d.saga.ran
	if d.state.Plan != nil && !d.keepSubnet.IsValid() {
		// The next plan stays on this subnet (netplan.ChooseKeeping): starting over must
		// not quietly move the deploy to a slower network.
		d.keepSubnet = d.state.Plan.Subnet
	}
	d.state.Containers, d.state.Plan, d.probes, d.matrix = nil, nil, nil, nil
	d.reboot, d.down = "", map[string]string{}
	d.req.Replace = true
	// A rebooted node's agent takes a moment to come back: the next probe waits for it.
	d.probeAgentWait = max(6*d.spec.Timeouts.NodeAgent.D(), time.Minute)
}

// nodeDownCause names a node that went down as the failure's cause: a step whose agent
// stopped answering after it had answered in this run, or a failure after which a node's
// agent did not answer. Its type is NodeDown; the message keeps what failed.
func (d *deployment) nodeDownCause(se *stepError) *stepError {
	if se.Type == contract.ErrNodeAgentDown && se.Node != "" && d.answered[se.Node] {
		d.down[se.Node] = "its agent stopped answering"
	}
	var nodes []string
	for _, n := range d.spec.Nodes {
		if d.down[n.Name] != "" {
			nodes = append(nodes, n.Name)
		}
	}
	if len(nodes) == 0 || se.Type == contract.ErrCanceled {
		return se
	}
	var why []string
	for _, n := range nodes {
		why = append(why, n+": "+d.down[n])
	}
	return &stepError{Step: se.Step, Node: nodes[0], Type: ErrNodeDown,
		Msg: fmt.Sprintf("%s went down during the deploy (%s); what failed: %s", strings.Join(nodes, ", "), strings.Join(why, "; "), se.Error())}
}

// tellSupervisorFailed tells the cluster's supervisor, if one runs, that this deploy failed
// after touching the cluster, so it can put the spec that served back.
func (d *deployment) tellSupervisorFailed(ctx workflow.Context, typ string) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	err := workflow.SignalExternalWorkflow(dctx, SuperviseWorkflowID(d.spec.Name), "", SignalDeployFailed,
		DeployFailure{SpecHash: d.spec.Hash(), Type: typ, RunID: d.id}).Get(dctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Info("no supervisor told of the failure", "error", err)
	}
}

// errDeferred is a compensation left to the node's agent: the node is down, and the agent
// removes the cluster's containers that are no longer current when it starts.
type errDeferred struct{ why string }

func (e *errDeferred) Error() string { return "deferred: " + e.why }
