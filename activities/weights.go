package activities

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/tpdeploy/tpdeploy/internal/confined"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/weights"
	"github.com/tpdeploy/tpdeploy/internal/weights/transfer"
)

// maxSyncFiles bounds the files of one copy (a model has hundreds at most).
const maxSyncFiles = 10000

// Weights describes the model a node holds (ModelManifest), serves it to the other nodes
// and copies it from the head (model.sync: from-head), and removes a failed copy's
// partial files. The server and the copy are package transfer's; these activities check
// each request against the node's policy and signed intent, and open what transfer uses
// (a listener or a dialer in the node's network namespace, a directory beneath an allowed
// mount).
type Weights struct {
	*nodeBase
	net    *hostNet
	mounts *mounts
	// servers are this agent's open model servers; keys the secrets its own copies
	// present to other agents' servers.
	servers transfer.Servers
	keys    transfer.Keys
	// placed records the files this agent's copies verified, for its relays (a copy
	// chain's node serving the next one what it is still receiving).
	placed transfer.Placed
}

func newWeights(base *nodeBase, net *hostNet, mnt *mounts) *Weights {
	return &Weights{nodeBase: base, net: net, mounts: mnt}
}

// ModelManifest describes the model this node holds: a Hugging Face snapshot in its cache,
// or model.host_dir. Missing files are in the manifest, not errors; the workflow compares
// manifests (weights.Compare) and fails the preflight with ModelIncomplete.
func (w *Weights) ModelManifest(ctx context.Context, req contract.ModelManifestRequest) (weights.Manifest, error) {
	if err := w.checkNode(req.Node); err != nil {
		return weights.Manifest{}, err
	}
	if req.Dir == "" && (req.HFCache == "" || req.Repo == "") {
		return weights.Manifest{}, temporal.NewNonRetryableApplicationError("a model manifest needs a directory, or a Hugging Face cache and repository", contract.ErrBadRequest, nil)
	}
	// The scan reads beneath the allowed mount the directory is under, through package
	// confined: no symlink is followed by the kernel, a snapshot's links to its blobs are
	// resolved by the scan itself, and a link out of the mount is refused.
	root, what := req.Dir, "model.host_dir"
	if root == "" {
		root, what = req.HFCache, "hf_cache"
	}
	if len(req.Hash) > maxSyncFiles {
		return weights.Manifest{}, w.deny("%d files to hash: at most %d, the files of one copy", len(req.Hash), maxSyncFiles)
	}
	hashing := weights.Hashing{All: req.Checksums, Files: req.Hash}
	dir, rel, err := w.mounts.beneath(root, what)
	if err != nil {
		return weights.Manifest{}, err
	}
	defer dir.Close()
	type scanned struct {
		m   weights.Manifest
		err error
	}
	done := make(chan scanned, 1)
	go func() {
		var s scanned
		if req.Dir != "" {
			s.m, s.err = weights.ScanDir(ctx, dir, filepath.ToSlash(rel), req.Dir, hashing)
		} else {
			s.m, s.err = weights.ScanHF(ctx, dir, filepath.ToSlash(rel), req.Repo, req.Revision, hashing)
		}
		if s.m.Dir != "" {
			s.m.Dir = w.mounts.nodePath(dir.Path(s.m.Dir))
		}
		if s.err == nil {
			// Where the files go: the directory, or the repository's directory in the
			// cache (its blobs), which may be a disk of its own.
			target := rel
			if req.Dir == "" {
				target = filepath.Join(rel, strings.TrimPrefix(weights.HFRepoDir(req.HFCache, req.Repo), filepath.Clean(req.HFCache)))
			}
			s.m.Free = freeBeneath(dir, target)
		}
		done <- s
	}()
	// Hashing reads every byte (minutes for a large model): heartbeat meanwhile.
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case s := <-done:
			source := req.Repo
			if req.Dir != "" {
				source = req.Dir
			}
			if errors.Is(s.err, weights.ErrInvalid) {
				return s.m, temporal.NewNonRetryableApplicationError(fmt.Sprintf("model %s: %v", source, s.err), contract.ErrModelCorrupt, nil)
			}
			if confined.IsRefusal(s.err) || errors.Is(s.err, weights.ErrLinkOutside) {
				scanned := "model.host_dir " + req.Dir
				if req.Dir == "" {
					scanned = fmt.Sprintf("model %s in hf_cache %s", req.Repo, req.HFCache)
				}
				return s.m, w.denyPath("scan of "+scanned, s.err)
			}
			if s.err != nil {
				return s.m, fmt.Errorf("scan model %s: %w", source, s.err)
			}
			return s.m, nil
		case <-tick.C:
			activity.RecordHeartbeat(ctx, "scanning")
		case <-ctx.Done():
			// The scan stops at its next file (it reads with ctx); the activity does not
			// wait for a read that does not return.
			return weights.Manifest{}, fmt.Errorf("scan model: %w", ctx.Err())
		}
	}
}

// freeBeneath is the free space for an unprivileged writer (f_bavail × f_bsize) of the
// file system holding rel, or its deepest ancestor that exists (the destination of a
// first download is not there yet), opened beneath dir without following links; nil
// when it cannot be read.
func freeBeneath(dir *confined.Dir, rel string) *int64 {
	for p := filepath.Clean(rel); ; p = filepath.Dir(p) {
		f, err := dir.OpenFile(p, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err == nil {
			defer f.Close()
			var st unix.Statfs_t
			if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
				return nil
			}
			free := int64(st.Bavail) * st.Bsize
			return &free
		}
		if p == "." || p == "/" || p == filepath.Dir(p) {
			return nil
		}
	}
}

// PrepareModelCopy makes the key this node's copy (SyncModel) will present to the head's
// model server: a random secret the agent keeps in memory, of which only the SHA-256 is
// returned (transfer.Keys). Workflow history then carries nothing a server accepts.
func (w *Weights) PrepareModelCopy(ctx context.Context, req contract.PrepareModelCopyRequest) (contract.ModelCopyKey, error) {
	if err := w.checkNode(req.Node); err != nil {
		return contract.ModelCopyKey{}, err
	}
	if c, err := w.signedSpec(ctx); err != nil {
		return contract.ModelCopyKey{}, err
	} else if err := w.signedModelRoot(c, req.Root); err != nil {
		return contract.ModelCopyKey{}, err
	}
	key, err := w.keys.New(req.TTL)
	if errors.Is(err, transfer.ErrKeysFull) {
		return contract.ModelCopyKey{}, w.deny("%v (each is forgotten within %s unused)", err, transfer.MaxTTL)
	}
	return contract.ModelCopyKey{Key: key}, err
}

// OpenModelServer starts an HTTP server on an ephemeral port of Addr, in the node's network
// namespace, serving the listed files under Root (GET /<name>, with Range) to the planned
// peers presenting one of the copies' keys. It closes on CloseModelServer, or by itself
// after TTL without a request in flight.
func (w *Weights) OpenModelServer(ctx context.Context, req contract.OpenModelServerRequest) (contract.ModelServer, error) {
	if err := w.checkNode(req.Node); err != nil {
		return contract.ModelServer{}, err
	}
	if !req.Addr.IsValid() {
		return contract.ModelServer{}, temporal.NewNonRetryableApplicationError("a model server needs the node's address", contract.ErrBadRequest, nil)
	}
	signed, err := w.signedSpec(ctx)
	if err != nil {
		return contract.ModelServer{}, err
	}
	if err := w.signedModelRoot(signed, req.Root); err != nil {
		return contract.ModelServer{}, err
	}
	if err := w.signedOwnAddress(signed, req.Addr); err != nil {
		return contract.ModelServer{}, err
	}
	served := map[string]bool{}
	for _, f := range req.Files {
		if !fs.ValidPath(f) || f == "." {
			return contract.ModelServer{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("model file %q is not a path inside the model's directory", f), contract.ErrBadRequest, nil)
		}
		served[f] = true
	}
	for f, size := range req.Relay {
		if !served[f] || size <= 0 {
			return contract.ModelServer{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("relayed model file %q is not one the server serves, or has no size", f), contract.ErrBadRequest, nil)
		}
	}
	if len(req.Keys) > transfer.MaxPeers || len(req.Peers) > transfer.MaxPeers {
		return contract.ModelServer{}, w.deny("%d keys and %d peers asked for: at most %d of each", len(req.Keys), len(req.Peers), transfer.MaxPeers)
	}
	if len(req.Keys) == 0 || len(req.Peers) == 0 {
		return contract.ModelServer{}, temporal.NewNonRetryableApplicationError("a model server needs the keys and the planned addresses of the nodes it serves", contract.ErrBadRequest, nil)
	}
	for _, k := range req.Keys {
		if !weights.IsSHA256(k) {
			return contract.ModelServer{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("key %q is not a hex SHA-256", k), contract.ErrBadRequest, nil)
		}
	}
	if err := w.signedPeers(signed, req.Peers); err != nil {
		return contract.ModelServer{}, err
	}
	if err := w.net.checkPeers(req.Peers); err != nil {
		return contract.ModelServer{}, err
	}
	if w.servers.Len() >= transfer.MaxServers {
		return contract.ModelServer{}, w.deny("%v", transfer.ErrFull)
	}
	dir, rel, err := w.mounts.beneath(req.Root, "model directory")
	if err != nil {
		return contract.ModelServer{}, err
	}
	if len(req.Relay) > 0 {
		// A relay serves what it is receiving: its directory may not be there yet.
		if err := dir.MkdirAll(rel); err != nil {
			dir.Close()
			if confined.IsRefusal(err) {
				return contract.ModelServer{}, w.denyPath("model directory "+req.Root, err)
			}
			return contract.ModelServer{}, fmt.Errorf("model directory %s: %w", req.Root, err)
		}
	}
	if d, err := dir.OpenFile(rel, unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
		dir.Close()
		if confined.IsRefusal(err) {
			return contract.ModelServer{}, w.denyPath("model directory "+req.Root, err)
		}
		return contract.ModelServer{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("no model directory %s on this node", req.Root), contract.ErrModelIncomplete, nil)
	} else {
		d.Close()
	}
	if err := w.net.checkListen([]netip.Addr{req.Addr}, 0); err != nil {
		dir.Close()
		return contract.ModelServer{}, err
	}
	var l net.Listener
	err = w.net.inNetNS(func() error {
		var err error
		l, err = net.Listen("tcp", netip.AddrPortFrom(req.Addr, 0).String())
		return err
	})
	if err != nil {
		dir.Close()
		return contract.ModelServer{}, fmt.Errorf("model server on %s: %w", req.Addr, err)
	}
	ap := l.Addr().(*net.TCPAddr).AddrPort()
	addr := netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	id, err := w.servers.Open(transfer.Serve{Listener: l, Dir: dir, Rel: rel, Files: req.Files, Relay: req.Relay, Placed: &w.placed,
		Keys: req.Keys, Peers: req.Peers, TTL: req.TTL, Node: w.name, Log: w.logger()})
	if errors.Is(err, transfer.ErrFull) {
		return contract.ModelServer{}, w.deny("%v", err)
	}
	if err != nil {
		return contract.ModelServer{}, err
	}
	return contract.ModelServer{Addr: addr, ID: id}, nil
}

// CloseModelServer closes the server of an ID; an unknown ID (already closed, expired, or
// lost with an agent restart) is not an error.
func (w *Weights) CloseModelServer(ctx context.Context, req contract.CloseModelServerRequest) error {
	if err := w.checkNode(req.Node); err != nil {
		return err
	}
	w.servers.Close(req.ID)
	return nil
}

// SyncModel copies the files a node lacks from the head's model server, agent to agent
// over the planned subnet (transfer.Copy: resumable from partial files, verified by size
// and hash, renamed into place; a file without a hash is refused). Progress heartbeats every second; a retried attempt
// trusts the files on disk, not the heartbeat. Nothing in Files: nothing is done.
func (w *Weights) SyncModel(ctx context.Context, req contract.SyncModelRequest) (contract.SyncResult, error) {
	res := contract.SyncResult{Copied: []string{}}
	if err := w.checkNode(req.Node); err != nil {
		return res, err
	}
	if err := checkSyncRequest(req); err != nil {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrBadRequest, nil)
	}
	signed, err := w.signedSpec(ctx)
	if err != nil {
		return res, err
	}
	if err := w.signedModelRoot(signed, req.Root); err != nil {
		return res, err
	}
	// The server to fetch from must be the head's or, in a copy chain, a node's before this
	// one, and the address to dial from this node's, as the signed spec pins them.
	if err := w.signedSource(signed, req.Source, req.From); err != nil {
		return res, err
	}
	if err := w.signedOwnAddress(signed, req.Addr); err != nil {
		return res, err
	}
	if len(req.Files) > maxSyncFiles {
		return res, w.deny("%d files asked for: at most %d per copy", len(req.Files), maxSyncFiles)
	}
	// The destination is beneath an allowed mount and every write there refuses links;
	// the source is a peer in this node's subnets.
	dir, rel, err := w.mounts.beneath(req.Root, "model destination")
	if err != nil {
		return res, err
	}
	defer dir.Close()
	if err := w.net.checkDial(req.From); err != nil {
		return res, err
	}
	if err := w.net.checkSource(req.Addr); err != nil {
		return res, err
	}
	if len(req.Files) == 0 {
		return res, nil
	}
	secret, release, ok := w.keys.Take(req.Key)
	if !ok {
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s holds no copy key %s (it expired, or this agent restarted since it made it): the copy starts over with a new key",
			w.name, shortKey(req.Key)), contract.ErrModelServerGone, nil)
	}
	defer release()
	var prev contract.SyncProgress
	if activity.HasHeartbeatDetails(ctx) {
		_ = activity.GetHeartbeatDetails(ctx, &prev)
	}
	dialer := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second, LocalAddr: &net.TCPAddr{IP: req.Addr.AsSlice()}}
	var copied transfer.Result
	copied, err = transfer.Copy{
		From: req.From, Secret: secret,
		Dial: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = w.net.inNetNS(func() error {
				var derr error
				c, derr = dialer.DialContext(ctx, network, addr)
				return derr
			})
			return c, err
		},
		Dir: dir, Rel: rel, HFCache: req.Layout == contract.ModelLayoutHF, Ref: req.Ref, Files: req.Files, Parallel: req.Parallel,
		Copied: prev.Copied, Node: w.name, Source: req.Source, Placed: &w.placed,
		Progress: func(p transfer.Progress) { activity.RecordHeartbeat(ctx, contract.SyncProgress(p)) },
	}.Run(ctx)
	res = contract.SyncResult(copied)
	if err != nil {
		w.logger().Warn("model sync stopped", zap.Int64("received", res.Bytes), zap.Strings("copied", res.Copied), zap.Error(err))
		return res, w.copyError(err)
	}
	w.keys.Forget(req.Key) // the copy is done: its key opens nothing more
	w.logger().Info("model synced", zap.Stringer("from", req.From), zap.Int("files", len(res.Copied)),
		zap.Int64("bytes", res.Bytes), zap.Int64("reused", res.Reused), zap.Float64("mbps", res.MBps))
	return res, nil
}

// copyError is a copy's failure as the activity's error: a kind no retry fixes is
// non-retryable, typed as the workflow branches on it; a write the kernel refused (a
// planted link on the way) is PolicyDenied; anything else (the network) is retried.
func (w *Weights) copyError(err error) error {
	for _, k := range []struct {
		kind error
		typ  string
	}{
		{transfer.ErrCorrupt, contract.ErrModelCorrupt},
		{transfer.ErrSourceLacks, contract.ErrModelIncomplete},
		{transfer.ErrServerGone, contract.ErrModelServerGone},
		{transfer.ErrNotServed, contract.ErrBadRequest},
		{transfer.ErrUnverifiable, contract.ErrBadRequest},
	} {
		if errors.Is(err, k.kind) {
			return temporal.NewNonRetryableApplicationError(err.Error(), k.typ, nil)
		}
	}
	if confined.IsRefusal(err) {
		return w.denyPath("model copy", err)
	}
	return err
}

// shortKey abbreviates a key for a message.
func shortKey(k string) string { return k[:min(len(k), 12)] }

func checkSyncRequest(req contract.SyncModelRequest) error {
	if !req.From.IsValid() || !req.Addr.IsValid() || req.Key == "" {
		return errors.New("a model sync needs the model server's address, this node's planned address and its copy key")
	}
	if req.Root == "" {
		return errors.New("a model sync needs a destination directory")
	}
	switch req.Layout {
	case "", contract.ModelLayoutDir:
	case contract.ModelLayoutHF:
		if !weights.IsGitSHA1(filepath.Base(req.Root)) || filepath.Base(filepath.Dir(req.Root)) != "snapshots" {
			return fmt.Errorf("%s is not a Hugging Face snapshot directory (…/snapshots/<commit>)", req.Root)
		}
		if req.Ref != "" && !filepath.IsLocal(req.Ref) {
			return fmt.Errorf("ref %q is not a ref name", req.Ref)
		}
	default:
		return fmt.Errorf("unknown model layout %q", req.Layout)
	}
	for _, f := range req.Files {
		if !fs.ValidPath(f.Name) || f.Name == "." || f.Size < 0 {
			return fmt.Errorf("model file %q is not a path inside the model's directory", f.Name)
		}
	}
	return nil
}

// RemovePartialModel removes the *.tpdeploy-partial files (and half-made snapshot links)
// under Root, and nothing else (transfer.RemovePartial). A Root that is not there is not
// an error.
func (w *Weights) RemovePartialModel(ctx context.Context, req contract.RemovePartialModelRequest) (contract.RemovePartialModelResult, error) {
	res := contract.RemovePartialModelResult{Removed: []string{}}
	if err := w.checkNode(req.Node); err != nil {
		return res, err
	}
	if req.Root == "" {
		return res, temporal.NewNonRetryableApplicationError("no directory to clean", contract.ErrBadRequest, nil)
	}
	if c, err := w.signedSpec(ctx); err != nil {
		return res, err
	} else if err := w.signedModelRoot(c, req.Root); err != nil {
		return res, err
	}
	dir, root, err := w.mounts.beneath(req.Root, "model directory")
	if err != nil {
		return res, err
	}
	defer dir.Close()
	res.Removed, err = transfer.RemovePartial(dir, root)
	if err != nil && confined.IsRefusal(err) {
		return res, w.denyPath("model directory "+req.Root, err)
	}
	if err != nil {
		return res, fmt.Errorf("remove partial model files under %s: %w", req.Root, err)
	}
	if len(res.Removed) > 0 {
		w.logger().Info("partial model files removed", zap.String("root", req.Root), zap.Strings("files", res.Removed))
	}
	return res, nil
}
