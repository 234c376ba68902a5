//go:build integration

package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
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
	"github.com/tpdeploy/tpdeploy/internal/weights"
	"github.com/tpdeploy/tpdeploy/lab"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// modelSpec is the lab spec serving a model from model.host_dir (the same node path on
// every node, under /models, which the default node policy allows; each lab node has its
// own disk under its host root), mounted at the same path in the containers.
func modelSpec(t *testing.T, name string) spec.Cluster {
	s := labSpec(t, name)
	s.Model.Path = "/models/" + name
	s.Model.HostDir = "/models/" + name
	return s
}

// modelDir is where a node's copy of the spec's model lives on the test's host.
func modelDir(node string, s spec.Cluster) string {
	return filepath.Join(theLab.NodeRoot(node), s.Model.HostDir)
}

func makeModel(t *testing.T, node string, s spec.Cluster, shards int, size int64, skip ...int) {
	t.Helper()
	dir := modelDir(node, s)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := lab.MakeModel(dir, shards, size, 7, skip...); err != nil {
		t.Fatal(err)
	}
}

func sha(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// A node missing two shards is refused before anything starts, naming both shards and the
// head's sizes; nothing is left running.
func TestModelMissingShardsRefusedAtPreflight(t *testing.T) {
	s := modelSpec(t, "e2e-model-missing")
	makeModel(t, "node-a", s, 4, 1<<20)
	makeModel(t, "node-b", s, 4, 1<<20, 2, 4)
	f, _ := failure(t, deployFor(t, s))
	if f.Type != contract.ErrModelIncomplete {
		t.Fatalf("failure %s: %s; want ModelIncomplete", f.Type, f.Message)
	}
	for _, want := range []string{
		"node-b lacks " + lab.ShardName(2, 4) + " (head has 1.0 MB)",
		"node-b lacks " + lab.ShardName(4, 4) + " (head has 1.0 MB)",
	} {
		if !strings.Contains(f.Message, want) {
			t.Errorf("message lacks %q: %s", want, f.Message)
		}
	}
	if left := containersOf(t, s.Name); len(left) != 0 {
		t.Errorf("containers started before the model check: %v", left)
	}
}

// With model.sync: from-head, node-b receives the shards it lacks from node-a's agent over
// the fast subnet, identical to the head's, and the cluster serves.
func TestModelSyncFromHeadServes(t *testing.T) {
	s := modelSpec(t, "e2e-model-sync")
	s.Model.Sync = spec.SyncFromHead
	const shards, size = 6, 48 << 20
	makeModel(t, "node-a", s, shards, size)
	makeModel(t, "node-b", s, shards, size, 2, 3, 5)
	res := deployResult(t, deployFor(t, s), 4*time.Minute)
	defer teardown(t, s.Name)
	if len(res.ModelCopies) != 1 || res.ModelCopies[0].Node != "node-b" || res.ModelCopies[0].Bytes != 3*size || res.ModelCopies[0].Files != 3 {
		t.Fatalf("model copies %+v, want node-b receiving 3 shards of %d bytes", res.ModelCopies, size)
	}
	c := res.ModelCopies[0]
	t.Logf("copied %s to node-b in %.2fs: %.0f MB/s over the lab's fast network", weights.HumanSize(c.Bytes), c.Seconds, c.MBps)
	for _, n := range []int{2, 3, 5} {
		name := lab.ShardName(n, shards)
		if got, want := sha(t, filepath.Join(modelDir("node-b", s), name)), sha(t, filepath.Join(modelDir("node-a", s), name)); got != want {
			t.Errorf("%s on node-b differs from the head's", name)
		}
	}
	if err := endpointServes(t, s); err != nil {
		t.Fatal(err)
	}
}

// node-b's agent is killed in the middle of the copy: the copy resumes on the restarted
// agent from what had arrived, and the cluster serves.
func TestModelSyncResumesAfterAgentKill(t *testing.T) {
	s := modelSpec(t, "e2e-model-resume")
	s.Model.Sync = spec.SyncFromHead
	const shards, size = 4, 96 << 20
	makeModel(t, "node-a", s, shards, size)
	skip := []int{1, 2, 3, 4}
	makeModel(t, "node-b", s, shards, size, skip...)
	run := deployFor(t, s)
	defer teardown(t, s.Name)
	// Kill the agent once a partial file holds some of a shard.
	dir := modelDir("node-b", s)
	deadline := time.Now().Add(3 * time.Minute)
	var arrived int64
	for arrived < 8<<20 {
		if time.Now().After(deadline) {
			t.Fatal("no partial model file appeared on node-b")
		}
		//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
		if st, err := tc.DescribeWorkflowExecution(context.Background(), run.GetID(), run.GetRunID()); err == nil && st.GetWorkflowExecutionInfo().GetCloseTime() != nil {
			t.Fatalf("deploy ended before the copy: %v", result(run, 10*time.Second, nil))
		}
		arrived = 0
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), weights.PartialSuffix) {
				if fi, err := e.Info(); err == nil {
					arrived += fi.Size()
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	killWorker(t, theLab.Nodes[1].Container)
	killed := time.Now()
	res := deployResult(t, run, 5*time.Minute)
	var c *struct{ Bytes, Reused int64 }
	for _, mc := range res.ModelCopies {
		if mc.Node == "node-b" {
			c = &struct{ Bytes, Reused int64 }{mc.Bytes, mc.Reused}
		}
	}
	if c == nil {
		t.Fatalf("no copy to node-b recorded: %+v", res.ModelCopies)
	}
	t.Logf("killed with %s in partial files; the resumed copy received %s and reused %s (served %.1fs after the kill)",
		weights.HumanSize(arrived), weights.HumanSize(c.Bytes), weights.HumanSize(c.Reused), time.Since(killed).Seconds())
	if c.Reused < arrived/2 || c.Bytes+c.Reused != shards*size {
		t.Errorf("resumed copy received %d and reused %d bytes of %d; what had arrived (%d) must not be sent again",
			c.Bytes, c.Reused, shards*size, arrived)
	}
	for n := 1; n <= shards; n++ {
		name := lab.ShardName(n, shards)
		if sha(t, filepath.Join(dir, name)) != sha(t, filepath.Join(modelDir("node-a", s), name)) {
			t.Errorf("%s on node-b differs from the head's", name)
		}
	}
	if err := endpointServes(t, s); err != nil {
		t.Fatal(err)
	}
}

// node-b loses power in the middle of the copy (its node container is killed, so its
// agent, its copy and its boot all end at once) and boots again: the deploy hears the new
// boot ID, starts over keeping what had arrived, the copy resumes from the partial files
// and the deploy serves. What arrived before the power cut is not sent again.
func TestModelCopyResumesAfterANodeReboot(t *testing.T) {
	s := modelSpec(t, "e2e-model-reboot")
	s.Model.Sync = spec.SyncFromHead
	const shards, size = 4, 128 << 20
	makeModel(t, "node-a", s, shards, size)
	makeModel(t, "node-b", s, shards, size, 1, 2, 3, 4)
	run := deployFor(t, s)
	defer teardown(t, s.Name)
	// The copy's progress, read where it is written: node-b's partial files (the
	// heartbeat reaches status only every few seconds, too late for a fast link).
	dir := modelDir("node-b", s)
	partial := func() int64 {
		var n int64
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), weights.PartialSuffix) {
				if fi, err := e.Info(); err == nil {
					n += fi.Size()
				}
			}
		}
		return n
	}
	deadline := time.Now().Add(3 * time.Minute)
	for partial() < 8<<20 {
		if time.Now().After(deadline) {
			t.Fatal("no partial model file appeared on node-b")
		}
		//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
		if st, err := tc.DescribeWorkflowExecution(context.Background(), run.GetID(), run.GetRunID()); err == nil && st.GetWorkflowExecutionInfo().GetCloseTime() != nil {
			t.Fatalf("deploy ended before the copy: %v", result(run, 10*time.Second, nil))
		}
		time.Sleep(5 * time.Millisecond)
	}
	b := theLab.Nodes[1]
	if _, err := eng.ContainerKill(context.Background(), b.Container, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	arrived := partial()
	if arrived >= shards*size {
		t.Fatalf("the copy had ended (%d bytes) when the power was cut", arrived)
	}
	if _, err := eng.ContainerStart(context.Background(), b.Container, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	res := deployResult(t, run, 5*time.Minute)
	if len(res.Restarts) == 0 || !strings.Contains(strings.Join(res.Restarts, "\n"), "node-b") {
		t.Errorf("deploy served without starting over for node-b's reboot: restarts %q", res.Restarts)
	}
	var c *workflows.ModelCopy
	for i, mc := range res.ModelCopies {
		if mc.Node == "node-b" {
			c = &res.ModelCopies[i]
		}
	}
	if c == nil {
		t.Fatalf("no copy to node-b recorded: %+v", res.ModelCopies)
	}
	t.Logf("power cut with %s in partial files; after the reboot the copy received %s and reused %s (served %.1fs after the cut; restarts %q)",
		weights.HumanSize(arrived), weights.HumanSize(c.Bytes), weights.HumanSize(c.Reused), time.Since(cut).Seconds(), res.Restarts)
	if c.Reused < arrived || c.Bytes+c.Reused != shards*size {
		t.Errorf("resumed copy received %d and reused %d bytes of %d; what had arrived (%d) must not be sent again",
			c.Bytes, c.Reused, shards*size, arrived)
	}
	for n := 1; n <= shards; n++ {
		name := lab.ShardName(n, shards)
		if sha(t, filepath.Join(dir, name)) != sha(t, filepath.Join(modelDir("node-a", s), name)) {
			t.Errorf("%s on node-b differs from the head's", name)
		}
	}
	if err := endpointServes(t, s); err != nil {
		t.Fatal(err)
	}
}

// Three nodes on the lab's one fast network, node-b and node-c holding none of the model:
// the copy is a chain through the real agents and their signed intent (node-a serves
// node-b, node-b relays to node-c what it receives), every node ends with the head's
// files, the deploy serves, and status names where each copy came from.
func TestModelCopyChainsThroughThreeNodes(t *testing.T) {
	root, _ := images.ModuleRoot()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	prefix := "tpd-e2e-chain-" + hex.EncodeToString(b)
	start := time.Now()
	l, err := labUp(context.Background(), filepath.Join(root, "bin", "temporal"), lab.Config{Prefix: prefix, Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		if err := lab.Down(context.Background(), eng, prefix); err != nil {
			t.Logf("lab down: %v", err)
		}
	})
	t.Logf("three-node lab up in %s", time.Since(start).Round(100*time.Millisecond))
	starterAt := func(args ...string) (string, int) {
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
	s := labSpec(t, "e2e-model-chain")
	s.Nodes = append(s.Nodes, spec.Node{Name: l.Nodes[2].Name, Role: spec.RoleWorker, GPUs: 1})
	s.Parallel.Tensor = 3
	s.Model.Path, s.Model.HostDir, s.Model.Sync = "/models/"+s.Name, "/models/"+s.Name, spec.SyncFromHead
	const shards, size = 4, 32 << 20
	dirOf := func(node string) string { return filepath.Join(l.NodeRoot(node), s.Model.HostDir) }
	if err := lab.MakeModel(dirOf("node-a"), shards, size, 7); err != nil {
		t.Fatal(err)
	}
	if out, code := starterAt("deploy", "-f", writeSpec(t, s), "--watch"); code != 0 {
		t.Fatalf("deploy exit %d:\n%s", code, out)
	}
	out, _ := starterAt("status", s.Name)
	t.Logf("status:\n%s", out)
	third := l.Nodes[2].Name
	for _, want := range []string{"model copied to node-b: ", "model copied to " + third + " from node-b: "} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}
	entries, err := os.ReadDir(dirOf("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		want := sha(t, filepath.Join(dirOf("node-a"), e.Name()))
		for _, n := range []string{"node-b", third} {
			if got := sha(t, filepath.Join(dirOf(n), e.Name())); got != want {
				t.Errorf("%s on %s differs from the head's", e.Name(), n)
			}
		}
	}
	if out, code := starterAt("teardown", s.Name); code != 0 {
		t.Errorf("teardown exit %d:\n%s", code, out)
	}
}
