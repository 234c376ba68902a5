package intent

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

func testSpec() spec.Cluster {
	return spec.Cluster{Name: "c", Image: "vllm/vllm-openai:v0.22.1", Model: spec.Model{Path: "Org/M", ExtraArgs: []string{"--max-model-len", "4096"}},
		Parallel: spec.Parallel{Tensor: 2},
		Nodes:    []spec.Node{{Name: "a", Role: spec.RoleHead, Env: map[string]string{"NCCL_DEBUG": "WARN", "A_B": "1"}}, {Name: "b", Role: spec.RoleWorker}},
		Secrets:  spec.Secrets{HFToken: &spec.SecretRef{Env: "HF_TOKEN"}}}
}

// A signature survives the trip through Temporal (JSON of the request, decoded by the agent)
// and verifies only with its own key, over its own spec.
func TestSignVerify(t *testing.T) {
	pub, priv, _ := GenerateKey()
	other, _, _ := GenerateKey()
	s := testSpec()
	in := Sign(priv, s)
	b, _ := json.Marshal(contract.RankRequest{Spec: s.WithDefaults(), Intent: in})
	var got contract.RankRequest
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	signed, err := Verify(got.Intent, pub)
	if err != nil {
		t.Fatal(err)
	}
	if signed.Hash() != s.Hash() {
		t.Fatalf("signed spec %s, want %s", signed.Hash(), s.Hash())
	}
	if err := Matches(signed, got.Spec); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(got.Intent, other); err == nil || !strings.Contains(err.Error(), "signed by "+in.KeyID) {
		t.Errorf("another key: %v", err)
	}
	tampered := *got.Intent
	tampered.Spec = []byte(strings.Replace(string(tampered.Spec), "vllm/vllm-openai:v0.22.1", "evil/vllm-openai:v0.22.1", 1))
	if _, err := Verify(&tampered, pub); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("a changed spec: %v", err)
	}
	forged := *got.Intent
	forged.Sig = append([]byte(nil), forged.Sig...)
	forged.Sig[0] ^= 1
	if _, err := Verify(&forged, pub); err == nil {
		t.Error("a changed signature verified")
	}
	if _, err := Verify(nil, pub); err == nil {
		t.Error("no intent verified")
	}
}

// The request's spec must be the signed one, field for field; only executor auto may have
// become the executor the images decided.
func TestMatches(t *testing.T) {
	s := testSpec()
	decided := s.WithDefaults()
	decided.Executor = spec.ExecutorMP
	if err := Matches(s, decided); err != nil {
		t.Errorf("auto decided as mp: %v", err)
	}
	pinned := s
	pinned.Executor = spec.ExecutorRay
	if err := Matches(pinned, decided); err == nil || !strings.Contains(err.Error(), "executor") {
		t.Errorf("ray signed, mp sent: %v", err)
	}
	for name, change := range map[string]func(*spec.Cluster){
		"image":    func(c *spec.Cluster) { c.Image = "evil/x:1" },
		"env":      func(c *spec.Cluster) { c.Nodes[0].Env = map[string]string{"NCCL_DEBUG": "INFO"} },
		"model":    func(c *spec.Cluster) { c.Model.ExtraArgs = []string{"--trust-remote-code"} },
		"hf_cache": func(c *spec.Cluster) { c.HFCache = "/" },
		"secrets":  func(c *spec.Cluster) { c.Secrets.APIKey = &spec.SecretRef{Env: "HF_TOKEN"} },
		"ports":    func(c *spec.Cluster) { c.Ports.VLLM = 22 },
	} {
		sent := s.WithDefaults()
		sent.Nodes = append([]spec.Node(nil), sent.Nodes...)
		change(&sent)
		if err := Matches(s, sent); err == nil || !strings.Contains(err.Error(), "not the signed one") {
			t.Errorf("%s changed: %v", name, err)
		}
	}
}

func TestKeyFiles(t *testing.T) {
	pub, priv, _ := GenerateKey()
	b, err := MarshalPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParsePrivateKey(b)
	if err != nil || !got.Equal(priv) {
		t.Fatalf("parse: %v", err)
	}
	p, err := ParsePublicKey(PublicKeyString(pub))
	if err != nil || !p.Equal(pub) {
		t.Fatalf("public: %v", err)
	}
	if _, err := ParsePublicKey("c2hvcnQ="); err == nil {
		t.Error("a short key parsed")
	}
	if _, err := ParsePrivateKey([]byte("not pem")); err == nil {
		t.Error("garbage parsed")
	}
	if !strings.HasPrefix(KeyID(pub), "ed25519:") || len(KeyID(pub)) != len("ed25519:")+16 {
		t.Errorf("key ID %q", KeyID(pub))
	}
}

// The signing time and the expiry are signed: neither can be moved without breaking the
// signature, an expired signature and one signed before a node's intents_not_before are
// refused, and an intent of the first format (no time) still verifies but is refused by a
// node that revokes by time.
func TestSignedTimes(t *testing.T) {
	pub, priv, _ := GenerateKey()
	s := testSpec()
	now := time.Date(2026, 5, 1, 12, 0, 0, 500, time.UTC)
	in := SignWith(priv, s, Options{ValidFor: time.Hour, Now: now})
	if !in.SignedAt.Equal(now.Truncate(time.Second)) || !in.NotAfter.Equal(in.SignedAt.Add(time.Hour)) {
		t.Fatalf("signed at %s, not after %s", in.SignedAt, in.NotAfter)
	}
	b, _ := json.Marshal(in)
	var got contract.Intent
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(&got, pub); err != nil {
		t.Fatalf("through JSON: %v", err)
	}
	if err := Current(&got, now.Add(59*time.Minute), time.Time{}); err != nil {
		t.Errorf("within its hour: %v", err)
	}
	var te *TimeError
	if err := Current(&got, now.Add(61*time.Minute), time.Time{}); !errors.As(err, &te) || !te.Expired || !strings.Contains(err.Error(), "expired at 2026-05-01T13:00:00Z") {
		t.Errorf("an hour and a minute later: %v", err)
	}
	for name, change := range map[string]func(*contract.Intent){
		"expiry moved later":       func(x *contract.Intent) { x.NotAfter = x.NotAfter.Add(24 * time.Hour) },
		"expiry removed":           func(x *contract.Intent) { x.NotAfter = time.Time{} },
		"signing time moved later": func(x *contract.Intent) { x.SignedAt = x.SignedAt.Add(24 * time.Hour) },
		"both times removed":       func(x *contract.Intent) { x.SignedAt, x.NotAfter = time.Time{}, time.Time{} },
		"a fraction of a second":   func(x *contract.Intent) { x.NotAfter = x.NotAfter.Add(time.Millisecond) },
	} {
		x := got
		change(&x)
		if _, err := Verify(&x, pub); err == nil {
			t.Errorf("%s: the signature still verifies", name)
		}
	}
	// A node that revokes everything signed before a time.
	if err := Current(&got, now, now.Add(-time.Minute)); err != nil {
		t.Errorf("signed after intents_not_before: %v", err)
	}
	if err := Current(&got, now, now.Add(time.Minute)); !errors.As(err, &te) || te.Expired || !strings.Contains(err.Error(), "signed at 2026-05-01T12:00:00Z, before 2026-05-01T12:01:00Z") {
		t.Errorf("signed before intents_not_before: %v", err)
	}
	// Signed in the future: with a node clock beyond the skew allowance behind the signing
	// time, the intent would survive any intents_not_before raised until then.
	if err := Current(&got, now.Add(-MaxClockSkew+time.Second), now.Add(-time.Hour)); err != nil {
		t.Errorf("signed within the clock-skew allowance ahead of the node: %v", err)
	}
	for _, nb := range []time.Time{{}, now.Add(-time.Hour)} {
		if err := Current(&got, now.Add(-MaxClockSkew-time.Minute), nb); !errors.As(err, &te) || te.Expired || !te.Future ||
			!strings.Contains(err.Error(), "signed at 2026-05-01T12:00:00Z, in the future") {
			t.Errorf("signed %s ahead of the node's clock (intents_not_before %s): %v", MaxClockSkew+time.Minute, nb, err)
		}
	}
	// The first format: the spec alone, no time.
	v1 := &contract.Intent{Spec: s.Canonical(), KeyID: KeyID(pub)}
	v1.Sig = ed25519.Sign(priv, append([]byte("tpdeploy intent v1\n"), v1.Spec...))
	if _, err := Verify(v1, pub); err != nil {
		t.Fatalf("a first-format intent: %v", err)
	}
	if err := Current(v1, now, time.Time{}); err != nil {
		t.Errorf("a first-format intent without intents_not_before: %v", err)
	}
	if err := Current(v1, now, now.Add(-time.Hour)); err == nil || !strings.Contains(err.Error(), "no signing time") {
		t.Errorf("a first-format intent with intents_not_before: %v", err)
	}
	// A signature without expiry never expires.
	forever := Sign(priv, s)
	if forever.SignedAt.IsZero() || !forever.NotAfter.IsZero() {
		t.Fatalf("Sign: signed at %s, not after %s", forever.SignedAt, forever.NotAfter)
	}
	if err := Current(forever, time.Now().Add(100*365*24*time.Hour), time.Time{}); err != nil {
		t.Errorf("a signature without expiry, a century on: %v", err)
	}
}
