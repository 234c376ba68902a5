package workflows

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/dataplane"
	"github.com/tpdeploy/tpdeploy/internal/hostmem"
	"github.com/tpdeploy/tpdeploy/internal/metrics"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/release"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// DeployRequest is DeployCluster's one input: a JSON object the Temporal UI's Start
// Workflow form accepts as it is.
type DeployRequest struct {
	Spec spec.Cluster `json:"spec"`
	// Intent is the operator's signature of Spec (package intent, `starter --sign-key-file`),
	// passed unchanged in every request that makes an agent act; agents whose policy sets
	// trusted_keys refuse requests without it. Redeploys, schedules and recoveries of the
	// spec carry the same one.
	Intent *contract.Intent `json:"intent,omitempty"`
	// Trigger says who started the deploy (cli, ui, schedule, recovery); for the record only.
	Trigger string `json:"trigger,omitempty"`
	// ReportEvery is how often the serving watch reports progress to the workflow
	// (default 10s).
	ReportEvery spec.Duration `json:"report_every,omitempty"`
	// Replace recreates every container instead of adopting running ones with the same
	// spec (recovery after a reboot, where a running container may be stale).
	Replace bool `json:"replace,omitempty"`
	// MaxRestarts bounds the restarts after reboots during the deploy (default 3).
	MaxRestarts int `json:"max_restarts,omitempty"`
}

// DeployResult is a serving deployment.
type DeployResult struct {
	Cluster      string                  `json:"cluster"`
	DeploymentID string                  `json:"deployment_id"`
	Endpoint     string                  `json:"endpoint"`
	Plan         netplan.Plan            `json:"plan"`
	Containers   []contract.ContainerRef `json:"containers"`
	Steps        []StepTiming            `json:"steps"`
	Warnings     []string                `json:"warnings,omitempty"`
	// Restarts are the reboots the deploy started over after.
	Restarts []string `json:"restarts,omitempty"`
	// ModelCopies are what model.sync copied to each node (and model.source: hub
	// downloaded to the head).
	ModelCopies []ModelCopy `json:"model_copies,omitempty"`
	// Hub is model.source: hub's model: the commit its revision resolved to, and the
	// files every node got.
	Hub *contract.HubModel `json:"hub,omitempty"`
	// Images are what the image holds on each node; Engine is the executor and release
	// behaviour they decided.
	Images []release.Image `json:"images,omitempty"`
	Engine *release.Model  `json:"engine,omitempty"`
	// DataPlane is the data-plane proof's verdict (nil when none ran).
	DataPlane *dataplane.Verdict `json:"data_plane,omitempty"`
	// Staged is the deployment this one replaced, when it was staged beside it.
	Staged *Staging `json:"staged,omitempty"`
	// Router is the fleet router's endpoint the model is routed through (spec.Router).
	Router string `json:"router,omitempty"`
}

// StepTiming is how long one step took.
type StepTiming struct {
	Step     string        `json:"step"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration"`
	Error    string        `json:"error,omitempty"`
}

// State is everything the deploy knows, exposed by the "state" query.
type State struct {
	Phase         string                   `json:"phase"`
	Details       string                   `json:"details"`
	Plan          *netplan.Plan            `json:"plan,omitempty"`
	Progress      contract.ServingProgress `json:"progress"`
	Steps         []StepTiming             `json:"steps"`
	Containers    []contract.ContainerRef  `json:"containers,omitempty"`
	Compensations []string                 `json:"compensations,omitempty"`
	Warnings      []string                 `json:"warnings,omitempty"`
	Restarts      []string                 `json:"restarts,omitempty"`
	// ModelCopies are the model.sync copies this deploy made, per node.
	ModelCopies []ModelCopy `json:"model_copies,omitempty"`
	// Hub is model.source: hub's model, resolved at plan.
	Hub *contract.HubModel `json:"hub,omitempty"`
	// Images are what the image holds on each node (the first step reads them); Engine
	// is what they decided: the executor, why, and how the release behaves.
	Images []release.Image `json:"images,omitempty"`
	Engine *release.Model  `json:"engine,omitempty"`
	// DataPlane is the data-plane proof's verdict: the transport NCCL chose on every
	// rank, the rails, the measured bus bandwidth.
	DataPlane *dataplane.Verdict `json:"data_plane,omitempty"`
	// Staged is the deployment that served when this deploy began (of another spec):
	// everything that stops nothing ran beside it first (stage.go).
	Staged *Staging `json:"staged,omitempty"`
	// Memory is every node's host-memory budget as its preflight made it.
	Memory []hostmem.Budget `json:"memory,omitempty"`
	Error  string           `json:"error,omitempty"`
	// Router is the fleet router's endpoint once the model is routed there (spec.Router).
	Router string `json:"router,omitempty"`
}

// DeployCluster deploys one model across the spec's nodes. Every run takes the cluster's
// claim, validates the spec and reads the image on every node (which decides the executor),
// then probe → reachability → plan → preflight → model check and copy; those stop nothing,
// so on a serving cluster they run beside it (staged) before the swap. Then, over Ray:
// Ray head → Ray workers → placement proof → data-plane proof → vLLM → serving; in vLLM's
// own multi-node mode: rendezvous proof → data-plane proof → headless ranks → rank 0 →
// serving. A failure or a cancel
// runs the compensations of the steps taken so far, last first. A planned node that
// reboots meanwhile (its agent reports a new boot ID, or a step fails and the node's boot
// ID changed) makes it compensate and start over from probing — addresses can change with
// a reboot — up to MaxRestarts times.
func DeployCluster(ctx workflow.Context, req DeployRequest) (DeployResult, error) {
	d := newDeployment(ctx, req)
	if err := d.registerQueries(ctx); err != nil {
		return DeployResult{}, err
	}
	start := workflow.Now(ctx)
	d.listenForReboots(ctx)
	err := d.claim(ctx)
	for err == nil {
		err = d.run(ctx)
		if err == nil || ctx.Err() != nil {
			break
		}
		why := d.rebootedMeanwhile(ctx, err)
		if why == "" {
			if trip := d.guardTripped(ctx, err); trip != nil {
				err = trip
			}
			break
		}
		if d.restarts >= d.maxRestarts() {
			err = &stepError{Step: d.state.Phase, Type: contract.ErrNodeRebooted,
				Msg: fmt.Sprintf("%s; gave up after %d restarts (what failed: %v)", why, d.restarts, err)}
			break
		}
		d.restart(ctx, why)
		err = nil
	}
	if err == nil {
		served := fmt.Sprintf("serving %s at %s", d.spec.Model.ServedName, d.result.Endpoint)
		if dp := d.state.DataPlane; dp != nil {
			served += "; data plane: " + dp.Summary // the UI's details say what status says
		}
		d.routeModel(ctx)
		if d.state.Router != "" {
			served += "; router: " + d.state.Router
		}
		d.setPhase(ctx, PhaseServed, served)
		d.ensureSupervisor(ctx)
		d.result.Steps = d.state.Steps
		d.result.Containers = d.state.Containers
		d.result.Warnings = d.state.Warnings
		d.result.Restarts = d.state.Restarts
		d.result.ModelCopies = d.state.ModelCopies
		d.result.Hub = d.state.Hub
		d.result.Images, d.result.Engine = d.state.Images, d.state.Engine
		d.result.DataPlane = d.state.DataPlane
		d.result.Staged = d.state.Staged
		d.result.Router = d.state.Router
		rec := metrics.Workflow(ctx)
		rec.Deploy(d.spec.Name, nil)
		rec.TimeToServing(d.spec.Name, workflow.Now(ctx).Sub(start))
		return d.result, nil
	}
	var se *stepError
	if !errors.As(err, &se) {
		se = &stepError{Step: d.state.Phase, Type: contract.ErrInternal, Msg: err.Error()}
	}
	se = d.nodeDownCause(se)
	d.setPhase(ctx, PhaseCompensating, fmt.Sprintf("%s failed (%s); compensating", se.Step, se.Type))
	// Refused before the swap, a staged deploy touched nothing of the serving cluster
	// (its compensations remove only what it made on the side, such as partial model
	// copies): there is nothing to roll back.
	refused := d.refusedBeforeSwap()
	touched := len(d.saga.steps) > 0 && refused == nil
	compErr := d.saga.compensate(ctx)
	d.state.Compensations = d.saga.ran
	failure := toFailure(se, compErr, refused)
	d.state.Error = failure.Type() + ": " + failure.Message()
	d.setPhase(ctx, PhaseFailed, d.state.Error)
	metrics.Workflow(ctx).Deploy(d.spec.Name, failure)
	if touched && se.Type != contract.ErrCanceled {
		d.tellSupervisorFailed(ctx, failure.Type())
	}
	if se.Type == contract.ErrCanceled && compErr == nil {
		return DeployResult{}, temporal.NewCanceledError(d.saga.ran)
	}
	return DeployResult{}, failure
}

// deployment is one run of DeployCluster.
type deployment struct {
	spec   spec.Cluster
	req    DeployRequest
	id     string
	state  State
	saga   saga
	result DeployResult
	probes []netplan.NodeProbe
	matrix []netplan.PairResult
	// ephemeral are the reachability test's dials to ephemeral-range ports.
	ephemeral []netplan.PairResult
	// dryRun is a plan: it records no ClusterName/DeployPhase (the UI's deploy filters
	// must not list it). searchPhase is the last phase recorded.
	dryRun      bool
	searchPhase string
	// reboot is the reboot this run heard of (set by the boot-report listener), cancelRun
	// cancels the steps in flight when it hears one, restarts counts the restarts.
	reboot    string
	cancelRun workflow.CancelFunc
	restarts  int
	// answered are the nodes whose agents answered in this run; down, those that stopped.
	answered map[string]bool
	down     map[string]string
	// probeAgentWait is how long the next probe waits for agents (after a reboot).
	probeAgentWait time.Duration
	// keepSubnet is the subnet planned before the deploy started over, the only one its
	// next plan may choose.
	keepSubnet netip.Prefix
	// swapped is set once the deploy went past the steps that stop nothing (stage.go);
	// it stays set across restarts.
	swapped bool
}

// specHash is the spec's identity as the operator wrote it (executor auto stays auto
// after the images decided it): containers' labels, the supervisor and redeploys compare it.
func (d *deployment) specHash() string { return d.req.Spec.Hash() }

func newDeployment(ctx workflow.Context, req DeployRequest) *deployment {
	c := req.Spec.WithDefaults()
	return &deployment{
		spec:     c,
		req:      req,
		id:       workflow.GetInfo(ctx).WorkflowExecution.RunID,
		state:    State{Phase: PhaseValidating},
		answered: map[string]bool{},
		down:     map[string]string{},
	}
}

func (d *deployment) registerQueries(ctx workflow.Context) error {
	for name, h := range map[string]any{
		contract.QueryPhase:    func() (string, error) { return d.state.Phase, nil },
		contract.QueryPlan:     func() (*netplan.Plan, error) { return d.state.Plan, nil },
		contract.QueryProgress: func() (contract.ServingProgress, error) { return d.state.Progress, nil },
		contract.QueryState:    func() (State, error) { return d.state, nil },
	} {
		if err := workflow.SetQueryHandler(ctx, name, h); err != nil {
			return fmt.Errorf("register query %s: %w", name, err)
		}
	}
	return nil
}

func (d *deployment) run(ctx workflow.Context) error {
	if err := d.validate(ctx); err != nil {
		return err
	}
	var cancel workflow.CancelFunc
	ctx, cancel = workflow.WithCancel(ctx)
	d.cancelRun = cancel
	defer func() { d.cancelRun = nil }()
	d.result = DeployResult{Cluster: d.spec.Name, DeploymentID: d.id}
	if err := d.readImages(ctx); err != nil {
		return err
	}
	if err := d.resolveHub(ctx); err != nil {
		return err
	}
	plan, err := planCluster(ctx, d.spec, d)
	if err != nil {
		return err
	}
	d.state.Plan = &plan
	d.result.Plan = plan
	// Everything up to here and the two steps below stop nothing and need no GPU: on a
	// serving cluster they run beside it (staged), and a failure leaves it serving.
	for _, step := range []func(workflow.Context) error{d.preflight, d.checkModel} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	if err := d.swap(ctx); err != nil {
		return err
	}
	steps := d.raySteps()
	if d.spec.Executor == spec.ExecutorMP {
		steps = d.mpSteps()
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// setPhase keeps the phase, the UI's current details and the log in step.
func (d *deployment) setPhase(ctx workflow.Context, phase, details string) {
	d.state.Phase = phase
	d.state.Details = details
	d.upsertSearch(ctx, phase)
	workflow.SetCurrentDetails(ctx, details)
	workflow.GetLogger(ctx).Info(details, "phase", phase, "cluster", d.spec.Name)
}

// step times fn under a phase and records it.
func (d *deployment) step(ctx workflow.Context, phase, details string, fn func() error) error {
	d.setPhase(ctx, phase, d.stagedDetails(details))
	t := StepTiming{Step: phase, Started: workflow.Now(ctx)}
	err := fn()
	t.Duration = workflow.Now(ctx).Sub(t.Started)
	if err != nil {
		t.Error = err.Error()
	}
	d.state.Steps = append(d.state.Steps, t)
	metrics.Workflow(ctx).Step(phase, t.Duration, stepMetricError(err))
	return err
}

// stepMetricError is a step's error as the step metric counts it: its classified type.
func stepMetricError(err error) error {
	var se *stepError
	if errors.As(err, &se) {
		return temporal.NewApplicationError(se.Msg, se.Type)
	}
	return err
}

// onNode returns ctx set to run an activity of kind o on node's own task queue.
func (d *deployment) onNode(ctx workflow.Context, node, summary string, o stepOptions) workflow.Context {
	return onNode(ctx, d.spec, node, summary, o)
}

// forEachNode runs one activity per node at once and waits for all of them; every
// node's failure is reported, not just the first.
func forEachNode[T any](ctx workflow.Context, step string, nodes []string, start func(node string) workflow.Future, done func(node string, v T)) error {
	futures := make([]workflow.Future, len(nodes))
	for i, n := range nodes {
		futures[i] = start(n)
	}
	var errs []*stepError
	for i, f := range futures {
		var v T
		if err := f.Get(ctx, &v); err != nil {
			errs = append(errs, classify(step, nodes[i], err))
			continue
		}
		done(nodes[i], v)
	}
	if len(errs) > 0 {
		return joinStepErrors(errs)
	}
	return nil
}

func nodeNames(nodes []spec.Node) []string {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	return names
}

func (d *deployment) deploymentRef() contract.Deployment {
	return contract.Deployment{Cluster: d.spec.Name, ID: d.id, SpecHash: d.specHash()}
}

func (d *deployment) preflight(ctx workflow.Context) error {
	return d.step(ctx, PhasePreflight, fmt.Sprintf("preflight: image %s on %d nodes", d.spec.Image, len(d.spec.Nodes)), func() error {
		o := deployStep(d.spec.Timeouts.Preflight.D(), stepAttempts)
		d.state.Memory = nil
		err := forEachNode(ctx, "preflight", nodeNames(d.spec.Nodes), func(node string) workflow.Future {
			n, _ := d.spec.Node(node)
			return workflow.ExecuteActivity(d.onNode(ctx, node, "preflight "+node, o), contract.ActivityPreflightNode,
				contract.PreflightRequest{Node: node, DockerHost: n.DockerHost, Image: d.spec.Image, Spec: &d.spec,
					Plan: d.state.Plan, Deployment: d.deploymentRef(), Intent: d.req.Intent})
		}, func(_ string, r contract.PreflightResult) {
			if r.Memory != nil {
				d.state.Memory = append(d.state.Memory, *r.Memory)
			}
		})
		if err != nil {
			return err
		}
		return d.checkPlannedAddresses(ctx, o)
	})
}

// checkPlannedAddresses asks every node whether the plan's address is still on the plan's
// interface. The plan was made from a probe that may be a minute old: a link that flapped
// since can come back under a new name (Docker's reconnect does; so do a recreated bond or
// a hot-plugged NIC), and NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME and --node-ip-address
// would then name what is gone. Caught here, before any container starts, the deploy
// starts over from probing (contract.ErrNetworkChanged) instead of failing at launch.
func (d *deployment) checkPlannedAddresses(ctx workflow.Context, o stepOptions) error {
	var names []string
	for _, n := range d.spec.Nodes {
		if _, ok := d.plannedNode(n.Name); ok {
			names = append(names, n.Name)
		}
	}
	var changed []string
	err := forEachNode(ctx, "preflight", names, func(node string) workflow.Future {
		np, _ := d.plannedNode(node)
		return d.askAddressHolds(ctx, np, o)
	}, func(node string, chk contract.AddressCheck) {
		if !chk.Holds {
			changed = append(changed, node+": "+chk.Detail)
		}
	})
	if err != nil {
		return err
	}
	if len(changed) > 0 {
		return &stepError{Step: "preflight", Type: contract.ErrNetworkChanged,
			Msg: "the network changed since the probe: " + strings.Join(changed, "; ")}
	}
	return nil
}

// askAddressHolds asks np's node whether its planned address is still on its planned
// interface (contract.AddressCheck).
func (d *deployment) askAddressHolds(ctx workflow.Context, np netplan.NodePlan, o stepOptions) workflow.Future {
	return workflow.ExecuteActivity(d.onNode(ctx, np.Name, "is "+np.Address.String()+" still on "+np.Interface, o),
		contract.ActivityAddressHolds, contract.AddressRequest{Node: np.Name, Interface: np.Interface, Address: np.Address})
}

// removeOnNode registers the compensation that removes role's containers on node. It is
// registered before the start is attempted, not after it succeeds: a start can create its
// container and then fail (or time out), and removal by label is a no-op when nothing
// was created.
func (d *deployment) removeOnNode(node, role string) {
	n, _ := d.spec.Node(node)
	d.saga.add(fmt.Sprintf("remove %s on %s", role, node), func(ctx workflow.Context) error {
		if why := d.down[node]; why != "" {
			return &leftToAgent{why: node + " is down (" + why + "); its agent removes the cluster's stale containers when it starts"}
		}
		actx := d.onNode(ctx, node, fmt.Sprintf("remove %s on %s", role, node), cleanupStep(d.spec))
		err := workflow.ExecuteActivity(actx, contract.ActivityRemoveContainers, contract.RemoveRequest{
			Node: node, DockerHost: n.DockerHost, Cluster: d.spec.Name, Roles: []string{role}, Intent: d.req.Intent,
		}).Get(ctx, nil)
		if err != nil && classify("remove", node, err).Type == contract.ErrNodeAgentDown {
			d.down[node] = "its agent did not answer the removal"
			return &leftToAgent{why: node + "'s agent does not answer; it removes the cluster's stale containers when it starts"}
		}
		return err
	})
}

// ensureSupervisor starts the cluster's supervisor (it outlives this run), or, when one
// runs, tells it the spec now serving.
func (d *deployment) ensureSupervisor(ctx workflow.Context) {
	id := contract.SuperviseWorkflowID(d.spec.Name)
	// The supervisor redeploys the operator's spec (executor auto stays auto: a new image
	// decides again).
	operators := d.req.Spec.WithDefaults()
	serving := &contract.ServingDeployment{RunID: d.id, SpecHash: d.specHash(), Endpoint: d.result.Endpoint}
	err := workflow.ExecuteChildWorkflow(clusterChild(ctx, id), SuperviseCluster, SuperviseRequest{Spec: operators, Intent: d.req.Intent, Serving: serving}).GetChildWorkflowExecution().Get(ctx, nil)
	if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		err = workflow.SignalExternalWorkflow(ctx, id, "", contract.SignalDeployed, Deployed{Spec: operators, Intent: d.req.Intent, Serving: serving}).Get(ctx, nil)
	}
	if err != nil {
		d.state.Warnings = append(d.state.Warnings, "supervisor: "+err.Error())
	}
}

// validate checks the spec as a local activity, so that its verdict is recorded and a
// later release's stricter rules cannot change this run on replay.
func (d *deployment) validate(ctx workflow.Context) error {
	if err := workflow.ExecuteLocalActivity(asDecision(ctx), ValidateSpec, d.spec).Get(ctx, nil); err != nil {
		return &stepError{Step: "validate spec", Type: contract.ErrSpecInvalid, Msg: message(err)}
	}
	if in := d.req.Intent; in != nil && !bytes.Equal(in.Spec, d.req.Spec.Canonical()) {
		// Said here, before any node is asked; the agents verify the signature itself.
		return &stepError{Step: "validate spec", Type: contract.ErrSpecInvalid,
			Msg: "the intent (signed by " + in.KeyID + ") signs another spec than the one given: sign the spec you deploy"}
	}
	return nil
}

// ValidateSpec is spec validation as a local activity: its verdict is recorded in history.
func ValidateSpec(_ context.Context, c spec.Cluster) error {
	if err := c.WithDefaults().Validate(); err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrSpecInvalid, nil)
	}
	return nil
}

// plannedNode is the node's plan in this attempt, if planning got that far.
func (d *deployment) plannedNode(name string) (netplan.NodePlan, bool) {
	if d.state.Plan == nil {
		return netplan.NodePlan{}, false
	}
	return d.state.Plan.Node(name)
}
