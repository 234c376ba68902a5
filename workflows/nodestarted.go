package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// NodeStarted is what a node agent's start asks of the controller (the agent starts it,
// contract.NodeStartedWorkflowID, and makes no other call of its own besides polling its
// queue; docs/security.md): tell the running supervisors and deploys the node's boot ID
// (ReportNodeBoot, on the workflow queue, which the controller serves), then, for each
// cluster the node holds containers of, read which of them its deployment holds
// (NodeWanted, on the workflow queue) and have the node remove the rest (ReconcileCluster,
// on the node's queue, checked there as a signed removal). A cluster whose state cannot
// be read, that an operation acts on, or whose removal the node refuses is left alone,
// and the result says why.
func NodeStarted(ctx workflow.Context, req contract.NodeStartRequest) (contract.NodeStartResult, error) {
	var res contract.NodeStartResult
	if req.Node == "" {
		return res, temporal.NewNonRetryableApplicationError("node started: no node named", contract.ErrBadRequest, nil)
	}
	if want := contract.NodeStartedWorkflowID(req.Node); workflow.GetInfo(ctx).WorkflowExecution.ID != want {
		// The ID is what an authorizer holds a node's credentials to: a run under another
		// node's ID must not speak for this node.
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("node started: the start-up of node %s runs under workflow ID %s, not %s",
			req.Node, want, workflow.GetInfo(ctx).WorkflowExecution.ID), contract.ErrWrongWorkflowID, nil)
	}
	ops := deployStep(30*time.Second, 5)
	if req.BootID != "" {
		if err := workflow.ExecuteActivity(onWorkflowQueue(ctx, "tell the running supervisors and deploys of "+req.Node+"'s boot", ops),
			contract.ActivityReportNodeBoot, contract.NodeBoot{Node: req.Node, BootID: req.BootID}).Get(ctx, &res.Told); err != nil {
			se := classify("tell of the node's boot", req.Node, err)
			return res, temporal.NewNonRetryableApplicationError(se.Error(), se.Type, err)
		}
	}
	node := ops
	node.agentWait, node.attempts = time.Minute, 3
	for _, cluster := range req.Clusters {
		var w contract.Wanted
		if err := workflow.ExecuteActivity(onWorkflowQueue(ctx, "what "+req.Node+" keeps of "+cluster, ops), contract.ActivityNodeWanted,
			contract.WantedRequest{Node: req.Node, Cluster: cluster}).Get(ctx, &w); err != nil {
			leave(&res, cluster, "state unknown: "+err.Error())
			continue
		}
		switch {
		case !w.Known:
			leave(&res, cluster, "no deploy of it is known")
			continue
		case w.Running:
			leave(&res, cluster, "an operation acts on it (run "+w.Run+")")
			continue
		}
		var removed []string
		if err := workflow.ExecuteActivity(withStep(ctx, contract.NodeQueue(req.Node), node.agentWait, "remove what "+cluster+"'s deployment no longer holds on "+req.Node, node),
			contract.ActivityReconcileCluster, contract.ReconcileRequest{Node: req.Node, Cluster: cluster, Keep: w.Keep, Intent: w.Intent, Run: w.Run}).Get(ctx, &removed); err != nil {
			leave(&res, cluster, err.Error())
			continue
		}
		res.Reconciled = append(res.Reconciled, cluster)
		res.Removed = append(res.Removed, removed...)
	}
	if len(res.LeftAlone) > 0 {
		var why []string
		for _, c := range req.Clusters {
			if r, ok := res.LeftAlone[c]; ok {
				why = append(why, c+": "+r)
			}
		}
		workflow.GetLogger(ctx).Info("clusters left alone at the node's start", "node", req.Node, "why", strings.Join(why, "; "))
	}
	return res, nil
}

// leave records why a cluster's containers on the node were left as they are.
func leave(res *contract.NodeStartResult, cluster, why string) {
	if res.LeftAlone == nil {
		res.LeftAlone = map[string]string{}
	}
	res.LeftAlone[cluster] = why
}
