package weights

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
)

// ErrInvalid marks a model whose files cannot be read as a model (an index that is not
// JSON or lists paths outside the model's directory, a ref that holds no commit): copying
// or retrying does not help.
var ErrInvalid = errors.New("invalid model")

// ErrLinkOutside marks a symbolic link in the model that leads out of the file system the
// scan reads (absolutely, or up through ..): the scan refuses it rather than describe
// what is outside.
var ErrLinkOutside = errors.New("a link leads outside the directory scanned")

// IndexSuffix ends the name of a safetensors index (model.safetensors.index.json), whose
// weight_map says which shard holds each tensor.
const IndexSuffix = ".safetensors.index.json"

// hashParallelism bounds how many files are hashed at once when checksums are asked for.
const hashParallelism = 4

// MaxIndexBytes bounds a safetensors index the scan reads: the largest models' indexes are
// a few MiB (one line per tensor), so more is not an index but a planted file (a sparse
// one of terabytes reads as zeros into memory).
const MaxIndexBytes = 64 << 20

// maxRefBytes bounds a Hugging Face ref: a commit hash and a newline.
const maxRefBytes = 4 << 10

// maxLinkHops bounds the links followed to reach one file: a snapshot's entry is one link
// to its blob.
const maxLinkHops = 8

// HFRepoDir is a repository's directory in a Hugging Face cache (HF_HOME, which holds
// hub/): <cache>/hub/models--Org--Name. cache and the result are slash-separated paths
// (the node's, or names in a scan's file system).
func HFRepoDir(cache, repo string) string {
	return path.Join(cache, "hub", hfRepoFolder(repo))
}

// HFSnapshotDir is the directory of one commit of a repository in a Hugging Face cache.
func HFSnapshotDir(cache, repo, commit string) string {
	return path.Join(HFRepoDir(cache, repo), "snapshots", commit)
}

func hfRepoFolder(repo string) string { return "models--" + strings.ReplaceAll(repo, "/", "--") }

// Hashing says which files a scan reads and hashes, beyond the names and sizes it always
// reads.
type Hashing struct {
	// All hashes every file (model.checksums): reads every byte.
	All bool
	// Files are files to hash without All, by name: the files a copy will send, which
	// the copy verifies by their hash.
	Files []string
}

func (h Hashing) of(name string) bool { return h.All || slices.Contains(h.Files, name) }

// How a scan reads. Everything is read through fsys, by fs.FS names: the caller chooses
// what the names resolve beneath (the agent's fsys is package confined's, which refuses
// every symbolic link). Links a model legitimately holds — a Hugging Face snapshot's
// entries are links to ../../blobs/<hash> — are resolved here: each is read with
// fs.ReadLink, joined to the link's own directory and looked up again (fs.Lstat), so the
// kernel never follows one, and a link that leads out of fsys is ErrLinkOutside. The
// lexical join is sound because every directory on the way was itself looked up without
// following links: a link among them fails the lookup.

// ScanHF describes the snapshot a Hugging Face cache holds of a repository: the commit
// revision names (a branch or tag under refs/, or a commit), "main" when revision is
// empty. cache is the cache's name in fsys. Files h names are read and hashed; the others'
// sizes only are read, and LFS files carry the sha256 their blob is named after. It stops when ctx is done (hashing
// reads every byte).
func ScanHF(ctx context.Context, fsys fs.FS, cache, repo, revision string, h Hashing) (Manifest, error) {
	m := Manifest{Source: repo}
	org, name, ok := strings.Cut(repo, "/")
	if !ok || !validSegment(org) || !validSegment(name) {
		return m, fmt.Errorf("%w: repository %q is not Org/Name", ErrInvalid, repo)
	}
	repoDir := HFRepoDir(cache, repo)
	rel := "hub/" + hfRepoFolder(repo)
	if _, err := fs.Stat(fsys, repoDir); errors.Is(err, fs.ErrNotExist) {
		m.Absent = "no " + rel + " in the Hugging Face cache"
		return m, nil
	} else if err != nil {
		return m, err
	}
	ref := revision
	if ref == "" {
		ref = "main"
	}
	if !fs.ValidPath(ref) {
		return m, fmt.Errorf("%w: revision %q", ErrInvalid, revision)
	}
	var commit string
	b, err := readCapped(fsys, path.Join(repoDir, "refs", ref), maxRefBytes)
	switch {
	case err == nil:
		commit = strings.TrimSpace(string(b))
		if !IsGitSHA1(commit) {
			return m, fmt.Errorf("%w: %s/refs/%s holds %q, not a commit", ErrInvalid, rel, ref, commit)
		}
	case errors.Is(err, fs.ErrNotExist) && IsGitSHA1(ref):
		commit = ref // a pinned commit: no ref names it
	case errors.Is(err, fs.ErrNotExist):
		m.Absent = fmt.Sprintf("no refs/%s in %s", ref, rel)
		return m, nil
	default:
		return m, err
	}
	m.Revision = commit
	m.Dir = path.Join(repoDir, "snapshots", commit)
	if fi, err := fs.Stat(fsys, m.Dir); errors.Is(err, fs.ErrNotExist) || err == nil && !fi.IsDir() {
		m.Absent = fmt.Sprintf("no snapshot %s in %s", commit, rel)
		return m, nil
	} else if err != nil {
		return m, err
	}
	return m, scanDir(ctx, fsys, m.Dir, h, &m)
}

// ScanDir describes the model a plain directory holds (a model.host_dir), as ScanHF does
// for a snapshot; dir is its name in fsys, and source what the manifest and its messages
// call it (the node's path).
func ScanDir(ctx context.Context, fsys fs.FS, dir, source string, h Hashing) (Manifest, error) {
	m := Manifest{Source: source, Dir: dir}
	fi, err := fs.Stat(fsys, dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		m.Absent = "no directory " + source
		return m, nil
	case err != nil:
		return m, err
	case !fi.IsDir():
		m.Absent = source + " is not a directory"
		return m, nil
	}
	return m, scanDir(ctx, fsys, dir, h, &m)
}

// scanDir fills m with the model files in dir: config.json, every file a safetensors index
// lists (or, without an index, the *.safetensors present), and the small files present at
// the top (JSON, tokenizer, chat templates, remote code) that vLLM reads too.
func scanDir(ctx context.Context, fsys fs.FS, dir string, h Hashing, m *Manifest) error {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return err
	}
	names := map[string]bool{"config.json": true}
	var indexes, shards []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || transient(name) {
			continue
		}
		switch {
		case strings.HasSuffix(name, IndexSuffix):
			indexes = append(indexes, name)
		case strings.HasSuffix(name, ".safetensors"):
			shards = append(shards, name)
		}
		if small(name) {
			names[name] = true
		}
	}
	for _, idx := range indexes {
		listed, err := readIndex(fsys, path.Join(dir, idx))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a link to a missing blob: reported below, as the index itself is
		}
		if err != nil {
			return fmt.Errorf("%s: %w", idx, err)
		}
		for _, n := range listed {
			names[n] = true
		}
	}
	if len(indexes) == 0 {
		for _, s := range shards {
			names[s] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	slices.Sort(sorted)
	var targets []string // where each file's content is, links resolved
	for _, name := range sorted {
		p := path.Join(dir, name)
		target, fi, err := resolve(fsys, p)
		if errors.Is(err, fs.ErrNotExist) {
			m.Missing = append(m.Missing, name)
			continue
		}
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			m.Missing = append(m.Missing, name)
			continue
		}
		f := File{Name: name, Size: fi.Size()}
		if target != p {
			if b := path.Base(target); IsSHA256(b) || IsGitSHA1(b) {
				f.Blob = b
			}
		}
		if !h.of(name) && IsSHA256(f.Blob) {
			f.SHA256 = f.Blob
		}
		m.Files = append(m.Files, f)
		targets = append(targets, target)
	}
	return hashAll(ctx, fsys, m.Files, targets, h)
}

// resolve looks name up, following its symbolic links as the package comment says, and
// returns the name of the file they end at with its description (never a link).
func resolve(fsys fs.FS, name string) (string, fs.FileInfo, error) {
	for hops := 0; ; hops++ {
		fi, err := fs.Lstat(fsys, name)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return name, fi, err
		}
		if hops == maxLinkHops {
			return name, nil, &fs.PathError{Op: "resolve", Path: name, Err: fmt.Errorf("more than %d links", maxLinkHops)}
		}
		link, err := fs.ReadLink(fsys, name)
		if err != nil {
			return name, nil, err
		}
		next := path.Join(path.Dir(name), link)
		if path.IsAbs(link) || !fs.ValidPath(next) {
			return name, nil, &fs.PathError{Op: "resolve", Path: name, Err: fmt.Errorf("%w: it links to %s", ErrLinkOutside, link)}
		}
		name = next
	}
}

// readIndex returns the files a safetensors index's weight_map lists, deduplicated.
func readIndex(fsys fs.FS, name string) ([]string, error) {
	target, _, err := resolve(fsys, name)
	if err != nil {
		return nil, err
	}
	b, err := readCapped(fsys, target, MaxIndexBytes)
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%w: no weight_map", ErrInvalid)
	}
	seen := map[string]bool{}
	var out []string
	for _, f := range idx.WeightMap {
		if seen[f] {
			continue
		}
		if !fs.ValidPath(f) || f == "." {
			return nil, fmt.Errorf("%w: weight_map lists %q, not a file in the model's directory", ErrInvalid, f)
		}
		seen[f] = true
		out = append(out, f)
	}
	slices.Sort(out)
	return out, nil
}

// readCapped reads a regular file of at most limit bytes. The size is checked before the
// read and the read is bounded too (a file may grow meanwhile); a FIFO or device is
// refused by the file system the agent reads through (package confined) before it is
// opened, and here again, for any other fs.FS.
func readCapped(fsys fs.FS, name string, limit int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: not a regular file (%s)", ErrInvalid, fi.Mode().Type())}
	}
	tooBig := func(n int64) error {
		return &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: %d bytes, more than the %d this file can need", ErrInvalid, n, limit)}
	}
	if fi.Size() > limit {
		return nil, tooBig(fi.Size())
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, tooBig(int64(len(b)))
	}
	return b, nil
}

// hashAll sets the SHA256 of the files h names from their content (at targets, their
// links resolved).
func hashAll(ctx context.Context, fsys fs.FS, files []File, targets []string, h Hashing) error {
	sem := make(chan struct{}, hashParallelism)
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i := range files {
		if !h.of(files[i].Name) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			files[i].SHA256, errs[i] = hashFile(ctx, fsys, targets[i])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// hashFile returns the sha256 of a file's content in hex, stopping when ctx is done.
func hashFile(ctx context.Context, fsys fs.FS, name string) (string, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return HashContent(ctx, f)
}

// HashContent is the sha256 of what r holds, in hex, read 1 MiB at a time and stopping
// when ctx is done (a model shard is gigabytes).
func HashContent(ctx context.Context, r io.Reader) (string, error) {
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n, err := r.Read(buf)
		h.Write(buf[:n])
		if err == io.EOF {
			return hex.EncodeToString(h.Sum(nil)), nil
		}
		if err != nil {
			return "", err
		}
	}
}

// small reports whether a top-level file is one of the small files a model directory
// carries besides its weights, which vLLM or transformers read.
func small(name string) bool {
	if strings.HasPrefix(name, "tokenizer") {
		return true
	}
	switch path.Ext(name) {
	case ".json", ".model", ".txt", ".py", ".tiktoken", ".jinja":
		return true
	}
	return false
}

// transient reports files that are only on their way: Hugging Face's downloads in
// progress and locks, and tpdeploy's own partial copies.
func transient(name string) bool {
	for _, s := range []string{".incomplete", ".lock", PartialSuffix} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// PartialSuffix ends the name of a file tpdeploy is still copying into a model directory;
// it is renamed into place once its size and hash are verified.
const PartialSuffix = ".tpdeploy-partial"

func validSegment(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`)
}
