package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/metrics"
	"github.com/tpdeploy/tpdeploy/spec"
)

// watch is the supervisor's loop: health is watched by one long-lived activity
// (WatchCluster, on any agent) that returns only on an incident or after WatchFor of
// health, so a healthy cluster adds a few history events an hour; node reboots, new specs,
// failed deploys and operators arrive as signals. Recovery has a budget across incidents:
// once it gives up, the cluster is degraded and is not redeployed again until something
// changes or a cool-down (doubling) passes.
func (sv *supervisor) watch(ctx workflow.Context) error {
	booted := workflow.GetSignalChannel(ctx, SignalNodeBooted)
	deployed := workflow.GetSignalChannel(ctx, SignalDeployed)
	manual := workflow.GetSignalChannel(ctx, SignalRedeploy)
	failed := workflow.GetSignalChannel(ctx, SignalDeployFailed)
	if sv.state.Detail == "" {
		sv.state.Detail = "no check yet"
	}
	for loop := 0; ; loop++ {
		info := workflow.GetInfo(ctx)
		if loop >= sv.maxLoops || info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() > 4000 {
			// Signals not yet handled would be lost with this run: handle them first.
			for {
				inc := sv.pending(ctx, booted, deployed, manual, failed)
				if inc == nil {
					break
				}
				sv.recover(ctx, inc)
			}
			return sv.continueAsNew(ctx)
		}
		var incident *Incident
		wctx, cancelWatch := workflow.WithCancel(ctx)
		sel := workflow.NewSelector(ctx)
		if sv.state.Degraded {
			sv.state.NextTry = workflow.Now(ctx).Add(sv.nextCooldown)
			sel.AddFuture(workflow.NewTimer(wctx, sv.nextCooldown), func(workflow.Future) {
				incident = sv.newIncident(ctx, "", fmt.Sprintf("cool-down of %s passed; degraded since: %s", sv.nextCooldown, sv.state.LastCause))
			})
		} else {
			o := stepOptions{startToClose: sv.watchFor + 2*time.Minute, heartbeat: 30 * time.Second}
			actx := workflow.WithActivityOptions(wctx, workflow.ActivityOptions{
				TaskQueue: contract.WorkflowQueue, StartToCloseTimeout: o.startToClose, HeartbeatTimeout: o.heartbeat,
				Summary:     "watch " + sv.spec.Name,
				RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute},
			})
			f := workflow.ExecuteActivity(actx, contract.ActivityWatchCluster, contract.WatchClusterRequest{
				Cluster: sv.spec.Name, Every: sv.every, Unhealthy: sv.unhealthy, For: sv.watchFor})
			sel.AddFuture(f, func(f workflow.Future) {
				var h contract.ClusterHealth
				if err := f.Get(ctx, &h); err != nil {
					if wctx.Err() == nil {
						sv.state.Detail = "watch failed: " + err.Error()
					}
					return
				}
				incident = sv.health(ctx, h)
			})
		}
		sel.AddReceive(booted, func(c workflow.ReceiveChannel, _ bool) {
			var b NodeBoot
			c.Receive(ctx, &b)
			if incident = sv.boot(ctx, b); incident != nil {
				sv.rearm(ctx, "a node rebooted")
			}
		})
		sel.AddReceive(deployed, func(c workflow.ReceiveChannel, _ bool) {
			var s spec.Cluster
			c.Receive(ctx, &s)
			sv.deployed(ctx, s)
		})
		sel.AddReceive(manual, func(c workflow.ReceiveChannel, _ bool) {
			var why string
			c.Receive(ctx, &why)
			sv.rearm(ctx, "an operator asked")
			incident = sv.newIncident(ctx, "", "redeploy requested: "+why)
		})
		sel.AddReceive(failed, func(c workflow.ReceiveChannel, _ bool) {
			var df DeployFailure
			c.Receive(ctx, &df)
			incident = sv.rollback(ctx, df)
		})
		sel.Select(ctx)
		cancelWatch()
		if ctx.Err() != nil {
			return temporal.NewCanceledError()
		}
		if incident != nil {
			sv.recover(ctx, incident)
		}
	}
}

// pending handles one signal already received, without blocking: the incident it makes,
// or nil when none is waiting or it makes none.
func (sv *supervisor) pending(ctx workflow.Context, booted, deployed, manual, failed workflow.ReceiveChannel) *Incident {
	for {
		var b NodeBoot
		var s spec.Cluster
		var why string
		var df DeployFailure
		switch {
		case booted.ReceiveAsync(&b):
			if inc := sv.boot(ctx, b); inc != nil {
				return inc
			}
		case deployed.ReceiveAsync(&s):
			sv.deployed(ctx, s)
		case manual.ReceiveAsync(&why):
			return sv.newIncident(ctx, "", "redeploy requested: "+why)
		case failed.ReceiveAsync(&df):
			if inc := sv.rollback(ctx, df); inc != nil {
				return inc
			}
		default:
			return nil
		}
	}
}

// health records what a watch saw; unhealthy is an incident.
func (sv *supervisor) health(ctx workflow.Context, h contract.ClusterHealth) *Incident {
	sv.state.LastCheck, sv.state.Healthy, sv.state.Detail = h.LastCheck, h.Healthy, h.Detail
	metrics.Workflow(ctx).SupervisorState(sv.spec.Name, h.Healthy)
	if h.Healthy {
		sv.state.Failures = 0
		return nil
	}
	sv.state.Failures = sv.unhealthy
	return sv.newIncident(ctx, "", h.Detail)
}

// deployed is a deploy that reached serving: the spec the supervisor puts back from now
// on; a degraded cluster is healthy again.
func (sv *supervisor) deployed(ctx workflow.Context, s spec.Cluster) {
	sv.spec = s.WithDefaults()
	sv.rearm(ctx, "a deploy serves spec "+sv.spec.Hash())
	sv.state.Healthy, sv.state.Failures = true, 0
}

// rollback: a deploy of another spec failed after touching the cluster; the spec that
// served goes back.
func (sv *supervisor) rollback(ctx workflow.Context, df DeployFailure) *Incident {
	if df.SpecHash == sv.spec.Hash() {
		return nil // its own recovery, or a redeploy of the serving spec: recover() decides
	}
	sv.rearm(ctx, "a deploy of another spec failed")
	inc := sv.newIncident(ctx, "", fmt.Sprintf("rollback: deploy %s of spec %s failed (%s) after touching the cluster; putting spec %s back",
		df.RunID, df.SpecHash, df.Type, sv.spec.Hash()))
	inc.rollbackOf = df.RunID
	return inc
}

// rearm closes the circuit breaker after a change: recovery gets its full budget again.
func (sv *supervisor) rearm(ctx workflow.Context, why string) {
	if sv.state.Degraded {
		workflow.GetLogger(ctx).Info("supervisor re-armed", "cluster", sv.spec.Name, "why", why)
	}
	sv.state.Degraded, sv.state.NextTry = false, time.Time{}
	sv.nextCooldown = sv.cooldown
}

// breaker opens after a recovery that gave up (the cluster is degraded, with its cause)
// and closes after one that served.
func (sv *supervisor) breaker(ctx workflow.Context, inc *Incident) {
	metrics.Workflow(ctx).Incident(sv.spec.Name, inc.Node, incidentCause(inc.Seen))
	if inc.Outcome == "serving again" || inc.Outcome == "left to the running deploy" {
		sv.rearm(ctx, inc.Outcome)
		return
	}
	if sv.state.Degraded {
		sv.nextCooldown = min(2*sv.nextCooldown, 4*time.Hour)
	}
	sv.state.Degraded, sv.state.LastCause = true, inc.Outcome
	sv.state.Healthy = false
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("%s degraded: %s; next try in %s unless a node reboots, a new spec serves or `starter redeploy %s`",
		sv.spec.Name, inc.Outcome, sv.nextCooldown, sv.spec.Name))
}

// incidentCause is an incident's cause as a metric label: a few values, never free text.
func incidentCause(seen string) string {
	switch {
	case strings.HasPrefix(seen, "boot ID changed"):
		return "reboot"
	case strings.HasPrefix(seen, "rollback:"):
		return "rollback"
	case strings.HasPrefix(seen, "redeploy requested"):
		return "requested"
	default:
		return "unhealthy"
	}
}
