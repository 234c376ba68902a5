package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/contract"
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

// PhaseSwap is the moment a staged deploy starts to replace the serving deployment.
const PhaseSwap = "replacing the serving deployment"

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

// findServing asks which deployment serves the cluster now (its supervisor's, if its
// endpoint answers). One of another spec makes this deploy a staged one. Not knowing is
// not a failure: the deploy then runs as on a cluster that does not serve.
func (d *deployment) findServing(ctx workflow.Context) {
	var srv contract.ServingDeployment
	err := workflow.ExecuteActivity(onWorkflowQueue(ctx, "what serves "+d.spec.Name, deployStep(30*time.Second, 3)),
		contract.ActivityServingDeployment, contract.ClusterRequest{Cluster: d.spec.Name}).Get(ctx, &srv)
	if err != nil {
		d.state.Warnings = append(d.state.Warnings, "could not tell which deployment serves (not staged): "+message(err))
		return
	}
	if !srv.Serves() || srv.SpecHash == d.specHash() {
		return
	}
	d.state.Staged = &Staging{Serving: srv, began: workflow.Now(ctx)}
	workflow.GetLogger(ctx).Info("staged beside the serving deployment", "cluster", d.spec.Name, "serving", srv.RunID, "spec", srv.SpecHash)
}

// swap marks the end of the steps that stop nothing.
func (d *deployment) swap(ctx workflow.Context) {
	st := d.state.Staged
	if d.swapped || st == nil {
		d.swapped = true
		return
	}
	d.swapped = true
	now := workflow.Now(ctx)
	st.Took, st.SwappedAt = now.Sub(st.began), now
	d.setPhase(ctx, PhaseSwap, fmt.Sprintf("staged in %s beside deploy run %s (spec %s): replacing it with spec %s",
		st.Took.Round(time.Millisecond), st.Serving.RunID, st.Serving.SpecHash, d.specHash()))
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
