package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

// startServices, set by the files with build tag integration, starts what their tests dial.
var startServices func(dir string) (stop func(), err error)

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tpdeploy-worker-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); (strings.HasPrefix(k, "TEMPORAL_") && k != "TEMPORAL_BIN") || strings.HasPrefix(k, "TPDEPLOY_") {
			os.Unsetenv(k)
		}
	}
	os.Setenv("TEMPORAL_CONFIG_FILE", filepath.Join(dir, "absent.toml"))
	if startServices != nil {
		stop, err := startServices(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			return 1
		}
		defer stop()
	}
	return m.Run()
}

func writePolicy(t *testing.T, yaml string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPolicyFlags checks the agent builds its policy from the file and the --allow-*
// flags, and refuses to start on a bad one before connecting to anything.
func TestPolicyFlags(t *testing.T) {
	unreachable := "127.0.0.1:1" // any dial fails: the policy errors must come first
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"missing file", []string{"--policy-file", filepath.Join(t.TempDir(), "nope.yaml")}, "nope.yaml"},
		{"bad file", []string{"--policy-file", writePolicy(t, "allowed_mounts: [relative]\n")}, `allowed_mounts: "relative" is not an absolute path`},
		{"bad flag", []string{"--policy-file", writePolicy(t, ""), "--allow-ports", "99999"}, `allowed_ports: "99999"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), append([]string{"--node", "n", "--address", unreachable}, tt.args...))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("want an error with %q, got %v", tt.wantErr, err)
			}
		})
	}

	t.Run("flags add to the file", func(t *testing.T) {
		file := writePolicy(t, "allowed_images: ['registry.internal/*:*']\n")
		err := run(context.Background(), []string{"--node", "n", "--address", unreachable, "--policy-file", file,
			"--allow-image", "tpdeploy/sim:*", "--allow-image", "tpdeploy/ray:*,tpdeploy/other:*",
			"--allow-mount", "/srv/hf", "--allow-docker-host", "tcp://127.0.0.1:2376", "--allow-ports", "80"})
		if err == nil || !strings.Contains(err.Error(), "connect to temporal at "+unreachable) {
			t.Fatalf("want the dial to fail after the policy was built, got %v", err)
		}
		p := nodePolicy
		for _, check := range []error{
			p.CheckImage("registry.internal/vllm:v1"), p.CheckImage("tpdeploy/sim:dev"), p.CheckImage("tpdeploy/other:x"),
			p.CheckMount("/srv/hf/hub"), p.CheckMount("/models/x"),
			p.CheckDockerHost("tcp://127.0.0.1:2376"), p.CheckDockerHost(""), p.CheckPorts(80, 8000),
		} {
			if check != nil {
				t.Errorf("refused: %v", check)
			}
		}
		if err := p.CheckImage("vllm/vllm-openai:v1"); err == nil || !strings.Contains(err.Error(), file) {
			t.Errorf("the file replaced the default images; want a refusal naming %s, got %v", file, err)
		}
	})

	t.Run("the default path", func(t *testing.T) {
		want, err := policy.Load(policy.DefaultFile, policy.Overrides{}) // the defaults when absent
		if err != nil {
			t.Fatal(err)
		}
		err = run(context.Background(), []string{"--node", "n", "--address", unreachable})
		if err == nil || !strings.Contains(err.Error(), "connect to temporal") {
			t.Fatalf("want the dial to fail after the policy was built, got %v", err)
		}
		if nodePolicy.File != policy.DefaultFile || strings.Join(nodePolicy.Images, ",") != strings.Join(want.Images, ",") {
			t.Errorf("policy %+v, want %+v", nodePolicy, want)
		}
	})
}

func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// Issue #36, item 7: the host's IPC namespace would share /dev/shm with every cluster's
// containers on the node; the agent refuses to start with it.
func TestContainerOptionsRefuseTheHostsIPC(t *testing.T) {
	for _, ipc := range []string{"host", "container:other"} {
		if _, err := containerOptions("host", ipc, "all", "10g", ""); err == nil || !strings.Contains(err.Error(), "--ipc "+ipc) {
			t.Errorf("--ipc %s: %v; want a refusal naming the flag", ipc, err)
		}
	}
	o, err := containerOptions("host", "", "all", "10g", "")
	if err != nil || o.IPC != "private" || o.ShmSize != 10<<30 {
		t.Errorf("default: %+v, %v; want private IPC with a 10 GiB /dev/shm", o, err)
	}
}

// Issue #36, item 10: an agent without trusted_keys acts on unsigned requests from anyone
// who can start a workflow in the namespace; it says so at start, loudly, on stderr
// whatever the log level, and says nothing of the kind with a trusted key.
func TestAgentWarnsLoudlyWhenItRunsUnsigned(t *testing.T) {
	pub, _, err := intent.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, policy string
		loud         bool
	}{
		{"no trusted_keys", "allowed_mounts: [/models]\n", true},
		{"a trusted key", "trusted_keys: [{id: ops, ed25519: \"" + intent.PublicKeyString(pub) + "\"}]\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			old := stderr
			stderr = &buf
			t.Cleanup(func() { stderr = old })
			// An every-interface metrics address ends the start right after the policy.
			err := run(context.Background(), []string{"--node", "node-a", "--policy-file", writePolicy(t, tc.policy), "--log-level", "error", "--metrics-addr", "0.0.0.0:9464"})
			if err == nil {
				t.Fatal("started")
			}
			out := buf.String()
			if got := strings.Contains(out, "UNSIGNED"); got != tc.loud {
				t.Errorf("banner %v, want %v:\n%s", got, tc.loud, out)
			}
			if tc.loud {
				for _, w := range []string{"trusted_keys", "starter keygen", "--trust-key", "docs/security.md"} {
					if !strings.Contains(out, w) {
						t.Errorf("the warning does not say %q:\n%s", w, out)
					}
				}
			}
		})
	}
}
