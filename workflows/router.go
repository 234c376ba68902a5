package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// routerVersion: from here on a deploy whose spec names a router (spec.Router) starts it
// on that node, routes its model there once it serves, and drains the old engine's route
// before a staged swap stops it. Asked only for such specs, so the histories of specs
// without a router (every one recorded before it) take no new command.
const routerVersion = "router"

// routed says whether this deploy goes through the fleet's router.
func (d *deployment) routed(ctx workflow.Context) bool {
	return d.spec.Router != nil && workflow.GetVersion(ctx, routerVersion, workflow.DefaultVersion, 1) == 1
}

// routeModel starts the router on its node (or keeps it) and routes the served model to
// this deployment's endpoint: the routes are the union of every cluster's, each cluster's
// entry its own (activities.Router merges it). A router that cannot be started or set is
// a warning, not a failure: the model serves at its own endpoint meanwhile.
func (d *deployment) routeModel(ctx workflow.Context) {
	if !d.routed(ctx) {
		return
	}
	r := *d.spec.Router
	// On a node of the cluster the router answers at the node's planned address, as the
	// engine does; elsewhere its agent says.
	np, _ := d.plannedNode(r.Node)
	n, _ := d.spec.Node(r.Node)
	var ref contract.RouterRef
	err := workflow.ExecuteActivity(d.onNode(ctx, r.Node, "start the router on "+r.Node, routerStep()), contract.ActivityEnsureRouter,
		contract.EnsureRouterRequest{Node: r.Node, DockerHost: n.DockerHost, Address: np.Address, Spec: d.spec, Intent: d.req.Intent}).Get(ctx, &ref)
	if err == nil {
		err = d.setRoute(ctx, contract.RouteRequest{Endpoint: d.result.Endpoint})
	}
	if err != nil {
		d.state.Warnings = append(d.state.Warnings, "router: "+message(err))
		return
	}
	d.state.Router = ref.Endpoint
}

// setRoute sends the cluster's route to the router's agent.
func (d *deployment) setRoute(ctx workflow.Context, req contract.RouteRequest) error {
	r := *d.spec.Router
	req.Node, req.Spec, req.Intent = r.Node, d.spec, d.req.Intent
	return workflow.ExecuteActivity(d.onNode(ctx, r.Node, "route "+d.spec.Model.ServedName+" on the router", routerStep()),
		contract.ActivitySetRoute, req).Get(ctx, nil)
}

// drainRoute, before a staged swap stops the serving engine at endpoint: the router sends
// it no new request (a model with no other replica holds them until the new engine is
// routed) and the swap waits for the requests in flight to end. A router that does not
// answer, or a drain past its bound, is a warning: the swap goes on.
func (d *deployment) drainRoute(ctx workflow.Context, endpoint string) {
	if endpoint == "" || !d.routed(ctx) {
		return
	}
	r := *d.spec.Router
	err := workflow.ExecuteActivity(d.onNode(ctx, r.Node, "drain the old engine's route on the router", routerStep()), contract.ActivityDrainRoute,
		contract.RouteRequest{Node: r.Node, Spec: d.spec, Endpoint: endpoint, Timeout: spec.Duration(routerDrainTimeout), Intent: d.req.Intent}).Get(ctx, nil)
	if err != nil {
		d.state.Warnings = append(d.state.Warnings, "router: drain before the swap: "+message(err))
	}
}

// unroute takes the cluster's replica out of the router's routes before its teardown stops
// the engine (a model left with no replica leaves the router's list). What it did, or
// why it could not, is the teardown's note; a router that does not answer fails nothing.
func (d *deployment) unroute(ctx workflow.Context) string {
	if !d.routed(ctx) {
		return ""
	}
	if err := d.setRoute(ctx, contract.RouteRequest{Remove: true}); err != nil {
		return "router: the route of " + d.spec.Model.ServedName + " is left: " + message(err)
	}
	return "router: " + d.spec.Model.ServedName + " no longer routed to " + d.spec.Name
}

// routeDownVersion: from here on the supervisor of a routed cluster marks its replica down
// on the router when an incident begins, before the recovery's redeploy: the router sends
// it nothing (another replica of the model answers; a model with none holds its requests)
// until the redeploy routes the new engine. Asked only for routed specs with a serving
// endpoint, so histories without a router take no new command.
const routeDownVersion = "route-down"

// routeDown marks the serving replica down on the router; what it did, or why it could
// not, is said on the incident's action. A router that does not answer fails nothing: the
// router's own dial errors keep a dead engine's replica out meanwhile.
func (sv *supervisor) routeDown(ctx workflow.Context, inc *Incident) {
	if sv.spec.Router == nil || sv.state.Serving == nil || sv.state.Serving.Endpoint == "" ||
		workflow.GetVersion(ctx, routeDownVersion, workflow.DefaultVersion, 1) != 1 {
		return
	}
	r := *sv.spec.Router
	err := workflow.ExecuteActivity(onNode(ctx, sv.spec, r.Node, "mark "+sv.spec.Name+" down on the router", routerStep()), contract.ActivitySetRoute,
		contract.RouteRequest{Node: r.Node, Spec: sv.spec, Endpoint: sv.state.Serving.Endpoint, Down: true, Intent: sv.intent}).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Warn("router: could not mark the replica down", "cluster", sv.spec.Name, "error", err)
		inc.RouterNote = "router: could not mark " + sv.spec.Name + " down: " + message(err)
		return
	}
	inc.RouterNote = "router: " + sv.spec.Name + " marked down (no traffic) until the redeploy serves"
}
