package activities

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/hub"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
	"github.com/tpdeploy/tpdeploy/internal/weights/transfer"
)

// hubClient is a client of the hub at endpoint (HF_ENDPOINT's value, "" for
// huggingface.co) with the token ref resolves to, within the node's policy: the endpoint
// must be one allowed_hub_endpoints names (the token goes there, the weights come from
// there), the token a secret the policy allows. Its connections are made from the node's
// network namespace.
func (w *Weights) hubClient(endpoint string, token *spec.SecretRef) (*hub.Client, error) {
	ep := hub.EndpointFrom(func(string) string { return endpoint })
	if err := w.allowed(func(p policy.Policy) error { return p.CheckHubEndpoint(ep) }); err != nil {
		return nil, err
	}
	c := &hub.Client{Endpoint: ep, HTTP: &http.Client{Transport: w.hubTransport()}}
	if token != nil {
		t, err := w.resolveSecret("secrets.hf_token", *token)
		if err != nil {
			return nil, err
		}
		c.Token = t
	}
	return c, nil
}

func (w *Weights) hubTransport() *http.Transport {
	dialer := net.Dialer{Timeout: 10 * time.Second, KeepAlive: 15 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = w.net.inNetNS(func() error {
				var derr error
				c, derr = dialer.DialContext(ctx, network, addr)
				return derr
			})
			return c, err
		},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		DisableCompression:    true,
		ReadBufferSize:        1 << 20,
	}
}

// hubError is a hub client's error as the activity's: a classified one (gated, not
// found, offline, corrupt) is non-retryable and typed, so that the plan refuses it with
// its fix rather than retrying.
func hubError(err error) error {
	if kind := hub.KindOf(err); kind != "" {
		return temporal.NewNonRetryableApplicationError(err.Error(), kind, nil)
	}
	return err
}

// ResolveHubModel resolves the model's revision on the hub to its commit and returns the
// files vLLM's default loader reads of it (hub.Select), with their sizes and hashes. A
// gated repository is checked for access here (a HEAD of its config.json), so that a
// missing token is refused at plan. Nothing is written.
func (w *Weights) ResolveHubModel(ctx context.Context, req contract.ResolveHubModelRequest) (contract.HubModel, error) {
	if err := w.checkNode(req.Node); err != nil {
		return contract.HubModel{}, err
	}
	c, err := w.hubClient(req.Endpoint, req.Token)
	if err != nil {
		return contract.HubModel{}, err
	}
	cm, err := c.Revision(ctx, req.Repo, req.Revision)
	if err != nil {
		return contract.HubModel{}, hubError(err)
	}
	if _, ok := cm.File("config.json"); ok {
		if err := c.Access(ctx, cm.Repo, cm.Commit, "config.json"); err != nil {
			return contract.HubModel{}, hubError(err)
		}
	}
	wm, err := c.WeightMap(ctx, cm)
	if err != nil {
		return contract.HubModel{}, hubError(err)
	}
	sel, err := hub.Select(cm.Files, wm)
	if err != nil {
		return contract.HubModel{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s at %s: %v", req.Repo, cm.Commit, err), contract.ErrModelUnavailable, nil)
	}
	out := contract.HubModel{Repo: cm.Repo, Revision: req.Revision, Commit: cm.Commit, Endpoint: c.Endpoint, Format: sel.Format, Skipped: sel.Skipped}
	for _, f := range sel.Files {
		out.Files = append(out.Files, HubFile(f))
	}
	return out, nil
}

// HubFile is a hub file as the copy verifies and the cache names it: an LFS file by its
// sha256 (its blob's name in the cache), a file kept in git by its git blob id.
func HubFile(f hub.Sibling) weights.File {
	if f.SHA256 != "" {
		return weights.File{Name: f.Name, Size: f.Size, SHA256: f.SHA256, Blob: f.SHA256}
	}
	return weights.File{Name: f.Name, Size: f.Size, Blob: f.BlobID}
}

// DownloadHubModel downloads the listed files of the commit from the hub into this node's
// hf_cache, as huggingface_hub lays it out (blobs, the snapshot's links, the ref), through
// package transfer's writer: resumable from partial files, each file verified by its size
// and hash before it is placed, every path opened without following links beneath an
// allowed mount. The signed spec must name this model from the hub, this endpoint and
// this token reference.
func (w *Weights) DownloadHubModel(ctx context.Context, req contract.DownloadHubModelRequest) (contract.SyncResult, error) {
	res := contract.SyncResult{Copied: []string{}}
	if err := w.checkNode(req.Node); err != nil {
		return res, err
	}
	bad := func(format string, args ...any) error {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), contract.ErrBadRequest, nil)
	}
	if !weights.IsGitSHA1(req.Commit) || filepath.Base(req.Root) != req.Commit || filepath.Base(filepath.Dir(req.Root)) != "snapshots" {
		return res, bad("%s is not the snapshot directory of commit %q", req.Root, req.Commit)
	}
	if req.Ref != "" && !filepath.IsLocal(req.Ref) {
		return res, bad("ref %q is not a ref name", req.Ref)
	}
	if len(req.Files) > maxSyncFiles {
		return res, w.deny("%d files asked for: at most %d per download", len(req.Files), maxSyncFiles)
	}
	for _, f := range req.Files {
		if !fs.ValidPath(f.Name) || f.Name == "." || f.Size < 0 {
			return res, bad("model file %q is not a path inside the model's directory", f.Name)
		}
	}
	signed, err := w.signedSpec(ctx)
	if err != nil {
		return res, err
	}
	if signed != nil {
		m := signed.Model
		switch {
		case !m.FromHub() || m.Path != req.Repo:
			return res, w.deny("signed intent: the signed spec does not download %s from the hub (model.source: hub)", req.Repo)
		case signed.HubEndpoint() != req.Endpoint:
			return res, w.deny("signed intent: hub endpoint %q is not the signed spec's (%q)", req.Endpoint, signed.HubEndpoint())
		case (signed.Secrets.HFToken == nil) != (req.Token == nil) || (req.Token != nil && *req.Token != *signed.Secrets.HFToken):
			return res, w.deny("signed intent: the token reference is not the signed spec's secrets.hf_token")
		}
		if err := w.signedModelRoot(signed, req.Root); err != nil {
			return res, err
		}
	}
	c, err := w.hubClient(req.Endpoint, req.Token)
	if err != nil {
		return res, err
	}
	for _, f := range req.Files {
		if _, err := c.ResolveURL(req.Repo, req.Commit, f.Name); err != nil {
			return res, bad("%v", err)
		}
	}
	dir, rel, err := w.mounts.beneath(req.Root, "model destination")
	if err != nil {
		return res, err
	}
	defer dir.Close()
	if len(req.Files) == 0 {
		return res, nil
	}
	var prev contract.SyncProgress
	if activity.HasHeartbeatDetails(ctx) {
		_ = activity.GetHeartbeatDetails(ctx, &prev)
	}
	tr := w.hubTransport()
	copied, err := transfer.Copy{
		Secret: c.Token, Origin: c.Endpoint,
		Dial: tr.DialContext,
		URL: func(name string) string {
			u, _ := c.ResolveURL(req.Repo, req.Commit, name) // checked above
			return u
		},
		Refused: func(resp *http.Response, name string) error { return c.Classify(resp, req.Repo, name) },
		Dir:     dir, Rel: rel, HFCache: true, Ref: req.Ref, Files: req.Files,
		Copied: prev.Copied, Node: w.name, Source: "hub",
		Progress: func(p transfer.Progress) { activity.RecordHeartbeat(ctx, contract.SyncProgress(p)) },
	}.Run(ctx)
	res = contract.SyncResult(copied)
	if err != nil {
		w.logger().Warn("hub download stopped", zap.String("repo", req.Repo), zap.Int64("received", res.Bytes), zap.Strings("copied", res.Copied), zap.Error(err))
		switch {
		case hub.KindOf(err) != "":
			return res, hubError(err)
		case errors.Is(err, transfer.ErrServerGone):
			// Connection refused: the hub is unreachable now; a retry resumes.
			return res, fmt.Errorf("hub %s: %w", c.Endpoint, err)
		}
		return res, w.copyError(err)
	}
	w.logger().Info("model downloaded from the hub", zap.String("repo", req.Repo), zap.String("commit", req.Commit), zap.Int("files", len(res.Copied)),
		zap.Int64("bytes", res.Bytes), zap.Int64("reused", res.Reused), zap.Float64("mbps", res.MBps))
	return res, nil
}
