package activities

import (
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// The start-up reconcile's check of the run it removes on (Agent.VerifyRemoval) is the
// gate's removal check: a key this node trusts, a spec of the cluster; nothing without
// trusted_keys.
func TestVerifyRemovalIsTheGatesRemovalCheck(t *testing.T) {
	pub, operator, _ := intent.GenerateKey()
	_, stranger, _ := intent.GenerateKey()
	pol, err := policy.Parse([]byte("trusted_keys: [{id: ops, ed25519: \""+intent.PublicKeyString(pub)+"\"}]\n"), "/etc/tpdeploy/policy.yaml", policy.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	a := New(Config{Name: "node-a", Policy: &pol})
	c := spec.Cluster{Name: "tpdtest-reconcile", Image: "vllm/vllm-openai:v0.22.1", Model: spec.Model{Path: "Org/model"},
		Parallel: spec.Parallel{Tensor: 1}, Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead}}}.WithDefaults()
	other := c
	other.Name = "tpdtest-other"
	if err := a.VerifyRemoval(intent.Sign(operator, c), c.Name); err != nil {
		t.Fatalf("the operator's teardown: %v", err)
	}
	for what, in := range map[string]*contract.Intent{
		"unsigned":                   nil,
		"signed by a stranger":       intent.Sign(stranger, c),
		"signed for another cluster": intent.Sign(operator, other),
	} {
		gateDenied(t, what, a.VerifyRemoval(in, c.Name), "signed")
	}
	if err := New(Config{Name: "node-a"}).VerifyRemoval(nil, c.Name); err != nil {
		t.Errorf("an agent without trusted_keys: %v", err)
	}
}
