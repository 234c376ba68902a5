//go:build integration

package control

import (
	"context"
	"crypto/ed25519"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// TestHistoriesOfEveryWorkflowType runs every workflow type on the real dev server — a
// deploy that serves, one that starts over after a reboot, one that fails, one in vLLM's
// own multi-node mode, one that proves its RDMA data plane, one that copies the model to
// a node that lacks shards, a staged deploy of a changed spec onto a serving cluster, a
// plan, a teardown, a scheduled redeploy and a supervisor's incident — and replays each history
// it recorded against the workflows as built. With TPDEPLOY_UPDATE_HISTORY=1 it writes
// them to workflows/testdata, where TestReplayCommittedHistories replays them from then
// on: a later change that alters their commands without workflow.GetVersion fails there.
func TestHistoriesOfEveryWorkflowType(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	terminateRunning(t, ctx, "SuperviseCluster") // children of earlier tests' deploys
	defer terminateRunning(t, context.Background(), "SuperviseCluster")
	dir := t.TempDir()
	if os.Getenv("TPDEPLOY_UPDATE_HISTORY") != "" {
		dir = "../../workflows/testdata"
	}
	// Signed, as an operator with a key deploys: the histories hold the intent in every
	// acting request. (The fake agents do not verify it; the lab's agents do.)
	key := historyKey
	ctl := Controller{Client: temporalClient, SignKey: key}
	recorded := map[string][2]string{} // file → workflow ID, run ID
	record := func(file, id, runID string) {
		writeHistory(t, ctx, id, runID, filepath.Join(dir, file))
		recorded[file] = [2]string{id, runID}
	}

	// A supervisor that waits on its watch (the fake endpoint never answers; it would take
	// 1000 checks to call that an incident), hears node b reboot and recovers.
	s, f := cluster(t, "hist-a", "a", "b")
	sup, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.SuperviseWorkflowID(s.Name), TaskQueue: contract.WorkflowQueue},
		workflows.SuperviseCluster, workflows.SuperviseRequest{Spec: s, Intent: intent.Sign(key, s), Unhealthy: 1000, CheckEvery: spec.Duration(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	run, err := ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: s, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("deploy: %v", Reason(err))
	}
	record("deploy-serves.json", run.GetID(), run.GetRunID())
	fakeagents.Reboot(f, s.Nodes[1].Name, "boot-2")
	if err := temporalClient.SignalWorkflow(ctx, sup.GetID(), "", contract.SignalNodeBooted, contract.NodeBoot{Node: s.Nodes[1].Name, BootID: "boot-2"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the supervisor's recovery", func() bool {
		v, err := temporalClient.QueryWorkflow(ctx, sup.GetID(), "", contract.QuerySupervision)
		var sv workflows.Supervision
		return err == nil && v.Get(&sv) == nil && len(sv.Incidents) == 1
	})
	if err := temporalClient.CancelWorkflow(ctx, sup.GetID(), ""); err != nil {
		t.Fatal(err)
	}
	_ = sup.Get(ctx, nil)
	record("supervise.json", sup.GetID(), sup.GetRunID())

	// A supervisor that continues as new after one loop (an agent's restart, no reboot):
	// the next run starts from the state handed on, boot IDs known, and is cancelled.
	cs, _ := cluster(t, "hist-s", "a", "b")
	csup, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.SuperviseWorkflowID(cs.Name), TaskQueue: contract.WorkflowQueue},
		workflows.SuperviseCluster, workflows.SuperviseRequest{Spec: cs, Intent: intent.Sign(key, cs), Unhealthy: 1000, CheckEvery: spec.Duration(time.Second), MaxLoops: 1})
	if err != nil {
		t.Fatal(err)
	}
	var csv workflows.Supervision
	querySupervision := func() bool {
		v, err := temporalClient.QueryWorkflow(ctx, csup.GetID(), "", contract.QuerySupervision)
		return err == nil && v.Get(&csv) == nil
	}
	waitFor(t, ctx, "the first run's boot IDs", func() bool { return querySupervision() && len(csv.BootIDs) == 2 })
	node := cs.Nodes[1].Name
	if err := temporalClient.SignalWorkflow(ctx, csup.GetID(), "", contract.SignalNodeBooted, contract.NodeBoot{Node: node, BootID: csv.BootIDs[node]}); err != nil {
		t.Fatal(err)
	}
	var nextRun string
	waitFor(t, ctx, "the supervisor continued as new", func() bool {
		//lint:ignore SA1019 as control/ops.go: nil-safe getters on the answer
		desc, err := temporalClient.DescribeWorkflowExecution(ctx, csup.GetID(), "")
		nextRun = desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		return err == nil && nextRun != csup.GetRunID() && querySupervision() && len(csv.BootIDs) == 2
	})
	if err := temporalClient.CancelWorkflow(ctx, csup.GetID(), nextRun); err != nil {
		t.Fatal(err)
	}
	if err := temporalClient.GetWorkflow(ctx, csup.GetID(), nextRun).Get(ctx, nil); !temporal.IsCanceledError(err) {
		t.Fatalf("the continued supervisor ended with %v, want canceled", err)
	}
	record("supervise-continued.json", csup.GetID(), nextRun)

	// A plan, then the teardown of the cluster.
	rep, err := ctl.Plan(ctx, s)
	if err != nil || rep.Plan == nil {
		t.Fatalf("plan: %+v %v", rep, err)
	}
	record("plan.json", contract.PlanWorkflowID(s.Name)+"-"+s.Hash(), "")
	if _, err := ctl.Teardown(ctx, s.Name, nil); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	record("teardown.json", contract.TeardownWorkflowID(s.Name), "")

	// A deploy that hears a planned node reboot while vLLM loads and starts over.
	r, rf := cluster(t, "hist-r", "a", "b")
	rf.BlockWatch = true
	run, err = ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: r, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ctx, ctl, r.Name, workflows.PhaseWaitingUntilServing)
	fakeagents.Reboot(rf, r.Nodes[1].Name, "boot-2")
	if err := temporalClient.SignalWorkflow(ctx, run.GetID(), run.GetRunID(), contract.SignalNodeBooted, contract.NodeBoot{Node: r.Nodes[1].Name, BootID: "boot-2"}); err != nil {
		t.Fatal(err)
	}
	var res workflows.DeployResult
	if err := run.Get(ctx, &res); err != nil || len(res.Restarts) != 1 {
		t.Fatalf("deploy after a reboot: %+v %v", res.Restarts, Reason(err))
	}
	record("deploy-restart.json", run.GetID(), run.GetRunID())
	terminateRunning(t, ctx, "SuperviseCluster")

	// A deploy that fails at launch and compensates.
	fs, ff := cluster(t, "hist-f", "a", "b")
	fakeagents.SetFailure(ff, "LaunchVLLM "+fs.Nodes[0].Name, temporal.NewNonRetryableApplicationError("no such image", contract.ErrBadRequest, nil))
	run, err = ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: fs, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err == nil {
		t.Fatal("the failing deploy served")
	}
	record("deploy-failed.json", run.GetID(), run.GetRunID())

	// A deploy in vLLM's own multi-node mode (executor mp): no Ray, headless ranks.
	m, _ := cluster(t, "hist-m", "a", "b")
	m.Executor = spec.ExecutorMP
	run, err = ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: m, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("mp deploy: %v", Reason(err))
	}
	record("deploy-mp.json", run.GetID(), run.GetRunID())
	terminateRunning(t, ctx, "SuperviseCluster")

	// A deploy whose plan has RDMA (the seed's RoCE HCA): the data-plane proof runs on
	// every node between placement and vLLM's launch.
	dp, df := cluster(t, "hist-d", "a", "b")
	for n, p := range df.Probes {
		df.Probes[n] = fakeagents.SeedRDMA(p)
	}
	run, err = ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: dp, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("rdma deploy: %v", Reason(err))
	}
	if got := fakeagents.Calls(df, "ProveDataPlane"); len(got) != 2 {
		t.Fatalf("the data-plane proof ran on %q, want both nodes", got)
	}
	record("deploy-rdma.json", run.GetID(), run.GetRunID())
	terminateRunning(t, ctx, "SuperviseCluster")

	// A deploy that copies two shards its worker lacks from the head (model.sync:
	// from-head): the head hashes them, the worker makes its copy key, the head serves
	// them for that key, the worker copies them.
	cp, cf := cluster(t, "hist-c", "a", "b")
	cp.Model.Sync = spec.SyncFromHead
	lacks := fakeagents.SeedManifest()
	lacks.Files = []weights.File{lacks.Files[0], lacks.Files[1], lacks.Files[4]}
	fakeagents.SetManifest(cf, cp.Nodes[1].Name, lacks)
	run, err = ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: cp, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("deploy with a model copy: %v", Reason(err))
	}
	if got := fakeagents.Calls(cf, "PrepareModelCopy", "SyncModel"); len(got) != 2 {
		t.Fatalf("the model copy: %q, want a key and a copy on the worker", got)
	}
	record("deploy-copy.json", run.GetID(), run.GetRunID())
	terminateRunning(t, ctx, "SuperviseCluster")

	// The same copy to two workers, as a chain (model-copy-chain): the head serves the
	// first worker, which relays to the second what it receives.
	ch, chf := cluster(t, "hist-ch", "a", "b", "c")
	ch.Model.Sync = spec.SyncFromHead
	ch.Nodes = append(ch.Nodes, spec.Node{Name: "hist-ch-c", Role: spec.RoleWorker, GPUs: 1})
	ch.Parallel = spec.Parallel{Tensor: 1, Pipeline: 3}
	third := fakeagents.SeedProbe("hist-ch-c", false)
	third.Links = append([]netplan.Link(nil), third.Links...)
	for i := range third.Links {
		if third.Links[i].Name == "enp1s0f1np1" {
			third.Links[i].Addrs = []netip.Prefix{netip.MustParsePrefix("192.168.200.14/24")}
		}
	}
	chf.Probes["hist-ch-c"] = third
	fakeagents.SetManifest(chf, "hist-ch-b", lacks)
	fakeagents.SetManifest(chf, "hist-ch-c", lacks)
	run, err = ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: ch, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("deploy with a chain copy: %v", Reason(err))
	}
	if got := fakeagents.Calls(chf, "OpenModelServer"); len(got) != 2 {
		t.Fatalf("the chain's servers: %q, want the head's and the first worker's", got)
	}
	record("deploy-copy-chain.json", run.GetID(), run.GetRunID())
	terminateRunning(t, ctx, "SuperviseCluster")

	// A staged deploy: a changed spec (executor mp where Ray serves) deployed onto a
	// serving cluster, its supervisor running. The steps that stop nothing run beside the
	// serving deployment; the swap removes the Ray containers mp does not replace, then mp
	// starts, and the supervisor is told the new spec serves.
	g, gf := cluster(t, "hist-g", "a", "b")
	gsup, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.SuperviseWorkflowID(g.Name), TaskQueue: contract.WorkflowQueue},
		workflows.SuperviseCluster, workflows.SuperviseRequest{Spec: g, Intent: intent.Sign(key, g), Unhealthy: 1000, CheckEvery: spec.Duration(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	run, err = ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: g, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("deploy before the staged one: %v", Reason(err))
	}
	var gsv workflows.Supervision
	waitFor(t, ctx, "the supervisor told the deploy serves", func() bool {
		v, err := temporalClient.QueryWorkflow(ctx, gsup.GetID(), "", contract.QuerySupervision)
		return err == nil && v.Get(&gsv) == nil && gsv.Serving != nil && gsv.Serving.RunID == run.GetRunID()
	})
	serving := *gsv.Serving
	serving.Executor = spec.ExecutorRay
	for _, n := range g.Nodes {
		serving.Nodes = append(serving.Nodes, contract.ServingNode{Name: n.Name, Role: n.Role})
	}
	servingSaid.Store(g.Name, serving)
	defer servingSaid.Delete(g.Name)
	changed := g
	changed.Executor = spec.ExecutorMP
	run, err = ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: changed, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var staged workflows.DeployResult
	if err := run.Get(ctx, &staged); err != nil {
		t.Fatalf("staged deploy: %v", Reason(err))
	}
	if staged.Staged == nil || staged.Staged.Serving.RunID != serving.RunID || staged.Staged.SwappedAt.IsZero() {
		t.Fatalf("staged = %+v, want staged beside run %s and swapped", staged.Staged, serving.RunID)
	}
	if got := fakeagents.Calls(gf, "RemoveContainers"); len(got) != 2 {
		t.Fatalf("removals at the swap: %q, want Ray's on both nodes", got)
	}
	record("deploy-staged.json", run.GetID(), run.GetRunID())
	terminateRunning(t, ctx, "SuperviseCluster")

	// A schedule's trigger for a cluster never deployed: it deploys as a child.
	x, _ := cluster(t, "hist-x", "a", "b")
	trig, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.RedeployWorkflowID(x.Name), TaskQueue: contract.WorkflowQueue},
		workflows.RedeployCluster, workflows.RedeployRequest{Spec: x, Trigger: "schedule", Intent: intent.Sign(key, x)})
	if err != nil {
		t.Fatal(err)
	}
	var rr workflows.RedeployResult
	if err := trig.Get(ctx, &rr); err != nil || rr.Action != workflows.RedeployDeployed {
		t.Fatalf("redeploy: %+v %v", rr, err)
	}
	record("redeploy.json", trig.GetID(), trig.GetRunID())

	for file := range recorded {
		if err := workflows.ReplayHistoryFile(filepath.Join(dir, file)); err != nil {
			t.Errorf("replay %s: %v", file, err)
		}
	}
}

// historyKey signs the recorded histories' deploys (fixed, so a re-recording differs from
// the last only where the workflows do).
var historyKey = ed25519.NewKeyFromSeed([]byte("tpdeploy histories operator key."))

func terminateRunning(t *testing.T, ctx context.Context, workflowType string) {
	t.Helper()
	resp, err := temporalClient.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: "WorkflowType = '" + workflowType + "' AND ExecutionStatus = 'Running'"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range resp.Executions {
		_ = temporalClient.TerminateWorkflow(ctx, e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId(), "test cleanup")
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
