//go:build integration

package agentgate

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/devserver"
)

// startGate runs the real dev server and a gate in front of it that knows node-b's key.
func startGate(t *testing.T) (gate, direct string) {
	t.Helper()
	srv, err := devserver.Start(context.Background(), t.TempDir())
	if err != nil {
		// No skip: CI builds the binary, so its absence is a failure to be seen.
		t.Fatalf("the gate's tests need the Temporal dev server: %v", err)
	}
	t.Cleanup(srv.Stop)
	g, err := Start("127.0.0.1:0", srv.Address, map[string]string{KeyHash("key-of-node-b"): "node-b"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Stop() })
	return g.Addr, srv.Address
}

func dial(t *testing.T, address, key string) (client.Client, error) {
	opts := client.Options{HostPort: address, Logger: quiet{}}
	if key != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(key)
		opts.ConnectionOptions.TLSDisabled = true
	}
	c, err := client.Dial(opts)
	if err == nil {
		t.Cleanup(c.Close)
	}
	return c, err
}

func code(err error) codes.Code {
	var se serviceerror.ServiceError
	if errors.As(err, &se) {
		return se.Status().Code()
	}
	return status.Code(err)
}

// Issue #36, item 9: the agents' credentials were namespace-wide wherever the server's
// roles stop at the namespace (the dev server has none). Through the gate, node-b's key
// makes the calls of docs/security.md's table and nothing else, on the real server.
func TestGateHoldsANodesKeyToItsCalls(t *testing.T) {
	gate, direct := startGate(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if _, err := dial(t, gate, ""); code(err) != codes.Unauthenticated {
		t.Errorf("dial without a key: %v, want Unauthenticated", err)
	}
	if _, err := dial(t, gate, "key-of-no-node"); code(err) != codes.Unauthenticated {
		t.Errorf("dial with an unknown key: %v, want Unauthenticated", err)
	}
	nodeB, err := dial(t, gate, "key-of-node-b")
	if err != nil {
		t.Fatalf("node-b through the gate: %v", err)
	}
	operator, err := dial(t, direct, "")
	if err != nil {
		t.Fatal(err)
	}

	// Allowed: its start-up report, and a poll of its own queue.
	run, err := nodeB.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.NodeStartedWorkflowID("node-b"), TaskQueue: contract.WorkflowQueue}, contract.NodeStartedWorkflow)
	if err != nil {
		t.Fatalf("node-b's NodeStarted run through the gate: %v", err)
	}
	defer func() { _ = operator.TerminateWorkflow(context.Background(), run.GetID(), run.GetRunID(), "test over") }()
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = nodeB.WorkflowService().PollActivityTaskQueue(pctx, &workflowservice.PollActivityTaskQueueRequest{
		Namespace: "default", TaskQueue: &taskqueuepb.TaskQueue{Name: contract.NodeQueue("node-b")}, Identity: "test"})
	pcancel()
	if c := code(err); err != nil && c != codes.DeadlineExceeded && c != codes.Canceled {
		t.Errorf("a poll of node-b's own queue: %v", err)
	}

	// Refused: everything else an agent never does, each at the gate.
	for name, call := range map[string]func() error{
		"start a deploy": func() error {
			_, err := nodeB.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.DeployWorkflowID("c"), TaskQueue: contract.WorkflowQueue}, "DeployCluster")
			return err
		},
		"start node-a's NodeStarted run": func() error {
			_, err := nodeB.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.NodeStartedWorkflowID("node-a"), TaskQueue: contract.WorkflowQueue}, contract.NodeStartedWorkflow)
			return err
		},
		"signal a workflow": func() error {
			return nodeB.SignalWorkflow(ctx, run.GetID(), "", contract.SignalNodeBooted, contract.NodeBoot{Node: "node-a"})
		},
		"read a workflow": func() error {
			_, err := nodeB.DescribeWorkflowExecution(ctx, run.GetID(), "")
			return err
		},
		"terminate a workflow": func() error {
			return nodeB.TerminateWorkflow(ctx, run.GetID(), "", "x")
		},
		"poll node-a's queue": func() error {
			_, err := nodeB.WorkflowService().PollActivityTaskQueue(ctx, &workflowservice.PollActivityTaskQueueRequest{
				Namespace: "default", TaskQueue: &taskqueuepb.TaskQueue{Name: contract.NodeQueue("node-a")}})
			return err
		},
		"poll workflow tasks": func() error {
			_, err := nodeB.WorkflowService().PollWorkflowTaskQueue(ctx, &workflowservice.PollWorkflowTaskQueueRequest{
				Namespace: "default", TaskQueue: &taskqueuepb.TaskQueue{Name: contract.WorkflowQueue}})
			return err
		},
		"list workflows": func() error {
			_, err := nodeB.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default"})
			return err
		},
	} {
		if err := call(); code(err) != codes.PermissionDenied {
			t.Errorf("%s through the gate: %v, want PermissionDenied", name, err)
		}
	}
	// The refusals happened at the gate: the server saw no signal and no termination.
	desc, err := operator.DescribeWorkflowExecution(ctx, run.GetID(), "")
	if err != nil {
		t.Fatal(err)
	}
	if s := desc.GetWorkflowExecutionInfo().GetStatus().String(); s != "Running" {
		t.Errorf("node-b's NodeStarted run is %s after the refused termination", s)
	}
}

type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
