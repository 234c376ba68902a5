package activities

import (
	"archive/tar"
	"bytes"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/dataplane"
	"github.com/tpdeploy/tpdeploy/internal/logscan"
	"github.com/tpdeploy/tpdeploy/internal/release"
)

// The watch acts only on what the running release's code can print: vLLM's duplicate-IP
// check exists in the legacy Ray executor alone, and V2 pins no node, so its pending
// group's fix must not send the operator after VLLM_HOST_IP.
func TestTheWatchFollowsTheRelease(t *testing.T) {
	dup := "RuntimeError: Every node should have a unique IP address. Got 2 nodes with node ids ['a', 'b'] and 1 unique IP addresses {'192.168.0.110'}. Please check your network configuration. If you set `VLLM_HOST_IP` environment variable, make sure it is unique for each node."
	pending := "WARNING 05-09 05:39:26 [ray_utils.py:300] Waiting for creating a placement group of specs for 10 seconds. specs=[{'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status` and `ray list nodes` to see if you have enough resources, and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node."
	decide := func(vllm string, env map[string]string) *release.Model {
		m, err := release.Decide(release.Layout{Executor: "ray", Head: "node-a", HeadEnv: env, World: 2, Nodes: 2},
			release.Image{Node: "node-a", VLLM: vllm, Ray: "2.55.0", RayBin: true})
		if err != nil {
			t.Fatal(err)
		}
		return &m
	}
	legacy, v2 := decide("0.17.1", nil), decide("0.22.1", nil)
	watchFor := func(m *release.Model) *watch {
		return &watch{v: New(Config{Name: "node-a"}).VLLM, req: contract.WatchRequest{Engine: m}}
	}

	if f := watchFor(legacy).forRelease(logscan.Classify(logscan.Line{Text: dup})); f == nil || f.Type != contract.ErrDuplicateAddress {
		t.Fatalf("legacy executor: duplicate-IP line gave %+v", f)
	}
	if f := watchFor(v2).forRelease(logscan.Classify(logscan.Line{Text: dup})); f != nil {
		t.Fatalf("V2 has no duplicate-IP check, yet the watch acted on %+v", f)
	}
	if f := watchFor(nil).forRelease(logscan.Classify(logscan.Line{Text: dup})); f == nil {
		t.Fatal("without a release model every finding stands")
	}
	f := watchFor(v2).forRelease(logscan.Classify(logscan.Line{Text: pending}))
	if f == nil || f.Type != contract.ErrPlacementPending || strings.Contains(f.Fix, "VLLM_HOST_IP") {
		t.Fatalf("V2 pending group: %+v", f)
	}
	if f := watchFor(decide("0.22.1", map[string]string{release.EnvRayV2: "0"})).forRelease(logscan.Classify(logscan.Line{Text: dup})); f == nil {
		t.Fatal("0.22.1 with VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0 runs the legacy executor, which has the check")
	}
}

// The watch warns when vLLM's own NCCL lines name another transport than the proof found.
func TestTheWatchHoldsVLLMsNCCLAgainstTheProof(t *testing.T) {
	w := &watch{v: New(Config{Name: "node-a"}).VLLM, req: contract.WatchRequest{Node: "node-a", DataPlane: &dataplane.Verdict{Transport: "IB", Rails: 2}}}
	for _, l := range []string{
		"(RayWorkerProc pid=2158, ip=10.200.1.13) vm:2158:2158 [0] NCCL INFO Using network Socket",
		"(RayWorkerProc pid=2158, ip=10.200.1.13) vm:2158:2158 [0] NCCL INFO Using network Socket",
		"vm:667:667 [0] NCCL INFO Using network IB",
	} {
		if err := w.line(l); err != nil {
			t.Fatal(err)
		}
	}
	if len(w.p.Warnings) != 1 || !strings.Contains(w.p.Warnings[0], "on 10.200.1.13 uses network Socket, but the data-plane proof found IB") {
		t.Fatalf("warnings %q", w.p.Warnings)
	}
}

// An archive for a file under /tmp creates the directories below /tmp and never an entry
// for /tmp itself, whose mode (1777) is the image's.
func TestFileArchiveLeavesTheTopDirectoryAlone(t *testing.T) {
	b, err := fileArchive("/tmp/tpdeploy/vllm-config/x.json", []byte("[]"))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, " ") != "tmp/tpdeploy/ tmp/tpdeploy/vllm-config/ tmp/tpdeploy/vllm-config/x.json" {
		t.Fatalf("entries %q", names)
	}
}
