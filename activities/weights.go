package activities

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/tpdeploy/tpdeploy/confined"
	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/weights"
)

// maxSyncFiles bounds the files of one copy (a model has hundreds at most).
const maxSyncFiles = 10000

// Flags of open(2) for paths that are only looked at.
const (
	unixOPath      = unix.O_PATH
	unixODirectory = unix.O_DIRECTORY
)

const (
	// defaultModelServeTTL and maxModelServeTTL bound how long a model server stays open
	// without a request in flight when its close never arrives.
	defaultModelServeTTL = 5 * time.Minute
	maxModelServeTTL     = time.Hour
	// syncParallelism is how many files SyncModel copies at once by default.
	syncParallelism = 4
	// syncStallAfter ends a copy that received nothing for this long (retryable).
	syncStallAfter = 60 * time.Second
	// syncHeartbeatEvery is how often SyncModel reports its progress.
	syncHeartbeatEvery = time.Second
	// linkSuffix ends the temporary name of a snapshot link before it is renamed in place.
	linkSuffix = ".tpdeploy-link"
	// maxModelServers bounds the model servers one agent keeps open (one per copy in
	// flight); maxModelServeLifetime closes a server however busy it is kept.
	maxModelServers       = 4
	maxModelServeLifetime = 12 * time.Hour
)

// Weights describes the model a node holds (ModelManifest), serves it to the other nodes
// and copies it from the head (model.sync: from-head), and removes a failed copy's
// partial files.
type Weights struct {
	*nodeBase
	net    *hostNet
	mounts *mounts
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
	// Both directories must be beneath an allowed mount, with no symlink on the way
	// (an hf_cache under the allowed prefix that is a link resolves elsewhere).
	for _, d := range []struct{ path, what string }{{req.Dir, "model.host_dir"}, {req.HFCache, "hf_cache"}} {
		if d.path == "" {
			continue
		}
		if err := w.mounts.checkModelDir(d.path, d.what); err != nil {
			return weights.Manifest{}, err
		}
	}
	type scanned struct {
		m   weights.Manifest
		err error
	}
	done := make(chan scanned, 1)
	go func() {
		var s scanned
		if req.Dir != "" {
			s.m, s.err = weights.ScanDirContext(ctx, w.mounts.hostPath(req.Dir), req.Checksums)
			s.m.Source = req.Dir
		} else {
			s.m, s.err = weights.ScanHFContext(ctx, w.mounts.hostPath(req.HFCache), req.Repo, req.Revision, req.Checksums)
		}
		s.m.Dir = w.mounts.nodePath(s.m.Dir)
		done <- s
	}()
	// Checksums read every byte (minutes for a large model): heartbeat meanwhile.
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
			if s.err != nil {
				return s.m, fmt.Errorf("scan model %s: %w", source, s.err)
			}
			return s.m, nil
		case <-tick.C:
			activity.RecordHeartbeat(ctx, "scanning")
		}
	}
}

// modelServers holds the open model servers of this process, by token (tokens are random,
// so one registry serves every agent of a process).
var modelServers = struct {
	mu sync.Mutex
	m  map[string]*modelServer
}{m: map[string]*modelServer{}}

// modelServer serves a fixed list of files over HTTP with Range support.
type modelServer struct {
	node, token string
	// dir is the allowed mount the files are beneath, rel the model's directory in it:
	// every file is opened by the kernel beneath dir (modelFile).
	dir      *confined.Dir
	rel      string
	files    map[string]bool
	ttl      time.Duration
	deadline time.Time
	srv      *http.Server
	log      *zap.Logger
	// served counts the bytes of file content written to clients.
	served atomic.Int64

	mu     sync.Mutex
	active int
	last   time.Time
	timer  *time.Timer
	closed bool
}

// OpenModelServer starts an HTTP server on an ephemeral port of Addr, in the node's network
// namespace, serving the listed files under Root (GET /<name>, with Range, bearer token).
// It closes on CloseModelServer, or by itself after TTL without a request in flight.
func (w *Weights) OpenModelServer(ctx context.Context, req contract.OpenModelServerRequest) (contract.ModelServer, error) {
	if err := w.checkNode(req.Node); err != nil {
		return contract.ModelServer{}, err
	}
	if !req.Addr.IsValid() {
		return contract.ModelServer{}, temporal.NewNonRetryableApplicationError("a model server needs the node's address", contract.ErrBadRequest, nil)
	}
	if err := w.signedModelRoot(req.Intent, req.Root); err != nil {
		return contract.ModelServer{}, err
	}
	files := map[string]bool{}
	for _, f := range req.Files {
		if !fs.ValidPath(f) || f == "." {
			return contract.ModelServer{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("model file %q is not a path inside the model's directory", f), contract.ErrBadRequest, nil)
		}
		files[f] = true
	}
	modelServers.mu.Lock()
	open := len(modelServers.m)
	modelServers.mu.Unlock()
	if open >= maxModelServers {
		return contract.ModelServer{}, w.deny("%d model servers are open, the most an agent keeps", open)
	}
	dir, rel, err := w.mounts.beneath(req.Root, "model directory")
	if err != nil {
		return contract.ModelServer{}, err
	}
	if d, err := dir.OpenFile(rel, unixOPath|unixODirectory, 0); err != nil {
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
	ttl := req.TTL
	if ttl <= 0 {
		ttl = defaultModelServeTTL
	}
	ttl = min(ttl, maxModelServeTTL)
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
	token, err := newToken()
	if err != nil {
		_ = l.Close()
		dir.Close()
		return contract.ModelServer{}, err
	}
	now := time.Now()
	s := &modelServer{node: w.name, token: token, dir: dir, rel: rel, files: files, ttl: ttl, last: now, deadline: now.Add(maxModelServeLifetime), log: w.logger()}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock() // expire reads the timer
	s.timer = time.AfterFunc(ttl, s.expire)
	s.mu.Unlock()
	modelServers.mu.Lock()
	modelServers.m[token] = s
	modelServers.mu.Unlock()
	go func() { _ = s.srv.Serve(l) }()
	ap := l.Addr().(*net.TCPAddr).AddrPort()
	addr := netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	w.logger().Info("model server open", zap.Stringer("addr", addr), zap.String("root", filepath.Join(dir.Root(), rel)), zap.Int("files", len(files)), zap.Duration("ttl", ttl))
	return contract.ModelServer{Addr: addr, Token: token}, nil
}

// CloseModelServer closes the server of a token; an unknown token (already closed,
// expired, or lost with an agent restart) is not an error.
func (w *Weights) CloseModelServer(ctx context.Context, req contract.CloseModelServerRequest) error {
	if err := w.checkNode(req.Node); err != nil {
		return err
	}
	closeModelServer(req.Token)
	return nil
}

func closeModelServer(token string) bool {
	modelServers.mu.Lock()
	s, ok := modelServers.m[token]
	delete(modelServers.m, token)
	modelServers.mu.Unlock()
	if !ok {
		return false
	}
	s.mu.Lock()
	s.closed = true
	s.timer.Stop()
	s.mu.Unlock()
	_ = s.srv.Close()
	_ = s.dir.Close()
	s.log.Info("model server closed", zap.Int64("served_bytes", s.served.Load()))
	return true
}

// openModelServer returns the open server of a token, for tests.
func openModelServer(token string) *modelServer {
	modelServers.mu.Lock()
	defer modelServers.mu.Unlock()
	return modelServers.m[token]
}

// expire closes the server once it has been idle for its TTL.
func (s *modelServer) expire() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	left := time.Until(s.deadline)
	if s.active > 0 && left > 0 {
		s.timer.Reset(min(s.ttl, left))
		s.mu.Unlock()
		return
	}
	if idle := time.Since(s.last); idle < s.ttl && left > 0 {
		s.timer.Reset(min(s.ttl-idle, left))
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	closeModelServer(s.token)
}

func (s *modelServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Only a request with the token keeps the server open: anyone else who reaches the
	// address must not hold it past its TTL.
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+s.token)) != 1 {
		http.Error(w, "unknown token", http.StatusUnauthorized)
		return
	}
	s.mu.Lock()
	s.active++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.active--
		s.last = time.Now()
		s.mu.Unlock()
	}()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, "/")
	if !s.files[name] {
		http.Error(w, "not served here: "+name, http.StatusForbidden)
		return
	}
	// Links are followed only while they stay beneath the allowed mount (a snapshot's
	// ../../blobs/<hash>); a planted config.json -> /etc/passwd is refused.
	f, err := s.dir.OpenBeneath(filepath.Join(s.rel, filepath.FromSlash(name)))
	if errors.Is(err, fs.ErrNotExist) {
		http.Error(w, "no "+name+" on "+s.node, http.StatusNotFound)
		return
	}
	if confined.IsRefusal(err) {
		s.log.Warn("model server refused a file that leads outside its directory", zap.String("file", name), zap.Error(err))
		http.Error(w, "not served here: "+name+" leads outside the model's directory", http.StatusForbidden)
		return
	}
	if err != nil {
		http.Error(w, "cannot open "+name+" on "+s.node, http.StatusInternalServerError)
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		http.Error(w, "no "+name+" on "+s.node, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(countingWriter{w, &s.served}, r, "", time.Time{}, f)
}

// countingWriter counts the body bytes written; it keeps ReadFrom, so the file still goes
// out with sendfile.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c countingWriter) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(c.ResponseWriter, r)
	c.n.Add(n)
	return n, err
}

// SyncModel copies the files a node lacks from the head's model server, agent to agent
// over the planned subnet. Each file is written to <name>.tpdeploy-partial, resumed from
// that file's size with a Range request when it is there (so an agent killed mid-copy does
// not fetch again what arrived), verified by size and hash (the resumed part included),
// and renamed into place. Progress heartbeats every second; a retried attempt trusts the
// files on disk, not the heartbeat. Nothing in Files: nothing is done.
func (w *Weights) SyncModel(ctx context.Context, req contract.SyncModelRequest) (contract.SyncResult, error) {
	res := contract.SyncResult{Copied: []string{}}
	if err := w.checkNode(req.Node); err != nil {
		return res, err
	}
	if err := checkSyncRequest(req); err != nil {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrBadRequest, nil)
	}
	if err := w.signedModelRoot(req.Intent, req.Root); err != nil {
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
	if len(req.Files) == 0 {
		return res, nil
	}
	if err := dir.MkdirAll(rel); err != nil {
		if confined.IsRefusal(err) {
			return res, w.denyPath("model destination "+req.Root, err)
		}
		return res, err
	}
	var prev contract.SyncProgress
	if activity.HasHeartbeatDetails(ctx) {
		_ = activity.GetHeartbeatDetails(ctx, &prev)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s := &syncer{w: w, req: req, dir: dir, rel: rel, prevCopied: map[string]bool{}, current: map[string]bool{}, changed: make(chan struct{}, 1)}
	for _, n := range prev.Copied {
		s.prevCopied[n] = true
	}
	for _, f := range req.Files {
		s.total += f.Size
	}
	start := time.Now()
	jobs := make(chan weights.File)
	parallel := req.Parallel
	if parallel <= 0 {
		parallel = syncParallelism
	}
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = w.net.inNetNS(func() error {
				var derr error
				c, derr = d.DialContext(ctx, network, addr)
				return derr
			})
			return c, err
		},
		ResponseHeaderTimeout: 30 * time.Second,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   parallel,
		ReadBufferSize:        1 << 20,
	}
	defer tr.CloseIdleConnections()
	// A redirect would take the copy to another server than the one the plan named.
	s.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	// The first failure ends the others (their errors are its consequences).
	var failOnce sync.Once
	var failed error
	fail := func(err error) {
		failOnce.Do(func() { failed = err; cancel(err) })
	}
	var wg sync.WaitGroup
	for range min(parallel, len(req.Files)) {
		wg.Go(func() {
			for f := range jobs {
				if err := s.one(ctx, f); err != nil {
					fail(err)
				}
			}
		})
	}
	go func() {
		defer close(jobs)
		for _, f := range req.Files {
			select {
			case jobs <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	tick := time.NewTicker(syncHeartbeatEvery)
	defer tick.Stop()
	lastReceived, lastChange := int64(0), time.Now()
	for running := true; running; {
		select {
		case <-finished:
			running = false
		case <-s.changed:
		case <-tick.C:
			if r := s.received.Load(); r != lastReceived {
				lastReceived, lastChange = r, time.Now()
			} else if s.downloading() && time.Since(lastChange) > syncStallAfter {
				fail(fmt.Errorf("copy from %s: nothing received for %s", req.From, syncStallAfter))
			}
		}
		activity.RecordHeartbeat(ctx, s.progress(start))
	}
	res.Bytes = s.received.Load()
	res.Reused = s.reused.Load() + s.found.Load()
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.MBps = float64(res.Bytes) / res.Seconds / 1e6
	}
	res.Copied = s.copiedNames()
	err = failed
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx) // canceled before a copy began
	}
	if err != nil {
		w.logger().Warn("model sync stopped", zap.Int64("received", res.Bytes), zap.Strings("copied", res.Copied), zap.Error(err))
		return res, err
	}
	if req.Layout == contract.ModelLayoutHF && req.Ref != "" {
		if err := writeHFRef(dir, rel, req.Ref); err != nil {
			return res, err
		}
	}
	w.logger().Info("model synced", zap.Stringer("from", req.From), zap.Int("files", len(res.Copied)),
		zap.Int64("bytes", res.Bytes), zap.Int64("reused", res.Reused), zap.Float64("mbps", res.MBps))
	return res, nil
}

func checkSyncRequest(req contract.SyncModelRequest) error {
	if !req.From.IsValid() || req.Token == "" {
		return errors.New("a model sync needs the model server's address and token")
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

// syncer is one SyncModel call's state, shared by its copying goroutines.
type syncer struct {
	w   *Weights
	req contract.SyncModelRequest
	// dir is the allowed mount the copy writes beneath, rel the destination in it; every
	// path below is relative to dir and opened without following links.
	dir        *confined.Dir
	rel        string
	client     *http.Client
	prevCopied map[string]bool
	total      int64
	received   atomic.Int64 // over the network
	reused     atomic.Int64 // resumed partial files and blobs already there
	found      atomic.Int64 // files already in place
	changed    chan struct{}

	mu      sync.Mutex
	current map[string]bool
	copied  []string
}

func (s *syncer) progress(start time.Time) contract.SyncProgress {
	p := contract.SyncProgress{Node: s.w.name, Total: s.total, Received: s.received.Load()}
	p.Done = p.Received + s.reused.Load() + s.found.Load()
	if secs := time.Since(start).Seconds(); secs > 0 {
		p.MBps = float64(p.Received) / secs / 1e6
	}
	s.mu.Lock()
	for n := range s.current {
		p.Current = append(p.Current, n)
	}
	p.Copied = slices.Clone(s.copied)
	s.mu.Unlock()
	slices.Sort(p.Current)
	slices.Sort(p.Copied)
	return p
}

func (s *syncer) copiedNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.copied)
	slices.Sort(out)
	if out == nil {
		out = []string{}
	}
	return out
}

func (s *syncer) downloading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.current) > 0
}

func (s *syncer) setCurrent(name string, on bool) {
	s.mu.Lock()
	if on {
		s.current[name] = true
	} else {
		delete(s.current, name)
	}
	s.mu.Unlock()
}

func (s *syncer) placed(name string) {
	s.mu.Lock()
	s.copied = append(s.copied, name)
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// paths of one file: where it ends up, where its partial copy grows, and (Hugging Face)
// the blob the destination links to.
func (s *syncer) paths(f weights.File) (dest, partial, blobs string) {
	dest = filepath.Join(s.rel, filepath.FromSlash(f.Name))
	partial = dest + weights.PartialSuffix
	if s.req.Layout == contract.ModelLayoutHF {
		blobs = filepath.Join(filepath.Dir(filepath.Dir(s.rel)), "blobs")
	}
	return dest, partial, blobs
}

// refused turns a write the kernel refused (a planted link on the way) into PolicyDenied.
func (s *syncer) refused(err error) error {
	if err != nil && confined.IsRefusal(err) {
		return s.w.denyPath("model copy", err)
	}
	return err
}

// blobName is the name a file's blob has in a Hugging Face cache, when known before the
// content is.
func blobName(f weights.File) string {
	switch {
	case weights.IsSHA256(f.Blob) || weights.IsGitSHA1(f.Blob):
		return f.Blob
	case weights.IsSHA256(f.SHA256):
		return f.SHA256
	}
	return ""
}

// one brings one file into place: found there already, linked to a blob already there,
// or copied.
func (s *syncer) one(ctx context.Context, f weights.File) error {
	dest, partial, blobs := s.paths(f)
	if done, err := s.inPlace(ctx, f, dest, blobs); err != nil || done {
		return err
	}
	if err := s.dir.MkdirAll(filepath.Dir(partial)); err != nil {
		return s.refused(err)
	}
	sum, err := s.fetch(ctx, f, partial)
	if err != nil {
		return s.refused(err)
	}
	if blobs == "" {
		if err := s.dir.Rename(partial, dest); err != nil {
			return s.refused(err)
		}
	} else {
		blob := blobName(f)
		if blob == "" {
			blob = sum
		}
		if err := s.dir.MkdirAll(blobs); err != nil {
			return s.refused(err)
		}
		if err := s.dir.Rename(partial, filepath.Join(blobs, blob)); err != nil {
			return s.refused(err)
		}
		if err := linkBlob(s.dir, dest, filepath.Join(blobs, blob)); err != nil {
			return s.refused(err)
		}
	}
	s.placed(f.Name)
	return nil
}

// inPlace reports whether a file is already where it belongs: for a Hugging Face cache,
// its blob is there at its size (then the snapshot entry is linked to it); for a directory,
// the file is there at its size and, when its hash is known, with that hash (unless an
// earlier attempt reported it copied).
func (s *syncer) inPlace(ctx context.Context, f weights.File, dest, blobs string) (bool, error) {
	if blobs != "" {
		blob := blobName(f)
		if blob == "" {
			return false, nil
		}
		p := filepath.Join(blobs, blob)
		if st, err := s.dir.Lstat(p); err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
			return false, s.refusedOnly(err)
		}
		if target, err := s.dir.ReadLink(dest); err != nil || filepath.Base(target) != blob {
			if err := linkBlob(s.dir, dest, p); err != nil {
				return false, s.refused(err)
			}
		}
		s.found.Add(f.Size)
		s.placed(f.Name)
		return true, nil
	}
	st, err := s.dir.Lstat(dest)
	if err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
		return false, s.refusedOnly(err)
	}
	if f.SHA256 != "" && !s.prevCopied[f.Name] {
		sum, err := s.hash(ctx, dest)
		if err != nil {
			return false, s.refused(err)
		}
		if sum != f.SHA256 {
			return false, nil
		}
	}
	s.found.Add(f.Size)
	s.placed(f.Name)
	return true, nil
}

// refusedOnly is a lookup's error when the kernel refused it (a planted link on the
// way), nil for any other (a file not there is simply not in place).
func (s *syncer) refusedOnly(err error) error {
	if err != nil && confined.IsRefusal(err) {
		return s.refused(err)
	}
	return nil
}

// hash is the sha256 of a file beneath the destination, opened without following links.
func (s *syncer) hash(ctx context.Context, rel string) (string, error) {
	f, err := s.dir.OpenFile(rel, os.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n, err := f.Read(buf)
		h.Write(buf[:n])
		if err == io.EOF {
			return hex.EncodeToString(h.Sum(nil)), nil
		}
		if err != nil {
			return "", err
		}
	}
}

// digest hashes a file's content as it arrives, for the checks its manifest allows: its
// sha256 when known (or needed to name a Hugging Face blob), else its git blob id for a
// small file of a Hugging Face cache.
type digest struct {
	size   int64
	sha256 hash.Hash
	git    hash.Hash
}

func newDigest(f weights.File, wantSHA256 string, needSHA256 bool) *digest {
	d := &digest{size: f.Size}
	if wantSHA256 != "" || needSHA256 {
		d.sha256 = sha256.New()
	}
	if wantSHA256 == "" && weights.IsGitSHA1(f.Blob) {
		d.git = sha1.New()
	}
	d.reset()
	return d
}

func (d *digest) reset() {
	if d.sha256 != nil {
		d.sha256.Reset()
	}
	if d.git != nil {
		d.git.Reset()
		fmt.Fprintf(d.git, "blob %d\x00", d.size)
	}
}

func (d *digest) Write(p []byte) (int, error) {
	if d.sha256 != nil {
		d.sha256.Write(p)
	}
	if d.git != nil {
		d.git.Write(p)
	}
	return len(p), nil
}

// fetch completes a file's partial copy from the model server, resuming from its size,
// and verifies it; it returns the content's sha256 when it was computed. A corrupt copy
// is removed; a copy interrupted by the network stays for the next attempt.
func (s *syncer) fetch(ctx context.Context, f weights.File, partial string) (string, error) {
	// A partial file that is a link (planted by a container that shares the cache) is
	// refused by the kernel: the agent never writes through one.
	file, err := s.dir.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return "", err
	}
	have := fi.Size()
	if have > f.Size {
		have = 0
	}
	wantSHA256 := f.SHA256
	if wantSHA256 == "" && weights.IsSHA256(f.Blob) {
		wantSHA256 = f.Blob
	}
	dg := newDigest(f, wantSHA256, s.req.Layout == contract.ModelLayoutHF && blobName(f) == "")
	if have > 0 {
		// Seed the hashes with what an earlier attempt wrote: the whole file is verified.
		if _, err := io.Copy(dg, io.NewSectionReader(file, 0, have)); err != nil {
			return "", fmt.Errorf("read %s: %w", partial, err)
		}
		s.reused.Add(have)
	}
	if err := file.Truncate(have); err != nil {
		return "", err
	}
	if _, err := file.Seek(have, io.SeekStart); err != nil {
		return "", err
	}
	if have < f.Size {
		s.setCurrent(f.Name, true)
		err := s.download(ctx, f, file, &have, dg, partial)
		s.setCurrent(f.Name, false)
		if err != nil {
			return "", err
		}
	}
	corrupt := func(what string) error {
		_ = file.Close()
		_ = s.dir.Remove(partial)
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s from %s: %s; the partial copy was removed", f.Name, s.req.From, what), contract.ErrModelCorrupt, nil)
	}
	if have != f.Size {
		return "", corrupt(fmt.Sprintf("%d bytes arrived, the head's manifest says %d", have, f.Size))
	}
	var sum string
	if dg.sha256 != nil {
		sum = hex.EncodeToString(dg.sha256.Sum(nil))
		if wantSHA256 != "" && sum != wantSHA256 {
			return "", corrupt(fmt.Sprintf("sha256 %s, the head's manifest says %s", sum, wantSHA256))
		}
	}
	if dg.git != nil {
		if got := hex.EncodeToString(dg.git.Sum(nil)); got != f.Blob {
			return "", corrupt(fmt.Sprintf("git blob %s, the head's manifest says %s", got, f.Blob))
		}
	}
	if err := file.Sync(); err != nil {
		return "", err
	}
	return sum, file.Close()
}

// download appends the rest of a file from the model server to file, from *have on.
func (s *syncer) download(ctx context.Context, f weights.File, file *os.File, have *int64, dg *digest, partial string) error {
	u := url.URL{Scheme: "http", Host: s.req.From.String(), Path: "/" + f.Name}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.req.Token)
	if *have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(*have, 10)+"-")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("copy %s: no model server at %s (closed, expired, or its agent restarted)", f.Name, s.req.From), contract.ErrModelServerGone, err)
		}
		return fmt.Errorf("copy %s from %s: %w", f.Name, s.req.From, err)
	}
	defer resp.Body.Close()
	body := func() string {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return strings.TrimSpace(string(b))
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if start, ok := contentRangeStart(resp.Header.Get("Content-Range")); !ok || start != *have {
			return fmt.Errorf("copy %s from %s: asked for bytes from %d, got %q", f.Name, s.req.From, *have, resp.Header.Get("Content-Range"))
		}
	case http.StatusOK:
		if *have > 0 { // the range was not honoured: start again
			s.reused.Add(-*have)
			*have = 0
			dg.reset()
			if err := file.Truncate(0); err != nil {
				return err
			}
			if _, err := file.Seek(0, io.SeekStart); err != nil {
				return err
			}
		}
	case http.StatusNotFound:
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("the source lacks %s: %s", f.Name, body()), contract.ErrModelIncomplete, nil)
	case http.StatusRequestedRangeNotSatisfiable:
		_ = file.Close()
		_ = s.dir.Remove(partial)
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s from %s: the source holds less than the %d bytes already copied, the head's manifest says %d; the partial copy was removed",
			f.Name, s.req.From, *have, f.Size), contract.ErrModelCorrupt, nil)
	case http.StatusUnauthorized:
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("copy %s: the model server at %s does not know this token (closed, expired, or its agent restarted)", f.Name, s.req.From), contract.ErrModelServerGone, nil)
	case http.StatusForbidden:
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("copy %s: %s", f.Name, body()), contract.ErrBadRequest, nil)
	default:
		return fmt.Errorf("copy %s from %s: %s: %s", f.Name, s.req.From, resp.Status, body())
	}
	// One byte more than expected is read so that an oversized source shows.
	dst := io.MultiWriter(file, dg, progressWriter{&s.received, have})
	buf := make([]byte, 1<<20)
	_, err = io.CopyBuffer(dst, io.LimitReader(resp.Body, f.Size-*have+1), buf)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("copy %s from %s: %w", f.Name, s.req.From, err)
	}
	if *have < f.Size {
		return fmt.Errorf("copy %s from %s: the response ended at byte %d of %d", f.Name, s.req.From, *have, f.Size)
	}
	return nil
}

// progressWriter counts what arrives, for the heartbeat and the file's own offset.
type progressWriter struct {
	total *atomic.Int64
	file  *int64
}

func (p progressWriter) Write(b []byte) (int, error) {
	p.total.Add(int64(len(b)))
	*p.file += int64(len(b))
	return len(b), nil
}

// contentRangeStart reads the first byte of "bytes START-END/SIZE".
func contentRangeStart(v string) (int64, bool) {
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, false
	}
	start, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(start, 10, 64)
	return n, err == nil
}

// linkBlob points a snapshot entry at its blob, relatively as huggingface_hub does
// (../../blobs/<hash>), replacing whatever was there in one rename.
func linkBlob(dir *confined.Dir, dest, blob string) error {
	if err := dir.MkdirAll(filepath.Dir(dest)); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(dest), blob)
	if err != nil {
		return err
	}
	tmp := dest + linkSuffix
	_ = dir.Remove(tmp)
	if err := dir.Symlink(rel, tmp); err != nil {
		return err
	}
	return dir.Rename(tmp, dest)
}

// writeHFRef makes refs/<ref> of a snapshot's repository name the snapshot's commit
// (snapshot relative to dir).
func writeHFRef(dir *confined.Dir, snapshot, ref string) error {
	repoDir := filepath.Dir(filepath.Dir(snapshot))
	p := filepath.Join(repoDir, "refs", filepath.FromSlash(ref))
	if err := dir.MkdirAll(filepath.Dir(p)); err != nil {
		return err
	}
	return dir.WriteFile(p, []byte(filepath.Base(snapshot)))
}

// RemovePartialModel removes the *.tpdeploy-partial files (and half-made snapshot links)
// under Root, and nothing else: complete files, verified and renamed into place, stay.
// A Root that is not there is not an error.
func (w *Weights) RemovePartialModel(ctx context.Context, req contract.RemovePartialModelRequest) (contract.RemovePartialModelResult, error) {
	res := contract.RemovePartialModelResult{Removed: []string{}}
	if err := w.checkNode(req.Node); err != nil {
		return res, err
	}
	if req.Root == "" {
		return res, temporal.NewNonRetryableApplicationError("no directory to clean", contract.ErrBadRequest, nil)
	}
	if err := w.signedModelRoot(req.Intent, req.Root); err != nil {
		return res, err
	}
	dir, root, err := w.mounts.beneath(req.Root, "model directory")
	if err != nil {
		return res, err
	}
	defer dir.Close()
	// Walked and removed beneath the allowed mount without following a link: a planted
	// link is removed itself (it is a partial name), never what it points to.
	err = fs.WalkDir(dir, root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(p, weights.PartialSuffix) && !strings.HasSuffix(p, linkSuffix) {
			return err
		}
		if err := dir.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		res.Removed = append(res.Removed, filepath.ToSlash(rel))
		return nil
	})
	slices.Sort(res.Removed)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
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
