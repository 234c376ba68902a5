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
	l, err := lab.Up(context.Background(), eng, filepath.Join(root, "bin", "temporal"), lab.Config{Prefix: prefix, Topology: topology})
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

// TestTriangleIsRefusedForNCCLsChannelNICAndServesOnSocketsWhenWarned: three simulated
// Sparks without a switch, every pair cabled. NCCL 2.28.9 connects each channel of a
// one-GPU node to both its neighbours over one NIC (the CX-7's two ports fused), so IB
// cannot carry tensor 3 (netplan channelNICs; lab/sim/fabric.go ibLinks): the deploy is
// refused naming each node's ports, with nothing started; with data_plane: warn it serves
// with NCCL on sockets over the management LAN, and status says so.
func TestTriangleIsRefusedForNCCLsChannelNICAndServesOnSocketsWhenWarned(t *testing.T) {
	_, starterAt := fabricLab(t, "tpd-e2e-tri-", lab.TopologyTriangle)
	stock, _ := lab.ReleaseNamed("vllm-0.22.1")
	ib := fabricSpec(t, "lab-triangle.yaml", "e2e-tri-ib", stock.Image())
	ib.DataPlane = "" // the default: require, as the plan has RDMA
	refusedNamingNCCL(t, starterAt, ib, "ncclTopoGetNetDev", "node-a reaches node-b only over rocep1s0f1:1 and node-c only over rocep1s0f0:1")
	s := fabricSpec(t, "lab-triangle.yaml", "e2e-tri-mp", stock.Image()) // data_plane: warn
	deployServes(t, starterAt, s, "executor mp", "data plane: Socket (no RDMA planned)")
}

// TestRing4RefusesWhatNCCLOrTheCablesCannotCarry: four simulated Sparks in a ring. Tensor
// 4 fits the cables in the cables' order, but NCCL cannot use them (as on the triangle) and
// is refused naming NCCL's channel NIC; tensor 3 (over Ray) needs three nodes all cabled
// to each other, which a ring of four has nowhere, and is refused naming the pairs. Nothing
// is started on any node.
func TestRing4RefusesWhatNCCLOrTheCablesCannotCarry(t *testing.T) {
	_, starterAt := fabricLab(t, "tpd-e2e-ring-", lab.TopologyRing4)
	stock, _ := lab.ReleaseNamed("vllm-0.22.1")
	ib := fabricSpec(t, "lab-ring4.yaml", "e2e-ring-mp", stock.Image())
	ib.DataPlane = "" // the default: require, as the plan has RDMA
	refusedNamingNCCL(t, starterAt, ib, "ncclTopoGetNetDev", "node-a reaches node-b only over rocep1s0f1:1 and node-d only over rocep1s0f0:1")

	// With Ray (vLLM's own mode needs the GPUs to divide over the nodes, which 3 over 4 does not).
	withRay, _ := lab.ReleaseNamed("vllm-0.22.1-ray")
	s := fabricSpec(t, "lab-ring4.yaml", "e2e-ring-tp3", withRay.Image())
	s.Parallel.Tensor = 3
	s.DataPlane = ""
	refusedNamingNCCL(t, starterAt, s, "node-a and node-c share no link")
}
