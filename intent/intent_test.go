package intent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/spec"
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
