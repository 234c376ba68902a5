//go:build integration

package control

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/devserver"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// These tests run the workflows on the real Temporal dev server, with the node
// activities faked: the real ones need real nodes (see the lab tests for those).

var (
	temporalClient client.Client
	serverAddress  string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tpdeploy-devserver-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	srv, err := devserver.Start(ctx, dir)
	if err != nil {
		// No skip: CI builds the binary, so its absence is a failure to be seen.
		fmt.Fprintln(os.Stderr, "FAIL: integration tests need the Temporal dev server:", err)
		return 1
	}
	defer srv.Stop()
	serverAddress = srv.Address
	temporalClient, err = client.Dial(client.Options{HostPort: srv.Address})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer temporalClient.Close()
	w := worker.New(temporalClient, contract.WorkflowQueue, worker.Options{})
	// Every workflow type, as agents register them: workers of one queue must agree.
	workflows.RegisterAll(w)
	// The operations activities every agent serves on the workflow queue.
	w.RegisterActivity(&testChecks{Checks: &Checks{Controller: Controller{Client: temporalClient}}})
	if err := w.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer w.Stop()
	return m.Run()
}

// testChecks are the operations activities with ServingDeployment answered by the test
// for the clusters it names in servingSaid: a fake agent's endpoint never answers the
// readiness check, so the test says which deployment serves (a staged deploy needs one).
type testChecks struct {
	*Checks
}

// servingSaid maps a cluster to the deployment a test says serves it.
var servingSaid sync.Map

func (c *testChecks) ServingDeployment(ctx context.Context, req contract.ServingRequest) (contract.ServingDeployment, error) {
	if srv, ok := servingSaid.Load(req.Cluster); ok {
		return srv.(contract.ServingDeployment), nil
	}
	return c.Checks.ServingDeployment(ctx, req)
}

// cluster makes a two-node seed cluster whose node names are unique to the test, and
// starts an agent (worker) for each node listed in agents.
func cluster(t *testing.T, name string, agents ...string) (spec.Cluster, *fakeagents.Agents) {
	t.Helper()
	s := fakeagents.SeedSpec()
	s.Name = name
	head, wk := name+"-a", name+"-b"
	s.Nodes[0].Name, s.Nodes[1].Name = head, wk
	s.Timeouts.NodeAgent = spec.Duration(3 * time.Second)
	f := fakeagents.New()
	f.Probes = map[string]netplan.NodeProbe{head: fakeagents.SeedProbe(head, true), wk: fakeagents.SeedProbe(wk, false)}
	// A deploy that serves starts the cluster's supervisor, whose checks of the fake
	// endpoint would fail: it ends with the test.
	t.Cleanup(func() {
		_ = temporalClient.TerminateWorkflow(context.Background(), contract.SuperviseWorkflowID(name), "", "test over")
	})
	for _, suffix := range agents {
		node := name + "-" + suffix
		w := worker.New(temporalClient, contract.NodeQueue(node), worker.Options{})
		w.RegisterActivity(f)
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
	}
	return s, f
}

func TestDeployCompletesOnDevServer(t *testing.T) {
	s, f := cluster(t, "it-happy", "a", "b")
	ctl := Controller{Client: temporalClient, SignKey: historyKey}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: s, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.DeployResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("deploy: %v", Reason(err))
	}
	if res.Endpoint != "http://192.168.200.12:8000" || res.Plan.Subnet.String() != "192.168.200.0/24" {
		t.Errorf("result endpoint %q subnet %s", res.Endpoint, res.Plan.Subnet)
	}
	st, err := ctl.Status(ctx, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running || st.Closed != "Completed" || st.State.Phase != workflows.PhaseServed || st.Result == nil {
		t.Errorf("status = running %v closed %q phase %q", st.Running, st.Closed, st.State.Phase)
	}
	if st.Spec == nil || st.Spec.Name != s.Name {
		t.Errorf("status did not recover the spec from history: %+v", st.Spec)
	}
	if got := fakeagents.Calls(f, "RemoveContainers"); len(got) != 0 {
		t.Errorf("successful deploy removed %q", got)
	}
	// The UI's list filter finds the run by cluster and phase.
	query := fmt.Sprintf(`ClusterName = %q AND DeployPhase = %q`, s.Name, workflows.PhaseServed)
	if ids := listWorkflows(t, ctx, query); !slices.Equal(ids, []string{run.GetRunID()}) {
		t.Errorf("list %s = %v, want the run %s", query, ids, run.GetRunID())
	}
	if os.Getenv("TPDEPLOY_UPDATE_HISTORY") != "" {
		writeHistory(t, ctx, run.GetID(), run.GetRunID(), "../../workflows/testdata/deploy-happy.json")
	}
}

// listWorkflows returns the run IDs a visibility query finds, waiting briefly for the
// dev server's visibility store to catch up.
func listWorkflows(t *testing.T, ctx context.Context, query string) []string {
	t.Helper()
	var ids []string
	for try := 0; try < 50; try++ {
		resp, err := temporalClient.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil {
			t.Fatalf("list %s: %v", query, err)
		}
		ids = ids[:0]
		for _, e := range resp.Executions {
			ids = append(ids, e.Execution.RunId)
		}
		if len(ids) > 0 {
			return ids
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ids
}

// writeHistory saves a run's history for the replay test (TPDEPLOY_UPDATE_HISTORY=1).
func writeHistory(t *testing.T, ctx context.Context, id, runID, file string) {
	t.Helper()
	it := temporalClient.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
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
	if err := os.WriteFile(filepath.Clean(file), b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d events to %s", len(hist.Events), file)
}

func TestConcurrentDeployRefusedAndTeardownCancels(t *testing.T) {
	s, f := cluster(t, "it-busy", "a", "b")
	f.BlockWatch = true
	ctl := Controller{Client: temporalClient}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	first, err := ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: s, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ctx, ctl, s.Name, workflows.PhaseWaitingUntilServing)

	_, err = ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: s, Trigger: "schedule"})
	var running *AlreadyRunningError
	if !errors.As(err, &running) {
		t.Fatalf("second deploy: want AlreadyRunningError, got %v", err)
	}
	if running.RunID != first.GetRunID() || !strings.Contains(err.Error(), contract.DeployWorkflowID(s.Name)) {
		t.Errorf("refusal does not name the running deploy: %v (running run %s)", err, first.GetRunID())
	}
	// `starter deploy` of the same spec joins the running deploy; of another spec, it is
	// refused naming both specs.
	joinedRun, joined, err := ctl.DeployOrJoin(ctx, workflows.DeployRequest{Spec: s, Trigger: "cli"})
	if err != nil || !joined || joinedRun.GetRunID() != first.GetRunID() {
		t.Errorf("same-spec deploy: joined=%v err=%v, want to join run %s", joined, err, first.GetRunID())
	}
	other := s
	other.Model.ExtraArgs = []string{"--max-model-len", "1024"}
	if _, joined, err = ctl.DeployOrJoin(ctx, workflows.DeployRequest{Spec: other, Trigger: "cli"}); joined || !errors.As(err, &running) ||
		!strings.Contains(err.Error(), "it deploys spec "+s.Hash()+", this is spec "+other.Hash()) {
		t.Errorf("other-spec deploy: joined=%v err=%v, want refused naming both specs", joined, err)
	}

	res, err := ctl.Teardown(ctx, s.Name, nil)
	if err != nil {
		t.Fatalf("teardown: %v", err)
	}
	if len(res.Removed) != 2 {
		t.Errorf("teardown reports %d nodes, want 2", len(res.Removed))
	}
	st, err := ctl.Status(ctx, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Closed != "Canceled" {
		t.Errorf("deploy after teardown: %q, want Canceled", st.Closed)
	}
	got := fakeagents.Calls(f, "RemoveContainers")
	want := []string{
		"RemoveContainers it-busy-a vllm", "RemoveContainers it-busy-b ray-worker", "RemoveContainers it-busy-a ray-head",
	}
	if len(got) != 5 || !slices.Equal(got[:3], want) {
		t.Errorf("removals = %q, want the cancel's compensations %q then one teardown per node", got, want)
	}
}

func waitPhase(t *testing.T, ctx context.Context, ctl Controller, cluster, phase string) {
	t.Helper()
	for {
		st, err := ctl.Status(ctx, cluster)
		if err == nil && st.State.Phase == phase {
			return
		}
		if err == nil && !st.Running {
			t.Fatalf("deploy closed (%s) before phase %q: %v", st.Closed, phase, st.Err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("phase %q not reached: %v", phase, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestMissingNodeAgentFailsFastNamingTheNode(t *testing.T) {
	s, f := cluster(t, "it-down", "a") // no agent for it-down-b
	ctl := Controller{Client: temporalClient}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	run, err := ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	err = Reason(run.Get(ctx, nil))
	var failure *Failure
	if !errors.As(err, &failure) || failure.Type != contract.ErrNodeAgentDown {
		t.Fatalf("want NodeAgentUnreachable, got %v", err)
	}
	if !strings.Contains(failure.Message, "it-down-b: read image: node agent is not serving task queue tpdeploy.node.it-down-b") {
		t.Errorf("message = %s", failure.Message)
	}
	// The node_agent timeout is 3s; the failure must come from it, not a step timeout.
	t.Logf("agent-down failure after %s", time.Since(start).Round(time.Millisecond))
	if got := fakeagents.Calls(f, "StartRayHead", "RemoveContainers"); len(got) != 0 {
		t.Errorf("went on to %q", got)
	}
}

func TestPlanOnDevServer(t *testing.T) {
	s, f := cluster(t, "it-plan", "a", "b")
	ctl := Controller{Client: temporalClient}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := ctl.Plan(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Plan == nil || rep.Plan.Subnet.String() != "192.168.200.0/24" || len(rep.Matrix) != 2 {
		t.Fatalf("report = %+v", rep)
	}
	if got := fakeagents.Calls(f, "PreflightNode", "StartRayHead"); len(got) != 0 {
		t.Errorf("plan went on to %q", got)
	}
}

// A teardown of a cluster that was never deployed is a no-op, not an error: a test's
// cleanup after a deploy that never started must not bury the test's own failure.
func TestTeardownOfNeverDeployedClusterIsNoOp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Controller{Client: temporalClient}.Teardown(ctx, "it-never-deployed", nil)
	if err != nil || !res.NeverDeployed || len(res.Removed) != 0 {
		t.Fatalf("teardown = %+v, %v; want a no-op", res, err)
	}
}
