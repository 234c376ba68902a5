package workflows

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// servingOther is a deployment of another spec serving the seed cluster.
var servingOther = contract.ServingDeployment{RunID: "run-old", SpecHash: "0ld5pec", Endpoint: "http://192.168.200.12:8000",
	Executor: spec.ExecutorRay, Nodes: []contract.ServingNode{{Name: "node-a", Role: spec.RoleHead}, {Name: "node-b", Role: spec.RoleWorker}}}

// A changed spec deployed onto a serving cluster stages: every step that stops nothing
// runs before the first container start, the result names the deployment it replaced and
// when, and the supervisor is told of the new one.
func TestStagedDeploySwapsAfterEveryStepThatStopsNothing(t *testing.T) {
	f := fakeagents.New()
	f.Serving = servingOther
	var mu sync.Mutex
	var order []string
	f.OnCall = func(key string) { mu.Lock(); order = append(order, strings.Fields(key)[0]); mu.Unlock() }
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("deploy failed: %v", err)
	}
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Staged == nil || res.Staged.Serving.RunID != servingOther.RunID || res.Staged.SwappedAt.IsZero() {
		t.Fatalf("result staged = %+v, want the replaced deployment and the swap time", res.Staged)
	}
	first := slices.Index(order, "StartRayHead")
	for _, staged := range []string{"ServingDeployment", "ReadImage", "ProbeNode", "DialPeers", "PreflightNode", "ModelManifest"} {
		if i := slices.Index(order, staged); i < 0 || i > first {
			t.Errorf("%s at %d, want it staged before the first container start (%d): %q", staged, i, first, order)
		}
	}
	for _, live := range []string{"StartRayWorker", "CheckPlacement", "LaunchVLLM"} {
		if i := slices.Index(order, live); i < first {
			t.Errorf("%s at %d ran before the swap (%d)", live, i, first)
		}
	}
}

// A spec with vLLM's API key asks the controller which deployment serves, unchecked, and
// has its head's agent check it: the head resolves the key for its own endpoint
// (checksQueue), and any other agent would refuse it, so the deploy would replace the
// serving engine unstaged; the head reads nothing from Temporal (headChecksSplit). A spec
// without a key asks the controller alone.
func TestServingCheckOfAKeyedSpecRunsOnTheHeadsAgent(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		f := fakeagents.New()
		f.Serving = servingOther
		s := fakeagents.SeedSpec()
		want := []string{"ServingDeployment " + s.Name + " on " + contract.WorkflowQueue}
		if keyed {
			s.Secrets.APIKey = &spec.SecretRef{Env: "VLLM_API_KEY"}
			want = []string{"ServingDeployment " + s.Name + " on " + contract.WorkflowQueue + " unchecked",
				"CheckTarget " + servingOther.RunID + " on " + contract.NodeQueue(s.Head().Name)}
		}
		env := newEnv(t, f)
		executeDeploy(env, DeployRequest{Spec: s})
		var res DeployResult
		if err := env.GetWorkflowResult(&res); err != nil {
			t.Fatalf("keyed %v: %v", keyed, err)
		}
		if calls := fakeagents.Calls(f, "ServingDeployment", "CheckTarget"); !slices.Equal(calls, want) {
			t.Errorf("keyed %v: %q, want %q", keyed, calls, want)
		}
		if res.Staged == nil {
			t.Errorf("keyed %v: not staged", keyed)
		}
		if res.Staged != nil && res.Staged.Serving.Target != nil {
			t.Errorf("keyed %v: the staging records the unchecked target %+v", keyed, res.Staged.Serving.Target)
		}
	}
}

// A keyed spec whose serving run does not answer its head's check is not staged beside
// it, and says why.
func TestKeyedServingRunThatFailsTheHeadsCheckIsNotStaged(t *testing.T) {
	f := fakeagents.New()
	f.Serving = servingOther
	s := fakeagents.SeedSpec()
	s.Secrets.APIKey = &spec.SecretRef{Env: "VLLM_API_KEY"}
	env := newEnv(t, f)
	env.OnActivity(contract.ActivityCheckTarget, mock.Anything, mock.Anything).Return(contract.DeploymentCheck{Exists: true, RunID: servingOther.RunID, Detail: "GET /health: 503"}, nil)
	executeDeploy(env, DeployRequest{Spec: s})
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Staged != nil {
		t.Errorf("staged beside %+v, which its head says does not serve", res.Staged.Serving)
	}
	if !slices.ContainsFunc(res.Warnings, func(w string) bool {
		return strings.Contains(w, "not staged: deploy run "+servingOther.RunID+" does not serve: GET /health: 503")
	}) {
		t.Errorf("warnings %q do not say why it was not staged", res.Warnings)
	}
}

// The same spec as the one serving is no staged deploy (adoption makes it a no-op).
func TestSameSpecAsTheServingOneIsNotStaged(t *testing.T) {
	f := fakeagents.New()
	f.Serving = servingOther
	f.Serving.SpecHash = fakeagents.SeedSpec().Hash()
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Staged != nil {
		t.Errorf("staged = %+v for a redeploy of the serving spec", res.Staged)
	}
}

// A staged step that fails leaves the serving deployment untouched: no container is
// started or removed, the supervisor is not asked to roll back, and the failure says the
// old deployment still serves, in words and in its details.
func TestStagedStepThatFailsLeavesTheServingDeploymentUntouched(t *testing.T) {
	for _, tt := range []struct {
		name, key  string
		err        error
		incomplete bool
		wantType   string
	}{
		{name: "image missing on node-b", key: "ReadImage node-b",
			err: nonRetryable1(contract.ErrImageMissing, "image vllm/vllm-openai:v0.17.0 not present"), wantType: contract.ErrImageMissing},
		{name: "policy refusal on node-b", key: "PreflightNode node-b",
			err: nonRetryable1(contract.ErrPolicyDenied, "node-b's policy refuses env MY_TUNING"), wantType: contract.ErrPolicyDenied},
		{name: "incomplete model on node-b", incomplete: true, wantType: contract.ErrModelIncomplete},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := fakeagents.New()
			f.Serving = servingOther
			if tt.err != nil {
				f.Failures[tt.key] = tt.err
			}
			if tt.incomplete {
				m := fakeagents.SeedManifest()
				m.Files = []weights.File{m.Files[0], m.Files[1], m.Files[4]}
				m.Missing = []string{"model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}
				f.Manifests["node-b"] = m
			}
			s := fakeagents.SeedSpec()
			told := false
			env := newEnvTelling(t, &testsuite.WorkflowTestSuite{}, f, func(DeployFailure) { told = true })
			executeDeploy(env, DeployRequest{Spec: s})
			err := env.GetWorkflowError()
			var app *temporal.ApplicationError
			if !errors.As(err, &app) {
				t.Fatalf("want an application error, got %v", err)
			}
			if app.Type() != tt.wantType {
				t.Errorf("type %s, want %s: %s", app.Type(), tt.wantType, app.Message())
			}
			if !strings.Contains(app.Message(), "nothing was stopped, deploy run run-old (spec 0ld5pec) still serves at http://192.168.200.12:8000") {
				t.Errorf("message does not say the old deployment serves: %s", app.Message())
			}
			var refused contract.StagedRefusal
			if !app.HasDetails() || app.Details(&refused) != nil || refused.Serving.RunID != servingOther.RunID || refused.Serving.SpecHash != servingOther.SpecHash {
				t.Errorf("details %+v, want the serving deployment", refused)
			}
			for _, m := range []string{"StartRayHead", "StartRayWorker", "LaunchVLLM", "RemoveContainers", "PrepareMaster"} {
				if got := fakeagents.Calls(f, m); len(got) != 0 {
					t.Errorf("a refused staged deploy called %s: %q", m, got)
				}
			}
			if told {
				t.Error("the supervisor was told to roll back an untouched cluster")
			}
		})
	}
}

// After the swap a failure is what it always was: compensations remove what was
// started, the supervisor is told (it puts the last good spec back), and the failure
// is no staged refusal.
func TestStagedDeployFailingAfterTheSwapRollsBack(t *testing.T) {
	f := fakeagents.New()
	f.Serving = servingOther
	f.Failures["LaunchVLLM node-a"] = bad("no such image")
	s := fakeagents.SeedSpec()
	var told []DeployFailure
	env := newEnvTelling(t, &testsuite.WorkflowTestSuite{}, f, func(df DeployFailure) { told = append(told, df) })
	executeDeploy(env, DeployRequest{Spec: s})
	var app *temporal.ApplicationError
	if !errors.As(env.GetWorkflowError(), &app) {
		t.Fatalf("want a failure, got %v", env.GetWorkflowError())
	}
	if strings.Contains(app.Message(), "still serves") || app.HasDetails() {
		t.Errorf("a failure after the swap reads as a staged refusal: %s", app.Message())
	}
	if got := fakeagents.Calls(f, "RemoveContainers"); len(got) != 3 {
		t.Errorf("compensations %q, want the vllm, worker and head removed", got)
	}
	if len(told) != 1 || told[0].SpecHash != s.Hash() || told[0].Type != contract.ErrBadRequest {
		t.Errorf("the supervisor was told %+v, want one failure of spec %s: nothing would put the last good spec back", told, s.Hash())
	}
}

// Not knowing what serves is no failure: the deploy runs unstaged, and says so.
func TestUnknownServingDeploysUnstaged(t *testing.T) {
	f := fakeagents.New()
	f.Failures["ServingDeployment seed"] = bad("no supervisor to ask")
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Staged != nil || !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "not staged") }) {
		t.Errorf("staged %+v, warnings %q", res.Staged, res.Warnings)
	}
}

// At the swap, what the serving deployment runs that no step replaces by name goes: Ray's
// containers when the image moves the cluster to mp (the old vLLM in the Ray head would
// keep vLLM's port), a node's ranks when it moves back to Ray, everything on a node the
// spec no longer has (left to its agent, with a warning, when it refuses). Nothing goes when
// the executor and the roles stay.
func TestTheSwapRemovesWhatTheNewDeploymentDoesNotReplace(t *testing.T) {
	three := servingOther
	three.Nodes = append(append([]contract.ServingNode(nil), servingOther.Nodes...), contract.ServingNode{Name: "node-c", Role: spec.RoleWorker})
	mpServing := servingOther
	mpServing.Executor = spec.ExecutorMP
	for _, tt := range []struct {
		name     string
		serving  contract.ServingDeployment
		executor string
		refuse   string
		want     []string
		warn     string
	}{
		{name: "same executor and roles", serving: servingOther, executor: spec.ExecutorRay},
		{name: "ray to mp", serving: servingOther, executor: spec.ExecutorMP,
			want: []string{"RemoveContainers node-a ray-head,ray-worker", "RemoveContainers node-b ray-head,ray-worker"}},
		{name: "mp to ray", serving: mpServing, executor: spec.ExecutorRay,
			want: []string{"RemoveContainers node-a vllm", "RemoveContainers node-b vllm"}},
		{name: "a node dropped", serving: three, executor: spec.ExecutorRay,
			want: []string{"RemoveContainers node-c ray-head,ray-worker,vllm"}},
		{name: "a dropped node refuses", serving: three, executor: spec.ExecutorRay, refuse: "RemoveContainers node-c",
			want: []string{"RemoveContainers node-c ray-head,ray-worker,vllm"}, warn: "node-c: the old deployment's containers are left to its agent's reconcile"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := fakeagents.New()
			f.Serving = tt.serving
			if tt.refuse != "" {
				f.Failures[tt.refuse] = nonRetryable1(contract.ErrPolicyDenied, "not in the signed spec")
			}
			s := fakeagents.SeedSpec()
			s.Executor = tt.executor
			env := newEnv(t, f)
			executeDeploy(env, DeployRequest{Spec: s})
			var res DeployResult
			if err := env.GetWorkflowResult(&res); err != nil {
				t.Fatal(err)
			}
			// The removals run on every node at once: their order is not the test's.
			got := fakeagents.Calls(f, "RemoveContainers")
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("removed %q, want %q", got, tt.want)
			}
			if tt.warn != "" && !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, tt.warn) }) {
				t.Errorf("warnings %q lack %q", res.Warnings, tt.warn)
			}
		})
	}
}
