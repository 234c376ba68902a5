package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// TeardownRequest is TeardownCluster's input.
type TeardownRequest struct {
	Spec spec.Cluster `json:"spec"`
	// Intent is the operator's signature of Spec (DeployRequest.Intent): agents with
	// trusted_keys remove a cluster's containers only for a signed spec of that cluster.
	Intent *contract.Intent `json:"intent,omitempty"`
}

// TeardownResult lists what was removed on each node.
type TeardownResult struct {
	Removed []contract.RemoveResult `json:"removed"`
	// NeverDeployed says the cluster had no deploy to tear down (nothing was done).
	NeverDeployed bool `json:"never_deployed,omitempty"`
	// Notes say what else the teardown did (the schedule paused, a deploy cancelled).
	Notes []string `json:"notes,omitempty"`
}

// TeardownCluster removes every container of the cluster on every node (all roles, any
// deployment). Removing a cluster that runs nothing is a no-op, not an error.
func TeardownCluster(ctx workflow.Context, req TeardownRequest) (TeardownResult, error) {
	d := newDeployment(ctx, DeployRequest{Spec: req.Spec, Trigger: "teardown", Intent: req.Intent})
	if err := d.validate(ctx); err != nil {
		var se *stepError
		errors.As(err, &se)
		return TeardownResult{}, toFailure(se, nil, nil)
	}
	var res TeardownResult
	if err := d.takeOver(ctx, &res); err != nil {
		return res, toFailure(err, nil, nil)
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("removing cluster %s from %d nodes", d.spec.Name, len(d.spec.Nodes)))
	if note := d.unroute(ctx); note != "" {
		res.Notes = append(res.Notes, note)
	}
	o := cleanupStep(d.spec)
	err := forEachNode(ctx, "teardown", nodeNames(d.spec.Nodes), func(node string) workflow.Future {
		n, _ := d.spec.Node(node)
		return workflow.ExecuteActivity(d.onNode(ctx, node, "remove cluster containers on "+node, o), contract.ActivityRemoveContainers,
			contract.RemoveRequest{Node: node, DockerHost: n.DockerHost, Cluster: d.spec.Name, Intent: req.Intent})
	}, func(_ string, r contract.RemoveResult) { res.Removed = append(res.Removed, r) })
	if err != nil {
		var se *stepError
		if errors.As(err, &se) {
			return res, toFailure(se, nil, nil)
		}
		return res, err
	}
	return res, nil
}
