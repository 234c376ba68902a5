package workflows

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/netplan"
)

// superviseEnv runs SuperviseCluster under its real ID (so the deploys it starts find it
// running) with fake agents and a health check whose answers the test sets.
func superviseEnv(t *testing.T, f *fakeagents.Agents, healthy func() bool) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(DeployCluster)
	env.RegisterWorkflow(SuperviseCluster)
	env.RegisterActivity(f)
	env.RegisterActivityWithOptions(func(ctx context.Context, req contract.CheckDeploymentRequest) (contract.DeploymentCheck, error) {
		if healthy() {
			return contract.DeploymentCheck{Exists: true, Closed: "Completed", Healthy: true, Endpoint: "http://192.168.200.12:8000", Plan: &netplan.Plan{Head: "node-a"}}, nil
		}
		return contract.DeploymentCheck{Exists: true, Closed: "Completed", Detail: "GET http://192.168.200.12:8000/health: 503 Service Unavailable"}, nil
	}, activity.RegisterOptions{Name: contract.ActivityCheckDeployment})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: SuperviseWorkflowID("seed")})
	env.SetTestTimeout(time.Minute)
	// These tests are of the periodic checks that runs recorded before the watch replay.
	env.OnGetVersion(superviseWatchVersion, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.OnGetVersion(mock.Anything, workflow.DefaultVersion, 1).Return(workflow.Version(1))
	return env
}

func supervision(t *testing.T, env *testsuite.TestWorkflowEnvironment) Supervision {
	t.Helper()
	v, err := env.QueryWorkflow(QuerySupervision)
	if err != nil {
		t.Fatal(err)
	}
	var s Supervision
	if err := v.Get(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSuperviseRedeploysAfterAReboot(t *testing.T) {
	f := fakeagents.New()
	env := superviseEnv(t, f, func() bool { return true })
	var got Supervision
	env.RegisterDelayedCallback(func() {
		// The agent restarted without a reboot: same boot ID, nothing to do.
		env.SignalWorkflow(SignalNodeBooted, NodeBoot{Node: "node-b", BootID: "boot-node-b"})
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(SignalNodeBooted, NodeBoot{Node: "node-b", BootID: "boot-2"})
	}, 2*time.Minute)
	env.RegisterDelayedCallback(func() {
		got = supervision(t, env)
		env.CancelWorkflow()
	}, 10*time.Minute)
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: fakeagents.SeedSpec()})

	if len(got.Incidents) != 1 {
		t.Fatalf("incidents = %+v, want one", got.Incidents)
	}
	inc := got.Incidents[0]
	if inc.Node != "node-b" || !strings.Contains(inc.Seen, "boot ID changed boot-nod -> boot-2") || inc.Outcome != "serving again" || inc.Attempts != 1 {
		t.Errorf("incident = %+v", inc)
	}
	if launches := fakeagents.Calls(f, "LaunchVLLM"); len(launches) != 1 || launches[0] != "LaunchVLLM node-a replace" {
		t.Errorf("launches = %q, want one recovery launch recreating the containers", launches)
	}
	if got.BootIDs["node-b"] != "boot-node-b" {
		// After recovery the supervisor re-reads the boot IDs from the agents (the fake
		// still says boot-1), so a late duplicate report is not a second incident.
		t.Errorf("boot IDs after recovery = %v", got.BootIDs)
	}
}

func TestSuperviseRedeploysWhenNotServing(t *testing.T) {
	f := fakeagents.New()
	var mu sync.Mutex
	healthy := true
	env := superviseEnv(t, f, func() bool { mu.Lock(); defer mu.Unlock(); return healthy })
	var got Supervision
	env.RegisterDelayedCallback(func() { mu.Lock(); healthy = false; mu.Unlock() }, time.Minute)
	env.RegisterDelayedCallback(func() {
		got = supervision(t, env)
		env.CancelWorkflow()
	}, 10*time.Minute)
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: fakeagents.SeedSpec(), MaxAttempts: 2})

	// Failed checks count towards an incident only three in a row; the endpoint stays
	// down here, so every later incident is again after three.
	if len(got.Incidents) == 0 {
		t.Fatal("no incident after the endpoint stopped serving")
	}
	inc := got.Incidents[0]
	if !strings.Contains(inc.Seen, "not serving for 3 checks: GET http://192.168.200.12:8000/health: 503") || inc.Outcome != "serving again" {
		t.Errorf("incident = %+v", inc)
	}
}

func TestSuperviseGivesUpAfterMaxAttempts(t *testing.T) {
	f := fakeagents.New()
	f.Failures["LaunchVLLM node-a"] = fakeagents.AgentDown()
	env := superviseEnv(t, f, func() bool { return true })
	var got Supervision
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalRedeploy, "test") }, time.Minute)
	env.RegisterDelayedCallback(func() {
		got = supervision(t, env)
		env.CancelWorkflow()
	}, 30*time.Minute)
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: fakeagents.SeedSpec(), MaxAttempts: 3})
	if len(got.Incidents) != 1 {
		t.Fatalf("incidents = %+v", got.Incidents)
	}
	inc := got.Incidents[0]
	if inc.Attempts != 3 || inc.Action != "gave up after 3 redeploys" || !strings.Contains(inc.Outcome, "redeploy failed") {
		t.Errorf("incident = %+v", inc)
	}
	// 10 s then 20 s of backoff between the three attempts, plus the deploys.
	if inc.Took < 30*time.Second {
		t.Errorf("took %s: no backoff between attempts", inc.Took)
	}
}

func TestSuperviseContinuesAsNewWithItsState(t *testing.T) {
	f := fakeagents.New()
	env := superviseEnv(t, f, func() bool { return true })
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(SignalNodeBooted, NodeBoot{Node: "node-b", BootID: "boot-2"})
	}, 10*time.Second)
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: fakeagents.SeedSpec(), MaxLoops: 20})
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("want continue-as-new, got %v", err)
	}
	var next SuperviseRequest
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if len(next.Incidents) != 1 || next.Incidents[0].Node != "node-b" || next.BootIDs["node-a"] != "boot-node-a" || next.MaxLoops != 20 || next.Spec.Name != "seed" {
		t.Errorf("carried state = %+v", next)
	}
}

// A Ray node that died while vLLM still answers is an incident too.
func TestSuperviseRedeploysWhenARayNodeIsDead(t *testing.T) {
	f := fakeagents.New()
	env := superviseEnv(t, f, func() bool { return true })
	var got Supervision
	env.RegisterDelayedCallback(func() {
		fakeagents.SetFailure(f, "RayNodesAlive node-a", temporal.NewNonRetryableApplicationError("not registered with Ray yet: node-b", contract.ErrNodeNotRegistered, nil))
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		got = supervision(t, env)
		env.CancelWorkflow()
	}, 3*time.Minute)
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: fakeagents.SeedSpec(), MaxAttempts: 1})
	if len(got.Incidents) == 0 || !strings.Contains(got.Incidents[0].Seen, "not serving for 3 checks: ray: not registered with Ray yet: node-b") {
		t.Fatalf("incidents = %+v", got.Incidents)
	}
}
