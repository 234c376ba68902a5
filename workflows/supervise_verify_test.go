package workflows

import (
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// A deployed signal anyone in the namespace can send (a compromised node's agent holds the
// credentials) neither changes the spec a signed supervisor puts back nor re-arms its
// breaker, unless the operator's key it was started with signed that very spec (#36 item
// 9a). One signed by that key is adopted.
func TestSupervisorAdoptsOnlyADeployedSignalItsOperatorSigned(t *testing.T) {
	_, priv, _ := intent.GenerateKey()
	_, other, _ := intent.GenerateKey()
	s := fakeagents.SeedSpec()
	in := intent.Sign(priv, s)
	forged := s
	forged.Image = "tpdeploy/evil:latest"
	env := watchEnv(t, fakeagents.New(), &fakeWatch{answers: []string{"block"}})
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(contract.SignalDeployed, Deployed{Spec: forged})
		env.SignalWorkflow(contract.SignalDeployed, Deployed{Spec: forged, Intent: intent.Sign(other, forged)})
		env.SignalWorkflow(contract.SignalDeployed, Deployed{Spec: forged, Intent: in})
	}, time.Minute)
	state := Supervision{Cluster: s.Name, BootIDs: map[string]string{"node-a": "a", "node-b": "b"},
		Degraded: true, LastCause: "redeploy failed", NextCooldown: spec.Duration(4 * time.Hour)}
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: s, Intent: in, MaxLoops: 3, State: &state})
	next := handedOn(t, env)
	if next.Spec.Hash() != s.WithDefaults().Hash() || !intent.Same(next.Intent, in) {
		t.Errorf("a forged signal changed what the supervisor puts back: image %s, intent the same: %v", next.Spec.Image, intent.Same(next.Intent, in))
	}
	if !next.State.Degraded {
		t.Errorf("a forged signal re-armed the breaker")
	}

	changed := s
	changed.Model.ExtraArgs = []string{"--max-model-len", "8192"}
	newer := intent.Sign(priv, changed)
	sv := newSupervisor(SuperviseRequest{Spec: s, Intent: in})
	sv.deployed(nil, Deployed{Spec: changed, Intent: newer})
	if sv.spec.Hash() != changed.WithDefaults().Hash() || !intent.Same(sv.intent, newer) {
		t.Errorf("the operator's own signal was not adopted: spec %s", sv.spec.Hash())
	}
}
