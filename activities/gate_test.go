package activities

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// gateDenied says err is the gate's refusal: non-retryable PolicyDenied naming node-a and
// saying want.
func gateDenied(t *testing.T, what string, err error, want string) {
	t.Helper()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != contract.ErrPolicyDenied || !app.NonRetryable() ||
		!strings.HasPrefix(app.Message(), "node-a: ") || !strings.Contains(app.Message(), want) {
		t.Errorf("%s: %v; want non-retryable %s, node-a: ...%s", what, err, contract.ErrPolicyDenied, want)
	}
}

// What the gate asks of a signature, without Docker: the key trusted, the times current for
// what starts something and not for a removal, the request's spec, deployment and cluster
// the signed ones.
func TestGateVerifiesTheSignature(t *testing.T) {
	pub, operator, _ := intent.GenerateKey()
	_, stranger, _ := intent.GenerateKey()
	notBefore := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	pol, err := policy.Parse([]byte("trusted_keys: [{id: ops, ed25519: \""+intent.PublicKeyString(pub)+"\"}]\nintents_not_before: "+notBefore.Format(time.RFC3339)+"\n"),
		"/etc/tpdeploy/policy.yaml", policy.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	g := New(Config{Name: "node-a", Policy: &pol}).base
	c := spec.Cluster{Name: "tpdtest-gate", Image: "vllm/vllm-openai:v0.22.1", Model: spec.Model{Path: "Org/model"},
		Parallel: spec.Parallel{Tensor: 1}, Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead}}}.WithDefaults()
	d := contract.Deployment{Cluster: c.Name, ID: "x", SpecHash: c.Hash()}
	start := func(in *contract.Intent) contract.StartRayRequest {
		return contract.StartRayRequest{Node: "node-a", Deployment: d, Spec: c, Intent: in}
	}
	removal := func(in *contract.Intent) contract.RemoveRequest {
		return contract.RemoveRequest{Node: "node-a", Cluster: c.Name, Intent: in}
	}
	admit := func(req any) error {
		_, err := g.admit("Test", []any{req})
		return err
	}

	signed := intent.Sign(operator, c)
	if got, err := g.admit("Test", []any{start(signed)}); err != nil || got == nil || got.Hash() != c.Hash() {
		t.Fatalf("the operator's own request: %v, %v; want the signed spec", got, err)
	}
	expired := intent.SignWith(operator, c, intent.Options{Now: time.Now().Add(-50 * time.Minute), ValidFor: 10 * time.Minute})
	gateDenied(t, "an expired signature starting something", admit(start(expired)),
		"signed intent: the signature expired at "+expired.NotAfter.Format(time.RFC3339))
	gateDenied(t, "an expired signature starting something", admit(start(expired)), "--sign-valid-for")
	revoked := intent.SignWith(operator, c, intent.Options{Now: notBefore.Add(-time.Hour)})
	gateDenied(t, "a revoked signature starting something", admit(start(revoked)),
		"intents_not_before is "+notBefore.Format(time.RFC3339)+" (/etc/tpdeploy/policy.yaml, --intents-not-before)")
	for name, in := range map[string]*contract.Intent{"expired": expired, "revoked": revoked} {
		if err := admit(removal(in)); err != nil {
			t.Errorf("a removal with a %s signature: %v; want it done", name, err)
		}
		if err := admit(contract.RemovePartialModelRequest{Node: "node-a", Root: "/models/x", Intent: in}); err != nil {
			t.Errorf("a partial-file removal with a %s signature: %v; want it done", name, err)
		}
	}

	gateDenied(t, "unsigned", admit(start(nil)), "the request is unsigned, and this node acts only on specs signed by a key it trusts (trusted_keys: ops")
	gateDenied(t, "a removal unsigned", admit(removal(nil)), "the request is unsigned")
	gateDenied(t, "another key", admit(start(intent.Sign(stranger, c))), "a key this node does not trust")
	gateDenied(t, "a removal by another key", admit(removal(intent.Sign(stranger, c))), "a key this node does not trust")

	other := c
	other.Image = "vllm/vllm-openai:v0.99.0"
	req := start(signed)
	req.Spec = other
	gateDenied(t, "another spec", admit(req), "signed intent: the request's spec is not the signed one (image differ)")
	req = start(signed)
	req.Deployment.SpecHash = other.Hash()
	gateDenied(t, "another deployment", admit(req), "signed intent: the deployment is of cluster "+c.Name+" spec "+other.Hash())
	rm := removal(signed)
	rm.Cluster = "tpdtest-theirs"
	gateDenied(t, "a removal of another cluster", admit(rm), "signed intent: a removal of cluster tpdtest-theirs with the signed spec of cluster "+c.Name)
	proof := contract.ProofRequest{Node: "node-a", Fresh: &contract.RankRequest{Node: "node-a", Deployment: d, Spec: other, Intent: signed}}
	gateDenied(t, "a proof's own container of another spec", admit(proof), "signed intent: the request's spec is not the signed one")

	if _, err := g.signedSpec(context.Background()); err == nil {
		t.Error("an activity run without the gate found a verified spec on a node with trusted_keys")
	}
}

// A nil policy is the default policy: no trusted_keys, so no signature is asked, and the
// rest of the defaults bound the request (an image of the stock vLLM's only).
func TestNilPolicyIsTheDefault(t *testing.T) {
	a := New(Config{Name: "node-a"})
	if a.base.policy == nil || strings.Join(a.base.policy.Images, ",") != strings.Join(policy.DefaultImages, ",") {
		t.Fatalf("the policy of an agent given none: %+v; want policy.Default()", a.base.policy)
	}
	if c, err := a.base.admit(contract.ActivityStartRayHead, []any{contract.StartRayRequest{Node: "node-a"}}); c != nil || err != nil {
		t.Errorf("an unsigned request without trusted_keys: %v, %v; want it through", c, err)
	}
	if c, err := a.base.signedSpec(context.Background()); c != nil || err != nil {
		t.Errorf("the signed spec without trusted_keys: %v, %v; want none", c, err)
	}
	err := a.base.allowed(func(p policy.Policy) error { return p.CheckImage("tpdeploy/sim:vllm-0.22.1-ray") })
	gateDenied(t, "an image the defaults do not allow", err, `image "tpdeploy/sim:vllm-0.22.1-ray" is not allowed by this node's policy`)
}
