package agentgate

import (
	"context"
	"strings"
	"testing"

	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

const svc = "/temporal.api.workflowservice.v1.WorkflowService/"

// The gate names the node by the key's hash, decodes the bytes as the method's own
// request type and holds it to authz.AgentCall; another service, an unknown method or
// bytes that are no such request are refused.
func TestGateDecidesFromTheKeyAndTheRequestsBytes(t *testing.T) {
	g := &Gate{Nodes: map[string]string{KeyHash("kb"): "node-b"}}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer kb"))
	if node, err := g.node(ctx); err != nil || node != "node-b" {
		t.Fatalf("node: %q, %v", node, err)
	}
	for _, md := range []metadata.MD{nil, metadata.Pairs("authorization", "Bearer ka"), metadata.Pairs("authorization", "kb")} {
		if _, err := g.node(metadata.NewIncomingContext(context.Background(), md)); err == nil {
			t.Errorf("%v: a node", md)
		}
	}
	poll := func(queue string) rawMessage {
		b, err := proto.Marshal(&workflowservice.PollActivityTaskQueueRequest{TaskQueue: &taskqueuepb.TaskQueue{Name: queue}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if err := g.allowed("node-b", svc+"PollActivityTaskQueue", poll(contract.NodeQueue("node-b"))); err != nil {
		t.Errorf("its own queue: %v", err)
	}
	for name, tc := range map[string]struct {
		method string
		req    rawMessage
		want   string
	}{
		"another node's queue":       {svc + "PollActivityTaskQueue", poll(contract.NodeQueue("node-a")), "is not its node's"},
		"the same bytes as a signal": {svc + "SignalWorkflowExecution", poll(contract.NodeQueue("node-b")), "SignalWorkflowExecution"},
		"another service":            {"/temporal.api.operatorservice.v1.OperatorService/DeleteNamespace", nil, "not the WorkflowService"},
		"no such method":             {svc + "Nope", nil, "no such method"},
		"garbage":                    {svc + "PollActivityTaskQueue", rawMessage("\xff\xff\xff"), "undecodable"},
	} {
		if err := g.allowed("node-b", tc.method, tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
