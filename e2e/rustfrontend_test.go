//go:build integration

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/lab"
)

// The newest release with VLLM_USE_RUST_FRONTEND=1, executor auto (mp on its stock
// image): vLLM's Python side launches the bundled vllm-rs, whose "(RustFrontend pid=N) …
// starting OpenAI server" line is the only ready line (no "Starting vLLM server on", no
// uvicorn), and the deploy follows it to serving; the server is the vllm-rs process.
func TestNewestReleaseServesWithTheRustFrontEnd(t *testing.T) {
	rel, ok := lab.ReleaseNamed("vllm-0.32.0")
	if !ok || !rel.RustFrontend {
		t.Fatal("no modelled vllm-0.32.0 with the Rust front end")
	}
	s := labSpec(t, "e2e-rustfe")
	s.Image = rel.Image()
	s.Executor = "" // auto
	for i := range s.Nodes {
		if s.Nodes[i].Env == nil {
			s.Nodes[i].Env = map[string]string{}
		}
		s.Nodes[i].Env["VLLM_USE_RUST_FRONTEND"] = "1"
	}
	start := time.Now()
	out, code := runStarter(t, "deploy", "-f", writeSpec(t, s), "--watch")
	defer teardown(t, s.Name)
	if code != 0 {
		t.Fatalf("deploy exit %d:\n%s", code, out)
	}
	served := time.Since(start)
	if err := endpointServes(t, s); err != nil {
		t.Fatal(err)
	}
	head := contract.ContainerName(s.Name, "node-a", contract.RoleVLLM)
	log, err := execOut(head, "cat", "/tmp/tpdeploy/vllm/log")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[utils.py:392] Launching Rust frontend: " + lab.SitePackages + "/vllm/vllm-rs frontend --listen-fd ",
		"(RustFrontend pid=", "starting OpenAI server bind_address="} {
		if !strings.Contains(log, want) {
			t.Errorf("head's vLLM log lacks %q:\n%s", want, log)
		}
	}
	for _, absent := range []string{"Starting vLLM server on", "Application startup complete."} {
		if strings.Contains(log, absent) {
			t.Errorf("the Rust front end's log shows the Python front end's %q", absent)
		}
	}
	if pid, _, _ := findProcess(t, s.Name, "node-a", lab.SitePackages+"/vllm/vllm-rs"); pid == 0 {
		t.Errorf("no vllm-rs process on node-a")
	}
	t.Logf("served with the Rust front end %.1fs after the deploy began", served.Seconds())
}

// An image whose own ENV sets vLLM's per-GPU NIC selection (no spec names it): the
// image read sees it, and the deploy is refused at plan naming the node, the image and
// why, before any container starts.
func TestImageWithNICSelectionInItsEnvIsRefused(t *testing.T) {
	s := labSpec(t, "e2e-nicmap")
	s.Image = lab.NICSelectionRelease.Image()
	f, took := failure(t, deployFor(t, s))
	if f.Type != contract.ErrImageNICSelection {
		t.Fatalf("failure %s: %s", f.Type, f.Message)
	}
	for _, w := range []string{"node-a: image " + s.Image + " sets VLLM_GPU_NIC_PCIE_MAPPING and VLLM_NIC_SELECTION_VARS in its ENV", "NCCL_IB_HCA", "Fix:"} {
		if !strings.Contains(f.Message, w) {
			t.Errorf("message lacks %q: %s", w, f.Message)
		}
	}
	if left := containersOf(t, s.Name); len(left) != 0 {
		t.Errorf("containers left: %v", left)
	}
	t.Logf("%s after %.1fs", f.Type, took.Seconds())
}
