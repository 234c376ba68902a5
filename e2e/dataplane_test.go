//go:build integration

package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/lab"
)

// TestDataPlaneOnTwoSparkRails brings up a lab shaped like two DGX Sparks (two rails on
// two subnets per node, a simulated RoCE HCA on each, lab/spark.go) and proves:
//   - the plan lists both rails, the deploy serves, and status says `data plane: IB on 2
//     rails` with a bandwidth figure;
//   - with node-b's policy mapping no RDMA device (rdma_devices: none), the deploy fails
//     as DataPlaneDegraded naming node-b and the cause, before vLLM starts, nothing left;
//   - with data_plane: warn the same cluster serves and status says Socket in plain words.
func TestDataPlaneOnTwoSparkRails(t *testing.T) {
	ctx := context.Background()
	l := sparkLab(t, "tpd-e2e-spark-")
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
	specOf := func(name, mode string) string {
		s := labSpec(t, name)
		s.DataPlane = mode
		return writeSpec(t, s)
	}
	teardown := func(name string) {
		t.Helper()
		if out, code := starterAt("teardown", name); code != 0 {
			t.Errorf("teardown %s exit %d:\n%s", name, code, out)
		}
		if left := containersOf(t, name); len(left) > 0 {
			t.Errorf("containers left for %s: %v", name, left)
		}
	}

	// Both rails, IB, a bandwidth.
	out, code := starterAt("plan", "-f", specOf("e2e-spark", ""))
	for _, want := range []string{l.Fast.String() + " used: node-a rocep1s0f1:1", l.Fast2.String() + " used: node-a roceP2p1s0f1:1", "NCCL_IB_HCA==rocep1s0f1:1,roceP2p1s0f1:1", "data plane: require (2 rail(s) used)"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	if out, code := starterAt("deploy", "-f", specOf("e2e-spark", ""), "--watch"); code != 0 {
		t.Fatalf("deploy exit %d:\n%s", code, out)
	}
	out, _ = starterAt("status", "e2e-spark")
	t.Logf("status:\n%s", out)
	if !strings.Contains(out, "data plane: IB on 2 rails, ") || !strings.Contains(out, " GB/s bus bandwidth") {
		t.Errorf("status lacks the data plane on both rails:\n%s", out)
	}
	teardown("e2e-spark")

	// Today's stock image (no Ray): auto picks vLLM's own multi-node mode, where nothing runs
	// before the ranks; the proof runs in a one-shot container made as each rank's, on both
	// rails, and nothing of it is left.
	stock, _ := lab.ReleaseNamed("vllm-0.22.1")
	ms := labSpec(t, "e2e-spark-mp")
	ms.Image = stock.Image()
	if out, code := starterAt("deploy", "-f", writeSpec(t, ms), "--watch"); code != 0 {
		t.Fatalf("mp deploy exit %d:\n%s", code, out)
	}
	out, _ = starterAt("status", "e2e-spark-mp")
	if !strings.Contains(out, "executor mp") || !strings.Contains(out, "data plane: IB on 2 rails, ") {
		t.Errorf("mp status lacks the executor or the data plane on both rails:\n%s", out)
	}
	for _, c := range containersOf(t, "e2e-spark-mp") {
		if strings.HasSuffix(c, "_"+contract.RoleProof) {
			t.Errorf("the proof's container %s is left", c)
		}
	}
	teardown("e2e-spark-mp")

	// node-b's policy maps no RDMA device: its agent restarts with it.
	setPolicy(t, l, "node-b", "rdma_devices: none\n")
	start := time.Now()
	out, code = starterAt("deploy", "-f", specOf("e2e-spark-off", ""), "--watch")
	took := time.Since(start)
	if code == 0 {
		t.Fatalf("deploy served with node-b's RDMA devices denied:\n%s", out)
	}
	for _, want := range []string{"DataPlaneDegraded", "node-b (rank 1) is on Socket", "no /dev/infiniband/uverbs* device in the container", "rdma_devices: none"} {
		if !strings.Contains(out, want) {
			t.Errorf("failure lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "node-a (rank 0) is on") {
		t.Errorf("node-a is named although its devices are mapped:\n%s", out)
	}
	t.Logf("DataPlaneDegraded after %s:\n%s", took.Round(time.Second), out)
	if left := containersOf(t, "e2e-spark-off"); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}

	// data_plane: warn serves over sockets and says so.
	if out, code := starterAt("deploy", "-f", specOf("e2e-spark-warn", spec.DataPlaneWarn), "--watch"); code != 0 {
		t.Fatalf("warn deploy exit %d:\n%s", code, out)
	}
	out, _ = starterAt("status", "e2e-spark-warn")
	t.Logf("status with data_plane: warn:\n%s", out)
	if !strings.Contains(out, "data plane: mixed: node-a IB, node-b Socket") && !strings.Contains(out, "data plane: Socket") {
		t.Errorf("status does not say Socket:\n%s", out)
	}
	if !strings.Contains(out, "DataPlaneDegraded") {
		t.Errorf("status lacks the warning:\n%s", out)
	}
	teardown("e2e-spark-warn")
}

// sparkLab brings up a lab of its own shaped like two DGX Sparks (two rails on two
// subnets per node), removed when the test or benchmark ends.
func sparkLab(tb testing.TB, prefix string) *lab.Lab {
	tb.Helper()
	root, _ := images.ModuleRoot()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	prefix += hex.EncodeToString(b)
	l, err := labUp(context.Background(), filepath.Join(root, "bin", "temporal"), lab.Config{Prefix: prefix, Topology: lab.TopologySpark})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		l.Close()
		if err := lab.Down(context.Background(), eng, prefix); err != nil {
			tb.Logf("lab down: %v", err)
		}
	})
	return l
}

// setPolicy writes the node agent's policy file and restarts the agent (its init restarts
// it) so that it reads it.
func setPolicy(t *testing.T, l *lab.Lab, node, yaml string) {
	t.Helper()
	n, _ := l.Node(node)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Name: "etc/tpdeploy/", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Name: "etc/tpdeploy/policy.yaml", Mode: 0o644, Size: int64(len(yaml))})
	_, _ = tw.Write([]byte(yaml))
	_ = tw.Close()
	if _, err := eng.CopyToContainer(context.Background(), n.Container, client.CopyToContainerOptions{DestinationPath: "/", Content: &buf}); err != nil {
		t.Fatal(err)
	}
	killWorker(t, n.Container)
	time.Sleep(3 * time.Second) // the init restarts it; the deploy's node_agent wait covers the rest
}
