//go:build integration

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/lab"
)

// fabricLab brings up a lab of its own with a switchless topology (lab.TopologyTriangle,
// lab.TopologyRing4), removed when the test ends, and a starter bound to it.
func fabricLab(t *testing.T, prefix, topology string) (*lab.Lab, func(args ...string) (string, int)) {
	t.Helper()
	root, _ := images.ModuleRoot()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	prefix += hex.EncodeToString(b)
	start := time.Now()
	l, err := labUp(context.Background(), filepath.Join(root, "bin", "temporal"), lab.Config{Prefix: prefix, Topology: topology})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s lab up in %s", topology, time.Since(start).Round(100*time.Millisecond))
	t.Cleanup(func() {
		l.Close()
		if err := lab.Down(context.Background(), eng, prefix); err != nil {
			t.Logf("lab down: %v", err)
		}
	})
	return l, func(args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, starter, args...)
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
}

// fabricSpec is examples/FILE under a cluster name of the test's own, on image.
func fabricSpec(t *testing.T, file, name, image string) spec.Cluster {
	t.Helper()
	root, _ := images.ModuleRoot()
	b, err := os.ReadFile(filepath.Join(root, "examples", file))
	if err != nil {
		t.Fatal(err)
	}
	s, err := spec.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	s.Name = name
	if image != "" {
		s.Image = image
	}
	since := time.Now()
	t.Cleanup(func() { finishCluster(t, name, since) })
	return s
}

// deployServes deploys s, checks that status shows the data plane per link, and tears it
// down leaving nothing.
func deployServes(t *testing.T, starterAt func(...string) (string, int), s spec.Cluster, wants ...string) {
	t.Helper()
	start := time.Now()
	if out, code := starterAt("deploy", "-f", writeSpec(t, s), "--watch"); code != 0 {
		t.Fatalf("%s: deploy exit %d:\n%s", s.Name, code, out)
	}
	t.Logf("%s served in %s", s.Name, time.Since(start).Round(time.Second))
	out, _ := starterAt("status", s.Name)
	t.Logf("status:\n%s", out)
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s: status lacks %q:\n%s", s.Name, w, out)
		}
	}
	if out, code := starterAt("teardown", s.Name); code != 0 {
		t.Errorf("teardown %s exit %d:\n%s", s.Name, code, out)
	}
	if left := containersOf(t, s.Name); len(left) > 0 {
		t.Errorf("containers left for %s: %v", s.Name, left)
	}
}

// refusedNamingNCCL deploys s, which the plan must refuse as DataPlaneUnreachable with
// the wants in its message, leaving no container.
func refusedNamingNCCL(t *testing.T, starterAt func(...string) (string, int), s spec.Cluster, wants ...string) {
	t.Helper()
	out, code := starterAt("deploy", "-f", writeSpec(t, s), "--watch")
	if code == 0 {
		t.Fatalf("%s served:\n%s", s.Name, out)
	}
	t.Logf("%s refused:\n%s", s.Name, out)
	for _, want := range append([]string{"DataPlaneUnreachable", "ways out"}, wants...) {
		if !strings.Contains(out, want) {
			t.Errorf("refusal lacks %q:\n%s", want, out)
		}
	}
	if left := containersOf(t, s.Name); len(left) > 0 {
		t.Errorf("containers left for %s: %v", s.Name, left)
	}
}

// TestTriangleServesOverIBWithNCCL230AndRefusesTheStockNCCL: three simulated Sparks
// without a switch, every pair cabled. The stock image's NCCL 2.28.9 connects each channel
// of a one-GPU node to both its neighbours over one NIC (netplan channelNICs; lab/sim
// fabric.go ibLinks), so the deploy is refused naming the version, the nodes' ports and
// the way out, with nothing started. The images with NCCL 2.30.7 (read from their
// libnccl.so.2) serve over IB on the three cables under both executors, in the same lab:
// mp on the stock image, and RayExecutorV2 (executor auto) on the one with Ray added,
// whose random rank order a triangle carries whatever it is. The plan turns on NCCL's
// subnet-aware routing, and each peer connects over the port facing it.
func TestTriangleServesOverIBWithNCCL230AndRefusesTheStockNCCL(t *testing.T) {
	_, starterAt := fabricLab(t, "tpd-e2e-tri-", lab.TopologyTriangle)
	stock, _ := lab.ReleaseNamed("vllm-0.22.1")
	old := fabricSpec(t, "lab-triangle.yaml", "e2e-tri-stock", stock.Image())
	old.DataPlane = "" // the default: require, as the plan has RDMA
	refusedNamingNCCL(t, starterAt, old, "the image's NCCL 2.28.9 connects", "ncclTopoGetNetDev",
		"node-a reaches node-b only over rocep1s0f1:1 and node-c only over rocep1s0f0:1", "an image whose NCCL is 2.30.7 or later")
	t.Run("mp", func(t *testing.T) {
		s := fabricSpec(t, "lab-triangle.yaml", "e2e-tri-ib", lab.NCCL230Release.Image())
		s.DataPlane = ""
		s.Executor = spec.ExecutorMP
		deployServes(t, starterAt, s, "executor mp", "data plane: IB on 3 links (triangle node-a-node-b-node-c)", "nccl 2.30.7")
	})
	t.Run("ray", func(t *testing.T) {
		s := fabricSpec(t, "lab-triangle.yaml", "e2e-tri-ray", lab.NCCL230RayRelease.Image())
		s.DataPlane = ""
		s.Executor = spec.ExecutorAuto
		deployServes(t, starterAt, s, "executor ray", "data plane: IB on 3 links (triangle node-a-node-b-node-c)", "nccl 2.30.7", "ray 2.59.0")
	})
}

// TestRing4ServesOverIBWithNCCL230AndRefusesWhatTheCablesCannotCarry: four simulated
// Sparks in a ring. On the image with NCCL 2.30.7, tensor 4 serves under mp over IB on the
// four cables, NCCL kept to its ring (its tree would cross the uncabled diagonal). With Ray
// added, RayExecutorV2, auto's pick, ranks by a random Ray node ID, which the ring cannot
// carry: refused naming that and the ways out, nothing started. vLLM's legacy Ray executor
// (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0), which ranks by IP as a string
// (sort_by_driver_then_worker_ip), serves, the lab's management addresses following the
// cables; the placement groups' bundles come in the order the nodes joined Ray, which is
// not the cables'. Tensor 3 (over Ray: vLLM's own mode needs the GPUs to
// divide over the nodes) needs three nodes all cabled to each other, which a ring of four
// has nowhere, whatever the NCCL: refused naming the pairs, nothing started on any node.
func TestRing4ServesOverIBWithNCCL230AndRefusesWhatTheCablesCannotCarry(t *testing.T) {
	_, starterAt := fabricLab(t, "tpd-e2e-ring-", lab.TopologyRing4)
	s := fabricSpec(t, "lab-ring4.yaml", "e2e-ring-ib", lab.NCCL230Release.Image())
	s.DataPlane = ""
	s.Executor = spec.ExecutorMP
	deployServes(t, starterAt, s, "executor mp", "data plane: IB on 4 links (ring node-a-node-b-node-c-node-d)")

	v2 := fabricSpec(t, "lab-ring4.yaml", "e2e-ring-v2", lab.NCCL230RayRelease.Image())
	v2.DataPlane = ""
	refusedNamingNCCL(t, starterAt, v2, "RayExecutorV2 ranks the nodes after the driver's by Ray node ID", "VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0")

	legacy := fabricSpec(t, "lab-ring4.yaml", "e2e-ring-legacy", lab.NCCL230RayRelease.Image())
	legacy.DataPlane = ""
	legacy.Nodes = slices.Clone(legacy.Nodes)
	legacy.Nodes[0].Env = maps.Clone(legacy.Nodes[0].Env)
	legacy.Nodes[0].Env["VLLM_USE_RAY_V2_EXECUTOR_BACKEND"] = "0"
	deployServes(t, starterAt, legacy, "executor ray", "data plane: IB on 4 links (ring node-a-node-b-node-c-node-d)")

	withRay, _ := lab.ReleaseNamed("vllm-0.22.1-ray")
	tp3 := fabricSpec(t, "lab-ring4.yaml", "e2e-ring-tp3", withRay.Image())
	tp3.Parallel.Tensor = 3
	tp3.DataPlane = ""
	refusedNamingNCCL(t, starterAt, tp3, "node-a and node-c share no link")
}
