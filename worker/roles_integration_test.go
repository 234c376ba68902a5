//go:build integration

package main

import (
	"context"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tpdeploy/tpdeploy/internal/agentgate"
	"github.com/tpdeploy/tpdeploy/internal/authz"
	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// calls records the gRPC methods a role's connection made, by their short name
// (PollActivityTaskQueue).
type calls struct {
	mu   sync.Mutex
	seen map[string]int
	// node, when set, is the agent's: each call is held to authz.AgentCall, and refused
	// are the calls it would refuse.
	node    string
	refused []string
}

func (c *calls) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.seen[method[strings.LastIndex(method, "/")+1:]]++
	if c.node != "" {
		if err := authz.AgentCall(c.node, method, req); err != nil {
			c.refused = append(c.refused, err.Error())
		}
	}
	c.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *calls) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for m := range c.seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// agentAllowedCalls are the Temporal API calls an agent in --role agent may make
// (docs/security.md lists them for an authorizer): the client's handshake, its node
// queue's polls and answers, the one start of its NodeStarted run, and a worker's
// shutdown. The reads of CheckDeployment and WatchCluster (keyed clusters' checks on
// the head's agent) are not exercised here and are listed apart in the docs.
var agentAllowedCalls = map[string]bool{
	"GetSystemInfo":                true,
	"DescribeNamespace":            true,
	"PollActivityTaskQueue":        true,
	"RespondActivityTaskCompleted": true,
	"RespondActivityTaskFailed":    true,
	"RespondActivityTaskCanceled":  true,
	"RecordActivityTaskHeartbeat":  true,
	"StartWorkflowExecution":       true,
	"ShutdownWorker":               true,
	"RecordWorkerHeartbeat":        true,
}

// TestAgentOnlyServesItsNodeQueue runs the controller (--role controller) and an agent
// (--role agent) against the dev server: the agent's start-up report runs through the
// controller (its NodeStarted run completes), the workflow queue's pollers are the
// controller's only (DescribeTaskQueue, both task types), the node queue's the agent's,
// and the agent's connection made no call outside agentAllowedCalls — no workflow-task
// poll, no signal, no list, no history read — and none that authz.AgentCall, the rule a
// server's authorizer would hold a node's credentials to, refuses for its request.
func TestAgentOnlyServesItsNodeQueue(t *testing.T) {
	node := "split-node"
	rec := map[string]*calls{roleAgent: {seen: map[string]int{}, node: node}, roleController: {seen: map[string]int{}}}
	dialHook = func(role string) []grpc.DialOption {
		return []grpc.DialOption{grpc.WithChainUnaryInterceptor(rec[role].interceptor)}
	}
	defer func() { dialHook = nil }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	go func() {
		done <- run(ctx, []string{"--role", "controller", "--address", devAddress, "--log-level", "error"})
	}()
	c, err := client.Dial(client.Options{HostPort: devAddress})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A running supervisor to be told of the node's boot: started on a queue no worker
	// polls, so it stays running with only what is sent to it in its history.
	sup, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.SuperviseWorkflowID("split-test"), TaskQueue: "tpdeploy-test-nobody-polls"}, "SuperviseCluster")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.TerminateWorkflow(context.Background(), sup.GetID(), sup.GetRunID(), "test over") }()
	// The agent reaches Temporal only through the gate (package agentgate), which holds its
	// node's key to authz.AgentCall at the server's side: a call outside the table fails
	// there, so the agent's start and its task below show the table is all it needs.
	gate := startGate(t, node, "key-of-"+node)
	t.Setenv("TEMPORAL_TLS", "false") // the test's gate is plaintext, as the lab's
	go func() {
		done <- run(ctx, []string{"--role", "agent", "--node", node, "--address", gate, "--api-key", "key-of-" + node, "--log-level", "error",
			"--policy-file", writePolicy(t, "allowed_ports: ['8000-9000']\n")})
	}()

	// The agent's start-up report: its NodeStarted run, which only the controller runs.
	var res contract.NodeStartResult
	deadline := time.Now().Add(60 * time.Second)
	for {
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.GetWorkflow(wctx, contract.NodeStartedWorkflowID(node), "").Get(wctx, &res)
		wcancel()
		if err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("a worker exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's NodeStarted run did not complete: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("NodeStarted: %+v", res)
	if updateHistory {
		// For the replay test (workflows/testdata): the start-up run, told one supervisor.
		writeHistory(t, ctx, c, contract.NodeStartedWorkflowID(node), "../workflows/testdata/node-started.json")
	}
	// The boot reached the supervisor through the controller: its history holds the signal.
	told := false
	it := c.GetWorkflowHistory(ctx, sup.GetID(), sup.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetWorkflowExecutionSignaledEventAttributes(); a != nil && a.GetSignalName() == contract.SignalNodeBooted {
			var boot contract.NodeBoot
			if err := converter.GetDefaultDataConverter().FromPayload(a.GetInput().GetPayloads()[0], &boot); err != nil {
				t.Fatal(err)
			}
			// Other tests' agents boot against the same server and the controller tells every
			// running supervisor, so this one's signal may not be the last.
			told = told || (boot.Node == node && boot.BootID != "")
			t.Logf("the supervisor was told %+v, by %s", boot, a.GetIdentity())
		}
	}
	if !told || !slices.Contains(res.Told, sup.GetID()) {
		t.Errorf("the running supervisor %s was not told of the node's boot (told %v)", sup.GetID(), res.Told)
	}

	// A node task, so the agent answers one: BootID (unsigned, reads only), scheduled by a
	// workflow of the test's own on a queue of its own.
	tw := sdkworker.New(c, "split-test-workflows", sdkworker.Options{})
	tw.RegisterWorkflowWithOptions(func(ctx workflow.Context) (string, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: contract.NodeQueue(node), StartToCloseTimeout: 30 * time.Second})
		var boot string
		err := workflow.ExecuteActivity(ctx, contract.ActivityBootID, contract.BootIDRequest{Node: node}).Get(ctx, &boot)
		return boot, err
	}, workflow.RegisterOptions{Name: "SplitTestAsksBootID"})
	if err := tw.Start(); err != nil {
		t.Fatal(err)
	}
	defer tw.Stop()
	var boot string
	bctx, bcancel := context.WithTimeout(ctx, 30*time.Second)
	bootRun, err := c.ExecuteWorkflow(bctx, client.StartWorkflowOptions{TaskQueue: "split-test-workflows"}, "SplitTestAsksBootID")
	if err == nil {
		err = bootRun.Get(bctx, &boot)
	}
	bcancel()
	if err != nil || boot == "" {
		t.Fatalf("the agent's BootID: %q, %v", boot, err)
	}

	pollers := func(queue string, kind enumspb.TaskQueueType) []*taskqueuepb.PollerInfo {
		t.Helper()
		resp, err := c.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
			Namespace: "default", TaskQueue: &taskqueuepb.TaskQueue{Name: queue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL}, TaskQueueType: kind})
		if err != nil {
			t.Fatalf("describe %s: %v", queue, err)
		}
		return resp.GetPollers()
	}
	// Pollers show once they have polled; the agent's node queue and the controller's
	// queue have by now (the run went through both).
	for _, q := range []struct {
		queue string
		kind  enumspb.TaskQueueType
		want  string // the identity prefix of every poller, and at least one
	}{
		{contract.WorkflowQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW, "tpdeploy-controller@"},
		{contract.WorkflowQueue, enumspb.TASK_QUEUE_TYPE_ACTIVITY, "tpdeploy-controller@"},
		{contract.NodeQueue(node), enumspb.TASK_QUEUE_TYPE_ACTIVITY, "tpdeploy-agent:" + node + "@"},
	} {
		ps := pollers(q.queue, q.kind)
		if len(ps) == 0 {
			t.Errorf("%s (%s): no pollers", q.queue, q.kind)
		}
		for _, p := range ps {
			// The package's other tests run agents of their own nodes (role all) on the
			// same dev server; only this test's node's agent is under test.
			if id := p.GetIdentity(); strings.HasPrefix(id, "tpdeploy-agent:") && !strings.HasPrefix(id, "tpdeploy-agent:"+node+"@") {
				continue
			}
			if !strings.HasPrefix(p.GetIdentity(), q.want) {
				t.Errorf("%s (%s) is polled by %q, want only %s…", q.queue, q.kind, p.GetIdentity(), q.want)
			}
		}
	}
	if ps := pollers(contract.NodeQueue(node), enumspb.TASK_QUEUE_TYPE_WORKFLOW); len(ps) != 0 {
		t.Errorf("the node queue has workflow pollers: %v", ps)
	}

	got := rec[roleAgent].names()
	t.Logf("the agent's Temporal calls: %s", strings.Join(got, ", "))
	for _, m := range got {
		if !agentAllowedCalls[m] {
			t.Errorf("the agent called %s, which an agent's credentials need not allow", m)
		}
	}
	if rec[roleAgent].seen["StartWorkflowExecution"] != 1 {
		t.Errorf("the agent started %d workflows, want its one NodeStarted run", rec[roleAgent].seen["StartWorkflowExecution"])
	}
	if rec[roleController].seen["PollWorkflowTaskQueue"] == 0 {
		t.Error("the controller never polled the workflow queue")
	}

	cancel()
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("exit on cancel: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a worker did not stop")
		}
	}
	// What the agent's stop added.
	got = rec[roleAgent].names()
	t.Logf("the agent's Temporal calls, its stop included: %s", strings.Join(got, ", "))
	for _, m := range got {
		if !agentAllowedCalls[m] {
			t.Errorf("the agent called %s, which an agent's credentials need not allow", m)
		}
	}
	// Every call, its request included, passes the authorizer's rule for node agents.
	for _, r := range rec[roleAgent].refused {
		t.Errorf("authz.AgentCall refuses the agent's call: %s", r)
	}
	if rec[roleAgent].seen["RespondActivityTaskCompleted"] == 0 {
		t.Error("the agent never answered a task")
	}
}

// startGate runs a gate in front of the dev server that knows node's key.
func startGate(t *testing.T, node, key string) string {
	t.Helper()
	g, err := agentgate.Start("127.0.0.1:0", devAddress, map[string]string{agentgate.KeyHash(key): node}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Stop() })
	return g.Addr
}

// updateHistory is read before TestMain clears the TPDEPLOY_ environment.
var updateHistory = os.Getenv("TPDEPLOY_UPDATE_HISTORY") != ""

// writeHistory saves a run's latest history for the replay test (TPDEPLOY_UPDATE_HISTORY=1).
func writeHistory(t *testing.T, ctx context.Context, c client.Client, id, file string) {
	t.Helper()
	it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	hist := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		hist.Events = append(hist.Events, ev)
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(hist)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d events to %s", len(hist.Events), file)
}
