package workflows

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// carriesIntent checks that every acting call carried exactly in, and that the calls named in
// want were among them.
func carriesIntent(t *testing.T, f *fakeagents.Agents, in *contract.Intent, want ...string) {
	t.Helper()
	got := fakeagents.Intents(f)
	var keys []string
	for k, list := range got {
		keys = append(keys, k)
		for i, x := range list {
			if !intent.Same(x, in) {
				t.Errorf("%s call %d carried %v, not the deploy's intent", k, i+1, x)
			}
		}
	}
	sort.Strings(keys)
	for _, w := range want {
		if !slices.Contains(keys, w) {
			t.Errorf("no %s among the acting calls %q", w, keys)
		}
	}
}

// signedRequests records the intent of every activity request package contract makes
// Signed, as an agent's gate would see it, whatever the fake agents record by hand.
type signedRequests struct {
	interceptor.WorkerInterceptorBase
	mu      sync.Mutex
	intents map[string][]*contract.Intent
}

// recordSigned installs a signedRequests on env's worker.
func recordSigned(env *testsuite.TestWorkflowEnvironment) *signedRequests {
	r := &signedRequests{intents: map[string][]*contract.Intent{}}
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{r}})
	return r
}

func (r *signedRequests) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &signedInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, r: r}
}

type signedInbound struct {
	interceptor.ActivityInboundInterceptorBase
	r *signedRequests
}

func (i *signedInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	if len(in.Args) > 0 {
		if s, ok := in.Args[0].(contract.Signed); ok {
			i.r.mu.Lock()
			name := activity.GetInfo(ctx).ActivityType.Name
			i.r.intents[name] = append(i.r.intents[name], s.Signature().Intent)
			i.r.mu.Unlock()
		}
	}
	return i.Next.ExecuteActivity(ctx, in)
}

// everySignedCarries checks that every request contract makes Signed carried exactly in.
func everySignedCarries(t *testing.T, r *signedRequests, in *contract.Intent) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.intents) == 0 {
		t.Fatal("no signed request was made")
	}
	for name, list := range r.intents {
		for i, x := range list {
			if !intent.Same(x, in) {
				t.Errorf("%s call %d carried %v, not the deploy's intent", name, i+1, x)
			}
		}
	}
}

// Every request that makes an agent act carries the deploy's signed intent unchanged, over
// Ray, in vLLM's own multi-node mode, through model.sync's copy and the compensations.
func TestEveryActingRequestCarriesTheIntent(t *testing.T) {
	_, priv, _ := intent.GenerateKey()
	t.Run("ray", func(t *testing.T) {
		f := fakeagents.New()
		s := fakeagents.SeedSpec()
		in := intent.Sign(priv, s)
		env := newEnv(t, f)
		signed := recordSigned(env)
		executeDeploy(env, DeployRequest{Spec: s, Intent: in})
		if err := env.GetWorkflowError(); err != nil {
			t.Fatal(err)
		}
		carriesIntent(t, f, in, "PreflightNode node-a", "PreflightNode node-b", "StartRayHead node-a", "StartRayWorker node-b", "LaunchVLLM node-a", "WatchServing node-a")
		everySignedCarries(t, signed, in)
	})
	t.Run("mp", func(t *testing.T) {
		f := fakeagents.New()
		for _, n := range []string{"node-a", "node-b"} {
			img := fakeagents.SeedImage(n)
			img.VLLM, img.Ray, img.RayBin, img.ID = "0.22.1", "", false, "sha256:3333333333333333"
			f.Images[n] = img
		}
		s := fakeagents.SeedSpec()
		in := intent.Sign(priv, s)
		env := newEnv(t, f)
		signed := recordSigned(env)
		executeDeploy(env, DeployRequest{Spec: s, Intent: in})
		if err := env.GetWorkflowError(); err != nil {
			t.Fatal(err)
		}
		carriesIntent(t, f, in, "PrepareMaster node-a", "StartVLLMRank node-a", "StartVLLMRank node-b", "WatchServing node-a", "WatchServing node-b")
		everySignedCarries(t, signed, in)
	})
	t.Run("model copy and compensations", func(t *testing.T) {
		f := fakeagents.New()
		m := fakeagents.SeedManifest()
		m.Files = m.Files[:2]
		m.Missing = []string{"model-00002-of-00003.safetensors"}
		f.Manifests["node-b"] = m
		f.Failures["LaunchVLLM node-a"] = temporal.NewNonRetryableApplicationError("no", contract.ErrBadRequest, nil)
		s := fakeagents.SeedSpec()
		s.Model.Sync = spec.SyncFromHead
		in := intent.Sign(priv, s)
		env := newEnv(t, f)
		signed := recordSigned(env)
		executeDeploy(env, DeployRequest{Spec: s, Intent: in})
		if err := env.GetWorkflowError(); err == nil {
			t.Fatal("the deploy served with a failing launch")
		}
		carriesIntent(t, f, in, "PrepareModelCopy node-b", "OpenModelServer node-a", "SyncModel node-b", "RemovePartialModel node-b", "RemoveContainers node-a", "RemoveContainers node-b")
		everySignedCarries(t, signed, in)
	})
	t.Run("teardown", func(t *testing.T) {
		f := fakeagents.New()
		s := fakeagents.SeedSpec()
		in := intent.Sign(priv, s)
		env := newEnv(t, f)
		signed := recordSigned(env)
		env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: contract.TeardownWorkflowID(s.Name)})
		env.ExecuteWorkflow(TeardownCluster, TeardownRequest{Spec: s, Intent: in})
		if err := env.GetWorkflowError(); err != nil {
			t.Fatal(err)
		}
		carriesIntent(t, f, in, "RemoveContainers node-a", "RemoveContainers node-b")
		everySignedCarries(t, signed, in)
	})
}

// An intent that signs another spec than the deploy's is refused before any node is asked.
func TestAnIntentOfAnotherSpecIsRefused(t *testing.T) {
	_, priv, _ := intent.GenerateKey()
	f := fakeagents.New()
	s := fakeagents.SeedSpec()
	other := s
	other.Image = "vllm/vllm-openai:v0.11.0"
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s, Intent: intent.Sign(priv, other)})
	err := env.GetWorkflowError()
	if err == nil || !strings.Contains(err.Error(), contract.ErrSpecInvalid) || !strings.Contains(err.Error(), "signs another spec") {
		t.Fatalf("deploy = %v, want SpecInvalid", err)
	}
	if calls := fakeagents.Calls(f, "ReadImage", "ProbeNode", "PreflightNode"); len(calls) > 0 {
		t.Errorf("nodes were asked: %q", calls)
	}
}

// The supervisor's recoveries repeat the spec it supervises with that spec's signature,
// carry it across continue-as-new, and take the new one with a new spec that serves.
func TestSupervisorRecoversWithTheSignatureOfItsSpec(t *testing.T) {
	_, priv, _ := intent.GenerateKey()
	f := fakeagents.New()
	w := &fakeWatch{answers: []string{"block", "healthy"}}
	env := watchEnv(t, f, w)
	s := fakeagents.SeedSpec()
	in := intent.Sign(priv, s)
	changed := s
	changed.Model.ExtraArgs = []string{"--max-model-len", "8192"}
	newer := intent.Sign(priv, changed)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(contract.SignalNodeBooted, contract.NodeBoot{Node: "node-b", BootID: "boot-2"})
	}, 0)
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: s, Intent: in, MaxLoops: 2})
	next := handedOn(t, env)
	if inc := next.State.Incidents; len(inc) != 1 || inc[0].Outcome != OutcomeServing {
		t.Fatalf("incidents %+v", inc)
	}
	carriesIntent(t, f, in, "StartRayHead node-a", "LaunchVLLM node-a")
	if !intent.Same(next.Intent, in) {
		t.Errorf("continue-as-new carried %v, want the spec's intent", next.Intent)
	}

	sv := newSupervisor(SuperviseRequest{Spec: s, Intent: in})
	sv.deployed(nil, Deployed{Spec: changed, Intent: newer})
	if sv.spec.Hash() != changed.Hash() || !intent.Same(sv.intent, newer) {
		t.Errorf("after a new spec served: spec %s intent %v", sv.spec.Hash(), sv.intent)
	}
}
