package workflows

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// An expired signature and the supervisor: its automatic redeploys carry the signature of
// the spec they repeat, so once that has expired every agent refuses them (PolicyDenied at
// preflight, nothing started) and the cluster goes degraded with the expiry as its cause;
// the operator's deploy of the spec signed again hands the supervisor the new signature,
// and the next recovery serves. (The agents' refusal is package intent's check, as
// the agent's gate, activities/gate.go, makes it.)
func TestSupervisorWithAnExpiredSignature(t *testing.T) {
	pub, priv, _ := intent.GenerateKey()
	s := fakeagents.SeedSpec()
	expired := intent.SignWith(priv, s, intent.Options{Now: time.Now().Add(-2 * time.Hour), ValidFor: time.Hour})
	fresh := intent.SignWith(priv, s, intent.Options{ValidFor: 24 * time.Hour})
	f := fakeagents.New()
	f.Refuse = func(method, node string, in *contract.Intent) error {
		if _, err := intent.Verify(in, pub); err != nil {
			return temporal.NewNonRetryableApplicationError(node+": signed intent: "+err.Error(), contract.ErrPolicyDenied, nil)
		}
		if method == "RemoveContainers" || method == "RemovePartialModel" {
			return nil // removal starts nothing: the agents take an expired signature for it
		}
		if err := intent.Current(in, time.Now(), time.Time{}); err != nil {
			return temporal.NewNonRetryableApplicationError(node+": signed intent: "+err.Error(), contract.ErrPolicyDenied, nil)
		}
		return nil
	}
	w := &fakeWatch{answers: []string{"block"}}
	env := watchEnv(t, f, w)
	var degraded Supervision
	var startedBeforeResign []string
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(contract.SignalNodeBooted, contract.NodeBoot{Node: "node-b", BootID: "boot-2"})
	}, 0)
	env.RegisterDelayedCallback(func() {
		degraded = supervision(t, env)
		startedBeforeResign = append(fakeagents.Calls(f, "StartRayHead"), fakeagents.Calls(f, "StartVLLMRank")...)
		// The operator signs the spec again and deploys it; it serves. Then node-b reboots.
		env.SignalWorkflow(contract.SignalDeployed, Deployed{Spec: s.WithDefaults(), Intent: fresh})
		env.SignalWorkflow(contract.SignalNodeBooted, contract.NodeBoot{Node: "node-b", BootID: "boot-3"})
	}, time.Hour)
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: s, Intent: expired, MaxAttempts: 2, MaxLoops: 3, Cooldown: spec.Duration(10 * time.Hour)})
	next := handedOn(t, env)

	if !degraded.Degraded || !strings.Contains(degraded.LastCause, "PolicyDenied") || !strings.Contains(degraded.LastCause, "the signature expired at "+expired.NotAfter.Format(time.RFC3339)) {
		t.Errorf("with the expired signature: degraded %v, cause %q", degraded.Degraded, degraded.LastCause)
	}
	if len(startedBeforeResign) != 0 {
		t.Errorf("containers were started with the expired signature: %q", startedBeforeResign)
	}
	if refused := fakeagents.Calls(f, "PreflightNode"); len(refused) < 2 || !strings.HasSuffix(refused[0], "refused") {
		t.Errorf("preflights = %q, want the expired signature refused at the first", refused)
	}
	if inc := next.State.Incidents; len(inc) != 2 || inc[0].Attempts != 2 || inc[0].Outcome != OutcomeFailed || inc[1].Outcome != OutcomeServing {
		t.Fatalf("incidents = %+v, want the refused recovery (2 attempts), then one that serves", inc)
	}
	if next.State.Degraded || !intent.Same(next.Intent, fresh) {
		t.Errorf("after the new signature: degraded %v, intent carried on %+v", next.State.Degraded, next.Intent)
	}
	for key, list := range fakeagents.Intents(f) {
		if strings.HasPrefix(key, "StartRay") || strings.HasPrefix(key, "LaunchVLLM") {
			for _, in := range list {
				if !intent.Same(in, fresh) {
					t.Errorf("%s carried %v, not the new signature", key, in)
				}
			}
		}
	}
}
