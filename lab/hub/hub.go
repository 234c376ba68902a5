// Package hub is the lab's Hugging Face hub: an http.Handler serving the endpoints of
// huggingface.co that a download uses, as huggingface_hub reads them (lab/README.md cites
// each behaviour): the revision API (a branch, tag or commit resolved to its commit, with
// the commit's files), and resolve/ for one file (ETag, X-Repo-Commit, X-Linked-Etag and
// X-Linked-Size for LFS files, served by a redirect as the hub's CDN does, with Range),
// and the hub's error answers: 401/403 with X-Error-Code GatedRepo for a gated repository,
// RepoNotFound, RevisionNotFound and EntryNotFound.
package hub

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// File is one file of a commit.
type File struct {
	Name string
	Data []byte
	// LFS says the file is stored in Git LFS (as the hub's .gitattributes puts
	// *.safetensors, *.bin and every file over 10 MB); the git blob is then a pointer.
	LFS bool
}

// Repo is one model repository.
type Repo struct {
	ID string // Org/Name
	// Gated repositories list their files to anyone but serve them only to a token
	// granted access.
	Gated bool
	// Refs maps branches and tags to commits.
	Refs map[string]string
	// Commits maps a commit (40 hex digits) to its files.
	Commits map[string][]File
}

// Hub serves repositories. Tokens maps a bearer token to the gated repositories it may
// read; any token listed is valid.
type Hub struct {
	Repos  map[string]*Repo
	Tokens map[string][]string

	mu   sync.Mutex
	sums map[dataKey]string // an LFS file's sha256, by its data's address and length
}

// sum is f's sha256, computed once per file: a lab model's shards are read once per
// request otherwise.
func (h *Hub) sum(f File) string {
	if len(f.Data) == 0 {
		return SHA256(nil)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := dataKey{&f.Data[0], len(f.Data)}
	if s, ok := h.sums[k]; ok {
		return s
	}
	if h.sums == nil {
		h.sums = map[dataKey]string{}
	}
	s := SHA256(f.Data)
	h.sums[k] = s
	return s
}

type dataKey struct {
	p *byte
	n int
}

// GitBlobID is git's id of a blob: sha1 of "blob <len>\0" and the content.
func GitBlobID(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// SHA256 is the hex sha256 of data: an LFS file's oid.
func SHA256(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// pointer is the Git LFS pointer file the repository's git holds for an LFS file.
func pointer(f File) []byte {
	return fmt.Appendf(nil, "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", SHA256(f.Data), len(f.Data))
}

// lfsPrefix is the lab's stand-in for the hub's CDN (cas-bridge.xethub.hf.co,
// cdn-lfs.hf.co): resolve/ of an LFS file redirects there.
const lfsPrefix = "/lab-lfs/"

// modTime is a fixed Last-Modified for every file, so that responses are reproducible.
var modTime = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	switch {
	case strings.HasPrefix(p, "/api/models/"):
		if r.Method != http.MethodGet {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.revision(w, r, strings.TrimPrefix(p, "/api/models/"))
	case strings.HasPrefix(p, lfsPrefix):
		h.lfs(w, r, strings.TrimPrefix(p, lfsPrefix))
	default:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.resolve(w, r, strings.TrimPrefix(p, "/"))
	}
}

// hubError answers as the hub does: the status, X-Error-Code (what
// huggingface_hub's hf_raise_for_status branches on) and X-Error-Message, and a JSON body
// {"error": message}.
func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// token returns the request's bearer token, and whether the hub knows it. An unknown
// token is refused outright, as the hub does ("Invalid credentials in Authorization
// header", 401), before the repository is looked at.
func (h *Hub) token(w http.ResponseWriter, r *http.Request) (tok string, ok bool) {
	a := r.Header.Get("Authorization")
	if a == "" {
		return "", true
	}
	tok, found := strings.CutPrefix(a, "Bearer ")
	if _, known := h.Tokens[tok]; !found || !known {
		hubError(w, http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
		return "", false
	}
	return tok, true
}

// repo finds a repository. A missing one is RepoNotFound: 401 to an anonymous request
// and 404 to an authenticated one (the hub does not tell a private repository from a
// missing one to those who cannot see it).
func (h *Hub) repo(w http.ResponseWriter, id, tok string) (*Repo, bool) {
	rp, ok := h.Repos[id]
	if !ok {
		status := http.StatusNotFound
		if tok == "" {
			status = http.StatusUnauthorized
		}
		hubError(w, status, "RepoNotFound", "Repository not found")
		return nil, false
	}
	return rp, true
}

// commit resolves a revision: a branch or tag, or a commit itself.
func (rp *Repo) commit(rev string) (string, bool) {
	if c, ok := rp.Refs[rev]; ok {
		return c, true
	}
	if _, ok := rp.Commits[rev]; ok {
		return rev, true
	}
	return "", false
}

type lfsInfo struct {
	SHA256      string `json:"sha256"`
	Size        int64  `json:"size"`
	PointerSize int64  `json:"pointerSize"`
}

type sibling struct {
	RFilename string   `json:"rfilename"`
	Size      *int64   `json:"size,omitempty"`
	BlobID    string   `json:"blobId,omitempty"`
	LFS       *lfsInfo `json:"lfs,omitempty"`
}

type modelInfo struct {
	ID       string    `json:"id"`
	ModelID  string    `json:"modelId"`
	SHA      string    `json:"sha"`
	Private  bool      `json:"private"`
	Gated    any       `json:"gated"`
	Siblings []sibling `json:"siblings"`
}

// revision serves GET /api/models/{org}/{name}[/revision/{rev}][?blobs=true]: the model's
// info at the commit rev resolves to (main without one). Gated repositories' info is public,
// as on the hub; only their files need access.
func (h *Hub) revision(w http.ResponseWriter, r *http.Request, rest string) {
	tok, ok := h.token(w, r)
	if !ok {
		return
	}
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) < 2 || (len(parts) > 2 && (len(parts) != 4 || parts[2] != "revision")) {
		hubError(w, http.StatusNotFound, "", "Not Found")
		return
	}
	id := parts[0] + "/" + parts[1]
	rev := "main"
	if len(parts) == 4 {
		var err error
		if rev, err = url.PathUnescape(parts[3]); err != nil {
			hubError(w, http.StatusBadRequest, "", "bad revision")
			return
		}
	}
	rp, ok := h.repo(w, id, tok)
	if !ok {
		return
	}
	commit, ok := rp.commit(rev)
	if !ok {
		hubError(w, http.StatusNotFound, "RevisionNotFound", fmt.Sprintf("Invalid rev id: %s", rev))
		return
	}
	info := modelInfo{ID: rp.ID, ModelID: rp.ID, SHA: commit, Gated: false}
	if rp.Gated {
		info.Gated = "manual"
	}
	blobs := r.URL.Query().Get("blobs") == "true"
	for _, f := range rp.Commits[commit] {
		s := sibling{RFilename: f.Name}
		if blobs {
			size := int64(len(f.Data))
			s.Size = &size
			if f.LFS {
				ptr := pointer(f)
				s.BlobID = GitBlobID(ptr)
				s.LFS = &lfsInfo{SHA256: SHA256(f.Data), Size: size, PointerSize: int64(len(ptr))}
			} else {
				s.BlobID = GitBlobID(f.Data)
			}
		}
		info.Siblings = append(info.Siblings, s)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(info)
}

// resolve serves GET and HEAD /{org}/{name}/resolve/{rev}/{path}. A file kept in git is
// served here, with ETag its git blob id; an LFS file is a 302 to the CDN, with
// X-Linked-Etag (its sha256) and X-Linked-Size, which huggingface_hub's
// get_hf_file_metadata prefers over the redirect's own ETag and Content-Length. Both carry
// X-Repo-Commit.
func (h *Hub) resolve(w http.ResponseWriter, r *http.Request, rest string) {
	tok, ok := h.token(w, r)
	if !ok {
		return
	}
	parts := strings.SplitN(rest, "/", 5)
	if len(parts) != 5 || parts[2] != "resolve" {
		hubError(w, http.StatusNotFound, "", "Not Found")
		return
	}
	id := parts[0] + "/" + parts[1]
	rev, err1 := url.PathUnescape(parts[3])
	name, err2 := url.PathUnescape(parts[4])
	if err1 != nil || err2 != nil {
		hubError(w, http.StatusBadRequest, "", "bad path")
		return
	}
	rp, ok := h.repo(w, id, tok)
	if !ok {
		return
	}
	if rp.Gated && !h.granted(tok, rp.ID) {
		// Anonymous: 401; a valid token without access: 403. Both GatedRepo.
		status := http.StatusForbidden
		msg := fmt.Sprintf("Access to model %s is restricted and you are not in the authorized list. Visit https://huggingface.co/%s to ask for access.", rp.ID, rp.ID)
		if tok == "" {
			status = http.StatusUnauthorized
			msg = fmt.Sprintf("Access to model %s is restricted. You must have access to it and be authenticated to access it. Please log in.", rp.ID)
		}
		hubError(w, status, "GatedRepo", msg)
		return
	}
	commit, ok := rp.commit(rev)
	if !ok {
		hubError(w, http.StatusNotFound, "RevisionNotFound", fmt.Sprintf("Invalid rev id: %s", rev))
		return
	}
	var file *File
	for i := range rp.Commits[commit] {
		if rp.Commits[commit][i].Name == name {
			file = &rp.Commits[commit][i]
		}
	}
	if file == nil {
		hubError(w, http.StatusNotFound, "EntryNotFound", "Entry not found")
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if file.LFS {
		sum := h.sum(*file)
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", fmt.Sprint(len(file.Data)))
		w.Header().Set("ETag", `"`+GitBlobID(pointer(*file))+`"`)
		// An absolute URL, as the hub's CDN is another host: huggingface_hub's HEAD
		// follows only relative redirects (those of a renamed repository), so it reads
		// X-Linked-Etag here rather than the CDN's answer.
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		w.Header().Set("Location", scheme+"://"+r.Host+lfsPrefix+sum)
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+GitBlobID(file.Data)+`"`)
	http.ServeContent(w, r, "", modTime, bytes.NewReader(file.Data))
}

func (h *Hub) granted(tok, repo string) bool {
	for _, id := range h.Tokens[tok] {
		if id == repo {
			return true
		}
	}
	return false
}

// lfs serves the CDN's copy of an LFS object by its sha256, with Range (http.ServeContent:
// 206 and Content-Range for a range, If-Range against the ETag). Like the hub's signed CDN
// URLs it needs no token: the resolve that redirected here checked access.
func (h *Hub) lfs(w http.ResponseWriter, r *http.Request, sum string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	for _, rp := range h.Repos {
		for _, files := range rp.Commits {
			for _, f := range files {
				if f.LFS && h.sum(f) == sum {
					w.Header().Set("ETag", `"`+sum+`"`)
					http.ServeContent(w, r, "", modTime, bytes.NewReader(f.Data))
					return
				}
			}
		}
	}
	http.Error(w, "not found", http.StatusNotFound)
}
