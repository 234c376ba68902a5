package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/metrics"
	"github.com/tpdeploy/tpdeploy/searchattr"
	"github.com/tpdeploy/tpdeploy/spec"
)

// SuperviseRequest is SuperviseCluster's input; the last three fields carry state across
// continue-as-new.
type SuperviseRequest struct {
	Spec spec.Cluster `json:"spec"`
	// Intent is the operator's signature of Spec, which recoveries and rollbacks carry.
	Intent *contract.Intent `json:"intent,omitempty"`
	// Serving is the deploy run that serves Spec (a staged deploy asks for it).
	Serving *contract.ServingDeployment `json:"serving,omitempty"`
	// CheckEvery is the health-check period (default 5s); Unhealthy the failed checks in a
	// row that count as an incident (default 3); MaxAttempts the redeploys per incident
	// (default 5) before the supervisor waits for the next incident.
	CheckEvery  spec.Duration `json:"check_every,omitempty"`
	Unhealthy   int           `json:"unhealthy,omitempty"`
	MaxAttempts int           `json:"max_attempts,omitempty"`
	// MaxLoops is how many checks and signals one run handles before it continues as
	// new (default 500, about 3500 history events); it also does when the server suggests
	// it or the history passes 4000 events.
	MaxLoops  int               `json:"max_loops,omitempty"`
	BootIDs   map[string]string `json:"boot_ids,omitempty"`
	Incidents []Incident        `json:"incidents,omitempty"`
	// WatchFor is how long one watch of a healthy cluster runs before it reports (default
	// 1h): the history grows by a few events per WatchFor, and with incidents.
	WatchFor spec.Duration `json:"watch_for,omitempty"`
	// Cooldown is the first wait of a degraded cluster before one more redeploy (default
	// 30m); each failed one doubles it, up to 4h.
	Cooldown spec.Duration `json:"cooldown,omitempty"`
	// Degraded, NextCooldown and Spent carry the circuit breaker across continue-as-new.
	Degraded     bool          `json:"degraded,omitempty"`
	LastCause    string        `json:"last_cause,omitempty"`
	NextCooldown spec.Duration `json:"next_cooldown,omitempty"`
	Spent        int           `json:"spent,omitempty"`
}

// Incident is one thing the supervisor saw and what it did about it.
type Incident struct {
	At       time.Time     `json:"at"`
	Node     string        `json:"node,omitempty"`
	Seen     string        `json:"seen"`
	Action   string        `json:"action"`
	Attempts int           `json:"attempts"`
	Outcome  string        `json:"outcome"`
	Took     time.Duration `json:"took"`
	// Cause names the incident when it is more than its Seen text says:
	// contract.IncidentEngineWedged.
	Cause string `json:"cause,omitempty"`
	// LastOutput is what each node's vLLM and Ray printed last, collected before the
	// recovery tore the cluster down.
	LastOutput map[string]string `json:"last_output,omitempty"`
	// rollbackOf is the failed deploy run that asked for this rollback: recover waits for
	// it to close rather than mistake it for a deploy someone else started.
	rollbackOf string
}

// rollbackWait is how long a rollback waits for the failed deploy that signalled it to
// close before starting the deploy that puts the spec back: the failed run signals and
// then completes, and the supervisor could see it still running.
const rollbackWait = time.Minute

// Supervision is the supervisor's state, for the query and `starter status`.
type Supervision struct {
	Cluster   string            `json:"cluster"`
	BootIDs   map[string]string `json:"boot_ids"`
	Healthy   bool              `json:"healthy"`
	LastCheck time.Time         `json:"last_check,omitzero"`
	Failures  int               `json:"failures"`
	Detail    string            `json:"detail,omitempty"`
	// Canary is the canary's last verdict.
	Canary    string     `json:"canary,omitempty"`
	Incidents []Incident `json:"incidents"`
	// Degraded says recovery gave up: no redeploy until something changes (a new spec
	// serving, a node reboot, `starter redeploy`) or the cool-down passes; LastCause is why.
	Degraded  bool      `json:"degraded,omitempty"`
	LastCause string    `json:"last_cause,omitempty"`
	NextTry   time.Time `json:"next_try,omitzero"`
	// Redeploys is how many redeploys the supervisor started, all incidents together.
	Redeploys int `json:"redeploys"`
	// Serving is the deploy run that last reached serving, the one a staged deploy of
	// another spec runs beside.
	Serving *contract.ServingDeployment `json:"serving,omitempty"`
}

// Deployed is what contract.SignalDeployed carries: the spec that now serves and the
// operator's signature of it.
type Deployed struct {
	Spec    spec.Cluster                `json:"spec"`
	Intent  *contract.Intent            `json:"intent,omitempty"`
	Serving *contract.ServingDeployment `json:"serving,omitempty"`
}

// keptIncidents bounds the incidents carried across continue-as-new; keptOutputs the
// incidents among them that keep what the nodes printed last.
const (
	keptIncidents = 50
	keptOutputs   = 3
)

// SuperviseCluster watches a serving cluster: one long-lived activity (WatchCluster)
// checks the endpoint every CheckEvery, and node agents report their boot ID when they
// start. A changed boot ID (a reboot), Unhealthy failed checks in a row, a failed deploy
// of another spec (a rollback) or an operator's request is an incident: it redeploys under
// the cluster's one deploy ID (re-probing, since addresses can change after a reboot, and
// recreating the containers), with backoff and at most MaxAttempts tries, and records what
// happened; a circuit breaker bounds the redeploys across incidents. It continues as new
// before its history grows large, and ends when cancelled (teardown).
func SuperviseCluster(ctx workflow.Context, req SuperviseRequest) error {
	sv := newSupervisor(req)
	if err := workflow.SetQueryHandler(ctx, contract.QuerySupervision, func() (Supervision, error) { return sv.state, nil }); err != nil {
		return err
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, searchattr.ClusterName.ValueSet(sv.spec.Name)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
	if len(sv.state.BootIDs) < len(sv.spec.Nodes) {
		sv.baseline(ctx)
	}
	return sv.watch(ctx)
}

// watch is the supervisor's loop: health is watched by one long-lived activity
// (WatchCluster, on any agent) that returns only on an incident or after WatchFor of
// health, so a healthy cluster adds a few history events an hour; node reboots, new specs,
// failed deploys and operators arrive as signals. Recovery has a budget across incidents:
// once it gives up, the cluster is degraded and is not redeployed again until something
// changes or a cool-down (doubling) passes.
func (sv *supervisor) watch(ctx workflow.Context) error {
	booted := workflow.GetSignalChannel(ctx, contract.SignalNodeBooted)
	deployed := workflow.GetSignalChannel(ctx, contract.SignalDeployed)
	manual := workflow.GetSignalChannel(ctx, contract.SignalRedeploy)
	failed := workflow.GetSignalChannel(ctx, contract.SignalDeployFailed)
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
				TaskQueue: checksQueue(sv.spec), StartToCloseTimeout: o.startToClose, HeartbeatTimeout: o.heartbeat,
				Summary:     "watch " + sv.spec.Name,
				RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute},
			})
			f := workflow.ExecuteActivity(actx, contract.ActivityWatchCluster, contract.WatchClusterRequest{
				Cluster: sv.spec.Name, Every: sv.every, Unhealthy: sv.unhealthy, For: sv.watchFor, Canary: canaryRequest(sv.spec)})
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
			var b contract.NodeBoot
			c.Receive(ctx, &b)
			if incident = sv.boot(ctx, b); incident != nil {
				sv.rearm(ctx, "a node rebooted")
			}
		})
		sel.AddReceive(deployed, func(c workflow.ReceiveChannel, _ bool) {
			var s Deployed
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
		var b contract.NodeBoot
		var s Deployed
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

// canaryRequest is the watch's canary from the spec (none when canary.off).
func canaryRequest(s spec.Cluster) contract.CanaryRequest {
	c := s.Canary.WithDefaults()
	if c.Off {
		return contract.CanaryRequest{}
	}
	return contract.CanaryRequest{Every: c.Every.D(), Timeout: c.Timeout.D(), Failures: c.Failures}
}

// health records what a watch saw; unhealthy is an incident.
func (sv *supervisor) health(ctx workflow.Context, h contract.ClusterHealth) *Incident {
	sv.state.LastCheck, sv.state.Healthy, sv.state.Detail, sv.state.Canary = h.LastCheck, h.Healthy, h.Detail, h.Canary
	metrics.Workflow(ctx).SupervisorState(sv.spec.Name, h.Healthy)
	if h.Healthy {
		sv.state.Failures = 0
		return nil
	}
	sv.state.Failures = sv.unhealthy
	inc := sv.newIncident(ctx, "", h.Detail)
	inc.Cause = h.Cause
	return inc
}

// deployed is a deploy that reached serving: the spec the supervisor puts back from now
// on; a degraded cluster is healthy again.
func (sv *supervisor) deployed(ctx workflow.Context, s Deployed) {
	sv.spec, sv.intent = s.Spec.WithDefaults(), s.Intent
	sv.state.Serving = s.Serving
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
	metrics.Workflow(ctx).Incident(sv.spec.Name, inc.Node, incidentCause(inc))
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
func incidentCause(inc *Incident) string {
	if inc.Cause != "" {
		return inc.Cause
	}
	seen := inc.Seen
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

type supervisor struct {
	spec        spec.Cluster
	intent      *contract.Intent
	every       time.Duration
	unhealthy   int
	maxAttempts int
	maxLoops    int
	state       Supervision
	// watchFor is one watch's length; cooldown and nextCooldown are the circuit breaker's
	// first and next wait.
	watchFor     time.Duration
	cooldown     time.Duration
	nextCooldown time.Duration
}

func newSupervisor(req SuperviseRequest) *supervisor {
	s := req.Spec.WithDefaults()
	sv := &supervisor{spec: s, intent: req.Intent, every: req.CheckEvery.D(), unhealthy: req.Unhealthy, maxAttempts: req.MaxAttempts,
		state: Supervision{Cluster: s.Name, BootIDs: req.BootIDs, Incidents: req.Incidents, Serving: req.Serving}}
	if sv.every <= 0 {
		sv.every = 5 * time.Second
	}
	if sv.unhealthy <= 0 {
		sv.unhealthy = 3
	}
	if sv.maxAttempts <= 0 {
		sv.maxAttempts = 5
	}
	if sv.maxLoops = req.MaxLoops; sv.maxLoops <= 0 {
		sv.maxLoops = 500
	}
	if sv.state.BootIDs == nil {
		sv.state.BootIDs = map[string]string{}
	}
	if sv.state.Incidents == nil {
		sv.state.Incidents = []Incident{}
	}
	if sv.watchFor = req.WatchFor.D(); sv.watchFor <= 0 {
		sv.watchFor = time.Hour
	}
	if sv.cooldown = req.Cooldown.D(); sv.cooldown <= 0 {
		sv.cooldown = 30 * time.Minute
	}
	if sv.nextCooldown = req.NextCooldown.D(); sv.nextCooldown <= 0 {
		sv.nextCooldown = sv.cooldown
	}
	sv.state.Degraded, sv.state.LastCause, sv.state.Redeploys = req.Degraded, req.LastCause, req.Spent
	return sv
}

func (sv *supervisor) continueAsNew(ctx workflow.Context) error {
	inc := sv.state.Incidents
	if len(inc) > keptIncidents {
		inc = inc[len(inc)-keptIncidents:]
	}
	// What the nodes printed is kept for the last few incidents only: it is large.
	inc = slices.Clone(inc)
	for i := range max(len(inc)-keptOutputs, 0) {
		inc[i].LastOutput = nil
	}
	return workflow.NewContinueAsNewError(ctx, SuperviseCluster, SuperviseRequest{
		Spec: sv.spec, Intent: sv.intent, Serving: sv.state.Serving, CheckEvery: spec.Duration(sv.every), Unhealthy: sv.unhealthy, MaxAttempts: sv.maxAttempts,
		MaxLoops: sv.maxLoops, BootIDs: sv.state.BootIDs, Incidents: inc,
		WatchFor: spec.Duration(sv.watchFor), Cooldown: spec.Duration(sv.cooldown), Degraded: sv.state.Degraded,
		LastCause: sv.state.LastCause, NextCooldown: spec.Duration(sv.nextCooldown), Spent: sv.state.Redeploys,
	})
}

// baseline asks every node for its boot ID; a node that does not answer is learnt from
// its agent's report when it starts.
func (sv *supervisor) baseline(ctx workflow.Context) {
	futures := map[string]workflow.Future{}
	for _, n := range sv.spec.Nodes {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue: contract.NodeQueue(n.Name), ScheduleToStartTimeout: sv.spec.Timeouts.NodeAgent.D(),
			StartToCloseTimeout: 10 * time.Second, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 2},
		})
		futures[n.Name] = workflow.ExecuteActivity(actx, contract.ActivityBootID, contract.BootIDRequest{Node: n.Name})
	}
	for _, n := range sv.spec.Nodes {
		var id string
		if err := futures[n.Name].Get(ctx, &id); err == nil {
			sv.state.BootIDs[n.Name] = id
		}
	}
}

// lastOutput asks every node for what the cluster's containers printed last, before the
// recovery's redeploy replaces them; a node that does not answer is left out.
func (sv *supervisor) lastOutput(ctx workflow.Context) map[string]string {
	futures := map[string]workflow.Future{}
	for _, n := range sv.spec.Nodes {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue: contract.NodeQueue(n.Name), ScheduleToStartTimeout: sv.spec.Timeouts.NodeAgent.D(),
			StartToCloseTimeout: 30 * time.Second, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
			Summary: "last output on " + n.Name,
		})
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

func (sv *supervisor) newIncident(ctx workflow.Context, node, seen string) *Incident {
	workflow.GetLogger(ctx).Warn("incident", "cluster", sv.spec.Name, "node", node, "seen", seen)
	return &Incident{At: workflow.Now(ctx), Node: node, Seen: seen}
}

// boot compares a node's reported boot ID with the one known.
func (sv *supervisor) boot(ctx workflow.Context, b contract.NodeBoot) *Incident {
	if _, ok := sv.spec.Node(b.Node); !ok || b.BootID == "" {
		return nil
	}
	old := sv.state.BootIDs[b.Node]
	sv.state.BootIDs[b.Node] = b.BootID
	if old == "" || old == b.BootID {
		return nil // first report, or the agent restarted without a reboot
	}
	return sv.newIncident(ctx, b.Node, fmt.Sprintf("boot ID changed %s -> %s: the node rebooted", short(old), short(b.BootID)))
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// recover redeploys with backoff until it serves or MaxAttempts is spent, and records
// the incident. A deploy already running (from the UI, the CLI or a schedule) is left to
// finish: there is never a second one.
func (sv *supervisor) recover(ctx workflow.Context, inc *Incident) {
	workflow.SetCurrentDetails(ctx, "incident: "+inc.Seen+"; redeploying")
	if c := incidentCause(inc); c == contract.IncidentEngineWedged || c == "unhealthy" {
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
				inc.Action, inc.Outcome = "none: a deploy was already running", "left to the running deploy"
				break
			}
			inc.Outcome = "redeploy did not start: " + err.Error()
		} else if err := child.Get(ctx, nil); err != nil {
			inc.Outcome = "redeploy failed: " + err.Error()
		} else {
			inc.Action, inc.Outcome = fmt.Sprintf("redeployed (re-probed, containers recreated) in %d attempt(s)", inc.Attempts), "serving again"
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
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("%s at %s: %s; %s (%s)", inc.Seen, inc.At.Format(time.RFC3339), inc.Action, inc.Outcome, inc.Took.Round(time.Second)))
	sv.baseline(ctx)
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
