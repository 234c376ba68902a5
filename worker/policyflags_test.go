package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/intent"
)

// --require-pinned-images and --intents-not-before (and their variables) reach the policy
// the agent enforces; a bad value is refused before anything is dialled.
func TestPinAndRevocationFlags(t *testing.T) {
	unreachable := "127.0.0.1:1"
	pub, _, _ := intent.GenerateKey()
	err := run(context.Background(), []string{"--node", "n", "--address", unreachable, "--policy-file", writePolicy(t, ""),
		"--require-pinned-images", "--trust-key", "ops=" + intent.PublicKeyString(pub), "--intents-not-before", "2026-05-01T00:00:00Z"})
	if err == nil || !strings.Contains(err.Error(), "connect to temporal at "+unreachable) {
		t.Fatalf("want the dial to fail after the policy was built, got %v", err)
	}
	if !nodePolicy.RequirePinned || !nodePolicy.NotBefore.Equal(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("policy: require pinned %v, not before %s", nodePolicy.RequirePinned, nodePolicy.NotBefore)
	}
	if err := nodePolicy.CheckImage("vllm/vllm-openai:v0.22.1"); err == nil || !strings.Contains(err.Error(), "require_pinned_images") {
		t.Errorf("an image by tag: %v", err)
	}
	t.Setenv("TPDEPLOY_REQUIRE_PINNED_IMAGES", "true")
	_ = run(context.Background(), []string{"--node", "n", "--address", unreachable, "--policy-file", writePolicy(t, "")})
	if !nodePolicy.RequirePinned {
		t.Error("TPDEPLOY_REQUIRE_PINNED_IMAGES=true did not require pinned images")
	}
	t.Setenv("TPDEPLOY_REQUIRE_PINNED_IMAGES", "yes please")
	if err := run(context.Background(), []string{"--node", "n", "--address", unreachable}); err == nil || !strings.Contains(err.Error(), "TPDEPLOY_REQUIRE_PINNED_IMAGES") {
		t.Errorf("a bad TPDEPLOY_REQUIRE_PINNED_IMAGES: %v", err)
	}
	t.Setenv("TPDEPLOY_REQUIRE_PINNED_IMAGES", "")
	err = run(context.Background(), []string{"--node", "n", "--address", unreachable, "--policy-file", writePolicy(t, ""),
		"--trust-key", "ops=" + intent.PublicKeyString(pub), "--intents-not-before", "May 1st"})
	if err == nil || !strings.Contains(err.Error(), `--intents-not-before: "May 1st" is not an RFC 3339 time`) {
		t.Errorf("a bad --intents-not-before: %v", err)
	}
}
