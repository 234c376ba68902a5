package workflows

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

const hubCommit = "fedcba9876543210fedcba9876543210fedcba98"

// hubSpec is the seed spec with its model from the hub, which holds it at hubCommit, and
// nodes whose caches hold nothing of it but have free bytes each.
func hubSpec(f *fakeagents.Agents, free int64) spec.Cluster {
	s := fakeagents.SeedSpec()
	s.Model.Source = spec.SourceHub
	sha := func(n string) string { return fakeagents.FakeSHA256(n) }
	f.Hub = &contract.HubModel{Repo: s.Model.Path, Commit: hubCommit, Endpoint: "https://huggingface.co", Format: "safetensors", Skipped: 3,
		Files: []weights.File{{Name: "config.json", Size: 700, Blob: "0123456789abcdef0123456789abcdef01234567"},
			{Name: "model-00001-of-00002.safetensors", Size: 4_000_000_000, SHA256: sha("1"), Blob: sha("1")},
			{Name: "model-00002-of-00002.safetensors", Size: 2_000_000_000, SHA256: sha("2"), Blob: sha("2")}}}
	for _, n := range []string{"node-a", "node-b"} {
		fr := free
		f.Manifests[n] = weights.Manifest{Source: s.Model.Path, Absent: "no repository in the cache", Free: &fr}
	}
	return s
}

// model.source: hub: the revision is resolved at plan, before any node is probed; the
// head downloads the commit's files once, node-b receives them from the head, and the
// result keeps the commit.
func TestHubModelIsDownloadedOnceByTheHeadAndCopiedToTheOthers(t *testing.T) {
	f := fakeagents.New()
	s := hubSpec(f, 100_000_000_000)
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	calls := fakeagents.Calls(f, "ResolveHubModel", "ProbeNode", "DownloadHubModel", "SyncModel")
	snapshot := weights.HFSnapshotDir(spec.DefaultHFCache, s.Model.Path, hubCommit)
	if len(calls) < 4 || calls[0] != "ResolveHubModel node-a "+s.Model.Path+"@" || !strings.HasPrefix(calls[1], "ProbeNode") ||
		!slices.Contains(calls, "DownloadHubModel node-a "+hubCommit) || calls[len(calls)-1] != "SyncModel node-b "+snapshot {
		t.Errorf("calls %q", calls)
	}
	if len(f.HubDownloads) != 1 || len(f.HubDownloads[0].Files) != 3 || f.HubDownloads[0].Ref != "main" || f.HubDownloads[0].Root != snapshot {
		t.Errorf("downloads %+v", f.HubDownloads)
	}
	if res.Hub == nil || res.Hub.Commit != hubCommit {
		t.Errorf("result's hub model %+v, want commit %s", res.Hub, hubCommit)
	}
	if len(res.ModelCopies) != 2 || res.ModelCopies[0].From != "hub" || res.ModelCopies[0].Node != "node-a" || res.ModelCopies[1].Node != "node-b" {
		t.Errorf("model copies %+v", res.ModelCopies)
	}
}

// A gated model without a token is refused at plan with the hub's fix: no node probed,
// nothing started.
func TestHubGatedModelIsRefusedBeforeAnyNodeIsProbed(t *testing.T) {
	f := fakeagents.New()
	s := hubSpec(f, 100_000_000_000)
	f.Failures = map[string]error{"ResolveHubModel node-a": temporal.NewNonRetryableApplicationError(
		"org/model is gated and no token was given: set secrets.hf_token", contract.ErrModelGated, nil)}
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	var app *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != contract.ErrModelGated || !strings.Contains(app.Message(), "secrets.hf_token") {
		t.Fatalf("err = %v, want ModelGated naming secrets.hf_token", env.GetWorkflowError())
	}
	if calls := fakeagents.Calls(f, "ProbeNode", "PreflightNode", "DownloadHubModel"); len(calls) != 0 {
		t.Errorf("calls after the refusal: %q", calls)
	}
}

// A node whose disk cannot hold what it must receive is refused before anything is
// written: DiskInsufficient naming it, its need and its free space; no download, no copy.
func TestDiskTooSmallIsRefusedBeforeAnyDownloadOrCopy(t *testing.T) {
	f := fakeagents.New()
	s := hubSpec(f, 100_000_000_000)
	small := int64(1_000_000_000)
	mb := f.Manifests["node-b"]
	mb.Free = &small
	f.Manifests["node-b"] = mb
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	var app *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != contract.ErrDiskInsufficient {
		t.Fatalf("err = %v, want DiskInsufficient", env.GetWorkflowError())
	}
	for _, want := range []string{"node-b", "needs 6.0 GB", "has 1.0 GB free"} {
		if !strings.Contains(app.Message(), want) {
			t.Errorf("message lacks %q: %s", want, app.Message())
		}
	}
	if calls := fakeagents.Calls(f, "DownloadHubModel", "SyncModel", "StartRayHead"); len(calls) != 0 {
		t.Errorf("calls after the refusal: %q", calls)
	}
}
