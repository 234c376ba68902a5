//go:build integration

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/lab"
)

// TestSpecTooLargeForANodeIsRefusedAtPreflight: on a lab whose node containers are
// limited to 512 MiB (a memory cgroup, so the agents' facts are the kernel's), `starter
// plan` shows each node's budget as not fitting, and a deploy is refused
// HostMemoryInsufficient at preflight, naming the node, what it needs and what it has,
// in seconds, with no container left.
func TestSpecTooLargeForANodeIsRefusedAtPreflight(t *testing.T) {
	ctx := context.Background()
	root, _ := images.ModuleRoot()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	prefix := "tpd-e2e-mem-" + hex.EncodeToString(b)
	l, err := lab.Up(ctx, eng, filepath.Join(root, "bin", "temporal"), lab.Config{Prefix: prefix, NodeMemory: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		if err := lab.Down(context.Background(), eng, prefix); err != nil {
			t.Logf("lab down: %v", err)
		}
	})
	starterAt := func(args ...string) (string, int) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, starter, args...)
		cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+l.Temporal, "TPDEPLOY_SIGN_KEY_FILE="+l.SignKeyFile)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("starter %v: %v\n%s", args, err, out)
		}
		return string(out), 0
	}
	file := writeSpec(t, labSpec(t, "e2e-mem"))

	out, _ := starterAt("plan", "-f", file)
	t.Logf("plan:\n%s", out)
	for _, want := range []string{"Host memory", "node-a: discrete GPU memory, cgroup", "of 512 MiB; DOES NOT FIT"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q", want)
		}
	}

	start := time.Now()
	out, code := starterAt("deploy", "-f", file, "--watch")
	took := time.Since(start)
	t.Logf("deploy refused after %s (exit %d):\n%s", took.Round(100*time.Millisecond), code, out)
	if code == 0 {
		t.Fatal("a spec too large for 512 MiB nodes deployed")
	}
	for _, want := range []string{"HostMemoryInsufficient", "host memory: needs", "available of 512 MiB", "host reserve 256 MiB", "Fix: "} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal lacks %q", want)
		}
	}
	if !strings.Contains(out, "node-a") && !strings.Contains(out, "node-b") {
		t.Error("refusal names no node")
	}
	if took > 2*time.Minute {
		t.Errorf("refused after %s, not at preflight", took)
	}
	if left := containersOf(t, "e2e-mem"); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}
}
