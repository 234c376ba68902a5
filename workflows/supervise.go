package workflows

import (
	"crypto/ed25519"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/metrics"
	"github.com/tpdeploy/tpdeploy/internal/searchattr"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// SuperviseCluster is the cluster's entity workflow: one per cluster, from the first deploy
// that serves until a teardown, under contract.SuperviseWorkflowID. Everything it knows
// is one value, Supervision: what the query answers and what continue-as-new hands on
// whole, so a field added there is carried without a line anywhere else.

// SuperviseRequest is SuperviseCluster's input: what serves (the spec, the operator's
// signature of it and, on the first run, the deploy run), how to supervise it, and State,
// what the run before this one knew. Continue-as-new passes the request on with the spec
// that serves then and the state; the options go on as they were given.
type SuperviseRequest struct {
	Spec spec.Cluster `json:"spec"`
	// Intent is the operator's signature of Spec, which recoveries and rollbacks carry.
	Intent *contract.Intent `json:"intent,omitempty"`
	// Serving is the deploy run that serves Spec when the supervisor starts (a staged
	// deploy asks for it); from then on State carries it.
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
	MaxLoops int `json:"max_loops,omitempty"`
	// WatchFor is how long one watch of a healthy cluster runs before it reports (default
	// 1h): the history grows by a few events per WatchFor, and with incidents.
	WatchFor spec.Duration `json:"watch_for,omitempty"`
	// Cooldown is the first wait of a degraded cluster before one more redeploy (default
	// 30m); each failed one doubles it, up to 4h.
	Cooldown spec.Duration `json:"cooldown,omitempty"`
	// State is what the previous run knew, handed on at continue-as-new; nil on the first.
	State *Supervision `json:"state,omitempty"`
}

// Supervision is the supervisor's state: answered to the query (`starter status`) and
// carried across continue-as-new as one value (SuperviseRequest.State).
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
	// NextCooldown is the degraded cluster's next wait: Cooldown, doubled by each failed
	// try, back to Cooldown when the breaker closes.
	NextCooldown spec.Duration `json:"next_cooldown,omitempty"`
	// Redeploys is how many redeploys the supervisor started, all incidents together.
	Redeploys int `json:"redeploys"`
	// Serving is the deploy run that last reached serving, the one a staged deploy of
	// another spec runs beside.
	Serving *contract.ServingDeployment `json:"serving,omitempty"`
	// OperatorKey is the ed25519 public key of the first signed spec this cluster's
	// supervisor served (its intent's key_id is the key's fingerprint): from then on a
	// deployed signal is adopted only with a spec that key signed. Nil: no signed spec
	// was served yet, and a signal is adopted as it comes.
	OperatorKey []byte `json:"operator_key,omitempty"`
	// Refused is the last deployed signal not adopted, and why.
	Refused string `json:"refused,omitempty"`
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
// happened (recover.go); a circuit breaker bounds the redeploys across incidents. It
// continues as new before its history grows large, and ends when cancelled (teardown).
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

// supervisor is one run of SuperviseCluster: the request it was started with, what
// serves, and the state it hands on.
type supervisor struct {
	req    SuperviseRequest
	spec   spec.Cluster
	intent *contract.Intent
	state  Supervision
	// The request's options, with their defaults.
	every       time.Duration
	unhealthy   int
	maxAttempts int
	maxLoops    int
	// watchFor is one watch's length; cooldown the circuit breaker's first wait.
	watchFor time.Duration
	cooldown time.Duration
}

func newSupervisor(req SuperviseRequest) *supervisor {
	sv := &supervisor{req: req, spec: req.Spec.WithDefaults(), intent: req.Intent,
		every: req.CheckEvery.D(), unhealthy: req.Unhealthy, maxAttempts: req.MaxAttempts, maxLoops: req.MaxLoops,
		watchFor: req.WatchFor.D(), cooldown: req.Cooldown.D()}
	if sv.every <= 0 {
		sv.every = 5 * time.Second
	}
	if sv.unhealthy <= 0 {
		sv.unhealthy = 3
	}
	if sv.maxAttempts <= 0 {
		sv.maxAttempts = 5
	}
	if sv.maxLoops <= 0 {
		sv.maxLoops = 500
	}
	if sv.watchFor <= 0 {
		sv.watchFor = time.Hour
	}
	if sv.cooldown <= 0 {
		sv.cooldown = 30 * time.Minute
	}
	if req.State != nil {
		sv.state = *req.State
	}
	sv.state.Cluster = sv.spec.Name
	if req.Serving != nil {
		sv.state.Serving = req.Serving
	}
	if sv.state.BootIDs == nil {
		sv.state.BootIDs = map[string]string{}
	}
	if sv.state.Incidents == nil {
		sv.state.Incidents = []Incident{}
	}
	// The spec it is started with is the operator's, by the key its signature verifies
	// with: the first signed one the cluster served, kept from then on (State).
	sv.pin(req.Intent, req.Spec)
	if sv.state.NextCooldown <= 0 {
		sv.state.NextCooldown = spec.Duration(sv.cooldown)
	}
	return sv
}

// continueAsNew hands the state on to the next run, whole but for its bounds: the last
// keptIncidents incidents, and what the nodes printed for the last keptOutputs of them.
func (sv *supervisor) continueAsNew(ctx workflow.Context) error {
	state := sv.state
	inc := state.Incidents
	if len(inc) > keptIncidents {
		inc = inc[len(inc)-keptIncidents:]
	}
	inc = slices.Clone(inc)
	for i := range max(len(inc)-keptOutputs, 0) {
		inc[i].LastOutput = nil
	}
	state.Incidents = inc
	next := sv.req
	next.Spec, next.Intent, next.Serving, next.State = sv.spec, sv.intent, nil, &state
	return workflow.NewContinueAsNewError(ctx, SuperviseCluster, next)
}

// watch is the supervisor's loop: health is watched by one long-lived activity
// (WatchCluster, on the controller or the head's agent) that returns only on an incident or after WatchFor of
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
			wait := sv.state.NextCooldown.D()
			sv.state.NextTry = workflow.Now(ctx).Add(wait)
			sel.AddFuture(workflow.NewTimer(wctx, wait), func(workflow.Future) {
				incident = sv.newIncident(ctx, CauseUnhealthy, "", fmt.Sprintf("cool-down of %s passed; degraded since: %s", wait, sv.state.LastCause))
			})
		} else {
			sel.AddFuture(sv.startWatch(wctx), func(f workflow.Future) {
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
			incident = sv.requested(ctx, why)
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

// startWatch starts one watch of the cluster's health: WatchCluster, or, for a keyed spec,
// watchOnHead (headChecksSplit). Its future is the watch's ClusterHealth.
func (sv *supervisor) startWatch(ctx workflow.Context) workflow.Future {
	req := contract.WatchClusterRequest{Cluster: sv.spec.Name, Every: sv.every, Unhealthy: sv.unhealthy, For: sv.watchFor, Canary: canaryRequest(sv.spec)}
	if !headChecksSplit(ctx, sv.spec) {
		actx := onChecksQueue(ctx, sv.spec, "watch "+sv.spec.Name, healthWatch(sv.watchFor))
		return workflow.ExecuteActivity(actx, contract.ActivityWatchCluster, req)
	}
	f, settle := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		h, err := sv.watchOnHead(ctx, req)
		settle.Set(h, err)
	})
	return f
}

// watchOnHead is a keyed cluster's watch: the controller says which run to watch, waiting
// out a running deploy (DeployTarget); the head's agent watches that run's endpoint
// (WatchTarget); and an unhealthy verdict is an incident only if the controller then says
// the run is still the one to watch (not replaced, and no deploy running), since the head
// cannot see a deploy begin.
func (sv *supervisor) watchOnHead(ctx workflow.Context, req contract.WatchClusterRequest) (contract.ClusterHealth, error) {
	name := sv.spec.Name
	var t contract.CheckTarget
	rctx := onWorkflowQueue(ctx, "what to watch of "+name, healthWatch(sv.watchFor))
	treq := contract.TargetRequest{Cluster: name, WaitDeploy: sv.watchFor, Every: sv.every, MustExist: true}
	if err := workflow.ExecuteActivity(rctx, contract.ActivityDeployTarget, treq).Get(ctx, &t); err != nil {
		return contract.ClusterHealth{}, err
	}
	if t.Running {
		return contract.ClusterHealth{Healthy: true, Deploying: true, Detail: "a deploy is running", LastCheck: workflow.Now(ctx)}, nil
	}
	var h contract.ClusterHealth
	actx := onChecksQueue(ctx, sv.spec, "watch "+name, healthWatch(sv.watchFor))
	if err := workflow.ExecuteActivity(actx, contract.ActivityWatchTarget, contract.WatchTargetRequest{WatchClusterRequest: req, Target: t}).Get(ctx, &h); err != nil || h.Healthy {
		return h, err
	}
	var now contract.CheckTarget
	lctx := onWorkflowQueue(ctx, "what to watch of "+name, supervisorLook(30*time.Second, 3))
	if err := workflow.ExecuteActivity(lctx, contract.ActivityDeployTarget, contract.TargetRequest{Cluster: name, MustExist: true}).Get(ctx, &now); err != nil {
		return h, nil // the watch's verdict stands
	}
	switch {
	case now.Running:
		return contract.ClusterHealth{Healthy: true, Deploying: true, Detail: "a deploy is running", Checks: h.Checks, LastCheck: h.LastCheck}, nil
	case now.RunID != t.RunID:
		return contract.ClusterHealth{Healthy: true, Checks: h.Checks, LastCheck: h.LastCheck,
			Detail: fmt.Sprintf("deploy run %s replaced %s while it was watched (%s)", now.RunID, t.RunID, h.Detail)}, nil
	}
	return h, nil
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
			return sv.requested(ctx, why)
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
	if h.Cause == "" {
		if node, msg := sv.guardTrip(ctx); node != "" {
			return sv.newIncident(ctx, CauseHostMemoryPressure, node, msg+" (what the watch saw: "+h.Detail+")")
		}
	}
	return sv.newIncident(ctx, watchCause(h.Cause), "", h.Detail)
}

// hostMemoryIncidentVersion: from here on an endpoint that stopped serving has each node's
// memory guard asked whether it stopped the cluster's engines (GuardTrip, read-only);
// histories from before made every such incident "unhealthy".
const hostMemoryIncidentVersion = "host-memory-incident"

// guardTrip is the first node (in spec order) whose memory guard stopped the cluster's
// engines, with the guard's message; "" when none did or none answered in time.
func (sv *supervisor) guardTrip(ctx workflow.Context) (node, msg string) {
	if workflow.GetVersion(ctx, hostMemoryIncidentVersion, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return "", ""
	}
	futures := map[string]workflow.Future{}
	for _, n := range sv.spec.Nodes {
		actx := onNode(ctx, sv.spec, n.Name, "memory guard of "+n.Name, supervisorLook(10*time.Second, 1))
		futures[n.Name] = workflow.ExecuteActivity(actx, contract.ActivityGuardTrip, contract.GuardTripRequest{Node: n.Name, Cluster: sv.spec.Name})
	}
	for _, n := range sv.spec.Nodes {
		var t contract.GuardTrip
		if futures[n.Name].Get(ctx, &t) == nil && t.Tripped && node == "" {
			node, msg = n.Name, t.Message
		}
	}
	return node, msg
}

// verifyDeployedVersion: from here on, a supervisor that holds an operator's key refuses a
// deployed signal that key did not sign (its spec is not adopted, its breaker stays as it
// is). Histories from before took every signal; none of them was refused.
const verifyDeployedVersion = "verify-deployed"

// deployed is a deploy that reached serving: the spec the supervisor puts back from now
// on; a degraded cluster is healthy again. Anyone who can signal the workflow can send
// one, so once the supervisor holds the operator's key, only a spec that key signed is
// adopted; the check is a pure function of the signal and the carried state, so it
// replays.
func (sv *supervisor) deployed(ctx workflow.Context, s Deployed) {
	if err := sv.verifyDeployed(s); err != nil &&
		workflow.GetVersion(ctx, verifyDeployedVersion, workflow.DefaultVersion, 1) == 1 {
		sv.state.Refused = fmt.Sprintf("a deployed signal of spec %s was not adopted: %v", s.Spec.WithDefaults().Hash(), err)
		workflow.GetLogger(ctx).Warn("deployed signal refused", "cluster", sv.spec.Name, "why", sv.state.Refused)
		return
	}
	sv.pin(s.Intent, s.Spec)
	sv.spec, sv.intent = s.Spec.WithDefaults(), s.Intent
	sv.state.Serving = s.Serving
	sv.rearm(ctx, "a deploy serves spec "+sv.spec.Hash())
	sv.state.Healthy, sv.state.Failures = true, 0
}

// verifyDeployed says why a deployed signal is not the operator's, or nil: once a key is
// held, the signal must carry an intent that key signed, of the signal's own spec.
func (sv *supervisor) verifyDeployed(s Deployed) error {
	key := ed25519.PublicKey(sv.state.OperatorKey)
	if key == nil {
		return nil
	}
	if s.Intent == nil {
		return fmt.Errorf("it is unsigned, and this supervisor serves specs signed by %s", intent.KeyID(key))
	}
	signed, err := intent.Verify(s.Intent, key)
	if err != nil {
		return err
	}
	return intent.Matches(signed, s.Spec)
}

// pin takes the operator's key from a signed spec, when the supervisor holds none yet: the
// key the intent carries, once the intent's signature verifies with it and signs c.
func (sv *supervisor) pin(in *contract.Intent, c spec.Cluster) {
	if sv.state.OperatorKey != nil || in == nil || len(in.PublicKey) != ed25519.PublicKeySize {
		return
	}
	key := ed25519.PublicKey(in.PublicKey)
	if signed, err := intent.Verify(in, key); err == nil && intent.Matches(signed, c) == nil {
		sv.state.OperatorKey = slices.Clone(in.PublicKey)
	}
}

// rollback: a deploy of another spec failed after touching the cluster; the spec that
// served goes back.
func (sv *supervisor) rollback(ctx workflow.Context, df DeployFailure) *Incident {
	if df.SpecHash == sv.spec.Hash() {
		return nil // its own recovery, or a redeploy of the serving spec: recover() decides
	}
	sv.rearm(ctx, "a deploy of another spec failed")
	inc := sv.newIncident(ctx, CauseRollback, "", fmt.Sprintf("rollback: deploy %s of spec %s failed (%s) after touching the cluster; putting spec %s back",
		df.RunID, df.SpecHash, df.Type, sv.spec.Hash()))
	inc.rollbackOf = df.RunID
	return inc
}

// requested is an operator's request for a redeploy (`starter redeploy`).
func (sv *supervisor) requested(ctx workflow.Context, why string) *Incident {
	return sv.newIncident(ctx, CauseRequested, "", "redeploy requested: "+why)
}

// baseline asks every node for its boot ID; a node that does not answer is learnt from
// its agent's report when it starts.
func (sv *supervisor) baseline(ctx workflow.Context) {
	futures := map[string]workflow.Future{}
	for _, n := range sv.spec.Nodes {
		actx := onNode(ctx, sv.spec, n.Name, "boot ID of "+n.Name, supervisorLook(10*time.Second, 2))
		futures[n.Name] = workflow.ExecuteActivity(actx, contract.ActivityBootID, contract.BootIDRequest{Node: n.Name})
	}
	for _, n := range sv.spec.Nodes {
		var id string
		if err := futures[n.Name].Get(ctx, &id); err == nil {
			sv.state.BootIDs[n.Name] = id
		}
	}
}

func (sv *supervisor) newIncident(ctx workflow.Context, cause IncidentCause, node, seen string) *Incident {
	workflow.GetLogger(ctx).Warn("incident", "cluster", sv.spec.Name, "node", node, "cause", cause, "seen", seen)
	return &Incident{At: workflow.Now(ctx), Node: node, Cause: cause, Seen: seen}
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
	return sv.newIncident(ctx, CauseReboot, b.Node, fmt.Sprintf("boot ID changed %s -> %s: the node rebooted", short(old), short(b.BootID)))
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
