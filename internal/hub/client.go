package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// DefaultEndpoint is the hub huggingface_hub talks to without HF_ENDPOINT.
const DefaultEndpoint = "https://huggingface.co"

// maxAPIBytes bounds a revision API answer: a repository of ten thousand files is a few
// MB of JSON.
const maxAPIBytes = 64 << 20

// maxIndexBytes bounds a safetensors index (a line per tensor: a few MiB for the largest
// models).
const maxIndexBytes = 64 << 20

// Error is a classified failure of a hub request: Kind is a failure type (ModelGated,
// ModelNotFound, ModelOffline, ModelUnavailable, ModelCorrupt), which the caller turns
// into the contract's error.
type Error struct {
	Kind string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// KindOf returns the failure type of a hub error, "" for another error.
func KindOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

func fail(kind, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// EndpointFrom returns the hub's base URL as huggingface_hub chooses it: HF_ENDPOINT when
// set (a mirror), otherwise huggingface.co; without a trailing slash.
func EndpointFrom(getenv func(string) string) string {
	if e := strings.TrimRight(getenv("HF_ENDPOINT"), "/"); e != "" {
		return e
	}
	return DefaultEndpoint
}

// Client is a client of the hub's HTTP API.
type Client struct {
	// Endpoint is the hub's base URL (EndpointFrom).
	Endpoint string
	// Token is the bearer token (secrets.hf_token); empty for anonymous requests.
	Token string
	// HTTP is the HTTP client; http.DefaultClient when nil. Redirects to the hub's CDN
	// are followed; Go drops the Authorization header when one leads to another host, as
	// huggingface_hub does.
	HTTP *http.Client
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) do(ctx context.Context, method, u string, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("hub request %s: %w", u, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fail(failure.ModelOffline, "the hub at %s is unreachable: %v", c.Endpoint, err)
	}
	return resp, nil
}

// Classify is classify for a download made by another client (the agent's, which writes
// into the cache through package transfer): what of repo a refused answer was for.
func (c *Client) Classify(resp *http.Response, repo, what string) error {
	return c.classify(resp, repo, what)
}

// classify turns a hub error answer into an Error, as huggingface_hub's
// hf_raise_for_status reads it: X-Error-Code first, then the status.
func (c *Client) classify(resp *http.Response, repo, what string) error {
	code := resp.Header.Get("X-Error-Code")
	msg := resp.Header.Get("X-Error-Message")
	switch {
	case code == "GatedRepo" && c.Token == "":
		return fail(failure.ModelGated, "%s is gated and no token was given: set secrets.hf_token to a token of an account that accepted its terms at %s/%s", repo, c.Endpoint, repo)
	case code == "GatedRepo":
		return fail(failure.ModelGated, "the token has no access to gated %s: accept its terms at %s/%s with the token's account", repo, c.Endpoint, repo)
	case code == "RepoNotFound":
		return fail(failure.ModelNotFound, "no repository %s on %s (or it is private and the token cannot see it)", repo, c.Endpoint)
	case code == "RevisionNotFound":
		return fail(failure.ModelNotFound, "%s has no revision %s", repo, what)
	case code == "EntryNotFound":
		return fail(failure.ModelNotFound, "%s has no file %s", repo, what)
	case resp.StatusCode == http.StatusUnauthorized && msg == "Invalid credentials in Authorization header":
		return fail(failure.ModelUnavailable, "the hub refused the token (401: invalid credentials): check secrets.hf_token")
	case resp.StatusCode == http.StatusUnauthorized:
		// huggingface_hub reads a bare 401 on a repository's URL as RepoNotFound.
		return fail(failure.ModelNotFound, "no repository %s on %s (401; it may be private)", repo, c.Endpoint)
	case resp.StatusCode == http.StatusForbidden:
		return fail(failure.ModelUnavailable, "the hub refused %s of %s (403): %s", what, repo, msg)
	case resp.StatusCode == http.StatusNotFound:
		return fail(failure.ModelNotFound, "%s of %s not found (404)", what, repo)
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return fail(failure.ModelOffline, "the hub at %s answered %s for %s of %s", c.Endpoint, resp.Status, what, repo)
	default:
		return fmt.Errorf("hub: %s of %s: %s %s", what, repo, resp.Status, msg)
	}
}

// Commit is a repository's commit and its files.
type Commit struct {
	Repo   string    `json:"repo"`
	Commit string    `json:"commit"`
	Gated  bool      `json:"gated,omitempty"`
	Files  []Sibling `json:"files"`
}

// File returns the commit's file of that name.
func (c Commit) File(name string) (Sibling, bool) {
	for _, f := range c.Files {
		if f.Name == name {
			return f, true
		}
	}
	return Sibling{}, false
}

func repoPath(repo string) (string, error) {
	org, name, ok := strings.Cut(repo, "/")
	if !ok || org == "" || name == "" || strings.Contains(name, "/") || org == ".." || name == ".." || org == "." || name == "." {
		return "", fmt.Errorf("repository %q is not Org/Name", repo)
	}
	return url.PathEscape(org) + "/" + url.PathEscape(name), nil
}

// Revision resolves rev (a branch, tag or commit; "main" when empty) to its commit and
// lists the commit's files with their sizes and hashes (GET
// /api/models/{repo}/revision/{rev}?blobs=true, as HfApi.model_info(files_metadata=True)).
// A gated repository's files are listed to anyone; Access tells whether the token may read
// them.
func (c *Client) Revision(ctx context.Context, repo, rev string) (Commit, error) {
	rp, err := repoPath(repo)
	if err != nil {
		return Commit{}, err
	}
	if rev == "" {
		rev = "main"
	}
	resp, err := c.do(ctx, http.MethodGet, c.Endpoint+"/api/models/"+rp+"/revision/"+url.PathEscape(rev)+"?blobs=true", nil)
	if err != nil {
		return Commit{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Commit{}, c.classify(resp, repo, rev)
	}
	var info struct {
		SHA      string          `json:"sha"`
		Gated    json.RawMessage `json:"gated"`
		Siblings []struct {
			RFilename string `json:"rfilename"`
			Size      *int64 `json:"size"`
			BlobID    string `json:"blobId"`
			LFS       *struct {
				SHA256 string `json:"sha256"`
				Size   int64  `json:"size"`
			} `json:"lfs"`
		} `json:"siblings"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAPIBytes)).Decode(&info); err != nil {
		return Commit{}, fmt.Errorf("hub: revision %s of %s: %w", rev, repo, err)
	}
	if len(info.SHA) != 40 {
		return Commit{}, fmt.Errorf("hub: revision %s of %s: the answer names no commit (sha %q)", rev, repo, info.SHA)
	}
	out := Commit{Repo: repo, Commit: info.SHA, Gated: len(info.Gated) > 0 && string(info.Gated) != "false" && string(info.Gated) != "null"}
	for _, s := range info.Siblings {
		if s.Size == nil {
			return Commit{}, fmt.Errorf("hub: revision %s of %s: %s has no size (the hub ignored blobs=true)", rev, repo, s.RFilename)
		}
		f := Sibling{Name: s.RFilename, Size: *s.Size, BlobID: s.BlobID}
		if s.LFS != nil {
			f.SHA256, f.Size = s.LFS.SHA256, s.LFS.Size
		}
		out.Files = append(out.Files, f)
	}
	return out, nil
}

// ResolveURL is where the commit's file name is downloaded from (resolve/).
func (c *Client) ResolveURL(repo, commit, name string) (string, error) {
	return c.resolveURL(repo, commit, name)
}

func (c *Client) resolveURL(repo, commit, name string) (string, error) {
	rp, err := repoPath(repo)
	if err != nil {
		return "", err
	}
	segs := strings.Split(name, "/")
	for i, s := range segs {
		if s == "" || s == "." || s == ".." {
			return "", fmt.Errorf("file %q of %s is not a path inside the repository", name, repo)
		}
		segs[i] = url.PathEscape(s)
	}
	return c.Endpoint + "/" + rp + "/resolve/" + url.PathEscape(commit) + "/" + strings.Join(segs, "/"), nil
}

// Access checks that the token may read the commit's file (a HEAD of resolve/, as
// huggingface_hub's get_hf_file_metadata does before a download), so a gated repository is
// refused at plan rather than mid-download. Redirects are not followed: the hub's answer
// itself says.
func (c *Client) Access(ctx context.Context, repo, commit, name string) error {
	u, err := c.resolveURL(repo, commit, name)
	if err != nil {
		return err
	}
	hc := *c.http()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cc := *c
	cc.HTTP = &hc
	resp, err := cc.do(ctx, http.MethodHead, u, http.Header{"Accept-Encoding": {"identity"}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 == 2 || resp.StatusCode/100 == 3 {
		return nil
	}
	return c.classify(resp, repo, name)
}

// WeightMap reads the commit's safetensors index and returns its weight_map; nil, nil when
// the commit has no index.
func (c *Client) WeightMap(ctx context.Context, cm Commit) (map[string]string, error) {
	if _, ok := cm.File(IndexName); !ok {
		return nil, nil
	}
	u, err := c.resolveURL(cm.Repo, cm.Commit, IndexName)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.classify(resp, cm.Repo, IndexName)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxIndexBytes)).Decode(&idx); err != nil {
		return nil, fmt.Errorf("hub: %s of %s: %w", IndexName, cm.Repo, err)
	}
	if idx.WeightMap == nil {
		return nil, fmt.Errorf("hub: %s of %s has no weight_map", IndexName, cm.Repo)
	}
	return idx.WeightMap, nil
}

// PartialSuffix ends the name of a file being downloaded, as huggingface_hub names it.
const PartialSuffix = ".incomplete"

// Download fetches the commit's file f to dest, through dest+PartialSuffix: a partial file
// left by an earlier attempt is resumed with a Range request from its end (its bytes are
// hashed first), and the whole is verified against f's size and hash (an LFS file's sha256,
// which is also its ETag, or the git blob id of a small one) before it is renamed to dest.
// A file that does not verify is removed and ModelCorrupt; f without a hash is refused.
func (c *Client) Download(ctx context.Context, repo, commit string, f Sibling, dest string) (received int64, err error) {
	if f.SHA256 == "" && f.BlobID == "" {
		return 0, fmt.Errorf("hub: %s of %s has no hash to verify it by", f.Name, repo)
	}
	u, err := c.resolveURL(repo, commit, f.Name)
	if err != nil {
		return 0, err
	}
	partial := dest + PartialSuffix
	file, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("hub: open %s: %w", partial, err)
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return 0, fmt.Errorf("hub: %s: %w", partial, err)
	}
	have := st.Size()
	var h hash.Hash
	if f.SHA256 != "" {
		h = sha256.New()
	} else {
		h = sha1.New()
		fmt.Fprintf(h, "blob %d\x00", f.Size)
	}
	if have > f.Size {
		have = 0
	}
	if have > 0 {
		if _, err := io.CopyN(h, file, have); err != nil {
			return 0, fmt.Errorf("hub: read %s: %w", partial, err)
		}
	} else if err := file.Truncate(0); err != nil {
		return 0, fmt.Errorf("hub: truncate %s: %w", partial, err)
	}
	if have < f.Size {
		hdr := http.Header{"Accept-Encoding": {"identity"}}
		if have > 0 {
			hdr.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
		}
		resp, err := c.do(ctx, http.MethodGet, u, hdr)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusPartialContent && have > 0 && rangeStart(resp.Header.Get("Content-Range")) == have:
		case resp.StatusCode == http.StatusOK:
			// The whole file: start over.
			if have > 0 {
				h.Reset()
				if f.SHA256 == "" {
					fmt.Fprintf(h, "blob %d\x00", f.Size)
				}
				have = 0
			}
			if err := file.Truncate(0); err != nil {
				return 0, fmt.Errorf("hub: truncate %s: %w", partial, err)
			}
		case resp.StatusCode/100 == 2:
			return 0, fmt.Errorf("hub: %s of %s: %s with Content-Range %q for a range from %d", f.Name, repo, resp.Status, resp.Header.Get("Content-Range"), have)
		default:
			if have == 0 {
				// Nothing arrived: leave no empty partial file behind.
				file.Close()
				_ = os.Remove(partial)
			}
			return 0, c.classify(resp, repo, f.Name)
		}
		if _, err := file.Seek(have, io.SeekStart); err != nil {
			return 0, fmt.Errorf("hub: %s: %w", partial, err)
		}
		// One byte more than is due, to tell an overlong answer from a complete one.
		n, err := io.Copy(io.MultiWriter(file, h), io.LimitReader(resp.Body, f.Size-have+1))
		received = n
		if err != nil {
			if ctx.Err() != nil {
				return received, ctx.Err()
			}
			// What arrived stays in the partial file for the next attempt.
			return received, fail(failure.ModelOffline, "hub: download of %s of %s broke after %d bytes: %v", f.Name, repo, have+n, err)
		}
		have += n
	}
	got := hex.EncodeToString(h.Sum(nil))
	want := f.SHA256
	if want == "" {
		want = f.BlobID
	}
	if have != f.Size || got != want {
		file.Close()
		_ = os.Remove(partial)
		return received, fail(failure.ModelCorrupt, "hub: %s of %s arrived with %d bytes and hash %s, the hub lists %d bytes and %s; the partial file is removed", f.Name, repo, have, short(got), f.Size, short(want))
	}
	if err := file.Sync(); err != nil {
		return received, fmt.Errorf("hub: sync %s: %w", partial, err)
	}
	if err := file.Close(); err != nil {
		return received, fmt.Errorf("hub: close %s: %w", partial, err)
	}
	if err := os.Rename(partial, dest); err != nil {
		return received, fmt.Errorf("hub: %w", err)
	}
	return received, nil
}

// rangeStart reads the first byte of a Content-Range ("bytes 4000-9999/10000"); -1 when
// it is not one.
func rangeStart(v string) int64 {
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return -1
	}
	first, _, ok := strings.Cut(rest, "-")
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(first, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
