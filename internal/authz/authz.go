// Package authz says which Temporal API calls a node agent's credentials need: the calls
// of an agent in --role agent (docs/security.md, "the calls an agent makes"), as a pure
// function of the call's method and request, for a server-side authorizer (Temporal's
// Authorizer plugin sees each call's API name and request) to hold a node's identity to.
// It holds no server code: a self-hosted server wraps AgentCall in its plugin.
package authz

import (
	"fmt"
	"strings"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// AgentCall is nil when node's agent may make the call method (a gRPC full method,
// /temporal.api.workflowservice.v1.WorkflowService/NAME, or NAME) with req; otherwise an
// error naming the call and why. Allowed: the SDK's handshake (GetSystemInfo,
// DescribeNamespace); polls of the node's own queue and the answers and heartbeats of its
// tasks; the one start of its NodeStarted run; and the worker's shutdown. No read of any
// workflow: a keyed cluster's checks on its head's agent check what the controller read
// (contract.CheckTarget).
func AgentCall(node, method string, req any) error {
	name := method[strings.LastIndex(method, "/")+1:]
	deny := func(why string) error { return fmt.Errorf("node %s's agent may not call %s: %s", node, name, why) }
	switch r := req.(type) {
	case *workflowservice.GetSystemInfoRequest, *workflowservice.DescribeNamespaceRequest,
		*workflowservice.RespondActivityTaskCompletedRequest, *workflowservice.RespondActivityTaskFailedRequest,
		*workflowservice.RespondActivityTaskCanceledRequest, *workflowservice.RecordActivityTaskHeartbeatRequest,
		*workflowservice.ShutdownWorkerRequest:
		return nil
	case *workflowservice.PollActivityTaskQueueRequest:
		if q := r.GetTaskQueue().GetName(); q != contract.NodeQueue(node) {
			return deny(fmt.Sprintf("task queue %s is not its node's, %s", q, contract.NodeQueue(node)))
		}
		return nil
	case *workflowservice.StartWorkflowExecutionRequest:
		if r.GetWorkflowType().GetName() != contract.NodeStartedWorkflow || r.GetWorkflowId() != contract.NodeStartedWorkflowID(node) ||
			r.GetTaskQueue().GetName() != contract.WorkflowQueue {
			return deny(fmt.Sprintf("a %s run %s on %s; an agent starts only its %s run %s on %s", r.GetWorkflowType().GetName(), r.GetWorkflowId(),
				r.GetTaskQueue().GetName(), contract.NodeStartedWorkflow, contract.NodeStartedWorkflowID(node), contract.WorkflowQueue))
		}
		return nil
	case *workflowservice.DescribeWorkflowExecutionRequest, *workflowservice.GetWorkflowExecutionHistoryRequest, *workflowservice.QueryWorkflowRequest:
		// A keyed cluster's head checks what the controller read (contract.CheckTarget).
		return deny("an agent reads no workflow; the controller reads what its checks check")
	}
	return deny("not a call an agent makes")
}
