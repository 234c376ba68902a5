package workflows

import (
	"context"
	"errors"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/metrics"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/release"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

func newEnv(t *testing.T, f *fakeagents.Agents) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	return newEnvIn(t, &testsuite.WorkflowTestSuite{}, f)
}

func newEnvIn(t *testing.T, s *testsuite.WorkflowTestSuite, f *fakeagents.Agents) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	env := newEnvTelling(t, s, f, nil)
	// A failed deploy tells the supervisor (none runs here).
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, contract.SignalDeployFailed, mock.Anything).Return(errors.New("no supervisor")).Maybe()
	return env
}

// newEnvTelling is newEnvIn with a supervisor that hears of failed deploys: told (when
// set) receives what each failed deploy signals.
func newEnvTelling(t *testing.T, s *testsuite.WorkflowTestSuite, f *fakeagents.Agents, told func(DeployFailure)) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	env := s.NewTestWorkflowEnvironment()
	if told != nil {
		env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, contract.SignalDeployFailed, mock.Anything).
			Run(func(args mock.Arguments) { told(args.Get(4).(DeployFailure)) }).Return(nil).Maybe()
	}
	env.RegisterWorkflow(DeployCluster)
	env.RegisterWorkflow(PlanCluster)
	env.RegisterWorkflow(TeardownCluster)
	env.RegisterWorkflow(SuperviseCluster)
	// A deploy that serves starts the cluster's supervisor, which runs until cancelled;
	// its own tests are in supervise_test.go.
	env.OnWorkflow(SuperviseCluster, mock.Anything, mock.Anything).Return(nil)
	// Teardown cancels the supervisor (not running here).
	env.OnRequestCancelExternalWorkflow(mock.Anything, mock.Anything, mock.Anything).Return(nil).Maybe()
	env.RegisterActivity(f)
	env.SetTestTimeout(time.Minute)
	return env
}

// executeDeploy runs DeployCluster under the cluster's deploy ID, as every trigger does.
func executeDeploy(env *testsuite.TestWorkflowEnvironment, req DeployRequest) {
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: contract.DeployWorkflowID(req.Spec.Name)})
	env.ExecuteWorkflow(DeployCluster, req)
}

func TestDeployHappyPath(t *testing.T) {
	f := fakeagents.New()
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec(), Trigger: "test"})
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("deploy failed: %v", err)
	}
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Plan.Subnet.String() != "192.168.200.0/24" {
		t.Errorf("plan subnet = %s, want the shared RoCE subnet", res.Plan.Subnet)
	}
	if res.Endpoint != "http://192.168.200.12:8000" {
		t.Errorf("endpoint = %q", res.Endpoint)
	}
	wantCalls := []string{
		"StartRayHead node-a 192.168.200.12",
		"StartRayWorker node-b 192.168.200.13 -> 192.168.200.12:6379",
		"CheckPlacement node-a",
		"LaunchVLLM node-a",
	}
	if got := fakeagents.Calls(f, "StartRayHead", "StartRayWorker", "CheckPlacement", "LaunchVLLM"); !slices.Equal(got, wantCalls) {
		t.Errorf("container steps = %q, want %q", got, wantCalls)
	}
	if got := fakeagents.Calls(f, "RemoveContainers"); len(got) != 0 {
		t.Errorf("a successful deploy removed containers: %q", got)
	}
	if got := fakeagents.Calls(f, "CloseProbeListeners"); len(got) != 2 {
		t.Errorf("reachability listeners closed %d times, want once per node: %q", len(got), got)
	}
	if f.WatchCalls != 3 {
		t.Errorf("WatchServing called %d times, want 3 (two progress reports, then serving)", f.WatchCalls)
	}
	var steps []string
	for _, s := range res.Steps {
		steps = append(steps, s.Step)
	}
	wantSteps := []string{PhaseImages, PhaseProbing, PhaseReachability, PhasePlanning, PhasePreflight, PhaseModel, PhaseRayHead, PhaseRayWorkers, PhasePlacement, PhaseLaunch, PhaseWaitingUntilServing}
	if !slices.Equal(steps, wantSteps) {
		t.Errorf("steps = %q, want %q", steps, wantSteps)
	}
	if len(res.Containers) != 3 {
		t.Errorf("containers = %+v, want head, worker, vllm", res.Containers)
	}

	var state State
	q, err := env.QueryWorkflow(contract.QueryState)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Get(&state); err != nil {
		t.Fatal(err)
	}
	if state.Phase != PhaseServed || state.Plan == nil || !state.Progress.Serving || state.Progress.ShardsTotal != 39 {
		t.Errorf("final state = %+v", state)
	}
	var phase string
	q, _ = env.QueryWorkflow(contract.QueryPhase)
	_ = q.Get(&phase)
	if phase != PhaseServed {
		t.Errorf("phase query = %q", phase)
	}
}

func TestDeployPlanEnvPerNode(t *testing.T) {
	f := fakeagents.New()
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	b, ok := res.Plan.Node("node-b")
	if !ok {
		t.Fatal("no plan for node-b")
	}
	want := map[string]string{
		"VLLM_HOST_IP": "192.168.200.13", "NCCL_SOCKET_IFNAME": "=enp1s0f1np1", "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
		"TP_SOCKET_IFNAME": "enp1s0f1np1", "RAY_ADDRESS": "192.168.200.12:6379",
	}
	for k, v := range want {
		if b.Env[k] != v {
			t.Errorf("node-b %s = %q, want %q", k, b.Env[k], v)
		}
	}
}

// TestDeployFailures fails each step, non-retryably and by exhausting retries, and checks
// exactly which compensations ran, in which order, and what the error says.
func TestDeployFailures(t *testing.T) {
	headOnly := []string{"RemoveContainers node-a ray-head"}
	rayAll := []string{"RemoveContainers node-b ray-worker", "RemoveContainers node-a ray-head"}
	everything := []string{"RemoveContainers node-a vllm", "RemoveContainers node-b ray-worker", "RemoveContainers node-a ray-head"}
	tests := []struct {
		name       string
		key        string // "Method node"
		err        error  // nil: fail retryably on every attempt
		wantType   string
		wantMsg    []string
		wantRemove []string
		attempts   int // expected attempts of the failing call
	}{
		{"probe non-retryable", "ProbeNode node-b", bad("no netlink"), contract.ErrBadRequest, []string{"node-b: probe: no netlink"}, nil, 1},
		{"probe exhausted", "ProbeNode node-b", nil, contract.ErrRetriesExhausted, []string{"node-b: probe:", "transient failure 5"}, nil, stepAttempts},
		{"listen fails", "OpenProbeListeners node-a", bad("address in use"), contract.ErrBadRequest, []string{"node-a: open reachability listeners: address in use"}, nil, 1},
		{"image missing", "PreflightNode node-b", nonRetryable1(contract.ErrImageMissing, "node-b: image vllm/vllm-openai:v0.17.0 not present"),
			contract.ErrImageMissing, []string{"image vllm/vllm-openai:v0.17.0 not present"}, nil, 1},
		{"head fails", "StartRayHead node-a", bad("port 6379 in use"), contract.ErrBadRequest, []string{"node-a: start ray head: port 6379 in use"}, headOnly, 1},
		{"head exhausted", "StartRayHead node-a", nil, contract.ErrRetriesExhausted, []string{"node-a: start ray head:"}, headOnly, stepAttempts},
		{"worker fails", "StartRayWorker node-b", nonRetryable1(contract.ErrBadRequest, "Unable to connect to GCS at 192.168.200.12:6379"),
			contract.ErrBadRequest, []string{"node-b: join ray worker: Unable to connect to GCS"}, rayAll, 1},
		{"worker exhausted", "StartRayWorker node-b", nil, contract.ErrRetriesExhausted, []string{"node-b: join ray worker"}, rayAll, stepAttempts},
		{"placement mismatch", "CheckPlacement node-a",
			nonRetryable1(contract.ErrPlacementMismatch, "node-a registered with ray as 10.1.230.180, planned 192.168.200.12"),
			contract.ErrPlacementMismatch, []string{"node-a: check placement: node-a registered with ray as 10.1.230.180, planned 192.168.200.12"}, rayAll, 1},
		{"placement exhausted", "CheckPlacement node-a", nil, contract.ErrRetriesExhausted, []string{"check placement"}, rayAll, stepAttempts},
		{"launch fails", "LaunchVLLM node-a", bad("no such image"), contract.ErrBadRequest, []string{"node-a: launch vllm"}, everything, 1},
		{"launch exhausted", "LaunchVLLM node-a", nil, contract.ErrRetriesExhausted, []string{"node-a: launch vllm"}, everything, stepAttempts},
		{"c10d unreachable", "WatchServing node-a",
			nonRetryable1(contract.ErrC10dUnreachable, "The client socket has failed to connect to any network address of (10.1.230.180, 55053)"),
			contract.ErrC10dUnreachable, []string{"node-a: wait until serving:", "(10.1.230.180, 55053)"}, everything, 1},
		{"watch exhausted", "WatchServing node-a", nil, contract.ErrRetriesExhausted, []string{"wait until serving"}, everything, 10},
		{"agent down at probe", "ProbeNode node-b", fakeagents.AgentDown(), contract.ErrNodeAgentDown,
			[]string{"node-b: probe: node agent is not serving task queue tpdeploy.node.node-b"}, nil, 1},
		// node-b answered at the probe and stopped: it went down, and its removal is left to
		// its agent's reconcile when it starts.
		{"agent down at join", "StartRayWorker node-b", fakeagents.AgentDown(), contract.ErrNodeDown,
			[]string{"node-b went down during the deploy", "node-b: join ray worker: node agent is not serving task queue tpdeploy.node.node-b"}, headOnly, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fakeagents.New()
			if tt.err != nil {
				f.Failures[tt.key] = tt.err
			} else {
				f.Flaky[tt.key] = 1000
			}
			env := newEnv(t, f)
			executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
			err := env.GetWorkflowError()
			if err == nil {
				t.Fatal("deploy succeeded")
			}
			var app *temporal.ApplicationError
			if !errors.As(err, &app) {
				t.Fatalf("error is not an application error: %v", err)
			}
			if app.Type() != tt.wantType {
				t.Errorf("type = %q, want %q (%v)", app.Type(), tt.wantType, app.Message())
			}
			for _, w := range tt.wantMsg {
				if !strings.Contains(app.Message(), w) {
					t.Errorf("message lacks %q:\n%s", w, app.Message())
				}
			}
			if got := fakeagents.Calls(f, "RemoveContainers"); !slices.Equal(got, tt.wantRemove) {
				t.Errorf("compensations = %q, want %q", got, tt.wantRemove)
			}
			if got := fakeagents.Attempts(f, tt.key); got != tt.attempts {
				t.Errorf("%s attempted %d times, want %d", tt.key, got, tt.attempts)
			}
			var state State
			q, qerr := env.QueryWorkflow(contract.QueryState)
			if qerr != nil {
				t.Fatal(qerr)
			}
			_ = q.Get(&state)
			if state.Phase != PhaseFailed || state.Error == "" {
				t.Errorf("state after failure: phase %q error %q", state.Phase, state.Error)
			}
			ran := 0
			for _, c := range state.Compensations {
				if !strings.Contains(c, "(deferred: ") {
					ran++
				} else if tt.wantType != contract.ErrNodeDown {
					t.Errorf("a compensation was deferred: %q", c)
				}
			}
			if ran != len(tt.wantRemove) {
				t.Errorf("state records compensations %q, want %d run", state.Compensations, len(tt.wantRemove))
			}
		})
	}
}

func bad(msg string) error { return nonRetryable1(contract.ErrBadRequest, msg) }

func nonRetryable1(typ, msg string) error {
	return temporal.NewNonRetryableApplicationError(msg, typ, nil)
}

func TestDeployRetriesTransientFailures(t *testing.T) {
	f := fakeagents.New()
	f.Flaky["StartRayWorker node-b"] = 2
	f.Flaky["ProbeNode node-a"] = 1
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("transient failures were not retried: %v", err)
	}
	if got := fakeagents.Attempts(f, "StartRayWorker node-b"); got != 3 {
		t.Errorf("worker start attempts = %d, want 3", got)
	}
}

func TestCompensationFailureDoesNotMaskOriginal(t *testing.T) {
	f := fakeagents.New()
	f.Failures["CheckPlacement node-a"] = nonRetryable1(contract.ErrPlacementMismatch, "node-a registered as 10.1.230.180, planned 192.168.200.12")
	f.Failures["RemoveContainers node-b"] = bad("docker daemon gone")
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	var app *temporal.ApplicationError
	if !errors.As(env.GetWorkflowError(), &app) {
		t.Fatalf("want application error, got %v", env.GetWorkflowError())
	}
	if app.Type() != contract.ErrPlacementMismatch {
		t.Errorf("type = %q: a compensation failure masked the original", app.Type())
	}
	for _, w := range []string{"planned 192.168.200.12", "compensation failed", "remove ray-worker on node-b: docker daemon gone"} {
		if !strings.Contains(app.Message(), w) {
			t.Errorf("message lacks %q: %s", w, app.Message())
		}
	}
	// The head is still removed although node-b's removal failed before it.
	want := []string{"RemoveContainers node-b ray-worker", "RemoveContainers node-a ray-head"}
	if got := fakeagents.Calls(f, "RemoveContainers"); !slices.Equal(got[len(got)-1:], want[1:]) || got[0] != want[0] {
		t.Errorf("compensations = %q, want node-b (all attempts) then node-a", got)
	}
}

func TestNoViableSubnetStartsNothing(t *testing.T) {
	f := fakeagents.New()
	f.Unreachable["node-b>node-a"] = true
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	var app *temporal.ApplicationError
	if !errors.As(env.GetWorkflowError(), &app) || app.Type() != contract.ErrNoViableSubnet {
		t.Fatalf("want NoViableSubnet, got %v", env.GetWorkflowError())
	}
	for _, w := range []string{"192.168.200.0/24 rejected: node-b cannot reach node-a", "10.1.230.0/24 rejected: node-b has no address in it", "node-b: enp1s0f1np1 192.168.200.13/24"} {
		if !strings.Contains(app.Message(), w) {
			t.Errorf("message lacks %q:\n%s", w, app.Message())
		}
	}
	if got := fakeagents.Calls(f, "StartRayHead", "PreflightNode", "RemoveContainers"); len(got) != 0 {
		t.Errorf("a plan failure went on to %q", got)
	}
	if got := fakeagents.Calls(f, "CloseProbeListeners"); len(got) != 2 {
		t.Errorf("listeners closed %q, want both nodes", got)
	}
}

func TestImageMismatch(t *testing.T) {
	for _, policy := range []string{"fail", "warn"} {
		t.Run(policy, func(t *testing.T) {
			f := fakeagents.New()
			f.ImageIDs["node-b"] = "sha256:2222222222222222"
			env := newEnv(t, f)
			s := fakeagents.SeedSpec()
			s.ImageMismatch = policy
			executeDeploy(env, DeployRequest{Spec: s})
			err := env.GetWorkflowError()
			if policy == "warn" {
				var res DeployResult
				if err != nil || env.GetWorkflowResult(&res) != nil {
					t.Fatalf("warn policy failed the deploy: %v", err)
				}
				if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "node-a and node-b differ: image ID 111111111111 vs 222222222222") {
					t.Errorf("warnings = %q", res.Warnings)
				}
				return
			}
			var app *temporal.ApplicationError
			if !errors.As(err, &app) || app.Type() != contract.ErrImageMismatch {
				t.Fatalf("want ImageMismatch, got %v", err)
			}
			if got := fakeagents.Calls(f, "StartRayHead"); len(got) != 0 {
				t.Errorf("started Ray despite mixed images: %q", got)
			}
		})
	}
}

// The image decides the executor: the seed's 0.17 image (Ray) deploys over Ray with the
// legacy executor's env form, today's stock image (no Ray) in vLLM's own multi-node mode,
// the same release with Ray added over Ray with V2, each node naming its own interface.
func TestTheImageDecidesTheExecutor(t *testing.T) {
	current := func(node string, ray bool) release.Image {
		img := fakeagents.SeedImage(node)
		img.VLLM, img.Ray, img.RayBin, img.ID = "0.22.1", "", false, "sha256:3333333333333333"
		if ray {
			img.Ray, img.RayBin, img.ID = "2.55.0", true, "sha256:4444444444444444"
		}
		return img
	}
	for _, tc := range []struct {
		name      string
		image     func(string) release.Image
		executor  string
		ray       string
		ncclForm  string
		firstCall string
	}{
		{"0.17.1 with Ray", fakeagents.SeedImage, "ray", release.RayLegacy, netplan.NCCLClusterWide, "StartRayHead"},
		{"0.22.1 without Ray", func(n string) release.Image { return current(n, false) }, "mp", "", netplan.NCCLPerNode, "StartVLLMRank"},
		{"0.22.1 with Ray", func(n string) release.Image { return current(n, true) }, "ray", release.RayV2, netplan.NCCLPerNode, "StartRayHead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeagents.New()
			for _, n := range []string{"node-a", "node-b"} {
				f.Images[n] = tc.image(n)
			}
			env := newEnv(t, f)
			executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
			var res DeployResult
			if err := env.GetWorkflowError(); err != nil || env.GetWorkflowResult(&res) != nil {
				t.Fatalf("deploy failed: %v", err)
			}
			if res.Engine == nil || res.Engine.Executor != tc.executor || res.Engine.RayExecutor != tc.ray || !strings.Contains(res.Engine.Why, "auto") {
				t.Fatalf("engine %+v, want executor %s (%s)", res.Engine, tc.executor, tc.ray)
			}
			if len(res.Images) != 2 || res.Images[1].Node != "node-b" || res.Images[1].VLLM != tc.image("node-b").VLLM {
				t.Errorf("images %+v", res.Images)
			}
			if res.Plan.NCCL.Form != tc.ncclForm {
				t.Errorf("NCCL form %q (%s), want %q", res.Plan.NCCL.Form, res.Plan.NCCL.Reason, tc.ncclForm)
			}
			if got := fakeagents.Calls(f, tc.firstCall); len(got) == 0 {
				t.Errorf("no %s: the %s executor did not run", tc.firstCall, tc.executor)
			}
		})
	}
}

// executor: ray on an image without Ray fails at the first step, naming the node, the
// image, its vLLM and the ways out; nothing is probed and nothing started.
func TestRayOnAnImageWithoutRayFailsFirst(t *testing.T) {
	f := fakeagents.New()
	for _, n := range []string{"node-a", "node-b"} {
		img := fakeagents.SeedImage(n)
		img.VLLM, img.Ray, img.RayBin = "0.22.1", "", false
		f.Images[n] = img
	}
	env := newEnv(t, f)
	s := fakeagents.SeedSpec()
	s.Executor = spec.ExecutorRay
	executeDeploy(env, DeployRequest{Spec: s})
	var app *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != contract.ErrImageLacksRay {
		t.Fatalf("want ImageLacksRay, got %v", err)
	}
	for _, w := range []string{"node-a", "0.22.1", "executor: mp", "pip install ray", "0.17.1 or earlier"} {
		if !strings.Contains(app.Message(), w) {
			t.Errorf("message lacks %q: %s", w, app.Message())
		}
	}
	if got := fakeagents.Calls(f, "ProbeNode", "PreflightNode", "StartRayHead", "StartVLLMRank", "RemoveContainers"); len(got) != 0 {
		t.Errorf("went on after the image refused: %q", got)
	}
}

// Two nodes holding different builds are refused naming both nodes and what differs.
func TestDifferentVersionsAreRefusedNamingBothNodes(t *testing.T) {
	f := fakeagents.New()
	b := fakeagents.SeedImage("node-b")
	b.Ray, b.ID = "2.54.0", "sha256:5555555555555555"
	f.Images["node-b"] = b
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	var app *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != contract.ErrImageMismatch {
		t.Fatalf("want ImageMismatch, got %v", err)
	}
	if !strings.Contains(app.Message(), "ray 2.53.0 on node-a, 2.54.0 on node-b") {
		t.Errorf("message: %s", app.Message())
	}
	if got := fakeagents.Calls(f, "ProbeNode", "StartRayHead"); len(got) != 0 {
		t.Errorf("went on with mixed images: %q", got)
	}
}

func TestInvalidSpecFailsBeforeAnyActivity(t *testing.T) {
	f := fakeagents.New()
	env := newEnv(t, f)
	s := fakeagents.SeedSpec()
	s.Parallel.Tensor = 8
	executeDeploy(env, DeployRequest{Spec: s})
	var app *temporal.ApplicationError
	if !errors.As(env.GetWorkflowError(), &app) || app.Type() != contract.ErrSpecInvalid {
		t.Fatalf("want SpecInvalid, got %v", env.GetWorkflowError())
	}
	if !strings.Contains(app.Message(), "tensor 8 x pipeline 1 = 8 GPUs, nodes provide 2") {
		t.Errorf("message = %s", app.Message())
	}
	if len(fakeagents.Calls(f, "ProbeNode")) != 0 {
		t.Error("an invalid spec was probed")
	}
}

func TestCancelDuringLoadingTearsDown(t *testing.T) {
	f := fakeagents.New()
	f.BlockWatch = true
	f.Started = make(chan string, 64)
	env := newEnv(t, f)
	env.SetTestTimeout(30 * time.Second)
	var midState State
	env.RegisterDelayedCallback(func() {
		q, err := env.QueryWorkflow(contract.QueryState)
		if err == nil {
			_ = q.Get(&midState)
		}
		env.CancelWorkflow()
	}, 10*time.Second)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	err := env.GetWorkflowError()
	if !temporal.IsCanceledError(err) {
		t.Fatalf("want canceled, got %v", err)
	}
	if midState.Phase != PhaseWaitingUntilServing {
		t.Errorf("cancelled in phase %q, want %q", midState.Phase, PhaseWaitingUntilServing)
	}
	want := []string{"RemoveContainers node-a vllm", "RemoveContainers node-b ray-worker", "RemoveContainers node-a ray-head"}
	if got := fakeagents.Calls(f, "RemoveContainers"); !slices.Equal(got, want) {
		t.Errorf("compensations after cancel = %q, want %q", got, want)
	}
}

func TestPlanWorkflowReportsMeasurements(t *testing.T) {
	f := fakeagents.New()
	env := newEnv(t, f)
	env.ExecuteWorkflow(PlanCluster, PlanRequest{Spec: fakeagents.SeedSpec()})
	var rep PlanReport
	if err := env.GetWorkflowResult(&rep); err != nil {
		t.Fatal(err)
	}
	if rep.Plan == nil || rep.Plan.Subnet.String() != "192.168.200.0/24" {
		t.Fatalf("plan = %+v", rep.Plan)
	}
	if len(rep.Probes) != 2 || len(rep.Matrix) != 2 {
		t.Errorf("probes %d, matrix %d: want 2 and 2 (one subnet, both directions)", len(rep.Probes), len(rep.Matrix))
	}
	if got := fakeagents.Calls(f, "StartRayHead", "PreflightNode", "RemoveContainers"); len(got) != 0 {
		t.Errorf("plan started containers: %q", got)
	}
	var external netplan.Candidate
	for _, c := range rep.Plan.Decision {
		if c.Subnet.String() == "10.1.230.0/24" {
			external = c
		}
	}
	if external.Reason != "rejected: node-b has no address in it" {
		t.Errorf("external subnet reason = %q", external.Reason)
	}
}

func TestTeardownRemovesEveryNode(t *testing.T) {
	f := fakeagents.New()
	env := newEnv(t, f)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: contract.TeardownWorkflowID("seed")})
	env.ExecuteWorkflow(TeardownCluster, TeardownRequest{Spec: fakeagents.SeedSpec()})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	got := fakeagents.Calls(f, "RemoveContainers")
	slices.Sort(got)
	if want := []string{"RemoveContainers node-a", "RemoveContainers node-b"}; !slices.Equal(got, want) {
		t.Errorf("teardown calls = %q, want %q", got, want)
	}
	// It owns the cluster first: the schedule paused, a running deploy waited for.
	if got := fakeagents.Calls(f, "PauseSchedule", "WaitClosed"); !slices.Equal(got, []string{"PauseSchedule seed", "WaitClosed tpdeploy-deploy-seed"}) {
		t.Errorf("before removing: %q", got)
	}
}

// A teardown started under another ID (the UI's form accepts any) is refused with the ID
// to use: a deploy looks for the teardown under that ID before it starts.
func TestTeardownUnderAnotherIDIsRefused(t *testing.T) {
	f := fakeagents.New()
	env := newEnv(t, f)
	env.ExecuteWorkflow(TeardownCluster, TeardownRequest{Spec: fakeagents.SeedSpec()})
	var app *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != contract.ErrWrongWorkflowID || !strings.Contains(app.Message(), "tpdeploy-teardown-seed") {
		t.Fatalf("teardown under another ID: %v", err)
	}
	if got := fakeagents.Calls(f, "RemoveContainers"); len(got) != 0 {
		t.Errorf("it removed containers: %q", got)
	}
}

// A deploy under another ID, or while the cluster is torn down, is refused before it
// touches anything.
func TestDeployOwnership(t *testing.T) {
	f := fakeagents.New()
	env := newEnv(t, f)
	env.ExecuteWorkflow(DeployCluster, DeployRequest{Spec: fakeagents.SeedSpec()})
	var app *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != contract.ErrWrongWorkflowID || !strings.Contains(app.Message(), "tpdeploy-deploy-seed") {
		t.Fatalf("deploy under another ID: %v", err)
	}
	f = fakeagents.New()
	f.TeardownBusy = true
	env = newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != contract.ErrClusterBusy || !strings.Contains(app.Message(), "being torn down") {
		t.Fatalf("deploy during a teardown: %v", err)
	}
	if got := fakeagents.Calls(f, "ProbeNode", "StartRayHead"); len(got) != 0 {
		t.Errorf("a refused deploy acted: %q", got)
	}
}

// A planned node that reboots while vLLM loads (its agent reports a new boot ID) makes the
// deploy compensate and start over from probing, recreating every container; it serves.
func TestDeployStartsOverWhenANodeReboots(t *testing.T) {
	f := fakeagents.New()
	f.BlockWatch = true
	f.Started = make(chan string, 100)
	env := newEnv(t, f)
	env.RegisterDelayedCallback(func() {
		for key := range f.Started {
			if key == "WatchServing node-a" {
				break
			}
		}
		fakeagents.Reboot(f, "node-b", "boot-2")
		env.SignalWorkflow(contract.SignalNodeBooted, contract.NodeBoot{Node: "node-b", BootID: "boot-2"})
	}, time.Second)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("deploy after a reboot: %v", err)
	}
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if len(res.Restarts) != 1 || !strings.Contains(res.Restarts[0], "node-b rebooted (boot ID boot-nod -> boot-2)") {
		t.Errorf("restarts = %q", res.Restarts)
	}
	if got := fakeagents.Attempts(f, "ProbeNode node-b"); got != 2 {
		t.Errorf("node-b probed %d times, want twice (again after the reboot)", got)
	}
	if got := fakeagents.Calls(f, "RemoveContainers"); !slices.Equal(got, []string{"RemoveContainers node-a vllm", "RemoveContainers node-b ray-worker", "RemoveContainers node-a ray-head"}) {
		t.Errorf("compensations before starting over = %q", got)
	}
	if got := fakeagents.Calls(f, "LaunchVLLM"); !slices.Equal(got, []string{"LaunchVLLM node-a", "LaunchVLLM node-a replace"}) {
		t.Errorf("launches = %q, want the second to recreate", got)
	}
}

// A step that fails because a node rebooted (vLLM's engine died) is checked against every
// node's boot ID: a changed one means starting over, not failing.
func TestDeployStartsOverWhenAFailureFollowsAReboot(t *testing.T) {
	f := fakeagents.New()
	f.Failures["WatchServing node-a"] = nonRetryable1(contract.ErrEngineDead, "EngineDeadError")
	f.OnCall = func(key string) {
		if key == "WatchServing node-a" && fakeagents.Attempts(f, "BootID node-b") == 0 {
			fakeagents.Reboot(f, "node-b", "boot-2")
			f.OnCall = nil
		}
	}
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "EngineDead") {
		// The engine keeps dying after the restart too: the deploy fails, but only after
		// it started over once for the reboot it found.
		t.Fatalf("deploy: %v", err)
	}
	var state State
	q, _ := env.QueryWorkflow(contract.QueryState)
	_ = q.Get(&state)
	if len(state.Restarts) != 1 || !strings.Contains(state.Restarts[0], "node-b rebooted") {
		t.Errorf("restarts = %q, want one for node-b's reboot", state.Restarts)
	}
	if got := fakeagents.Attempts(f, "ProbeNode node-b"); got != 2 {
		t.Errorf("node-b probed %d times, want twice", got)
	}
}

// A Ray worker's node whose memory guard stopped its engines is, at the head, a Ray node
// that died: the deploy asks every node's guard and fails HostMemoryPressure naming that
// node, with what the head saw kept in the message.
func TestAGuardTripOnAWorkerIsHostMemoryPressure(t *testing.T) {
	f := fakeagents.New()
	f.Failures["WatchServing node-a"] = nonRetryable1(contract.ErrRayNodeDead, "ActorDiedError: the actor's node died")
	f.GuardTrips = map[string]string{"node-b": "node-b: host memory fell to 60 MiB available (the lowest seen)"}
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	var app *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != contract.ErrHostMemoryPressure {
		t.Fatalf("deploy: %v", err)
	}
	for _, w := range []string{"node-b", "60 MiB available (the lowest seen)", "what the deploy saw: RayNodeDead"} {
		if !strings.Contains(app.Message(), w) {
			t.Errorf("message lacks %q: %s", w, app.Message())
		}
	}
	if got := fakeagents.Attempts(f, "GuardTrip node-b"); got != 1 {
		t.Errorf("node-b's guard asked %d times", got)
	}

	// No trip anywhere: the head's finding stands.
	f = fakeagents.New()
	f.Failures["WatchServing node-a"] = nonRetryable1(contract.ErrRayNodeDead, "ActorDiedError: the actor's node died")
	env = newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != contract.ErrRayNodeDead {
		t.Fatalf("deploy without a trip: %v", err)
	}
}

// A link that came back renamed during the deploy (NCCL then finds no interface of the
// planned name) is found by asking the nodes whether their planned address is still on the
// planned interface: the deploy starts over from probing and serves on the new name.
func TestDeployStartsOverWhenAnInterfaceCameBackRenamed(t *testing.T) {
	f := fakeagents.New()
	f.Failures["WatchServing node-a"] = nonRetryable1(contract.ErrNCCLNoInterface, "NCCL_SOCKET_IFNAME names no interface")
	watches := 0
	f.OnCall = func(key string) {
		if key != "WatchServing node-a" {
			return
		}
		if watches++; watches == 1 {
			fakeagents.RenameLink(f, "node-b", "enp1s0f1np1", "enp1s0f1np2")
		} else {
			f.Failures = map[string]error{}
		}
	}
	deployRestartsOntoRenamedLink(t, f, "node-b's network changed (192.168.200.13 is now on enp1s0f1np2, not on the planned enp1s0f1np1)")
}

// deployRestartsOntoRenamedLink deploys the seed spec, expects it to serve after one restart
// for why, and node-b to be planned on its renamed link enp1s0f1np2.
func deployRestartsOntoRenamedLink(t *testing.T, f *fakeagents.Agents, why string) {
	t.Helper()
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if len(res.Restarts) != 1 || res.Restarts[0] != why {
		t.Errorf("restarts = %q, want [%q]", res.Restarts, why)
	}
	if np, _ := res.Plan.Node("node-b"); np.Interface != "enp1s0f1np2" {
		t.Errorf("node-b planned on %s after the restart, want enp1s0f1np2", np.Interface)
	}
}

// A link that flaps between the probe and the start (Docker's reconnect renames the
// interface) is found at preflight, before any container starts: the deploy starts over
// from probing and serves on the new name, having started Ray once.
func TestPreflightFindsAnInterfaceRenamedSinceTheProbe(t *testing.T) {
	f := fakeagents.New()
	renamed := false
	f.OnCall = func(key string) {
		if key == "DialPeers node-b" && !renamed {
			renamed = true
			fakeagents.RenameLink(f, "node-b", "enp1s0f1np1", "enp1s0f1np2")
		}
	}
	deployRestartsOntoRenamedLink(t, f, "the network changed since the probe: node-b: 192.168.200.13 is now on enp1s0f1np2, not on the planned enp1s0f1np1")
	for _, method := range []string{"StartRayHead", "StartRayWorker", "LaunchVLLM"} {
		if got := len(fakeagents.Calls(f, method)); got != 1 {
			t.Errorf("%s called %d times, want once (nothing starts on the stale plan)", method, got)
		}
	}
	if got := fakeagents.Attempts(f, "ProbeNode node-b"); got != 2 {
		t.Errorf("node-b probed %d times, want twice", got)
	}
}

// A refused dial means the peer's listeners are gone (its agent restarted after opening
// them): reachability is tested again with fresh listeners instead of planning without
// the subnet.
func TestReachabilityAgainWhenListenersAreGone(t *testing.T) {
	f := fakeagents.New()
	f.RefusedDials["node-a>node-b"] = 1
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if got := fakeagents.Attempts(f, "OpenProbeListeners node-b"); got != 2 {
		t.Errorf("node-b opened listeners %d times, want twice", got)
	}
	if res.Plan.Subnet.String() != "192.168.200.0/24" {
		t.Errorf("planned on %s, want the fast subnet", res.Plan.Subnet)
	}
}

// A node missing two shards is refused before anything starts, naming the files and the
// head's sizes.
func TestModelIncompleteRefusedBeforeRay(t *testing.T) {
	f := fakeagents.New()
	m := fakeagents.SeedManifest()
	m.Files = []weights.File{m.Files[0], m.Files[1], m.Files[4]}
	m.Missing = []string{"model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}
	f.Manifests["node-b"] = m
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	var app *temporal.ApplicationError
	err := env.GetWorkflowError()
	if !errors.As(err, &app) || app.Type() != contract.ErrModelIncomplete {
		t.Fatalf("err = %v, want ModelIncomplete", err)
	}
	for _, want := range []string{"node-b lacks model-00002-of-00003.safetensors (head has 4.9 GB)", "node-b lacks model-00003-of-00003.safetensors (head has 1.2 GB)", "model.sync: from-head"} {
		if !strings.Contains(app.Message(), want) {
			t.Errorf("message lacks %q: %s", want, app.Message())
		}
	}
	if got := fakeagents.Attempts(f, "StartRayHead node-a"); got != 0 {
		t.Errorf("ray head started %d times before the model was checked", got)
	}
}

// With model.sync: from-head the head serves what node-b lacks and node-b copies it into
// the same snapshot of its own cache; the deploy serves and reports the copy.
func TestModelSyncFromHead(t *testing.T) {
	f := fakeagents.New()
	m := fakeagents.SeedManifest()
	m.Files = []weights.File{m.Files[0], m.Files[1], m.Files[4]}
	m.Missing = []string{"model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}
	f.Manifests["node-b"] = m
	s := fakeagents.SeedSpec()
	s.Model.Sync = spec.SyncFromHead
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	snapshot := fakeagents.SeedManifest().Dir
	calls := fakeagents.Calls(f, "PrepareModelCopy", "OpenModelServer", "SyncModel", "CloseModelServer")
	want := []string{"PrepareModelCopy node-b " + snapshot, "OpenModelServer node-a model-00002-of-00003.safetensors,model-00003-of-00003.safetensors",
		"SyncModel node-b " + snapshot, "CloseModelServer node-a"}
	if !slices.Equal(calls, want) {
		t.Errorf("calls %q, want %q", calls, want)
	}
	// The server is opened for node-b's key, from node-b's planned address, and the copy
	// names the same key (the fake, like an agent, copies only with a key it made).
	nodeB, _ := res.Plan.Node("node-b")
	if len(f.ServerRequests) != 1 || len(f.SyncRequests) != 1 {
		t.Fatalf("%d servers, %d copies", len(f.ServerRequests), len(f.SyncRequests))
	}
	srv, cp := f.ServerRequests[0], f.SyncRequests[0]
	if !slices.Equal(srv.Keys, []string{cp.Key}) || !slices.Equal(srv.Peers, []netip.Addr{nodeB.Address}) || cp.Addr != nodeB.Address {
		t.Errorf("server keys %q peers %v; copy key %q from %s; node-b is planned at %s", srv.Keys, srv.Peers, cp.Key, cp.Addr, nodeB.Address)
	}
	if len(res.ModelCopies) != 1 || res.ModelCopies[0].Node != "node-b" || res.ModelCopies[0].Bytes != 6_100_000_000 {
		t.Errorf("model copies %+v", res.ModelCopies)
	}
	if i, j := slices.Index(fakeagents.Calls(f, "SyncModel", "StartRayHead"), "SyncModel node-b "+snapshot), 0; i != j {
		t.Errorf("the copy did not come before Ray: %q", fakeagents.Calls(f, "SyncModel", "StartRayHead"))
	}
}

// A model.host_dir scanned without checksums has sizes only: before the copy, the head's
// agent hashes exactly the files node-b lacks, and the copy gets those hashes (the agents
// copy no file they cannot verify: the fake refuses one as they do).
func TestModelSyncOfAHostDirHashesWhatItCopies(t *testing.T) {
	f := fakeagents.New()
	head := weights.Manifest{Source: "/models/qwen", Dir: "/models/qwen", Files: []weights.File{{Name: "config.json", Size: 700},
		{Name: "model-00001-of-00002.safetensors", Size: 4_900_000_000}, {Name: "model-00002-of-00002.safetensors", Size: 1_200_000_000},
		{Name: "model.safetensors.index.json", Size: 30_000}}}
	node := head
	node.Files = []weights.File{head.Files[0], head.Files[3]}
	f.Manifests["node-a"], f.Manifests["node-b"] = head, node
	s := fakeagents.SeedSpec()
	s.Model.Path, s.Model.HostDir, s.Model.Sync = "/models/qwen", "/models/qwen", spec.SyncFromHead
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	calls := fakeagents.Calls(f, "ModelManifest", "OpenModelServer", "SyncModel")
	want := []string{"ModelManifest node-a model-00001-of-00002.safetensors,model-00002-of-00002.safetensors",
		"OpenModelServer node-a model-00001-of-00002.safetensors,model-00002-of-00002.safetensors", "SyncModel node-b /models/qwen"}
	if len(calls) < 2 || !slices.Equal(calls[2:], want) {
		t.Errorf("calls %q, want the two scans then %q", calls, want)
	}
	if len(res.ModelCopies) != 1 || res.ModelCopies[0].Files != 2 {
		t.Errorf("model copies %+v", res.ModelCopies)
	}
}

// A file that changed on the head between the check and the copy's hashing fails the
// deploy before anything is copied, naming the file.
func TestModelSyncFailsWhenTheHeadChangesMeanwhile(t *testing.T) {
	f := fakeagents.New()
	head := weights.Manifest{Source: "/models/qwen", Dir: "/models/qwen", Files: []weights.File{{Name: "config.json", Size: 700},
		{Name: "model.safetensors", Size: 4_900_000_000}}}
	node := head
	node.Files = head.Files[:1]
	f.Manifests["node-a"], f.Manifests["node-b"] = head, node
	f.OnCall = func(key string) {
		if key == "ModelManifest node-a" && fakeagents.Attempts(f, key) == 2 {
			shrunk := head
			shrunk.Files = []weights.File{head.Files[0], {Name: "model.safetensors", Size: 1_000}}
			fakeagents.SetManifest(f, "node-a", shrunk)
		}
	}
	s := fakeagents.SeedSpec()
	s.Model.Path, s.Model.HostDir, s.Model.Sync = "/models/qwen", "/models/qwen", spec.SyncFromHead
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	var app *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != contract.ErrModelIncomplete ||
		!strings.Contains(app.Message(), "model.safetensors changed (4.9 GB then, 1.0 kB now) on node-a") {
		t.Fatalf("err = %v", err)
	}
	if calls := fakeagents.Calls(f, "OpenModelServer", "SyncModel"); len(calls) != 0 {
		t.Errorf("copied after the head changed: %q", calls)
	}
}

// A node that keeps rebooting ends the deploy after MaxRestarts, as NodeRebooted.
func TestDeployGivesUpAfterItsRestarts(t *testing.T) {
	f := fakeagents.New()
	f.Failures["WatchServing node-a"] = nonRetryable1(contract.ErrEngineDead, "EngineDeadError")
	f.BootIDs["node-b"] = "boot-again"
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec(), MaxRestarts: 2})
	var app *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != contract.ErrNodeRebooted || !strings.Contains(app.Message(), "gave up after 2 restarts") {
		t.Fatalf("err = %v", err)
	}
	if got := fakeagents.Attempts(f, "ProbeNode node-a"); got != 3 {
		t.Errorf("probed %d times, want 3 (the first attempt and 2 restarts)", got)
	}
}

// vLLM's own multi-node mode: the master port proven from node-b before any rank starts,
// then rank 0 and node-b's headless rank started at once in one step, no Ray at all, and
// the same serving watch.
func TestMPDeployServes(t *testing.T) {
	f := fakeagents.New()
	s := fakeagents.SeedSpec()
	s.Executor = spec.ExecutorMP
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	got := fakeagents.Calls(f, "PrepareMaster", "DialPeers", "CloseProbeListeners", "StartVLLMRank", "StartRayHead", "StartRayWorker", "CheckPlacement")
	// The first DialPeers and CloseProbeListeners are the reachability test's.
	want := []string{"PrepareMaster node-a", "DialPeers node-b", "CloseProbeListeners node-a",
		"StartVLLMRank node-a rank=0 replace=true", "StartVLLMRank node-b rank=1 replace=true"}
	tail := slices.Clone(got[max(0, len(got)-len(want)):])
	slices.Sort(tail[len(tail)-2:]) // the two ranks start at once: either may be first
	if len(got) < len(want) || !slices.Equal(tail, want) {
		t.Errorf("calls %q, want them to end with %q (the last two in any order)", got, want)
	}
	var steps []string
	for _, st := range res.Steps {
		steps = append(steps, st.Step)
	}
	if !slices.Contains(steps, PhaseAllRanks) || slices.Contains(steps, PhaseRanks) || slices.Contains(steps, PhaseLaunchMP) {
		t.Errorf("steps %q, want %q and neither of the one-after-the-other steps", steps, PhaseAllRanks)
	}
	if res.Plan.RayAddress != "" || res.Plan.NCCL.Form != netplan.NCCLPerNode {
		t.Errorf("plan ray %q nccl %q, want no Ray and per-node NCCL", res.Plan.RayAddress, res.Plan.NCCL.Form)
	}
	if res.Endpoint != "http://192.168.200.12:8000" {
		t.Errorf("endpoint %s", res.Endpoint)
	}
}

// A headless rank that fails on its own node ends the deploy naming that node, while rank
// 0 (which would wait for it forever) is still loading; every rank is removed.
func TestMPHeadlessRankFailureEndsTheDeploy(t *testing.T) {
	f := fakeagents.New()
	f.BlockWatch = true
	f.Failures["WatchServing node-b"] = nonRetryable1(contract.ErrC10dUnreachable, "a worker cannot reach the torch c10d rendezvous")
	s := fakeagents.SeedSpec()
	s.Executor = spec.ExecutorMP
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	var app *temporal.ApplicationError
	err := env.GetWorkflowError()
	if !errors.As(err, &app) || app.Type() != contract.ErrC10dUnreachable || !strings.Contains(app.Message(), "node-b") {
		t.Fatalf("err = %v, want C10dUnreachable naming node-b", err)
	}
	removals := fakeagents.Calls(f, "RemoveContainers")
	for _, want := range []string{"RemoveContainers node-a vllm", "RemoveContainers node-b vllm"} {
		if !slices.Contains(removals, want) {
			t.Errorf("removals %q lack %q", removals, want)
		}
	}
}

// A master port node-b cannot reach fails before any rank starts, naming the port.
func TestMPMasterPortUnreachableFailsBeforeRanks(t *testing.T) {
	f := fakeagents.New()
	s := fakeagents.SeedSpec()
	s.Executor = spec.ExecutorMP
	env := newEnv(t, f)
	f.OnCall = func(key string) {
		if key == "PrepareMaster node-a" {
			f.RefusedDials["node-b>node-a"] = 1
			f.OnCall = nil
		}
	}
	executeDeploy(env, DeployRequest{Spec: s})
	var app *temporal.ApplicationError
	err := env.GetWorkflowError()
	if !errors.As(err, &app) || app.Type() != contract.ErrC10dUnreachable || !strings.Contains(app.Message(), "node-b cannot reach the master address 192.168.200.12:29501") {
		t.Fatalf("err = %v", err)
	}
	if got := fakeagents.Calls(f, "StartVLLMRank"); len(got) != 0 {
		t.Errorf("ranks started: %q", got)
	}
}

// A deploy records tpdeploy's own instruments: every step's duration, the reachability
// pairs per subnet, the shards loaded, the deploy and its time to serving.
func TestDeployRecordsMetrics(t *testing.T) {
	e, err := metrics.NewExporter()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	var suite testsuite.WorkflowTestSuite
	suite.SetMetricsHandler(e.Handler)
	env := newEnvIn(t, &suite, fakeagents.New())
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	e.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`tpdeploy_step_duration_seconds_count{`, `step="probing"`, `step="waiting until serving"`,
		`tpdeploy_reachability_pairs_total{`, `subnet="192.168.200.0/24"`,
		`tpdeploy_shards_loaded{`, `tpdeploy_deploys_total{`, `outcome="served"`, `tpdeploy_time_to_serving_seconds_count{`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// A load that stops making progress — no new line, no shard, for timeouts.load_stall —
// ends LoadStalled naming the node and the last progress seen, with the usual
// compensations, long before timeouts.serving; a load whose output moves on does not.
func TestStalledLoadEndsLoadStalled(t *testing.T) {
	stuck := contract.ServingProgress{Phase: "loading", ShardsLoaded: 4, ShardsTotal: 30, Percent: 13, Lines: 41,
		LastLine: "Loading safetensors checkpoint shards:  13% Completed | 4/30", Elapsed: 10 * time.Second}
	f := fakeagents.New()
	f.WatchSteps = []contract.ServingProgress{{Phase: "loading", ShardsLoaded: 3, ShardsTotal: 30, Lines: 40, Elapsed: 10 * time.Second}}
	for range 20 {
		f.WatchSteps = append(f.WatchSteps, stuck)
	}
	env := newEnv(t, f)
	s := fakeagents.SeedSpec()
	s.Timeouts.LoadStall = spec.Duration(time.Minute)
	executeDeploy(env, DeployRequest{Spec: s})
	var app *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != contract.ErrLoadStalled {
		t.Fatalf("a stalled load: %v", err)
	}
	for _, w := range []string{"node-a", "no progress for 1m0s", "timeouts.load_stall 1m0s", "loading weights: 4/30 shards on node-a", "last line: Loading safetensors checkpoint shards:  13% Completed | 4/30"} {
		if !strings.Contains(app.Message(), w) {
			t.Errorf("message lacks %q:\n%s", w, app.Message())
		}
	}
	// The first stuck report moved it (a new shard); six more of 10 s each stand still.
	if f.WatchCalls != 8 {
		t.Errorf("WatchServing called %d times, want 8", f.WatchCalls)
	}
	if got := fakeagents.Calls(f, "RemoveContainers"); !slices.Equal(got, []string{"RemoveContainers node-a vllm", "RemoveContainers node-b ray-worker", "RemoveContainers node-a ray-head"}) {
		t.Errorf("compensations = %q", got)
	}

	// Output that moves on, even with no new shard, is progress.
	f = fakeagents.New()
	f.WatchSteps = nil
	for i := range 12 {
		f.WatchSteps = append(f.WatchSteps, contract.ServingProgress{Phase: "warming", ShardsLoaded: 30, ShardsTotal: 30, Lines: 100 + i, Elapsed: 10 * time.Second})
	}
	f.WatchSteps = append(f.WatchSteps, contract.ServingProgress{Phase: "serving", Serving: true, ShardsLoaded: 30, ShardsTotal: 30, Lines: 200})
	env = newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("a load whose output moves on: %v", err)
	}
}

// With three nodes the copy is a chain: node-a serves node-b, and node-b serves node-c
// while it receives (what it is itself receiving marked to relay); each copy names the
// node it copies from, and the result records it.
func TestModelSyncIsAChain(t *testing.T) {
	f := fakeagents.New()
	p := fakeagents.SeedProbe("node-c", false)
	p.Links = append([]netplan.Link(nil), p.Links...)
	for i := range p.Links {
		if p.Links[i].Name == "enp1s0f1np1" {
			p.Links[i].Addrs = []netip.Prefix{netip.MustParsePrefix("192.168.200.14/24")}
		}
	}
	f.Probes["node-c"] = p
	m := fakeagents.SeedManifest()
	m.Files = []weights.File{m.Files[0], m.Files[1], m.Files[4]}
	m.Missing = []string{"model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}
	f.Manifests["node-b"] = m
	c := fakeagents.SeedManifest()
	c.Files = []weights.File{c.Files[0], c.Files[1], c.Files[3], c.Files[4]}
	c.Missing = []string{"model-00002-of-00003.safetensors"}
	f.Manifests["node-c"] = c
	s := fakeagents.SeedSpec()
	s.Nodes = append(s.Nodes, spec.Node{Name: "node-c", Role: spec.RoleWorker, GPUs: 1})
	s.Parallel = spec.Parallel{Tensor: 1, Pipeline: 3}
	s.Model.Sync = spec.SyncFromHead
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	servers := map[string]contract.OpenModelServerRequest{}
	for _, r := range f.ServerRequests {
		servers[r.Node] = r
	}
	copies := map[string]contract.SyncModelRequest{}
	for _, r := range f.SyncRequests {
		copies[r.Node] = r
	}
	a, b := servers["node-a"], servers["node-b"]
	if len(servers) != 2 || !slices.Equal(a.Files, []string{"model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}) || len(a.Relay) != 0 {
		t.Fatalf("servers %+v, want node-a serving node-b's two files", f.ServerRequests)
	}
	if !slices.Equal(b.Files, []string{"model-00002-of-00003.safetensors"}) || len(b.Relay) != 1 || b.Relay["model-00002-of-00003.safetensors"] != 4_900_000_000 {
		t.Errorf("node-b serves %v relaying %v, want model-00002 relayed (node-b receives it too)", b.Files, b.Relay)
	}
	nodeB, _ := res.Plan.Node("node-b")
	nodeC, _ := res.Plan.Node("node-c")
	if !slices.Equal(a.Peers, []netip.Addr{nodeB.Address}) || !slices.Equal(b.Peers, []netip.Addr{nodeC.Address}) ||
		!slices.Equal(a.Keys, []string{copies["node-b"].Key}) || !slices.Equal(b.Keys, []string{copies["node-c"].Key}) {
		t.Errorf("node-a serves %v %v, node-b serves %v %v; copies %+v", a.Peers, a.Keys, b.Peers, b.Keys, copies)
	}
	if copies["node-b"].Source != "node-a" || copies["node-c"].Source != "node-b" || copies["node-c"].From.Addr() != nodeB.Address {
		t.Errorf("node-b copies from %q, node-c from %q at %s", copies["node-b"].Source, copies["node-c"].Source, copies["node-c"].From)
	}
	from := map[string]string{}
	for _, mc := range res.ModelCopies {
		from[mc.Node] = mc.From
	}
	if len(from) != 2 || from["node-b"] != "" || from["node-c"] != "node-b" {
		t.Errorf("model copies %+v", res.ModelCopies)
	}
	if closed := fakeagents.Calls(f, "CloseModelServer"); len(closed) != 2 {
		t.Errorf("closed %q, want both servers", closed)
	}
}

// node-b reboots mid-copy (its copy fails as its agent goes): the deploy starts over and
// the copy resumes — the partial files are kept for it, not removed by the restart's
// compensation — and the deploy serves.
func TestModelCopyResumesAfterANodeRebootsMidCopy(t *testing.T) {
	f := fakeagents.New()
	m := fakeagents.SeedManifest()
	m.Files = []weights.File{m.Files[0], m.Files[1], m.Files[4]}
	m.Missing = []string{"model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}
	f.Manifests["node-b"] = m
	f.OnCall = func(key string) {
		if key != "SyncModel node-b" {
			return
		}
		if fakeagents.Attempts(f, key) == 1 {
			fakeagents.Reboot(f, "node-b", "boot-2")
			fakeagents.SetFailure(f, key, nonRetryable1(contract.ErrNodeAgentDown, "node-b's agent went away mid-copy"))
			return
		}
		fakeagents.SetFailure(f, key, nil)
	}
	s := fakeagents.SeedSpec()
	s.Model.Sync = spec.SyncFromHead
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if len(res.Restarts) != 1 || !strings.Contains(res.Restarts[0], "node-b rebooted") {
		t.Errorf("restarts %q", res.Restarts)
	}
	calls := fakeagents.Calls(f, "SyncModel", "RemovePartialModel")
	if want := []string{"SyncModel node-b " + m.Dir, "SyncModel node-b " + m.Dir}; !slices.Equal(calls, want) {
		t.Errorf("calls %q, want the copy twice and no partial files removed between", calls)
	}
	if len(res.ModelCopies) != 1 || res.ModelCopies[0].Node != "node-b" {
		t.Errorf("model copies %+v", res.ModelCopies)
	}
}
