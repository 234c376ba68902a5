// Package registration is where the node agent puts its activities on its two workers: the
// node's own activities on the node's task queue, the operations activities on the workflow
// queue, the latter behind the agent's gate of signed intent (NodeOptions). The worker's
// main calls both, and the tests derive the registered names, and which of them the gate
// refuses unsigned, from the same calls, so neither list is kept anywhere by hand.
package registration

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
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

// NodeOptions are the options of the worker of the node's queue: base's, with the agent's
// gate of signed intent (activities.Agent.Gate) innermost, so that it runs right before
// each activity, inside every other interceptor (the liveness heartbeats cover it too).
func NodeOptions(base worker.Options, node *activities.Agent) worker.Options {
	base.Interceptors = append(append([]interceptor.WorkerInterceptor{}, base.Interceptors...), node.Gate())
	return base
}
