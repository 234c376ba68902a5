package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/spec"
)

// TeardownRequest is TeardownCluster's input.
type TeardownRequest struct {
	Spec spec.Cluster `json:"spec"`
}

// TeardownResult lists what was removed on each node.
type TeardownResult struct {
	Removed []contract.RemoveResult `json:"removed"`
	// NeverDeployed says the cluster had no deploy to tear down (nothing was done).
	NeverDeployed bool `json:"never_deployed,omitempty"`
}

// TeardownCluster removes every container of the cluster on every node (all roles, any
// deployment). Removing a cluster that runs nothing is a no-op, not an error.
func TeardownCluster(ctx workflow.Context, req TeardownRequest) (TeardownResult, error) {
	d := newDeployment(ctx, DeployRequest{Spec: req.Spec, Trigger: "teardown"})
	if err := d.spec.Validate(); err != nil {
		return TeardownResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrSpecInvalid, nil)
	}
	var res TeardownResult
	if workflow.GetVersion(ctx, superviseVersion, workflow.DefaultVersion, 1) == 1 {
		// A supervisor left running would redeploy what is being removed. Not running is fine.
		_ = workflow.RequestCancelExternalWorkflow(ctx, SuperviseWorkflowID(d.spec.Name), "").Get(ctx, nil)
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("removing cluster %s from %d nodes", d.spec.Name, len(d.spec.Nodes)))
	o := stepOptions{startToClose: d.spec.Timeouts.Teardown.D(), attempts: 5}
	// Removal by label is idempotent, so a node whose agent is slow to return can wait
	// longer than a deploy step would.
	o.agentWait = max(3*d.spec.Timeouts.NodeAgent.D(), 30*time.Second)
	err := forEachNode(ctx, "teardown", nodeNames(d.spec.Nodes), func(node string) workflow.Future {
		n, _ := d.spec.Node(node)
		return workflow.ExecuteActivity(d.onNode(ctx, node, "remove cluster containers on "+node, o), contract.ActivityRemoveContainers,
			contract.RemoveRequest{Node: node, DockerHost: n.DockerHost, Cluster: d.spec.Name})
	}, func(_ string, r contract.RemoveResult) { res.Removed = append(res.Removed, r) })
	if err != nil {
		var se *stepError
		if errors.As(err, &se) {
			return res, toFailure(se, nil)
		}
		return res, err
	}
	return res, nil
}
