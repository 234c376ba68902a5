package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// `starter sign --sign-valid-for` signs an expiry into the intent: the Start Workflow input
// it prints verifies with the key's public half, not_after is the signing time plus the
// duration, and a bad duration is a usage error naming the flag or the variable.
func TestSignWithAnExpiry(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "operator.key")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"keygen", "-o", key}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	priv, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	k, err := intent.ParsePrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	specFile := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(specFile, []byte("name: lab\nimage: vllm/vllm-openai:v0.22.1\nmodel: {path: /models/m}\nparallel: {tensor: 2}\nnodes: [{name: a, role: head, gpus: 1}, {name: b, role: worker, gpus: 1}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want time.Duration // 0: no expiry
	}{
		{[]string{"--sign-valid-for", "2h"}, 2 * time.Hour},
		{nil, 0},
	} {
		out.Reset()
		errOut.Reset()
		before := time.Now().Truncate(time.Second)
		if err := run(context.Background(), append([]string{"sign", "-f", specFile, "--sign-key-file", key}, tc.args...), &out, &errOut); err != nil {
			t.Fatal(err)
		}
		var req workflows.DeployRequest
		if err := json.Unmarshal(out.Bytes(), &req); err != nil {
			t.Fatalf("%s: %v", out.String(), err)
		}
		if _, err := intent.Verify(req.Intent, k.Public().(ed25519.PublicKey)); err != nil {
			t.Fatal(err)
		}
		in := req.Intent
		if in.SignedAt.Before(before) || in.SignedAt.After(time.Now()) {
			t.Errorf("signed at %s, not now", in.SignedAt)
		}
		switch {
		case tc.want == 0 && !in.NotAfter.IsZero():
			t.Errorf("%v: expires at %s, want never", tc.args, in.NotAfter)
		case tc.want != 0 && in.NotAfter.Sub(in.SignedAt) != tc.want:
			t.Errorf("%v: not after %s, signed at %s: want %s apart", tc.args, in.NotAfter, in.SignedAt, tc.want)
		case tc.want != 0 && !strings.Contains(errOut.String(), "expires at "+in.NotAfter.Format(time.RFC3339)):
			t.Errorf("sign did not say when it expires: %q", errOut.String())
		}
	}
	for _, bad := range [][]string{{"--sign-valid-for", "-1h"}, {"--sign-valid-for", "a week"}} {
		err := run(context.Background(), append([]string{"sign", "-f", specFile, "--sign-key-file", key}, bad...), &out, &errOut)
		if !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", bad, err)
		}
	}
	t.Setenv("TPDEPLOY_SIGN_VALID_FOR", "soon")
	errOut.Reset()
	err = run(context.Background(), []string{"sign", "-f", specFile, "--sign-key-file", key}, &out, &errOut)
	if !errors.Is(err, errUsage) || !strings.Contains(errOut.String(), "TPDEPLOY_SIGN_VALID_FOR") {
		t.Errorf("a bad TPDEPLOY_SIGN_VALID_FOR: %v, %q", err, errOut.String())
	}
}
