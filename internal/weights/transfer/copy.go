package transfer

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
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

	"github.com/tpdeploy/tpdeploy/internal/confined"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

const (
	// parallelism is how many files a copy fetches at once by default.
	parallelism = 4
	// stallAfter ends a copy that received nothing for this long (retryable).
	stallAfter = 60 * time.Second
	// progressEvery is how often a copy reports its progress.
	progressEvery = time.Second
)

// LinkSuffix ends the temporary name of a snapshot link before it is renamed in place
// (RemovePartial removes one left by an interrupted copy).
const LinkSuffix = ".tpdeploy-link"

// Kinds of a copy's failure that no retry of the same copy can fix; the error's text
// says what happened, errors.Is says which kind.
var (
	// ErrCorrupt: what arrived is not the size or hash the head's manifest says (the
	// partial copy was removed).
	ErrCorrupt = errors.New("model file corrupt")
	// ErrSourceLacks: the server does not hold a file it was to serve.
	ErrSourceLacks = errors.New("the source lacks a model file")
	// ErrServerGone: the server refused the connection or the key (closed, expired, or
	// its agent restarted): open another and copy again.
	ErrServerGone = errors.New("model server gone")
	// ErrNotServed: the server refused a file (not in its list, or leading outside its
	// directory).
	ErrNotServed = errors.New("model file not served")
	// ErrUnverifiable: a file to copy has no hash (weights.File.Hashed), so what arrives
	// could not be told from what the head holds: nothing is copied.
	ErrUnverifiable = errors.New("model file without a hash")
)

// failure is an error of one of the kinds above, with its own message.
type failure struct {
	kind error
	msg  string
}

func (f *failure) Error() string { return f.msg }
func (f *failure) Unwrap() error { return f.kind }

func fail(kind error, format string, args ...any) error {
	return &failure{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// Copy is one copy from a model server into a directory.
type Copy struct {
	// From is the model server, and Secret the secret of this node's key, which the
	// server accepts (Keys).
	From   netip.AddrPort
	Secret string
	// Dial makes the copy's connections (the agent dials from the node's own network
	// namespace and its planned address: the server accepts only its peers').
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Dir is the allowed mount written beneath and Rel the destination in it: every
	// path is opened without following links.
	Dir *confined.Dir
	Rel string
	// HFCache writes into a Hugging Face cache as huggingface_hub does: Rel is the
	// snapshot directory, content goes to ../../blobs/<hash>, the snapshot entry links to
	// it, and refs/<Ref> names the commit once every file is in place. Otherwise files are
	// written at Rel/<name>.
	HFCache bool
	Ref     string
	// Files are what to copy, with the head's sizes and hashes.
	Files []weights.File
	// Parallel is how many files are fetched at once (default 4).
	Parallel int
	// Copied are the files an earlier attempt reported in place (its last progress):
	// those are not hashed again.
	Copied []string
	// Node names this node in progress reports, and Source the node copied from.
	Node   string
	Source string
	// Placed, when set, records every file the copy verified and put in place (or found
	// in place), for this agent's relay of it to the next node of a chain (Serve.Relay).
	Placed *Placed
	// Progress receives the copy's progress every second and whenever a file is placed.
	Progress func(Progress)
	// URL, when set, is where each file is fetched instead of From's /<name>: a hub's
	// resolve URL (model.source: hub). Secret is then the hub token, sent only when set;
	// redirects are followed (the hub serves LFS files through its CDN, and Go drops the
	// Authorization header on a redirect to another host, as huggingface_hub does);
	// Origin names the source in messages, and Refused classifies an answer other than
	// 200 or 206 (the hub's errors).
	URL     func(name string) string
	Origin  string
	Refused func(resp *http.Response, name string) error
}

// origin names the copy's source in messages.
func (c Copy) origin() string {
	if c.Origin != "" {
		return c.Origin
	}
	return c.From.String()
}

// Progress is a copy's progress, reported while it runs. Its fields are
// contract.SyncProgress's, which the agent heartbeats.
type Progress struct {
	// Node is the node receiving the copy, From the node it receives from (a chain's
	// predecessor; empty for the head).
	Node string
	From string
	// Done is the bytes in place of Total: copied, resumed from partial files, or found.
	Done  int64
	Total int64
	// Received is what came over the network in this attempt.
	Received int64
	MBps     float64
	Current  []string
	Copied   []string
}

// Result is what a copy placed. Its fields are contract.SyncResult's.
type Result struct {
	// Bytes came over the network in this attempt; Reused were already on this node
	// (partial files of an earlier attempt, blobs another snapshot shares).
	Bytes   int64
	Reused  int64
	Seconds float64
	// MBps is Bytes per second, in decimal megabytes.
	MBps float64
	// Copied names the files now in place, sorted.
	Copied []string
}

// Run copies c.Files. Each file is written to <name>.tpdeploy-partial, resumed from that
// file's size with a Range request when it is there (so an agent killed mid-copy does not
// fetch again what arrived), verified by size and hash (the resumed part included), and
// renamed into place. A file already in place (its size and hash) is not fetched. Every
// file must have a hash: size alone would let a corrupt or tampered file of the right
// length through. The result is what arrived, even on an error.
func (c Copy) Run(ctx context.Context) (Result, error) {
	res := Result{Copied: []string{}}
	if len(c.Files) == 0 {
		return res, nil
	}
	for _, f := range c.Files {
		if !f.Hashed() {
			return res, fail(ErrUnverifiable, "copy %s: no sha256 or blob id to verify it by (the head's manifest hashes the files a copy sends)", f.Name)
		}
	}
	if err := c.Dir.MkdirAll(c.Rel); err != nil {
		return res, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s := &syncer{c: c, prevCopied: map[string]bool{}, current: map[string]bool{}, changed: make(chan struct{}, 1)}
	for _, n := range c.Copied {
		s.prevCopied[n] = true
	}
	for _, f := range c.Files {
		s.total += f.Size
	}
	start := time.Now()
	jobs := make(chan weights.File)
	parallel := c.Parallel
	if parallel <= 0 {
		parallel = parallelism
	}
	parallel = min(parallel, MaxConnsPerPeer) // the server closes more
	tr := &http.Transport{
		DialContext:           c.Dial,
		ResponseHeaderTimeout: 30 * time.Second,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   parallel,
		ReadBufferSize:        1 << 20,
	}
	defer tr.CloseIdleConnections()
	// A redirect would take the copy to another server than the one the plan named.
	s.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if c.URL != nil {
		s.client.CheckRedirect = nil // the hub's CDN
	}

	// The first failure ends the others (their errors are its consequences).
	var failOnce sync.Once
	var failed error
	stop := func(err error) {
		failOnce.Do(func() { failed = err; cancel(err) })
	}
	var wg sync.WaitGroup
	for range min(parallel, len(c.Files)) {
		wg.Go(func() {
			for f := range jobs {
				if err := s.one(ctx, f); err != nil {
					stop(err)
				}
			}
		})
	}
	go func() {
		defer close(jobs)
		for _, f := range c.Files {
			select {
			case jobs <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	tick := time.NewTicker(progressEvery)
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
			} else if s.downloading() && time.Since(lastChange) > stallAfter {
				stop(fmt.Errorf("copy from %s: nothing received for %s", c.origin(), stallAfter))
			}
		}
		c.Placed.Touch()
		if c.Progress != nil {
			c.Progress(s.progress(start))
		}
	}
	res.Bytes = s.received.Load()
	res.Reused = s.reused.Load() + s.found.Load()
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.MBps = float64(res.Bytes) / res.Seconds / 1e6
	}
	res.Copied = s.copiedNames()
	err := failed
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx) // canceled before a copy began
	}
	if err != nil {
		return res, err
	}
	if c.HFCache && c.Ref != "" {
		if err := writeHFRef(c.Dir, c.Rel, c.Ref); err != nil {
			return res, err
		}
	}
	return res, nil
}

// syncer is one copy's state, shared by its fetching goroutines.
type syncer struct {
	c          Copy
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

func (s *syncer) progress(start time.Time) Progress {
	p := Progress{Node: s.c.Node, From: s.c.Source, Total: s.total, Received: s.received.Load()}
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
	s.c.Placed.Mark(s.c.Dir.Path(filepath.Join(s.c.Rel, filepath.FromSlash(name))))
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
	dest = filepath.Join(s.c.Rel, filepath.FromSlash(f.Name))
	partial = dest + weights.PartialSuffix
	if s.c.HFCache {
		blobs = filepath.Join(filepath.Dir(filepath.Dir(s.c.Rel)), "blobs")
	}
	return dest, partial, blobs
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
	if err := s.c.Dir.MkdirAll(filepath.Dir(partial)); err != nil {
		return err
	}
	sum, err := s.fetch(ctx, f, partial)
	if err != nil {
		return err
	}
	if blobs == "" {
		if err := s.c.Dir.Rename(partial, dest); err != nil {
			return err
		}
	} else {
		blob := blobName(f)
		if blob == "" {
			blob = sum
		}
		if err := s.c.Dir.MkdirAll(blobs); err != nil {
			return err
		}
		if err := s.c.Dir.Rename(partial, filepath.Join(blobs, blob)); err != nil {
			return err
		}
		if err := linkBlob(s.c.Dir, dest, filepath.Join(blobs, blob)); err != nil {
			return err
		}
	}
	s.placed(f.Name)
	return nil
}

// inPlace reports whether a file is already where it belongs: for a Hugging Face cache,
// its blob is there at its size (then the snapshot entry is linked to it; the blob's name
// is its hash); for a directory, the file is there at its size and with its hash (unless
// an earlier attempt reported it copied).
func (s *syncer) inPlace(ctx context.Context, f weights.File, dest, blobs string) (bool, error) {
	if blobs != "" {
		blob := blobName(f)
		if blob == "" {
			return false, nil
		}
		p := filepath.Join(blobs, blob)
		if st, err := s.c.Dir.Lstat(p); err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
			return false, refusedOnly(err)
		}
		if target, err := s.c.Dir.ReadLink(dest); err != nil || filepath.Base(target) != blob {
			if err := linkBlob(s.c.Dir, dest, p); err != nil {
				return false, err
			}
		}
		s.found.Add(f.Size)
		s.placed(f.Name)
		return true, nil
	}
	st, err := s.c.Dir.Lstat(dest)
	if err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
		return false, refusedOnly(err)
	}
	if f.SHA256 != "" && !s.prevCopied[f.Name] {
		sum, err := s.hash(ctx, dest)
		if err != nil {
			return false, err
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
func refusedOnly(err error) error {
	if err != nil && confined.IsRefusal(err) {
		return err
	}
	return nil
}

// hash is the sha256 of a file beneath the destination, opened without following links.
func (s *syncer) hash(ctx context.Context, rel string) (string, error) {
	f, err := s.c.Dir.OpenFile(rel, os.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return weights.HashContent(ctx, f)
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
	file, err := s.c.Dir.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o644)
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
	dg := newDigest(f, wantSHA256, s.c.HFCache && blobName(f) == "")
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
		_ = s.c.Dir.Remove(partial)
		return fail(ErrCorrupt, "%s from %s: %s; the partial copy was removed", f.Name, s.c.origin(), what)
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
	from := s.c.origin()
	u := (&url.URL{Scheme: "http", Host: from, Path: "/" + f.Name}).String()
	if s.c.URL != nil {
		u = s.c.URL(f.Name)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if s.c.Secret != "" || s.c.URL == nil {
		req.Header.Set("Authorization", "Bearer "+s.c.Secret)
	}
	req.Header.Set("Accept-Encoding", "identity")
	if *have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(*have, 10)+"-")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return fail(ErrServerGone, "copy %s: no model server at %s (closed, expired, or its agent restarted)", f.Name, from)
		}
		return fmt.Errorf("copy %s from %s: %w", f.Name, from, err)
	}
	defer resp.Body.Close()
	body := func() string {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return strings.TrimSpace(string(b))
	}
	ok := resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent
	if !ok && s.c.Refused != nil && resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		if *have == 0 {
			// Nothing arrived: leave no empty partial file behind.
			_ = file.Close()
			_ = s.c.Dir.Remove(partial)
		}
		return s.c.Refused(resp, f.Name)
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if start, ok := contentRangeStart(resp.Header.Get("Content-Range")); !ok || start != *have {
			return fmt.Errorf("copy %s from %s: asked for bytes from %d, got %q", f.Name, from, *have, resp.Header.Get("Content-Range"))
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
		return fail(ErrSourceLacks, "the source lacks %s: %s", f.Name, body())
	case http.StatusRequestedRangeNotSatisfiable:
		_ = file.Close()
		_ = s.c.Dir.Remove(partial)
		return fail(ErrCorrupt, "%s from %s: the source holds less than the %d bytes already copied, the head's manifest says %d; the partial copy was removed",
			f.Name, from, *have, f.Size)
	case http.StatusUnauthorized:
		return fail(ErrServerGone, "copy %s: the model server at %s does not accept this node's key (closed, expired, or its agent restarted)", f.Name, from)
	case http.StatusForbidden:
		return fail(ErrNotServed, "copy %s: %s", f.Name, body())
	default:
		return fmt.Errorf("copy %s from %s: %s: %s", f.Name, from, resp.Status, body())
	}
	// One byte more than expected is read so that an oversized source shows.
	dst := io.MultiWriter(file, dg, progressWriter{&s.received, have})
	buf := make([]byte, 1<<20)
	_, err = io.CopyBuffer(dst, io.LimitReader(resp.Body, f.Size-*have+1), buf)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("copy %s from %s: %w", f.Name, from, err)
	}
	if *have < f.Size {
		return fmt.Errorf("copy %s from %s: the response ended at byte %d of %d", f.Name, from, *have, f.Size)
	}
	return nil
}

// progressWriter counts what arrives, for the progress and the file's own offset.
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
	tmp := dest + LinkSuffix
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
