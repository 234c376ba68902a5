package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// A planned node that reboots during the deploy, or whose network changes under it, makes
// the deploy compensate and start over from probing (addresses can change with a reboot),
// up to MaxRestarts times. Two ways to hear of it: the boot report its agent sends when it
// starts (listenForReboots), and, after a failure that a lost node or a changed network
// can cause, asking every node (rebootedMeanwhile).

// listenForReboots follows the boot reports node agents send when they start: a planned
// node whose boot ID differs from the one its probe reported has rebooted, so the steps in
// flight are cancelled and the deploy starts over.
func (d *deployment) listenForReboots(ctx workflow.Context) {
	ch := workflow.GetSignalChannel(ctx, contract.SignalNodeBooted)
	workflow.Go(ctx, func(gctx workflow.Context) {
		for {
			var b contract.NodeBoot
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

// nodeLoss are the failure types a lost or rebooted node can cause; after one of them the
// deploy asks every node for its boot ID before it decides.
var nodeLoss = []string{
	contract.ErrEngineDead, contract.ErrRayNodeDead, contract.ErrContainerExited, contract.ErrVLLMExited,
	contract.ErrNodeAgentDown, contract.ErrStepTimeout, contract.ErrRetriesExhausted, contract.ErrNCCL,
	contract.ErrCollectiveTimeout, contract.ErrC10dUnreachable, contract.ErrDockerUnreachable, contract.ErrNodeNotRegistered, contract.ErrCanceled,
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
	if se.Type == contract.ErrNetworkChanged {
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

// engineLoss are the failure types a node's memory guard stopping its engine containers
// causes elsewhere: the head sees the Ray node die, vLLM exit, NCCL lose a peer.
var engineLoss = []string{
	contract.ErrRayNodeDead, contract.ErrEngineDead, contract.ErrContainerExited, contract.ErrVLLMExited, contract.ErrNCCL,
}

// guardTripped is HostMemoryPressure when, after a failure a lost engine causes, a node's
// memory guard says it stopped the cluster's engines: what failed was the guard's stop
// (a Ray worker's node is only a dead Ray node at the head), and the breaker and the
// operator need the memory, not Ray, named. Nil otherwise.
func (d *deployment) guardTripped(ctx workflow.Context, err error) error {
	var se *stepError
	if !errors.As(err, &se) || !slices.Contains(engineLoss, se.Type) {
		return nil
	}
	if workflow.GetVersion(ctx, "guard-trip-named", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	futures := map[string]workflow.Future{}
	for _, n := range d.spec.Nodes {
		actx := onNode(ctx, d.spec, n.Name, "memory guard of "+n.Name, checkStep(d.spec))
		futures[n.Name] = workflow.ExecuteActivity(actx, contract.ActivityGuardTrip, contract.GuardTripRequest{Node: n.Name, Cluster: d.spec.Name})
	}
	for _, n := range d.spec.Nodes {
		var t contract.GuardTrip
		if futures[n.Name].Get(ctx, &t) == nil && t.Tripped {
			return &stepError{Step: se.Step, Node: n.Name, Type: contract.ErrHostMemoryPressure, Msg: t.Message + " (what the deploy saw: " + se.Type + ": " + se.Msg + ")"}
		}
	}
	return nil
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
	compensate := d.saga.compensate
	if workflow.GetVersion(ctx, restartKeepsPartialModel, workflow.DefaultVersion, 1) == 1 {
		compensate = d.saga.compensateForRestart
	}
	if err := compensate(ctx); err != nil {
		d.state.Warnings = append(d.state.Warnings, "before restarting: "+err.Error())
	}
	d.state.Compensations = d.saga.ran
	if d.state.Plan != nil && !d.keepSubnet.IsValid() {
		// The next plan stays on this subnet (netplan.ChooseKeeping): starting over must
		// not quietly move the deploy to a slower network.
		d.keepSubnet = d.state.Plan.Subnet
	}
	d.state.Containers, d.state.Plan, d.probes, d.matrix, d.ephemeral = nil, nil, nil, nil, nil
	d.reboot, d.down = "", map[string]string{}
	d.req.Replace = true
	// A rebooted node's agent takes a moment to come back: the next probe waits for it.
	d.probeAgentWait = max(6*d.spec.Timeouts.NodeAgent.D(), time.Minute)
}
