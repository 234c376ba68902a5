package activities

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
	labhub "github.com/tpdeploy/tpdeploy/lab/hub"
)

// hubAgent is node-a with a policy allowing the hub at url, a cache directory and the
// token variable TPD_TEST_HF_TOKEN; the hub serves the lab's model public and gated.
func hubAgent(t *testing.T) (*agent, string, string, []labhub.File) {
	t.Helper()
	files := labhub.LabModel(2, 64<<10, 3)
	h := &labhub.Hub{Repos: map[string]*labhub.Repo{}, Tokens: map[string][]string{"tok": {"lab/gated"}}}
	for _, r := range []struct {
		id    string
		gated bool
	}{{"lab/open", false}, {"lab/gated", true}} {
		c := labhub.CommitOf(r.id, files)
		h.Repos[r.id] = &labhub.Repo{ID: r.id, Gated: r.gated, Refs: map[string]string{"main": c}, Commits: map[string][]labhub.File{c: files}}
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cache := t.TempDir()
	t.Setenv("TPD_TEST_HF_TOKEN", "tok")
	pol, err := policy.Parse(nil, "test", policy.Overrides{Mounts: []string{cache}, HubEndpoints: []string{srv.URL}, SecretEnv: []string{"TPD_TEST_HF_TOKEN"}})
	if err != nil {
		t.Fatal(err)
	}
	return newAgentWith(t, Config{Name: "node-a", Policy: &pol}, nil), srv.URL, cache, files
}

// The head's agent resolves the revision to its commit and lists only what vLLM reads
// (not README.md, not original/); a gated repository without the token is ModelGated
// with the fix, with it resolved; a hub the policy does not name is refused.
func TestResolveHubModelSelectsAndClassifies(t *testing.T) {
	a, url, _, files := hubAgent(t)
	hm, err := run[contract.HubModel](a, a.node.Weights.ResolveHubModel, contract.ResolveHubModelRequest{Node: "node-a", Repo: "lab/open", Endpoint: url})
	if err != nil {
		t.Fatal(err)
	}
	if hm.Commit != labhub.CommitOf("lab/open", files) || hm.Skipped != 2 || len(hm.Files) != 5 || hm.Format != "safetensors" {
		t.Errorf("resolved %+v", hm)
	}
	for _, f := range hm.Files {
		if !f.Hashed() {
			t.Errorf("%s has no hash to verify it by", f.Name)
		}
	}
	_, err = run[contract.HubModel](a, a.node.Weights.ResolveHubModel, contract.ResolveHubModelRequest{Node: "node-a", Repo: "lab/gated", Endpoint: url})
	if app := modelAppError(t, err); app.Type() != contract.ErrModelGated || !app.NonRetryable() || !strings.Contains(app.Error(), "set secrets.hf_token") {
		t.Errorf("gated without a token: %v", err)
	}
	tok := &spec.SecretRef{Env: "TPD_TEST_HF_TOKEN"}
	if _, err := run[contract.HubModel](a, a.node.Weights.ResolveHubModel, contract.ResolveHubModelRequest{Node: "node-a", Repo: "lab/gated", Endpoint: url, Token: tok}); err != nil {
		t.Errorf("gated with the token: %v", err)
	}
	_, err = run[contract.HubModel](a, a.node.Weights.ResolveHubModel, contract.ResolveHubModelRequest{Node: "node-a", Repo: "lab/nothing", Endpoint: url})
	if app := modelAppError(t, err); app.Type() != contract.ErrModelNotFound {
		t.Errorf("a missing repository: %v", err)
	}
	_, err = run[contract.HubModel](a, a.node.Weights.ResolveHubModel, contract.ResolveHubModelRequest{Node: "node-a", Repo: "lab/open", Endpoint: "http://127.0.0.1:1"})
	if app := modelAppError(t, err); app.Type() != contract.ErrPolicyDenied || !strings.Contains(app.Error(), policy.SettingHubEndpoints) {
		t.Errorf("a hub the policy does not name: %v", err)
	}
}

// The download writes the commit's files into the cache as huggingface_hub does (the
// manifest then finds the snapshot at the ref, every file verified), resuming a partial
// file an earlier attempt left (through the hub's CDN redirect, with Range), and the
// manifest reports the destination's free space; a second download finds everything in
// place.
func TestDownloadHubModelFillsTheCache(t *testing.T) {
	a, url, cache, files := hubAgent(t)
	tok := &spec.SecretRef{Env: "TPD_TEST_HF_TOKEN"}
	hm, err := run[contract.HubModel](a, a.node.Weights.ResolveHubModel, contract.ResolveHubModelRequest{Node: "node-a", Repo: "lab/gated", Endpoint: url, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	empty := a.manifest(t, contract.ModelManifestRequest{HFCache: cache, Repo: "lab/gated", Revision: hm.Commit})
	if empty.Absent == "" || empty.Free == nil || *empty.Free <= 0 {
		t.Fatalf("an empty cache: %+v", empty)
	}
	req := contract.DownloadHubModelRequest{Node: "node-a", Root: weights.HFSnapshotDir(cache, "lab/gated", hm.Commit), Repo: "lab/gated",
		Commit: hm.Commit, Endpoint: url, Token: tok, Ref: "main", Files: hm.Files}
	shard := files[3] // model-00001-of-00002.safetensors
	if err := os.MkdirAll(req.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(req.Root, shard.Name+weights.PartialSuffix), shard.Data[:10000], 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := run[contract.SyncResult](a, a.node.Weights.DownloadHubModel, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != hm.Size()-10000 || res.Reused != 10000 || len(res.Copied) != 5 {
		t.Errorf("downloaded %+v, want %d bytes in 5 files, 10000 of them resumed", res, hm.Size())
	}
	m := a.manifest(t, contract.ModelManifestRequest{HFCache: cache, Repo: "lab/gated"})
	if m.Revision != hm.Commit || len(m.Files) != 5 || len(m.Missing) != 0 || len(weights.Lacking(weights.Manifest{Revision: hm.Commit, Files: hm.Files}, m)) != 0 {
		t.Errorf("the cache after the download: %+v", m)
	}
	if _, err := os.Stat(filepath.Join(req.Root, "README.md")); err == nil {
		t.Error("README.md was downloaded")
	}
	again, err := run[contract.SyncResult](a, a.node.Weights.DownloadHubModel, req)
	if err != nil || again.Bytes != 0 {
		t.Errorf("a second download: %+v, %v", again, err)
	}
	req.Token = nil
	if err := os.RemoveAll(filepath.Join(cache, "hub")); err != nil {
		t.Fatal(err)
	}
	_, err = run[contract.SyncResult](a, a.node.Weights.DownloadHubModel, req)
	if app := modelAppError(t, err); app.Type() != contract.ErrModelGated {
		t.Errorf("a download of the gated model without the token: %v", err)
	}
}
