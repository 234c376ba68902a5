package workflows

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/metrics"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/release"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// PlanRequest is PlanCluster's input.
type PlanRequest struct {
	Spec spec.Cluster `json:"spec"`
}

// PlanReport is everything the planner saw and decided, for `starter plan`.
type PlanReport struct {
	Probes []netplan.NodeProbe  `json:"probes"`
	Matrix []netplan.PairResult `json:"matrix"`
	Plan   *netplan.Plan        `json:"plan,omitempty"`
	// Images are what the image holds on each node; Engine what they decided.
	Images []release.Image `json:"images,omitempty"`
	Engine *release.Model  `json:"engine,omitempty"`
	// Hub is model.source: hub's model: its commit and the files every node will get.
	Hub *contract.HubModel `json:"hub,omitempty"`
	// Error is why no plan was possible; the report still holds what was measured.
	Error string `json:"error,omitempty"`
}

// PlanCluster probes every node, tests reachability and chooses the subnet, starting no
// container: the dry run behind `starter plan`.
func PlanCluster(ctx workflow.Context, req PlanRequest) (PlanReport, error) {
	d := newDeployment(ctx, DeployRequest{Spec: req.Spec, Trigger: "plan"})
	d.dryRun = true
	if err := d.registerQueries(ctx); err != nil {
		return PlanReport{}, err
	}
	if err := d.spec.Validate(); err != nil {
		return PlanReport{}, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrSpecInvalid, nil)
	}
	report := PlanReport{}
	err := d.readImages(ctx)
	report.Images, report.Engine = d.state.Images, d.state.Engine
	if err == nil {
		err = d.resolveHub(ctx)
		report.Hub = d.state.Hub
	}
	var plan netplan.Plan
	if err == nil {
		plan, err = planCluster(ctx, d.spec, d)
		report.Probes, report.Matrix = d.probes, d.matrix
	}
	// The images' warnings (image_mismatch: warn) belong with the plan's.
	plan.Warnings = append(append([]string(nil), d.state.Warnings...), plan.Warnings...)
	var se *stepError
	switch {
	case err == nil:
		report.Plan = &plan
	case errors.As(err, &se) && (se.Type == contract.ErrNoViableSubnet || se.Type == contract.ErrInsufficientGPUs || se.Type == contract.ErrDataPlaneUnreachable || se.Type == contract.ErrEphemeralBlocked):
		// The measurements are the useful part of a failed plan: return them.
		report.Error = se.Error()
	default:
		if se != nil {
			return report, toFailure(se, nil, nil)
		}
		return report, err
	}
	return report, nil
}

// planCluster runs probe → reachability → choice, shared by deploy and plan.
func planCluster(ctx workflow.Context, c spec.Cluster, d *deployment) (netplan.Plan, error) {
	if err := d.probe(ctx); err != nil {
		return netplan.Plan{}, err
	}
	if err := d.reachability(ctx); err != nil {
		return netplan.Plan{}, err
	}
	var plan netplan.Plan
	err := d.step(ctx, PhasePlanning, "choosing the subnet every node reaches", func() error {
		err := workflow.ExecuteLocalActivity(asDecision(ctx), ChoosePlan, PlanInput{Spec: c, Probes: d.probes, Matrix: d.matrix, Ephemeral: d.ephemeral, KeepSubnet: d.keepSubnet, Engine: d.state.Engine}).Get(ctx, &plan)
		if err != nil {
			return classify("plan", "", err)
		}
		return nil
	})
	return plan, err
}

func (d *deployment) probe(ctx workflow.Context) error {
	return d.step(ctx, PhaseProbing, fmt.Sprintf("probing %d nodes", len(d.spec.Nodes)), func() error {
		o := deployStep(d.spec.Timeouts.Probe.D(), stepAttempts)
		o.agentWait = d.probeAgentWait
		got := map[string]netplan.NodeProbe{}
		err := forEachNode(ctx, "probe", nodeNames(d.spec.Nodes), func(node string) workflow.Future {
			n, _ := d.spec.Node(node)
			return workflow.ExecuteActivity(d.onNode(ctx, node, "probe "+node, o), contract.ActivityProbeNode,
				contract.ProbeRequest{Node: node, SpecGPUs: n.GPUs, DockerHost: n.DockerHost, UnifiedMemory: n.UnifiedMemory})
		}, func(node string, p netplan.NodeProbe) { got[node] = p })
		if err != nil {
			return err
		}
		d.probes = make([]netplan.NodeProbe, 0, len(d.spec.Nodes))
		for _, n := range d.spec.Nodes {
			d.probes = append(d.probes, got[n.Name])
			d.answered[n.Name] = true
		}
		return nil
	})
}

// reachability opens short-lived listeners on every candidate address of every node and
// has every other node dial them, from its own network namespace: all pairs, both ways;
// and on both ends of every cable of the data plane, dialled from the other end.
func (d *deployment) reachability(ctx workflow.Context) error {
	addrs := netplan.ReachAddrs(d.spec, d.probes)
	if len(d.spec.Nodes) < 2 {
		return nil
	}
	return d.step(ctx, PhaseReachability, fmt.Sprintf("testing reachability between %d nodes", len(d.spec.Nodes)), func() error {
		for attempt := 1; ; attempt++ {
			refused, err := d.reachOnce(ctx, addrs)
			if err != nil || len(refused) == 0 || attempt == reachabilityAttempts {
				return err
			}
			// A refused dial reached the peer's host and found no listener: the peer's
			// agent restarted since it opened them (its sockets closed with it). Testing
			// again with fresh listeners tells a dead listener from a dead link.
			workflow.GetLogger(ctx).Warn("reachability listeners gone; testing again", "refused", refused, "attempt", attempt)
		}
	})
}

// reachabilityAttempts is how many times a reachability test in which a dial was refused
// is done, each time with fresh listeners.
const reachabilityAttempts = 3

// reachOnce opens the listeners, has every node dial every other, closes the listeners,
// and records the matrix; it returns the dials that were refused.
func (d *deployment) reachOnce(ctx workflow.Context, addrs map[string][]netip.Prefix) ([]string, error) {
	dialTimeout := 2 * time.Second
	o := deployStep(30*time.Second, 3)
	names := nodeNames(d.spec.Nodes)
	listeners := map[string]contract.ListenResult{}
	err := forEachNode(ctx, "open reachability listeners", names, func(node string) workflow.Future {
		return workflow.ExecuteActivity(d.onNode(ctx, node, "listen on "+node, o), contract.ActivityOpenProbeListeners,
			contract.ListenRequest{Node: node, Addrs: addrs[node], TTL: 2 * time.Minute, Ephemeral: true})
	}, func(node string, r contract.ListenResult) { listeners[node] = r })
	// Listeners close whatever happens next; the TTL covers an agent that dies first.
	defer d.closeListeners(ctx, listeners)
	if err != nil {
		return nil, err
	}
	results := map[string][]netplan.PairResult{}
	err = forEachNode(ctx, "dial peers", names, func(node string) workflow.Future {
		var targets []netplan.Target
		for _, peer := range names {
			if peer != node {
				targets = append(targets, listeners[peer].Targets...)
			}
		}
		targets = netplan.DialTargets(d.probeOf(node), targets)
		return workflow.ExecuteActivity(d.onNode(ctx, node, "dial peers from "+node, o), contract.ActivityDialPeers,
			contract.DialRequest{Node: node, Targets: targets, Timeout: dialTimeout})
	}, func(node string, r []netplan.PairResult) { results[node] = r })
	if err != nil {
		return nil, err
	}
	d.matrix, d.ephemeral = nil, nil
	var refused []string
	pairs := map[string][2]int{} // subnet -> ok, failed
	for _, n := range names {
		// The ephemeral-range dials judge only the chosen subnet's ports
		// (netplan.CheckEphemeral), never which subnet is chosen.
		var base []netplan.PairResult
		for _, r := range results[n] {
			if r.Ephemeral {
				d.ephemeral = append(d.ephemeral, r)
			} else {
				base = append(base, r)
			}
		}
		results[n] = base
		d.matrix = append(d.matrix, base...)
		for _, r := range results[n] {
			c := pairs[r.Subnet.String()]
			if r.OK {
				c[0]++
			} else {
				c[1]++
			}
			pairs[r.Subnet.String()] = c
		}
		for _, r := range results[n] {
			if !r.OK && strings.Contains(r.Error, "connection refused") {
				refused = append(refused, fmt.Sprintf("%s -> %s %s", r.From, r.To, r.Addr))
			}
		}
	}
	rec := metrics.Workflow(ctx)
	subnets := make([]string, 0, len(pairs))
	for sn := range pairs {
		subnets = append(subnets, sn)
	}
	sort.Strings(subnets) // a map's order is random; the recording order need not be, but is
	for _, sn := range subnets {
		rec.Reachability(sn, pairs[sn][0], pairs[sn][1])
	}
	return refused, nil
}

func (d *deployment) closeListeners(ctx workflow.Context, listeners map[string]contract.ListenResult) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	o := deployStep(10*time.Second, 2)
	var futures []workflow.Future
	for _, n := range d.spec.Nodes {
		if l, ok := listeners[n.Name]; ok && l.Token != "" {
			futures = append(futures, workflow.ExecuteActivity(d.onNode(dctx, n.Name, "close listeners on "+n.Name, o),
				contract.ActivityCloseProbeListeners, contract.CloseRequest{Node: n.Name, Token: l.Token}))
		}
	}
	for _, f := range futures {
		if err := f.Get(dctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("close reachability listeners", "error", err)
		}
	}
}

// PlanInput is ChoosePlan's input.
type PlanInput struct {
	Spec   spec.Cluster         `json:"spec"`
	Probes []netplan.NodeProbe  `json:"probes"`
	Matrix []netplan.PairResult `json:"matrix"`
	// Ephemeral are the reachability test's dials to ephemeral-range ports.
	Ephemeral []netplan.PairResult `json:"ephemeral,omitempty"`
	// KeepSubnet, when valid, is the only subnet a restarted deploy may plan on.
	KeepSubnet netip.Prefix `json:"keep_subnet,omitzero"`
	// Engine is the release's behaviour the images decided (nil: the legacy Ray form).
	Engine *release.Model `json:"engine,omitempty"`
}

// ChoosePlan is the planner as a local activity: pure, but its result is recorded in
// history, so a later change to the planner cannot change the plan of a running deploy.
func ChoosePlan(_ context.Context, in PlanInput) (netplan.Plan, error) {
	plan, err := netplan.ChooseFor(in.Spec, in.Probes, in.Matrix, netplan.Options{Keep: in.KeepSubnet, Engine: in.Engine})
	if err == nil {
		err = netplan.CheckEphemeral(plan, in.Ephemeral)
	}
	var pe *netplan.Error
	if errors.As(err, &pe) {
		return plan, temporal.NewNonRetryableApplicationError(pe.Error(), pe.Type, nil)
	}
	return plan, err
}

// probeOf is the named node's probe (zero before probing).
func (d *deployment) probeOf(node string) netplan.NodeProbe {
	for _, p := range d.probes {
		if p.Node == node {
			return p
		}
	}
	return netplan.NodeProbe{Node: node}
}
