package hub

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/failure"
	labhub "github.com/tpdeploy/tpdeploy/lab/hub"
)

const (
	commitMain = "1111111111111111111111111111111111111111"
	commitOld  = "2222222222222222222222222222222222222222"
)

var shard1 = bytes.Repeat([]byte("a"), 30000)
var shard2 = bytes.Repeat([]byte("b"), 20000)

// gptOSSLike is a repository shaped as openai/gpt-oss-120b: top-level shards with their
// index, the original checkpoint under original/, and the tokenizer and chat template.
func gptOSSLike() []labhub.File {
	idx := `{"metadata":{"total_size":50000},"weight_map":{"w1":"model-00001-of-00002.safetensors","w2":"model-00002-of-00002.safetensors"}}`
	return []labhub.File{
		{Name: ".gitattributes", Data: []byte("*.safetensors filter=lfs\n")},
		{Name: "README.md", Data: []byte("# model\n")},
		{Name: "config.json", Data: []byte(`{"architectures":["GptOssForCausalLM"]}`)},
		{Name: "generation_config.json", Data: []byte(`{}`)},
		{Name: "tokenizer.json", Data: []byte(`{"model":{}}`)},
		{Name: "tokenizer_config.json", Data: []byte(`{}`)},
		{Name: "chat_template.jinja", Data: []byte(`{{ messages }}`)},
		{Name: IndexName, Data: []byte(idx)},
		{Name: "model-00001-of-00002.safetensors", Data: shard1, LFS: true},
		{Name: "model-00002-of-00002.safetensors", Data: shard2, LFS: true},
		{Name: "original/model.safetensors", Data: bytes.Repeat([]byte("o"), 50000), LFS: true},
		{Name: "original/config.json", Data: []byte(`{}`)},
	}
}

// countingHub wraps the lab hub and records the Range headers and bytes it sent.
type countingHub struct {
	h      http.Handler
	mu     sync.Mutex
	ranges []string
	sent   int64
}

func (c *countingHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	if r.Header.Get("Range") != "" {
		c.ranges = append(c.ranges, r.Header.Get("Range"))
	}
	c.mu.Unlock()
	c.h.ServeHTTP(countWriter{w, c}, r)
}

type countWriter struct {
	http.ResponseWriter
	c *countingHub
}

func (w countWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	w.c.sent += int64(len(p))
	w.c.mu.Unlock()
	return w.ResponseWriter.Write(p)
}

func newHub(t *testing.T) (*httptest.Server, *countingHub) {
	t.Helper()
	files := gptOSSLike()
	h := &labhub.Hub{
		Repos: map[string]*labhub.Repo{
			"openai/gpt-oss-lab": {ID: "openai/gpt-oss-lab", Refs: map[string]string{"main": commitMain, "v1": commitOld},
				Commits: map[string][]labhub.File{commitMain: files, commitOld: files[:9]}},
			"meta/gated": {ID: "meta/gated", Gated: true, Refs: map[string]string{"main": commitMain}, Commits: map[string][]labhub.File{commitMain: files}},
		},
		Tokens: map[string][]string{"granted": {"meta/gated"}, "nogrant": nil},
	}
	ch := &countingHub{h: h}
	srv := httptest.NewServer(ch)
	t.Cleanup(srv.Close)
	return srv, ch
}

func TestEndpointFrom(t *testing.T) {
	if got := EndpointFrom(func(string) string { return "" }); got != DefaultEndpoint {
		t.Errorf("no HF_ENDPOINT: %q", got)
	}
	env := map[string]string{"HF_ENDPOINT": "https://hf-mirror.example/"}
	if got := EndpointFrom(func(k string) string { return env[k] }); got != "https://hf-mirror.example" {
		t.Errorf("HF_ENDPOINT: %q", got)
	}
}

// TestResolveListAndSelect: main and a tag resolve to their commits; the listed files
// carry sizes and LFS hashes, and the selection from the index keeps the two shards,
// config and tokenizer, not original/ or README.
func TestResolveListAndSelect(t *testing.T) {
	srv, _ := newHub(t)
	c := &Client{Endpoint: srv.URL}
	ctx := context.Background()
	cm, err := c.Revision(ctx, "openai/gpt-oss-lab", "")
	if err != nil {
		t.Fatal(err)
	}
	if cm.Commit != commitMain || len(cm.Files) != 12 || cm.Gated {
		t.Fatalf("commit %s, %d files, gated %v", cm.Commit, len(cm.Files), cm.Gated)
	}
	f, _ := cm.File("model-00001-of-00002.safetensors")
	if f.Size != 30000 || f.SHA256 != labhub.SHA256(shard1) {
		t.Errorf("shard: %+v", f)
	}
	if old, err := c.Revision(ctx, "openai/gpt-oss-lab", "v1"); err != nil || old.Commit != commitOld {
		t.Errorf("v1: %v %v", old.Commit, err)
	}
	wm, err := c.WeightMap(ctx, cm)
	if err != nil {
		t.Fatal(err)
	}
	sel, err := Select(cm.Files, wm)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range sel.Files {
		names = append(names, f.Name)
	}
	want := "chat_template.jinja config.json generation_config.json model-00001-of-00002.safetensors model-00002-of-00002.safetensors " + IndexName + " tokenizer.json tokenizer_config.json"
	if strings.Join(names, " ") != want || sel.Skipped != 4 {
		t.Errorf("selected %q (skipped %d)", names, sel.Skipped)
	}
}

func TestClassifiedRefusals(t *testing.T) {
	srv, _ := newHub(t)
	ctx := context.Background()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	cases := []struct {
		name, endpoint, token, repo, rev string
		access                           bool
		kind, msg                        string
	}{
		{"gated without a token", srv.URL, "", "meta/gated", "main", true, failure.ModelGated, "no token was given: set secrets.hf_token"},
		{"gated, token without access", srv.URL, "nogrant", "meta/gated", "main", true, failure.ModelGated, "accept its terms at " + srv.URL + "/meta/gated"},
		{"missing repository, anonymous", srv.URL, "", "nobody/nothing", "main", false, failure.ModelNotFound, "no repository nobody/nothing"},
		{"missing repository, with a token", srv.URL, "nogrant", "nobody/nothing", "main", false, failure.ModelNotFound, "no repository nobody/nothing"},
		{"missing revision", srv.URL, "", "openai/gpt-oss-lab", "v9", false, failure.ModelNotFound, "no revision v9"},
		{"forged token", srv.URL, "forged", "openai/gpt-oss-lab", "main", false, failure.ModelUnavailable, "refused the token"},
		{"unreachable", closed.URL, "", "openai/gpt-oss-lab", "main", false, failure.ModelOffline, "unreachable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{Endpoint: tc.endpoint, Token: tc.token}
			cm, err := c.Revision(ctx, tc.repo, tc.rev)
			if tc.access {
				if err != nil {
					t.Fatalf("a gated repository's files are listed to anyone: %v", err)
				}
				if !cm.Gated {
					t.Error("not marked gated")
				}
				err = c.Access(ctx, tc.repo, cm.Commit, "config.json")
			}
			if KindOf(err) != tc.kind || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v (kind %q), want %s with %q", err, KindOf(err), tc.kind, tc.msg)
			}
		})
	}
	c := &Client{Endpoint: srv.URL, Token: "granted"}
	if err := c.Access(ctx, "meta/gated", commitMain, "model-00001-of-00002.safetensors"); err != nil {
		t.Errorf("granted token: %v", err)
	}
	if err := c.Access(ctx, "openai/gpt-oss-lab", commitMain, "missing.json"); KindOf(err) != failure.ModelNotFound {
		t.Errorf("missing file: %v", err)
	}
}

func TestDownloadVerifiesAndResumes(t *testing.T) {
	srv, ch := newHub(t)
	ctx := context.Background()
	c := &Client{Endpoint: srv.URL, Token: "granted"}
	cm, err := c.Revision(ctx, "meta/gated", "main")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	// A small file kept in git, verified by its git blob id.
	cfg, _ := cm.File("config.json")
	if _, err := c.Download(ctx, cm.Repo, cm.Commit, cfg, filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "config.json")); string(b) != `{"architectures":["GptOssForCausalLM"]}` {
		t.Errorf("config.json: %s", b)
	}

	// A shard whose download broke after 12000 bytes resumes from there: only the rest is
	// sent, through the CDN redirect (whose host drops no token here: same host).
	f, _ := cm.File("model-00001-of-00002.safetensors")
	dest := filepath.Join(dir, f.Name)
	if err := os.WriteFile(dest+PartialSuffix, shard1[:12000], 0o644); err != nil {
		t.Fatal(err)
	}
	ch.sent = 0
	n, err := c.Download(ctx, cm.Repo, cm.Commit, f, dest)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dest); !bytes.Equal(b, shard1) {
		t.Error("the resumed shard is not the file")
	}
	if n != 18000 || ch.sent != 18000 || len(ch.ranges) != 2 || ch.ranges[1] != "bytes=12000-" {
		t.Errorf("received %d, the hub sent %d with ranges %q; want 18000 from bytes=12000-", n, ch.sent, ch.ranges)
	}
	if _, err := os.Stat(dest + PartialSuffix); !os.IsNotExist(err) {
		t.Errorf("partial left: %v", err)
	}

	// A partial file holding other bytes does not verify: ModelCorrupt, and removed, so
	// the next attempt starts over and succeeds.
	f2, _ := cm.File("model-00002-of-00002.safetensors")
	dest2 := filepath.Join(dir, f2.Name)
	if err := os.WriteFile(dest2+PartialSuffix, bytes.Repeat([]byte("x"), 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Download(ctx, cm.Repo, cm.Commit, f2, dest2); KindOf(err) != failure.ModelCorrupt || !strings.Contains(err.Error(), "partial file is removed") {
		t.Fatalf("corrupt partial: %v", err)
	}
	if _, err := os.Stat(dest2 + PartialSuffix); !os.IsNotExist(err) {
		t.Errorf("corrupt partial left: %v", err)
	}
	if _, err := c.Download(ctx, cm.Repo, cm.Commit, f2, dest2); err != nil {
		t.Fatalf("after the corrupt partial: %v", err)
	}
	if b, _ := os.ReadFile(dest2); !bytes.Equal(b, shard2) {
		t.Error("shard 2 is not the file")
	}

	// A file listed at another size than the hub serves is refused, not renamed.
	wrong := f2
	wrong.Size = 19999
	dest3 := filepath.Join(dir, "wrong")
	if _, err := c.Download(ctx, cm.Repo, cm.Commit, wrong, dest3); KindOf(err) != failure.ModelCorrupt {
		t.Errorf("wrong size: %v", err)
	}
	if _, err := os.Stat(dest3); !os.IsNotExist(err) {
		t.Errorf("a file that does not verify was placed: %v", err)
	}

	// Without the token the gated file is refused as ModelGated, and nothing is placed.
	anon := &Client{Endpoint: srv.URL}
	dest4 := filepath.Join(dir, "anon")
	if _, err := anon.Download(ctx, cm.Repo, cm.Commit, f, dest4); KindOf(err) != failure.ModelGated {
		t.Errorf("anonymous download of a gated file: %v", err)
	}
	for _, p := range []string{dest4, dest4 + PartialSuffix} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", p, err)
		}
	}
}
