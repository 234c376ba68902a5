package authz

import (
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	querypb "go.temporal.io/api/query/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

const svc = "/temporal.api.workflowservice.v1.WorkflowService/"

func queue(name string) *taskqueuepb.TaskQueue { return &taskqueuepb.TaskQueue{Name: name} }

func start(typ, id, q string) *workflowservice.StartWorkflowExecutionRequest {
	return &workflowservice.StartWorkflowExecutionRequest{WorkflowType: &commonpb.WorkflowType{Name: typ}, WorkflowId: id, TaskQueue: queue(q)}
}

func run(id string) *commonpb.WorkflowExecution { return &commonpb.WorkflowExecution{WorkflowId: id} }

// TestAgentCall: node-b's agent may poll only its queue and start only its NodeStarted
// run; it may not poll workflow tasks, signal, list, terminate, read any workflow (a keyed
// cluster's head checks what the controller read: contract.CheckTarget), or start
// anything else.
func TestAgentCall(t *testing.T) {
	for _, tt := range []struct {
		name   string
		method string
		req    any
		ok     bool
	}{
		{"handshake", "GetSystemInfo", &workflowservice.GetSystemInfoRequest{}, true},
		{"namespace", svc + "DescribeNamespace", &workflowservice.DescribeNamespaceRequest{}, true},
		{"own queue", "PollActivityTaskQueue", &workflowservice.PollActivityTaskQueueRequest{TaskQueue: queue(contract.NodeQueue("node-b"))}, true},
		{"another node's queue", "PollActivityTaskQueue", &workflowservice.PollActivityTaskQueueRequest{TaskQueue: queue(contract.NodeQueue("node-a"))}, false},
		{"the workflow queue's activities", "PollActivityTaskQueue", &workflowservice.PollActivityTaskQueueRequest{TaskQueue: queue(contract.WorkflowQueue)}, false},
		{"workflow tasks", "PollWorkflowTaskQueue", &workflowservice.PollWorkflowTaskQueueRequest{TaskQueue: queue(contract.NodeQueue("node-b"))}, false},
		{"answer", "RespondActivityTaskCompleted", &workflowservice.RespondActivityTaskCompletedRequest{}, true},
		{"heartbeat", "RecordActivityTaskHeartbeat", &workflowservice.RecordActivityTaskHeartbeatRequest{}, true},
		{"answer by ID", "RespondActivityTaskCompletedById", &workflowservice.RespondActivityTaskCompletedByIdRequest{}, false},
		{"its NodeStarted", "StartWorkflowExecution", start(contract.NodeStartedWorkflow, contract.NodeStartedWorkflowID("node-b"), contract.WorkflowQueue), true},
		{"another node's NodeStarted", "StartWorkflowExecution", start(contract.NodeStartedWorkflow, contract.NodeStartedWorkflowID("node-a"), contract.WorkflowQueue), false},
		{"a deploy", "StartWorkflowExecution", start("DeployCluster", contract.DeployWorkflowID("c"), contract.WorkflowQueue), false},
		{"NodeStarted on a queue of its own", "StartWorkflowExecution", start(contract.NodeStartedWorkflow, contract.NodeStartedWorkflowID("node-b"), "mine"), false},
		{"signal", "SignalWorkflowExecution", &workflowservice.SignalWorkflowExecutionRequest{WorkflowExecution: run(contract.SuperviseWorkflowID("c"))}, false},
		{"signal with start", "SignalWithStartWorkflowExecution", &workflowservice.SignalWithStartWorkflowExecutionRequest{}, false},
		{"list", "ListWorkflowExecutions", &workflowservice.ListWorkflowExecutionsRequest{}, false},
		{"terminate", "TerminateWorkflowExecution", &workflowservice.TerminateWorkflowExecutionRequest{}, false},
		{"describe a deploy", "DescribeWorkflowExecution", &workflowservice.DescribeWorkflowExecutionRequest{Execution: run(contract.DeployWorkflowID("c"))}, false},
		{"describe a supervisor", "DescribeWorkflowExecution", &workflowservice.DescribeWorkflowExecutionRequest{Execution: run(contract.SuperviseWorkflowID("c"))}, false},
		{"a deploy's history", "GetWorkflowExecutionHistory", &workflowservice.GetWorkflowExecutionHistoryRequest{Execution: run(contract.DeployWorkflowID("c"))}, false},
		{"a teardown's history", "GetWorkflowExecutionHistory", &workflowservice.GetWorkflowExecutionHistoryRequest{Execution: run(contract.TeardownWorkflowID("c"))}, false},
		{"a deploy's state", "QueryWorkflow", &workflowservice.QueryWorkflowRequest{Execution: run(contract.DeployWorkflowID("c")), Query: &querypb.WorkflowQuery{QueryType: contract.QueryState}}, false},
		{"a supervisor's state", "QueryWorkflow", &workflowservice.QueryWorkflowRequest{Execution: run(contract.SuperviseWorkflowID("c")), Query: &querypb.WorkflowQuery{QueryType: contract.QuerySupervision}}, false},
		{"shutdown", "ShutdownWorker", &workflowservice.ShutdownWorkerRequest{}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := AgentCall("node-b", tt.method, tt.req)
			if (err == nil) != tt.ok {
				t.Errorf("AgentCall(%s) = %v, want allowed %v", tt.method, err, tt.ok)
			}
		})
	}
}
