// Package registration is where the node agent puts its activities on its two workers: the
// node's own activities on the node's task queue, the operations activities on the workflow
// queue. The worker's main calls Agent, and its test derives the registered names from the
// same call, so the list of what an agent serves is kept nowhere by hand.
package registration

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/control"
)

// Agent registers the agent's activities: checks (control.Checks) on workflowQueue, the
// worker of contract.WorkflowQueue; the node's (activities.Agent, one struct per concern)
// on nodeQueue, the worker of contract.NodeQueue of the node, with the checks of
// contract.HeadChecks there too (a cluster with vLLM's API key is checked by its head's
// agent). The SDK names each activity after its method.
func Agent(workflowQueue, nodeQueue worker.ActivityRegistry, node *activities.Agent, checks *control.Checks) {
	workflowQueue.RegisterActivity(checks)
	for _, concern := range node.Activities() {
		nodeQueue.RegisterActivity(concern)
	}
	for name, fn := range map[string]any{contract.ActivityCheckDeployment: checks.CheckDeployment, contract.ActivityWatchCluster: checks.WatchCluster} {
		nodeQueue.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}
