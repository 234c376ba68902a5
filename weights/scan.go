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
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// ErrInvalid marks a model whose files cannot be read as a model (an index that is not
// JSON or lists paths outside the model's directory, a ref that holds no commit): copying
// or retrying does not help.
var ErrInvalid = errors.New("invalid model")

// IndexSuffix ends the name of a safetensors index (model.safetensors.index.json), whose
// weight_map says which shard holds each tensor.
const IndexSuffix = ".safetensors.index.json"

// hashParallelism bounds how many files are hashed at once when checksums are asked for.
const hashParallelism = 4

// HFRepoDir is a repository's directory in a Hugging Face cache (HF_HOME, which holds
// hub/): <cache>/hub/models--Org--Name.
func HFRepoDir(cache, repo string) string {
	return filepath.Join(cache, "hub", hfRepoFolder(repo))
}

// HFSnapshotDir is the directory of one commit of a repository in a Hugging Face cache.
func HFSnapshotDir(cache, repo, commit string) string {
	return filepath.Join(HFRepoDir(cache, repo), "snapshots", commit)
}

func hfRepoFolder(repo string) string { return "models--" + strings.ReplaceAll(repo, "/", "--") }

// ScanHF describes the snapshot a Hugging Face cache holds of a repository: the commit
// revision names (a branch or tag under refs/, or a commit), "main" when revision is
// empty. With checksums every file is read and hashed; without, only sizes are read and
// LFS files carry the sha256 their blob is named after.
func ScanHF(cache, repo, revision string, checksums bool) (Manifest, error) {
	return ScanHFContext(context.Background(), cache, repo, revision, checksums)
}

// ScanHFContext is ScanHF, stopping when ctx is done (hashing reads every byte).
func ScanHFContext(ctx context.Context, cache, repo, revision string, checksums bool) (Manifest, error) {
	m := Manifest{Source: repo}
	org, name, ok := strings.Cut(repo, "/")
	if !ok || !validSegment(org) || !validSegment(name) {
		return m, fmt.Errorf("%w: repository %q is not Org/Name", ErrInvalid, repo)
	}
	repoDir := HFRepoDir(cache, repo)
	rel := "hub/" + hfRepoFolder(repo)
	if _, err := os.Stat(repoDir); errors.Is(err, fs.ErrNotExist) {
		m.Absent = "no " + rel + " in the Hugging Face cache"
		return m, nil
	} else if err != nil {
		return m, err
	}
	ref := revision
	if ref == "" {
		ref = "main"
	}
	if !filepath.IsLocal(ref) {
		return m, fmt.Errorf("%w: revision %q", ErrInvalid, revision)
	}
	var commit string
	b, err := os.ReadFile(filepath.Join(repoDir, "refs", ref))
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
	m.Dir = filepath.Join(repoDir, "snapshots", commit)
	if fi, err := os.Stat(m.Dir); errors.Is(err, fs.ErrNotExist) || err == nil && !fi.IsDir() {
		m.Absent = fmt.Sprintf("no snapshot %s in %s", commit, rel)
		return m, nil
	} else if err != nil {
		return m, err
	}
	return m, scanDir(ctx, m.Dir, checksums, &m)
}

// ScanDir describes the model a plain directory holds (a model.host_dir), as ScanHF does
// for a snapshot.
func ScanDir(dir string, checksums bool) (Manifest, error) {
	return ScanDirContext(context.Background(), dir, checksums)
}

// ScanDirContext is ScanDir, stopping when ctx is done.
func ScanDirContext(ctx context.Context, dir string, checksums bool) (Manifest, error) {
	m := Manifest{Source: dir, Dir: dir}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		m.Absent = "no directory " + dir
		return m, nil
	case err != nil:
		return m, err
	case !fi.IsDir():
		m.Absent = dir + " is not a directory"
		return m, nil
	}
	return m, scanDir(ctx, dir, checksums, &m)
}

// scanDir fills m with the model files in dir: config.json, every file a safetensors index
// lists (or, without an index, the *.safetensors present), and the small files present at
// the top (JSON, tokenizer, chat templates, remote code) that vLLM reads too.
func scanDir(ctx context.Context, dir string, checksums bool, m *Manifest) error {
	entries, err := os.ReadDir(dir)
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
		listed, err := readIndex(filepath.Join(dir, idx))
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
	for _, name := range sorted {
		p := filepath.Join(dir, filepath.FromSlash(name))
		fi, err := os.Stat(p)
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
		if li, err := os.Lstat(p); err == nil && li.Mode()&fs.ModeSymlink != 0 {
			if target, err := os.Readlink(p); err == nil {
				if b := path.Base(filepath.ToSlash(target)); IsSHA256(b) || IsGitSHA1(b) {
					f.Blob = b
				}
			}
		}
		if !checksums && IsSHA256(f.Blob) {
			f.SHA256 = f.Blob
		}
		m.Files = append(m.Files, f)
	}
	if checksums {
		return hashAll(ctx, dir, m.Files)
	}
	return nil
}

// readIndex returns the files a safetensors index's weight_map lists, deduplicated.
func readIndex(p string) ([]string, error) {
	b, err := os.ReadFile(p)
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

// hashAll sets the SHA256 of every file from its content.
func hashAll(ctx context.Context, dir string, files []File) error {
	sem := make(chan struct{}, hashParallelism)
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i := range files {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sum, err := HashFile(ctx, filepath.Join(dir, filepath.FromSlash(files[i].Name)))
			files[i].SHA256, errs[i] = sum, err
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// HashFile returns the sha256 of a file's content in hex, stopping when ctx is done.
func HashFile(ctx context.Context, p string) (string, error) {
	f, err := os.Open(p)
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
