package hub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const commitA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// testHub is a hub with one public and one gated repository, a token granted the gated one
// and a valid token without access. Exported for the hub client's tests in the same module.
func testHub() *Hub {
	files := []File{
		{Name: "config.json", Data: []byte(`{"architectures":["LlamaForCausalLM"]}`)},
		{Name: "model.safetensors", Data: bytes.Repeat([]byte("0123456789"), 1000), LFS: true},
	}
	return &Hub{
		Repos: map[string]*Repo{
			"org/open":  {ID: "org/open", Refs: map[string]string{"main": commitA}, Commits: map[string][]File{commitA: files}},
			"org/gated": {ID: "org/gated", Gated: true, Refs: map[string]string{"main": commitA}, Commits: map[string][]File{commitA: files}},
		},
		Tokens: map[string][]string{"granted": {"org/gated"}, "other": nil},
	}
}

func do(t *testing.T, srv *httptest.Server, method, path, token string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestRevisionResolvesToTheCommitWithItsFiles(t *testing.T) {
	srv := httptest.NewServer(testHub())
	defer srv.Close()
	for _, path := range []string{"/api/models/org/open/revision/main?blobs=true", "/api/models/org/open/revision/" + commitA + "?blobs=true"} {
		resp := do(t, srv, "GET", path, "", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		var info struct {
			SHA      string `json:"sha"`
			Siblings []struct {
				RFilename string `json:"rfilename"`
				Size      int64  `json:"size"`
				BlobID    string `json:"blobId"`
				LFS       *struct {
					SHA256 string `json:"sha256"`
					Size   int64  `json:"size"`
				} `json:"lfs"`
			} `json:"siblings"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
			t.Fatal(err)
		}
		if info.SHA != commitA || len(info.Siblings) != 2 {
			t.Fatalf("%s: %+v", path, info)
		}
		cfg, w := info.Siblings[0], info.Siblings[1]
		if cfg.RFilename != "config.json" || cfg.LFS != nil || cfg.BlobID != GitBlobID([]byte(`{"architectures":["LlamaForCausalLM"]}`)) || cfg.Size != 38 {
			t.Errorf("config.json: %+v", cfg)
		}
		if w.LFS == nil || w.LFS.Size != 10000 || w.LFS.SHA256 != SHA256(bytes.Repeat([]byte("0123456789"), 1000)) || w.Size != 10000 {
			t.Errorf("model.safetensors: %+v", w)
		}
	}
	// Without ?blobs=true the siblings carry names only.
	resp := do(t, srv, "GET", "/api/models/org/open/revision/main", "", nil)
	body, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(body), `"size"`) || !strings.Contains(string(body), `"rfilename":"model.safetensors"`) {
		t.Errorf("without blobs: %s", body)
	}
}

func TestErrorsCarryTheHubsErrorCodes(t *testing.T) {
	srv := httptest.NewServer(testHub())
	defer srv.Close()
	cases := []struct {
		method, path, token string
		status              int
		code                string
	}{
		{"GET", "/api/models/org/missing/revision/main", "", 401, "RepoNotFound"},
		{"GET", "/api/models/org/missing/revision/main", "other", 404, "RepoNotFound"},
		{"GET", "/api/models/org/open/revision/nope", "", 404, "RevisionNotFound"},
		{"GET", "/api/models/org/open/revision/main", "forged", 401, ""},
		{"GET", "/api/models/org/gated/revision/main", "", 200, ""}, // a gated repo's info is public
		{"HEAD", "/org/gated/resolve/main/config.json", "", 401, "GatedRepo"},
		{"GET", "/org/gated/resolve/main/config.json", "other", 403, "GatedRepo"},
		{"HEAD", "/org/gated/resolve/main/config.json", "granted", 200, ""},
		{"HEAD", "/org/open/resolve/main/missing.json", "", 404, "EntryNotFound"},
		{"HEAD", "/org/open/resolve/v9/config.json", "", 404, "RevisionNotFound"},
		{"HEAD", "/org/missing/resolve/main/config.json", "", 401, "RepoNotFound"},
	}
	for _, c := range cases {
		resp := do(t, srv, c.method, c.path, c.token, nil)
		if resp.StatusCode != c.status || resp.Header.Get("X-Error-Code") != c.code {
			t.Errorf("%s %s (token %q): %d %q, want %d %q", c.method, c.path, c.token, resp.StatusCode, resp.Header.Get("X-Error-Code"), c.status, c.code)
		}
	}
}

func TestResolveHeaders(t *testing.T) {
	srv := httptest.NewServer(testHub())
	defer srv.Close()
	resp := do(t, srv, "HEAD", "/org/open/resolve/main/config.json", "", nil)
	data := []byte(`{"architectures":["LlamaForCausalLM"]}`)
	if resp.StatusCode != 200 || resp.Header.Get("ETag") != `"`+GitBlobID(data)+`"` || resp.Header.Get("X-Repo-Commit") != commitA ||
		resp.Header.Get("Content-Length") != fmt.Sprint(len(data)) || resp.Header.Get("X-Linked-Etag") != "" {
		t.Errorf("config.json: %d %v", resp.StatusCode, resp.Header)
	}
	weights := bytes.Repeat([]byte("0123456789"), 1000)
	resp = do(t, srv, "HEAD", "/org/open/resolve/main/model.safetensors", "", nil)
	if resp.StatusCode != 302 || resp.Header.Get("X-Linked-Etag") != `"`+SHA256(weights)+`"` || resp.Header.Get("X-Linked-Size") != "10000" ||
		resp.Header.Get("X-Repo-Commit") != commitA || resp.Header.Get("Location") != srv.URL+"/lab-lfs/"+SHA256(weights) {
		t.Errorf("model.safetensors: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestRangeResumesADownload: a download cut after 4000 bytes resumes with Range from there
// and the pieces are the file.
func TestRangeResumesADownload(t *testing.T) {
	srv := httptest.NewServer(testHub())
	defer srv.Close()
	weights := bytes.Repeat([]byte("0123456789"), 1000)
	loc := do(t, srv, "GET", "/org/open/resolve/main/model.safetensors", "", nil).Header.Get("Location")
	loc = strings.TrimPrefix(loc, srv.URL)
	first := do(t, srv, "GET", loc, "", map[string]string{"Range": "bytes=0-3999"})
	a, _ := io.ReadAll(first.Body)
	rest := do(t, srv, "GET", loc, "", map[string]string{"Range": "bytes=4000-", "If-Range": `"` + SHA256(weights) + `"`})
	b, _ := io.ReadAll(rest.Body)
	if first.StatusCode != 206 || rest.StatusCode != 206 || rest.Header.Get("Content-Range") != "bytes 4000-9999/10000" {
		t.Fatalf("statuses %d %d, Content-Range %q", first.StatusCode, rest.StatusCode, rest.Header.Get("Content-Range"))
	}
	if !bytes.Equal(append(a, b...), weights) {
		t.Error("the resumed pieces are not the file")
	}
	// An If-Range naming another version gets the whole file, not a range of the wrong one.
	stale := do(t, srv, "GET", loc, "", map[string]string{"Range": "bytes=4000-", "If-Range": `"deadbeef"`})
	if stale.StatusCode != 200 {
		t.Errorf("stale If-Range: %d", stale.StatusCode)
	}
}
