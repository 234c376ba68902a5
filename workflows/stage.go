package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// A deploy of a changed spec onto a serving cluster is staged: everything that stops
// nothing and needs no GPU runs first, beside the serving deployment — reading the image
// on every node (present, identical, its versions), probing, reachability, the plan, the
// preflight (the image, the node policy checked against every container each node will
// run, the ports) and the model (checked, copied). Only then does it swap: the first
// step that may stop or replace a container of the old deployment (the Ray head, or
// rank 0's master port). A staged step that fails leaves the old deployment serving
// untouched, and the failure says so (contract.StagedRefusal), so `starter status`, the
// supervisor and the agents' reconcile keep treating it as the one that serves. A failure
// after the swap is handled as before: compensations, then the supervisor puts the last
// good spec back.
//
// What needs the GPUs — the data-plane proof, the engine — runs after the swap: on real
// nodes the serving vLLM holds them.

// Staging is what a staged deploy records of the deployment it was staged beside.
type Staging struct {
	// Serving is the deployment that served when the deploy began.
	Serving contract.ServingDeployment `json:"serving"`
	// Took is how long the staged steps ran beside it; SwappedAt is when the deploy
	// began to replace it (zero when it never did).
	Took      time.Duration `json:"took"`
	SwappedAt time.Time     `json:"swapped_at,omitzero"`
	began     time.Time
}

// servingCheckOnHeadVersion: from here on a deploy of a spec with vLLM's API key asks
// which deployment serves on the head's agent (checksQueue), not on any agent. Asked only
// for such specs, so the histories of specs without a key take no new command.
const servingCheckOnHeadVersion = "serving-check-on-head"

// findServing asks which deployment serves the cluster now (its supervisor's, if its
// endpoint answers). One of another spec makes this deploy a staged one. Not knowing is
// not a failure: the deploy then runs as on a cluster that does not serve.
func (d *deployment) findServing(ctx workflow.Context) {
	srv, err := d.serving(ctx)
	if err != nil {
		d.state.Warnings = append(d.state.Warnings, "could not tell which deployment serves (not staged): "+message(err))
		return
	}
	if !srv.Serves() && srv.Supervised {
		// A supervised cluster that does not serve: the deploy replaces what runs in place,
		// and the operator should see why it was not staged.
		d.state.Warnings = append(d.state.Warnings, "not staged: "+srv.Detail)
	}
	if !srv.Serves() || srv.SpecHash == d.specHash() {
		return
	}
	d.state.Staged = &Staging{Serving: srv, began: workflow.Now(ctx)}
	workflow.GetLogger(ctx).Info("staged beside the serving deployment", "cluster", d.spec.Name, "serving", srv.RunID, "spec", srv.SpecHash)
}

// serving asks which deployment serves: the controller, or, for a keyed spec, the
// controller what serves and the head's agent whether it answers (headChecksSplit; before
// it, the head's agent alone, servingCheckOnHeadVersion).
func (d *deployment) serving(ctx workflow.Context) (contract.ServingDeployment, error) {
	var srv contract.ServingDeployment
	o := deployStep(30*time.Second, 3)
	req := contract.ServingRequest{Cluster: d.spec.Name}
	switch {
	case headChecksSplit(ctx, d.spec):
		req.Unchecked = true
		if err := workflow.ExecuteActivity(onWorkflowQueue(ctx, "what serves "+d.spec.Name, o), contract.ActivityServingDeployment, req).Get(ctx, &srv); err != nil {
			return srv, err
		}
		t := srv.Target
		srv.Target = nil
		if t == nil {
			return srv, nil
		}
		// Its readiness check sends vLLM's API key, which only the head's agent resolves,
		// for its own endpoint (checksQueue).
		o.agentWait = d.spec.Timeouts.NodeAgent.D()
		var chk contract.DeploymentCheck
		if err := workflow.ExecuteActivity(onChecksQueue(ctx, d.spec, "check what serves "+d.spec.Name, o), contract.ActivityCheckTarget, *t).Get(ctx, &chk); err != nil {
			return contract.ServingDeployment{}, err
		}
		if !chk.Healthy {
			return contract.NotServing(srv.RunID, chk.Detail), nil
		}
		return srv, nil
	case d.spec.Secrets.APIKey != nil && workflow.GetVersion(ctx, servingCheckOnHeadVersion, workflow.DefaultVersion, 1) == 1:
		// Any other agent refuses the key (PolicyDenied), and the deploy then replaced the
		// serving engine unstaged: a coin toss with two agents (#37: the router test's
		// swap failed thousands of requests).
		o.agentWait = d.spec.Timeouts.NodeAgent.D()
		err := workflow.ExecuteActivity(onChecksQueue(ctx, d.spec, "what serves "+d.spec.Name, o), contract.ActivityServingDeployment, req).Get(ctx, &srv)
		return srv, err
	}
	err := workflow.ExecuteActivity(onWorkflowQueue(ctx, "what serves "+d.spec.Name, o), contract.ActivityServingDeployment, req).Get(ctx, &srv)
	return srv, err
}

// swap ends the steps that stop nothing. On a staged deploy it removes what the serving
// deployment runs that this one will not replace by name (removeStale); the rest is
// replaced container by container as the steps start them.
func (d *deployment) swap(ctx workflow.Context) error {
	st := d.state.Staged
	if d.swapped || st == nil {
		d.swapped = true
		return nil
	}
	d.swapped = true
	now := workflow.Now(ctx)
	st.Took, st.SwappedAt = now.Sub(st.began), now
	return d.step(ctx, PhaseSwap, fmt.Sprintf("staged in %s beside deploy run %s (spec %s): replacing it with spec %s",
		st.Took.Round(time.Millisecond), st.Serving.RunID, st.Serving.SpecHash, d.specHash()), func() error {
		d.drainRoute(ctx, st.Serving.Endpoint)
		return d.removeStale(ctx)
	})
}

// removeStale removes the serving deployment's containers that no step of this one
// replaces by name: Ray's when the executor changes to mp (the old vLLM in the Ray head
// would keep vLLM's port), the ranks' when it changes to ray, a node's old role when the
// head moves, everything on a node the spec no longer has. A node whose agent does not
// answer, or refuses (a node no longer in the signed spec), is left to its reconcile and
// said in the warnings.
func (d *deployment) removeStale(ctx workflow.Context) error {
	old := d.state.Staged.Serving
	type removal struct {
		host  string
		roles []string
	}
	todo := map[string]removal{}
	var nodes []string
	for _, on := range old.Nodes {
		n, kept := d.spec.Node(on.Name)
		var roles []string
		switch {
		case !kept:
			roles = []string{contract.RoleRayHead, contract.RoleRayWorker, contract.RoleVLLM}
		case d.spec.Executor == spec.ExecutorMP:
			if old.Executor != spec.ExecutorMP {
				roles = []string{contract.RoleRayHead, contract.RoleRayWorker}
			}
		default:
			if on.Role != n.Role {
				roles = []string{contract.RoleRayHead, contract.RoleRayWorker}
			}
			if old.Executor == spec.ExecutorMP {
				roles = append(roles, contract.RoleVLLM)
			}
		}
		if len(roles) > 0 {
			todo[on.Name] = removal{host: on.DockerHost, roles: roles}
			nodes = append(nodes, on.Name)
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	var futures []workflow.Future
	for _, node := range nodes {
		r := todo[node]
		actx := d.onNode(ctx, node, fmt.Sprintf("remove the old %s on %s", strings.Join(r.roles, ", "), node), cleanupStep(d.spec))
		futures = append(futures, workflow.ExecuteActivity(actx, contract.ActivityRemoveContainers, contract.RemoveRequest{
			Node: node, DockerHost: r.host, Cluster: d.spec.Name, Roles: r.roles, Intent: d.req.Intent}))
	}
	var errs []*stepError
	for i, f := range futures {
		err := f.Get(ctx, nil)
		if err == nil {
			continue
		}
		se := classify("remove the old deployment's containers", nodes[i], err)
		if _, kept := d.spec.Node(nodes[i]); !kept || se.Type == contract.ErrNodeAgentDown {
			d.state.Warnings = append(d.state.Warnings, fmt.Sprintf("%s: the old deployment's containers are left to its agent's reconcile: %s", nodes[i], se.Msg))
			continue
		}
		errs = append(errs, se)
	}
	if len(errs) > 0 {
		return joinStepErrors(errs)
	}
	return nil
}

// refusedBeforeSwap is the refusal of a staged deploy that failed before the swap (nil
// for any other failure).
func (d *deployment) refusedBeforeSwap() *contract.StagedRefusal {
	if d.state.Staged == nil || d.swapped {
		return nil
	}
	return &contract.StagedRefusal{Serving: d.state.Staged.Serving}
}

// stagedDetails prefixes a phase's details while the deploy runs beside the serving one.
func (d *deployment) stagedDetails(details string) string {
	if d.state.Staged == nil || d.swapped {
		return details
	}
	return "staging (deploy run " + d.state.Staged.Serving.RunID + " serves meanwhile): " + details
}
