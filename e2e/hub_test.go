//go:build integration

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
	"github.com/tpdeploy/tpdeploy/lab"
)

// hubSpec is the lab spec serving repo from the lab hub (model.source: hub, the head's
// HF_ENDPOINT naming it), with every node's cache of repo emptied before and after.
func hubSpec(t *testing.T, name, repo string) spec.Cluster {
	s := labSpec(t, name)
	s.Model.Path, s.Model.ServedName, s.Model.Source = repo, "tiny-moe", spec.SourceHub
	s.Nodes[0].Env["HF_ENDPOINT"] = theLab.Hub
	clean := func() {
		for _, n := range theLab.Nodes {
			_ = os.RemoveAll(filepath.Join(theLab.NodeRoot(n.Name), weights.HFRepoDir(spec.DefaultHFCache, repo)))
		}
	}
	clean()
	t.Cleanup(clean)
	return s
}

// The lab's model is on no node: the head's agent downloads only the files vLLM reads
// from the lab hub (not README.md, not original/), node-b receives them from the head,
// both snapshots are the commit the plan resolved, and the cluster serves.
func TestHubModelOnNoNodeServesFromTheLabHub(t *testing.T) {
	s := hubSpec(t, "e2e-hub", lab.HubRepo)
	res := deployResult(t, deployFor(t, s), 4*time.Minute)
	defer teardown(t, s.Name)
	if res.Hub == nil || !weights.IsGitSHA1(res.Hub.Commit) {
		t.Fatalf("the result keeps no commit: %+v", res.Hub)
	}
	want := []string{"config.json", lab.ShardName(1, 2), lab.ShardName(2, 2), "model.safetensors.index.json", "tokenizer.json"}
	if got := weights.Names(res.Hub.Files); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("files %q, want %q", got, want)
	}
	if len(res.ModelCopies) != 2 || res.ModelCopies[0].From != "hub" || res.ModelCopies[0].Files != 5 || res.ModelCopies[1].Node != "node-b" {
		t.Fatalf("model copies %+v, want the head's download then node-b's copy", res.ModelCopies)
	}
	for _, c := range res.ModelCopies {
		t.Logf("%s received %s from %q in %.2fs (%.0f MB/s)", c.Node, weights.HumanSize(c.Bytes), c.From, c.Seconds, c.MBps)
	}
	for _, n := range []string{"node-a", "node-b"} {
		snap := filepath.Join(theLab.NodeRoot(n), weights.HFSnapshotDir(spec.DefaultHFCache, s.Model.Path, res.Hub.Commit))
		for _, f := range res.Hub.Files {
			if got := sha(t, filepath.Join(snap, f.Name)); f.SHA256 != "" && got != f.SHA256 {
				t.Errorf("%s's %s has sha256 %s, the hub lists %s", n, f.Name, got, f.SHA256)
			}
		}
		for _, left := range []string{"README.md", "original"} {
			if _, err := os.Lstat(filepath.Join(snap, left)); err == nil {
				t.Errorf("%s holds %s, which vLLM does not read", n, left)
			}
		}
	}
	if err := endpointServes(t, s); err != nil {
		t.Fatal(err)
	}
}

// `starter plan` lists the files the download takes and their total; the gated
// repository without a token is refused at plan with ModelGated and the fix, and with
// the lab's token it plans.
func TestHubPlanListsTheFilesAndRefusesAGatedModelWithoutAToken(t *testing.T) {
	s := hubSpec(t, "e2e-hub-plan", lab.HubRepo)
	out, code := runStarter(t, "plan", "-f", writeSpec(t, s))
	if code != 0 || !strings.Contains(out, "Model from the hub") || !strings.Contains(out, lab.ShardName(2, 2)) || !strings.Contains(out, "5 files, 33.6 MB") {
		t.Errorf("plan (exit %d) does not list the hub's files and their total:\n%s", code, out)
	}
	g := hubSpec(t, "e2e-hub-gated", lab.HubGatedRepo)
	out, code = runStarter(t, "plan", "-f", writeSpec(t, g))
	if code == 0 || !strings.Contains(out, contract.ErrModelGated) || !strings.Contains(out, "set secrets.hf_token") {
		t.Errorf("gated without a token: exit %d, want ModelGated with the fix:\n%s", code, out)
	}
	g.Secrets.HFToken = &spec.SecretRef{Env: "LAB_HF_TOKEN"}
	if out, code = runStarter(t, "plan", "-f", writeSpec(t, g)); code != 0 || !strings.Contains(out, "Model from the hub") {
		t.Errorf("gated with the lab's token: exit %d:\n%s", code, out)
	}
}

// node-b's cache of the model is a 4 MiB disk: the deploy is refused before anything is
// downloaded or started, with DiskInsufficient naming node-b, its need and its free space.
func TestHubNodeWithoutSpaceRefusedBeforeAnythingStarts(t *testing.T) {
	s := hubSpec(t, "e2e-hub-disk", lab.HubGatedRepo)
	s.Secrets.HFToken = &spec.SecretRef{Env: "LAB_HF_TOKEN"}
	// A small disk where node-b's cache keeps the repository; node-b restarts to see it
	// (its container's view of its root is taken when it starts).
	disk := filepath.Join(theLab.NodeRoot("node-b"), weights.HFRepoDir(spec.DefaultHFCache, s.Model.Path))
	if err := os.MkdirAll(disk, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tpd-hub-disk", disk).CombinedOutput(); err != nil {
		t.Fatalf("mount a small disk: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", disk).Run() })
	restartNode(t, "node-b")
	eventually(t, 30*time.Second, "node-b running", func() bool {
		info, err := eng.ContainerInspect(context.Background(), theLab.Nodes[1].Container, client.ContainerInspectOptions{})
		return err == nil && info.Container.State.Running
	})
	time.Sleep(3 * time.Second) // its agent polling again
	f, took := failure(t, deployFor(t, s))
	if f.Type != contract.ErrDiskInsufficient {
		t.Fatalf("failure %s: %s; want DiskInsufficient", f.Type, f.Message)
	}
	for _, want := range []string{"node-b", "needs 33.6 MB", "free"} {
		if !strings.Contains(f.Message, want) {
			t.Errorf("message lacks %q: %s", want, f.Message)
		}
	}
	t.Logf("refused in %s: %s", took.Round(time.Millisecond), f.Message)
	if left := containersOf(t, s.Name); len(left) != 0 {
		t.Errorf("containers started: %v", left)
	}
	if _, err := os.Stat(filepath.Join(theLab.NodeRoot("node-a"), weights.HFRepoDir(spec.DefaultHFCache, s.Model.Path))); err == nil {
		t.Errorf("node-a downloaded the model before the refusal")
	}
}
