// Package registration is where the worker binary puts its activities: the node's own
// activities on the node's task queue, behind the agent's gate of signed intent
// (NodeOptions), in an agent (Node); the operations activities on the workflow queue, in
// the controller (Controller). The worker's main calls them, and the tests derive the
// registered names, and which of them the gate refuses unsigned, from the same calls, so
// neither list is kept anywhere by hand.
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
	Controller(workflowQueue, checks)
	Node(nodeQueue, node, checks)
}

// Controller registers the operations activities (control.Checks) on workflowQueue, the
// controller's worker of contract.WorkflowQueue.
func Controller(workflowQueue worker.ActivityRegistry, checks *control.Checks) {
	workflowQueue.RegisterActivity(checks)
}

// Node registers the node's activities on nodeQueue, the agent's worker of
// contract.NodeQueue, with the checks of contract.HeadChecks.
func Node(nodeQueue worker.ActivityRegistry, node *activities.Agent, checks *control.Checks) {
	for _, concern := range node.Activities() {
		nodeQueue.RegisterActivity(concern)
	}
	for name, fn := range map[string]any{contract.ActivityCheckDeployment: checks.CheckDeployment, contract.ActivityWatchCluster: checks.WatchCluster, contract.ActivityServingDeployment: checks.ServingDeployment,
		contract.ActivityCheckTarget: checks.CheckTarget, contract.ActivityWatchTarget: checks.WatchTarget} {
		nodeQueue.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}

// NodeOptions are the options of the worker of the node's queue: base's, with the agent's
// gate of signed intent (activities.Agent.Gate) innermost, so that it runs right before
// each activity, inside every other interceptor (the liveness heartbeats cover it too).
//
// The node's queue runs no workflow: without DisableWorkflowWorker the SDK polls it for
// workflow tasks too (TestAgentOnlyServesItsNodeQueue saw PollWorkflowTaskQueue), a call an
// agent's credentials should not need.
func NodeOptions(base worker.Options, node *activities.Agent) worker.Options {
	base.DisableWorkflowWorker = true
	base.Interceptors = append(append([]interceptor.WorkerInterceptor{}, base.Interceptors...), node.Gate())
	return base
}
