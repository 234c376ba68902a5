package activities

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/hfcachetest"
	"github.com/tpdeploy/tpdeploy/internal/weights"
	"github.com/tpdeploy/tpdeploy/internal/weights/transfer"
)

const (
	modelRepo   = "Org/Tiny"
	modelCommit = "5f1c8d2a0b9e7c6d4f3a2b1c0d9e8f7a6b5c4d3e"
)

var loopback = netip.MustParseAddr("127.0.0.1")

// tinyModelFiles is a model of n shards of size bytes each, random content (a corrupted
// copy must not hash the same), plus its config, tokenizer and index.
func tinyModelFiles(n, size int) []hfcachetest.File {
	files := []hfcachetest.File{
		{Name: "config.json", Data: []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`)},
		{Name: "tokenizer.json", Data: []byte(strings.Repeat("tok ", 300))},
	}
	var wm []string
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i, n)
		wm = append(wm, fmt.Sprintf(`"layers.%d.w":%q`, i, name))
		files = append(files, hfcachetest.File{Name: name, Data: randomBytes(uint64(i), size)})
	}
	files = append(files, hfcachetest.File{Name: "model.safetensors.index.json", Data: []byte(`{"weight_map":{` + strings.Join(wm, ",") + `}}`)})
	return files
}

func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	_, _ = r.Read(b)
	return b
}

// writeHFCache lays files out as huggingface_hub does, as modelRepo at modelCommit
// (refs/main).
func writeHFCache(t *testing.T, cache string, files []hfcachetest.File) {
	t.Helper()
	hfcachetest.WriteSnapshot(t, cache, modelRepo, "main", modelCommit, files)
}

func writeModelDir(t *testing.T, dir string, files []hfcachetest.File) {
	t.Helper()
	for _, f := range files {
		hfcachetest.WriteFile(t, filepath.Join(dir, f.Name), f.Data)
	}
}

func withoutFiles(files []hfcachetest.File, names ...string) []hfcachetest.File {
	return slices.DeleteFunc(slices.Clone(files), func(f hfcachetest.File) bool { return slices.Contains(names, f.Name) })
}

// agent is one node agent under test: its activities run in a test activity environment,
// where heartbeats work.
type agent struct {
	node *Agent
	env  *testsuite.TestActivityEnvironment
	mu   sync.Mutex
	hb   []contract.SyncProgress
}

func newAgent(t *testing.T, name string, bg context.Context) *agent {
	t.Helper()
	return newAgentWith(t, Config{Name: name, unrestricted: true}, bg)
}

// newAgentWith is newAgent of an agent configured as c.
func newAgentWith(t *testing.T, c Config, bg context.Context) *agent {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	g := &agent{node: New(c), env: suite.NewTestActivityEnvironment()}
	registerAgent(g.env, g.node)
	if bg != nil {
		g.env.SetWorkerOptions(gated(g.node, worker.Options{BackgroundActivityContext: bg}))
	}
	g.env.SetOnActivityHeartbeatListener(func(_ *activity.Info, d converter.EncodedValues) {
		var p contract.SyncProgress
		if d.Get(&p) == nil {
			g.mu.Lock()
			g.hb = append(g.hb, p)
			g.mu.Unlock()
		}
	})
	return g
}

func run[T any](g *agent, fn any, req any) (T, error) {
	var out T
	v, err := g.env.ExecuteActivity(fn, req)
	if err == nil {
		err = v.Get(&out)
	}
	return out, err
}

func (g *agent) manifest(t *testing.T, req contract.ModelManifestRequest) weights.Manifest {
	t.Helper()
	req.Node = g.node.Probe.name
	m, err := run[weights.Manifest](g, g.node.Weights.ModelManifest, req)
	if err != nil {
		t.Fatalf("%s: model manifest: %v", g.node.Probe.name, err)
	}
	return m
}

// sync has g copy as req says, from its loopback address unless req names another.
func (g *agent) sync(req contract.SyncModelRequest) (contract.SyncResult, error) {
	req.Node = g.node.Probe.name
	if !req.Addr.IsValid() {
		req.Addr = loopback
	}
	return run[contract.SyncResult](g, g.node.Weights.SyncModel, req)
}

// copyKey is a key g made for a copy (PrepareModelCopy), as a deploy asks of every node
// that will copy before the head opens its server.
func (g *agent) copyKey(t *testing.T) string {
	t.Helper()
	k, err := run[contract.ModelCopyKey](g, g.node.Weights.PrepareModelCopy, contract.PrepareModelCopyRequest{Node: g.node.Probe.name, Root: "/"})
	if err != nil {
		t.Fatal(err)
	}
	return k.Key
}

// open has g serve files under root on loopback, to loopback, for the copies of keys.
func (g *agent) open(t *testing.T, root string, files []string, ttl time.Duration, keys ...string) contract.ModelServer {
	t.Helper()
	srv, err := run[contract.ModelServer](g, g.node.Weights.OpenModelServer, contract.OpenModelServerRequest{Node: g.node.Probe.name, Addr: loopback, Root: root, Files: files,
		Keys: keys, Peers: []netip.Addr{loopback}, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.node.Weights.servers.Close(srv.ID) })
	return srv
}

// isOpen says whether g's model server srv is open.
func (g *agent) isOpen(srv contract.ModelServer) bool {
	_, ok := g.node.Weights.servers.Stats(srv.ID)
	return ok
}

// served is the bytes g's model server srv has sent.
func (g *agent) served(t *testing.T, srv contract.ModelServer) int64 {
	t.Helper()
	st, ok := g.node.Weights.servers.Stats(srv.ID)
	if !ok {
		t.Fatal("the model server closed")
	}
	return st.Served
}

func modelAppError(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) {
		t.Fatalf("error %v (%T) is not an application error", err, err)
	}
	return app
}

func TestModelManifestActivity(t *testing.T) {
	cache := t.TempDir()
	writeHFCache(t, cache, tinyModelFiles(4, 1000))
	a := newAgent(t, "node-a", nil)
	m := a.manifest(t, contract.ModelManifestRequest{HFCache: cache, Repo: modelRepo})
	if len(m.Files) != 7 || m.Revision != modelCommit || m.Dir != weights.HFSnapshotDir(cache, modelRepo, modelCommit) || len(m.Missing) != 0 {
		t.Fatalf("manifest = %+v", m)
	}
	if d := a.manifest(t, contract.ModelManifestRequest{Dir: filepath.Join(cache, "nowhere")}); d.Absent == "" {
		t.Errorf("a directory that is not there: %+v", d)
	}
	_, err := run[weights.Manifest](a, a.node.Weights.ModelManifest, contract.ModelManifestRequest{Node: "node-b", HFCache: cache, Repo: modelRepo})
	if app := modelAppError(t, err); app.Type() != contract.ErrWrongNode {
		t.Errorf("task for another node: %v", err)
	}
	hfcachetest.WriteFile(t, filepath.Join(cache, "bad", "config.json"), []byte("{}"))
	hfcachetest.WriteFile(t, filepath.Join(cache, "bad", "model.safetensors.index.json"), []byte("{"))
	_, err = run[weights.Manifest](a, a.node.Weights.ModelManifest, contract.ModelManifestRequest{Node: "node-a", Dir: filepath.Join(cache, "bad")})
	if app := modelAppError(t, err); app.Type() != contract.ErrModelCorrupt || !app.NonRetryable() {
		t.Errorf("unreadable index: %v", err)
	}
}

// TestSyncModelNothingMissingCopiesNothing: identical nodes need no copy, and a copy
// retried after it completed sends nothing again.
func TestSyncModelNothingMissingCopiesNothing(t *testing.T) {
	headCache, nodeCache := t.TempDir(), t.TempDir()
	files := tinyModelFiles(2, 5000)
	writeHFCache(t, headCache, files)
	writeHFCache(t, nodeCache, files)
	a, b := newAgent(t, "node-a", nil), newAgent(t, "node-b", nil)
	head := a.manifest(t, contract.ModelManifestRequest{HFCache: headCache, Repo: modelRepo})
	node := b.manifest(t, contract.ModelManifestRequest{HFCache: nodeCache, Repo: modelRepo})
	if ps := weights.Compare(head, "node-b", node); len(ps) != 0 {
		t.Fatalf("problems: %v", ps)
	}
	lacking := weights.Lacking(head, node)
	if len(lacking) != 0 {
		t.Fatalf("lacking = %v", weights.Names(lacking))
	}
	key := b.copyKey(t)
	srv := a.open(t, head.Dir, weights.Names(head.Files), 0, key)
	res, err := b.sync(contract.SyncModelRequest{From: srv.Addr, Key: key, Root: weights.HFSnapshotDir(nodeCache, modelRepo, head.Revision),
		Layout: contract.ModelLayoutHF, Ref: "main", Files: lacking})
	if err != nil || res.Bytes != 0 || len(res.Copied) != 0 {
		t.Fatalf("sync of nothing = %+v, %v", res, err)
	}
	// Every file, all there already: found, not sent.
	res, err = b.sync(contract.SyncModelRequest{From: srv.Addr, Key: key, Root: weights.HFSnapshotDir(nodeCache, modelRepo, head.Revision),
		Layout: contract.ModelLayoutHF, Ref: "main", Files: head.Files})
	if err != nil || res.Bytes != 0 || len(res.Copied) != len(head.Files) || a.served(t, srv) != 0 {
		t.Fatalf("sync of what is there = %+v, %v; served %d bytes", res, err, a.served(t, srv))
	}
}

// TestSyncModelCopiesWhatANodeLacks copies two missing shards into one node's Hugging Face
// cache, and the whole model into a node that has none, as huggingface_hub would have
// written them; the nodes then compare equal to the head.
func TestSyncModelCopiesWhatANodeLacks(t *testing.T) {
	headCache, bCache, cCache := t.TempDir(), t.TempDir(), t.TempDir()
	files := tinyModelFiles(4, 300_000)
	shard2, shard4 := files[3].Name, files[5].Name
	writeHFCache(t, headCache, files)
	writeHFCache(t, bCache, withoutFiles(files, shard2, shard4))
	a, b, c := newAgent(t, "node-a", nil), newAgent(t, "node-b", nil), newAgent(t, "node-c", nil)
	head := a.manifest(t, contract.ModelManifestRequest{HFCache: headCache, Repo: modelRepo})
	nodeB := b.manifest(t, contract.ModelManifestRequest{HFCache: bCache, Repo: modelRepo})
	want := []string{
		"node-b lacks model-00002-of-00004.safetensors (head has 300.0 kB)",
		"node-b lacks model-00004-of-00004.safetensors (head has 300.0 kB)",
	}
	var got []string
	for _, p := range weights.Compare(head, "node-b", nodeB) {
		got = append(got, p.Message)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("preflight: %q", got)
	}
	bKey, cKey := b.copyKey(t), c.copyKey(t)
	srv := a.open(t, head.Dir, weights.Names(head.Files), time.Minute, bKey, cKey)

	lacking := weights.Lacking(head, nodeB)
	res, err := b.sync(contract.SyncModelRequest{From: srv.Addr, Key: bKey, Root: weights.HFSnapshotDir(bCache, modelRepo, head.Revision),
		Layout: contract.ModelLayoutHF, Ref: "main", Files: lacking})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Copied, []string{shard2, shard4}) || res.Bytes != 600_000 || a.served(t, srv) != 600_000 {
		t.Fatalf("sync = %+v; served %d", res, a.served(t, srv))
	}
	if after := b.manifest(t, contract.ModelManifestRequest{HFCache: bCache, Repo: modelRepo, Checksums: true}); len(weights.Compare(head, "node-b", after)) != 0 || len(weights.Check("node-b", after)) != 0 {
		t.Fatalf("node-b after the copy: %v %v", weights.Compare(head, "node-b", after), weights.Check("node-b", after))
	}
	link := filepath.Join(weights.HFSnapshotDir(bCache, modelRepo, modelCommit), shard2)
	if target, err := os.Readlink(link); err != nil || target != "../../blobs/"+hfcachetest.BlobName(files[3]) {
		t.Errorf("%s links to %q (%v), want ../../blobs/<sha256> as huggingface_hub writes it", shard2, target, err)
	}
	// Heartbeats reach the server throttled; the first is sent at once.
	b.mu.Lock()
	hb := slices.Clone(b.hb)
	b.mu.Unlock()
	if len(hb) == 0 || hb[0].Total != 600_000 {
		t.Errorf("heartbeats = %+v", hb)
	}

	// node-c has no copy of the model at all.
	nodeC := c.manifest(t, contract.ModelManifestRequest{HFCache: cCache, Repo: modelRepo})
	if ps := weights.Compare(head, "node-c", nodeC); len(ps) != 1 || !strings.Contains(ps[0].Message, "node-c lacks the model: no hub/models--Org--Tiny") {
		t.Fatalf("node-c: %v", ps)
	}
	res, err = c.sync(contract.SyncModelRequest{From: srv.Addr, Key: cKey, Root: weights.HFSnapshotDir(cCache, modelRepo, head.Revision),
		Layout: contract.ModelLayoutHF, Ref: "main", Files: weights.Lacking(head, nodeC), Parallel: 2})
	if err != nil || len(res.Copied) != 7 {
		t.Fatalf("sync of the whole model = %+v, %v", res, err)
	}
	if after := c.manifest(t, contract.ModelManifestRequest{HFCache: cCache, Repo: modelRepo}); len(weights.Compare(head, "node-c", after)) != 0 {
		t.Fatalf("node-c after the copy: %v", weights.Compare(head, "node-c", after))
	}
	if ref, _ := os.ReadFile(filepath.Join(weights.HFRepoDir(cCache, modelRepo), "refs", "main")); string(ref) != modelCommit {
		t.Errorf("refs/main = %q", ref)
	}
}

// TestSyncModelResumesAnInterruptedCopy cuts a copy after a known number of bytes (the
// agent's context is cancelled, as when it is killed), then a new agent copies again:
// only what had not arrived is sent.
func TestSyncModelResumesAnInterruptedCopy(t *testing.T) {
	headDir, nodeDir := filepath.Join(t.TempDir(), "model"), filepath.Join(t.TempDir(), "model")
	const size, cut = 32 << 20, 10 << 20
	files := []hfcachetest.File{{Name: "config.json", Data: []byte(`{"model_type":"llama"}`)}, {Name: "model.safetensors", Data: randomBytes(7, size)}}
	writeModelDir(t, headDir, files)
	a := newAgent(t, "node-a", nil)
	head := a.manifest(t, contract.ModelManifestRequest{Dir: headDir, Checksums: true})
	bg, kill := context.WithCancel(context.Background())
	first := newAgent(t, "node-b", bg)
	// The restarted agent holds none of its predecessor's keys: it copies with a key of its
	// own, as the deploy's next round gives it.
	second := newAgent(t, "node-b", nil)
	firstKey, secondKey := first.copyKey(t), second.copyKey(t)
	srv := a.open(t, headDir, weights.Names(head.Files), time.Minute, firstKey, secondKey)

	// A link that delivers cut bytes of a response, then nothing.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, _ := http.NewRequestWithContext(r.Context(), r.Method, "http://"+srv.Addr.String()+r.URL.Path, nil)
		out.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		maps.Copy(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		if n, _ := io.CopyN(w, resp.Body, cut); n == cut {
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	}))
	via := netip.MustParseAddrPort(proxy.Listener.Addr().String())

	partial := filepath.Join(nodeDir, "model.safetensors"+weights.PartialSuffix)
	go func() {
		defer kill()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if fi, err := os.Stat(partial); err == nil && fi.Size() >= cut {
				return
			}
		}
	}()
	shard, _ := head.File("model.safetensors")
	req := contract.SyncModelRequest{From: via, Key: firstKey, Root: nodeDir, Files: []weights.File{shard}}
	if _, err := first.sync(req); err == nil {
		t.Fatal("the interrupted copy succeeded")
	}
	if fi, err := os.Stat(partial); err != nil || fi.Size() != cut {
		t.Fatalf("after the interruption: %v, %v; want %d bytes in the partial file", fi, err, cut)
	}

	// The cut response's handler ends once the link is gone; then count.
	proxy.Close()
	for {
		if st, ok := a.node.Weights.servers.Stats(srv.ID); !ok || st.Active == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := a.served(t, srv)
	req.From, req.Key = srv.Addr, secondKey // a restarted agent: only the disk remembers
	res, err := second.sync(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != size-cut || res.Reused != cut || a.served(t, srv)-before != size-cut {
		t.Fatalf("resumed copy = %+v; the server sent %d bytes; want %d sent, %d reused", res, a.served(t, srv)-before, size-cut, cut)
	}
	if _, err := os.Stat(partial); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("partial file left: %v", err)
	}
	copied, err := os.ReadFile(filepath.Join(nodeDir, "model.safetensors"))
	sum := sha256.Sum256(copied)
	if got := hex.EncodeToString(sum[:]); err != nil || got != shard.SHA256 {
		t.Fatalf("copied sha256 %s (%v), want %s", got, err, shard.SHA256)
	}
}

// TestSyncModelRefusesACorruptSource: a head whose file no longer matches its manifest
// (same size, other bytes) fails the copy as ModelCorrupt and leaves no partial file; a
// head that lost a file fails it as ModelIncomplete.
func TestSyncModelRefusesACorruptSource(t *testing.T) {
	for _, hf := range []bool{false, true} {
		t.Run(map[bool]string{false: "directory, checksums", true: "hugging face cache, blob names"}[hf], func(t *testing.T) {
			headRoot, nodeRoot := t.TempDir(), t.TempDir()
			files := tinyModelFiles(2, 200_000)
			a, b := newAgent(t, "node-a", nil), newAgent(t, "node-b", nil)
			var head weights.Manifest
			req := contract.SyncModelRequest{Root: filepath.Join(nodeRoot, "model")}
			if hf {
				writeHFCache(t, headRoot, files)
				head = a.manifest(t, contract.ModelManifestRequest{HFCache: headRoot, Repo: modelRepo})
				req.Root, req.Layout = weights.HFSnapshotDir(nodeRoot, modelRepo, head.Revision), contract.ModelLayoutHF
			} else {
				writeModelDir(t, filepath.Join(headRoot, "model"), files)
				head = a.manifest(t, contract.ModelManifestRequest{Dir: filepath.Join(headRoot, "model"), Checksums: true})
			}
			shard := files[2].Name
			f, _ := head.File(shard)
			hfcachetest.WriteFile(t, filepath.Join(head.Dir, shard), randomBytes(99, 200_000)) // through the link: the blob itself
			req.Key = b.copyKey(t)
			srv := a.open(t, head.Dir, weights.Names(head.Files), time.Minute, req.Key)
			req.From, req.Files = srv.Addr, []weights.File{f}
			_, err := b.sync(req)
			app := modelAppError(t, err)
			if app.Type() != contract.ErrModelCorrupt || !app.NonRetryable() || !strings.Contains(app.Message(), "the partial copy was removed") {
				t.Fatalf("type %s: %s", app.Type(), app.Message())
			}
			for _, p := range []string{filepath.Join(req.Root, shard+weights.PartialSuffix), filepath.Join(req.Root, shard)} {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s is there after a corrupt copy (%v)", p, err)
				}
			}
			if err := os.Remove(filepath.Join(head.Dir, files[3].Name)); err != nil {
				t.Fatal(err)
			}
			lost, _ := head.File(files[3].Name)
			req.Files = []weights.File{lost}
			_, err = b.sync(req)
			if app := modelAppError(t, err); app.Type() != contract.ErrModelIncomplete || !app.NonRetryable() || !strings.Contains(app.Message(), "the source lacks "+lost.Name) {
				t.Fatalf("type %s: %s", app.Type(), app.Message())
			}
		})
	}
}

// A model.host_dir copy is verified by content, not size, whatever model.checksums says:
// given the sizes a scan without checksums reports, the copy places nothing — here, a
// partial file an earlier attempt left with bytes that are not the head's would have
// been completed to the right length and renamed into place as the model's shard.
func TestHostDirCopyIsNeverVerifiedBySizeAlone(t *testing.T) {
	headDir, nodeDir := filepath.Join(t.TempDir(), "model"), filepath.Join(t.TempDir(), "model")
	shardData := randomBytes(3, 1<<20)
	writeModelDir(t, headDir, []hfcachetest.File{{Name: "config.json", Data: []byte(`{"model_type":"llama"}`)}, {Name: "model.safetensors", Data: shardData}})
	a, b := newAgent(t, "node-a", nil), newAgent(t, "node-b", nil)
	head := a.manifest(t, contract.ModelManifestRequest{Dir: headDir}) // no checksums: the default
	shard, _ := head.File("model.safetensors")
	partial := filepath.Join(nodeDir, shard.Name+weights.PartialSuffix)
	hfcachetest.WriteFile(t, partial, randomBytes(99, 1<<19)) // half the shard, other bytes
	key := b.copyKey(t)
	srv := a.open(t, headDir, weights.Names(head.Files), time.Minute, key)
	_, err := b.sync(contract.SyncModelRequest{From: srv.Addr, Key: key, Root: nodeDir, Files: []weights.File{shard}})
	if got, rerr := os.ReadFile(filepath.Join(nodeDir, shard.Name)); rerr == nil && !bytes.Equal(got, shardData) {
		t.Fatalf("the copy placed %d bytes that are not the head's shard (it was verified by its size alone)", len(got))
	}
	if app := modelAppError(t, err); app.Type() != contract.ErrBadRequest || !strings.Contains(app.Message(), "no sha256 or blob id to verify it by") {
		t.Fatalf("a copy without hashes: type %s: %s", app.Type(), app.Message())
	}
	if a.isOpen(srv) && a.served(t, srv) != 0 {
		t.Errorf("the server sent %d bytes to a copy that could not verify them", a.served(t, srv))
	}
}

// The head hashes the files a copy will send when asked (what a deploy asks before a
// model.host_dir copy); with those hashes a corrupted partial file, and a file in place
// of the right size with other bytes, are caught: the first fails the copy as
// ModelCorrupt and is removed, the second is copied again.
func TestHostDirCopyVerifiesWhatTheHeadHashed(t *testing.T) {
	headDir, nodeDir := filepath.Join(t.TempDir(), "model"), filepath.Join(t.TempDir(), "model")
	files := []hfcachetest.File{{Name: "config.json", Data: []byte(`{"model_type":"llama"}`)}, {Name: "tokenizer.json", Data: []byte(strings.Repeat("tok ", 300))},
		{Name: "model.safetensors", Data: randomBytes(3, 1<<20)}}
	writeModelDir(t, headDir, files)
	a, b := newAgent(t, "node-a", nil), newAgent(t, "node-b", nil)
	sized := a.manifest(t, contract.ModelManifestRequest{Dir: headDir})
	head := a.manifest(t, contract.ModelManifestRequest{Dir: headDir, Hash: []string{"model.safetensors", "tokenizer.json"}})
	for _, f := range head.Files {
		sum := sha256.Sum256(files[slices.IndexFunc(files, func(m hfcachetest.File) bool { return m.Name == f.Name })].Data)
		want := map[bool]string{true: hex.EncodeToString(sum[:])}[f.Name != "config.json"]
		if f.SHA256 != want {
			t.Errorf("%s: sha256 %q, want %q (only the files asked for are hashed)", f.Name, f.SHA256, want)
		}
	}
	if !slices.Equal(weights.Names(head.Files), weights.Names(sized.Files)) {
		t.Fatalf("hashing changed the files: %q, %q", weights.Names(head.Files), weights.Names(sized.Files))
	}
	shard, _ := head.File("model.safetensors")
	tok, _ := head.File("tokenizer.json")
	partial := filepath.Join(nodeDir, shard.Name+weights.PartialSuffix)
	hfcachetest.WriteFile(t, partial, randomBytes(99, 1<<19))
	hfcachetest.WriteFile(t, filepath.Join(nodeDir, tok.Name), []byte(strings.Repeat("TOK ", 300))) // the right size, other bytes
	key := b.copyKey(t)
	srv := a.open(t, headDir, weights.Names(head.Files), time.Minute, key)
	req := contract.SyncModelRequest{From: srv.Addr, Key: key, Root: nodeDir, Files: []weights.File{tok, shard}, Parallel: 1}
	_, err := b.sync(req)
	if app := modelAppError(t, err); app.Type() != contract.ErrModelCorrupt || !strings.Contains(app.Message(), "sha256") {
		t.Fatalf("a corrupted partial file: type %s: %s", app.Type(), app.Message())
	}
	if _, err := os.Stat(partial); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the corrupt partial file is still there: %v", err)
	}
	if _, err := b.sync(req); err != nil {
		t.Fatalf("the copy again: %v", err)
	}
	for _, f := range files[1:] {
		if got, err := os.ReadFile(filepath.Join(nodeDir, f.Name)); err != nil || !bytes.Equal(got, f.Data) {
			t.Errorf("%s on node-b is not the head's (%d bytes, %v)", f.Name, len(got), err)
		}
	}
}

// TestModelServerServesOnlyItsListAndExpires: the server answers ranges of the files it
// was given, refuses any other file and strangers, and closes by itself after its TTL.
func TestModelServerServesOnlyItsListAndExpires(t *testing.T) {
	dir := t.TempDir()
	writeModelDir(t, dir, []hfcachetest.File{{Name: "config.json", Data: []byte(`{"model_type":"llama"}`)}, {Name: "secret.safetensors", Data: []byte("not listed")}})
	a := newAgent(t, "node-a", nil)
	const secret = "a copy's secret"
	srv := a.open(t, dir, []string{"config.json"}, 500*time.Millisecond, transfer.KeyHash(secret))
	get := func(name, bearer, rng string) (int, string) {
		return getModelFile(t, nil, srv, name, bearer, rng)
	}
	if code, body := get("config.json", secret, "bytes=2-"); code != http.StatusPartialContent || body != `model_type":"llama"}` {
		t.Errorf("range of a listed file: %d %q", code, body)
	}
	if code, _ := get("secret.safetensors", secret, ""); code != http.StatusForbidden {
		t.Errorf("a file not in the list: %d", code)
	}
	if code, _ := get("config.json", "", ""); code != http.StatusUnauthorized {
		t.Errorf("no key: %d", code)
	}
	// Idle for its TTL, it closes: the port refuses connections.
	deadline := time.Now().Add(5 * time.Second)
	for a.isOpen(srv) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if a.isOpen(srv) {
		t.Fatal("the model server is still open after its TTL")
	}
	if c, err := net.DialTimeout("tcp", srv.Addr.String(), time.Second); err == nil {
		c.Close()
		t.Fatal("the model server's port still accepts connections")
	}
	b := newAgent(t, "node-b", nil)
	key := b.copyKey(t)
	other := a.open(t, dir, []string{"config.json"}, time.Hour, key)
	if _, err := a.env.ExecuteActivity(a.node.Weights.CloseModelServer, contract.CloseModelServerRequest{Node: "node-a", ID: other.ID}); err != nil || a.isOpen(other) {
		t.Fatalf("close: %v", err)
	}
	if _, err := a.env.ExecuteActivity(a.node.Weights.CloseModelServer, contract.CloseModelServerRequest{Node: "node-a", ID: other.ID}); err != nil {
		t.Errorf("closing a closed server: %v", err)
	}
	_, err := b.sync(contract.SyncModelRequest{From: other.Addr, Key: key, Root: t.TempDir(),
		Files: []weights.File{{Name: "config.json", Size: 22, SHA256: strings.Repeat("0", 64)}}})
	if app := modelAppError(t, err); app.Type() != contract.ErrModelServerGone {
		t.Errorf("copy from a closed server: %s: %s", app.Type(), app.Message())
	}
}

// historyStrings are the string values in the JSON of vs: what workflow history records of
// them.
func historyStrings(t *testing.T, vs ...any) []string {
	t.Helper()
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	for _, v := range vs {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var decoded any
		if err := json.Unmarshal(b, &decoded); err != nil {
			t.Fatal(err)
		}
		walk(decoded)
	}
	return out
}

// getModelFile asks a model server for a file, from local (nil: any address), with a
// bearer secret ("" for none) and a Range ("" for none).
func getModelFile(t *testing.T, local net.Addr, srv contract.ModelServer, name, bearer, rng string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+srv.Addr.String()+"/"+name, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: local}).DialContext}}
	defer hc.CloseIdleConnections() // the server caps a peer's connections (MaxConnsPerPeer)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Issue #23: what a copy carries through workflow history is useless to fetch with. The
// copying node's agent makes the secret and keeps it; history holds its SHA-256 (the key
// PrepareModelCopy returns, OpenModelServer's Keys and SyncModel's Key) and the server's
// address and ID. Presented to the server, none of them is accepted; given to another
// agent, the key names no secret it holds; the secret itself is served only from a planned
// peer's address; and once the copy is done the key opens nothing more.
func TestWhatHistoryHoldsOfACopyFetchesNothing(t *testing.T) {
	headDir, nodeDir := filepath.Join(t.TempDir(), "model"), filepath.Join(t.TempDir(), "model")
	files := []hfcachetest.File{{Name: "config.json", Data: []byte(`{"model_type":"llama"}`)}, {Name: "model.safetensors", Data: randomBytes(5, 100_000)}}
	writeModelDir(t, headDir, files)
	a, b, stranger := newAgent(t, "node-a", nil), newAgent(t, "node-b", nil), newAgent(t, "node-b", nil)
	head := a.manifest(t, contract.ModelManifestRequest{Dir: headDir, Checksums: true})
	key := b.copyKey(t)
	srv := a.open(t, headDir, weights.Names(head.Files), time.Minute, key)
	req := contract.SyncModelRequest{Node: "node-b", From: srv.Addr, Key: key, Addr: loopback, Root: nodeDir, Files: head.Files}
	// Every string the copy's activities put into history, as history holds it (JSON).
	history := historyStrings(t, contract.ModelCopyKey{Key: key}, contract.OpenModelServerRequest{Node: "node-a", Addr: loopback, Root: headDir,
		Files: weights.Names(head.Files), Keys: []string{key}, Peers: []netip.Addr{loopback}}, srv, req)
	if !slices.Contains(history, key) || !slices.Contains(history, srv.ID) {
		t.Fatalf("history's strings %q lack the key or the server's ID", history)
	}
	for _, v := range history {
		if code, _ := getModelFile(t, nil, srv, "config.json", v, ""); code != http.StatusUnauthorized {
			t.Errorf("%q from history as the bearer token: %d, want %d", v, code, http.StatusUnauthorized)
		}
	}
	_, err := stranger.sync(req)
	if app := modelAppError(t, err); app.Type() != contract.ErrModelServerGone || !strings.Contains(app.Message(), "holds no copy key") {
		t.Errorf("another agent given the key: %s: %s", app.Type(), app.Message())
	}
	if n := a.served(t, srv); n != 0 {
		t.Fatalf("the server sent %d bytes to requests made of what history holds", n)
	}
	// The secret, from an address that is not a planned peer's, is refused too.
	secret, release, ok := b.node.Weights.keys.Take(key)
	if !ok {
		t.Fatal("node-b does not hold the key it made")
	}
	if code, body := getModelFile(t, &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, srv, "config.json", secret, ""); code != http.StatusForbidden {
		t.Errorf("the secret from 127.0.0.2, not a peer: %d %q", code, body)
	}
	release()
	if res, err := b.sync(req); err != nil || len(res.Copied) != len(files) {
		t.Fatalf("node-b's copy with its own key: %+v, %v", res, err)
	}
	if got, err := os.ReadFile(filepath.Join(nodeDir, "model.safetensors")); err != nil || !bytes.Equal(got, files[1].Data) {
		t.Errorf("the copied shard is not the head's (%v)", err)
	}
	if _, err := b.sync(req); err == nil || modelAppError(t, err).Type() != contract.ErrModelServerGone {
		t.Errorf("the key after its copy was done: %v", err)
	}
	// The same secret from a peer's address is served: the refusal above was the address's.
	if code, _ := getModelFile(t, nil, srv, "config.json", secret, ""); code != http.StatusOK {
		t.Errorf("the secret from a peer: %d", code)
	}
}

func TestRemovePartialModel(t *testing.T) {
	root := t.TempDir()
	for _, n := range []string{"model.safetensors", "model-00001.safetensors" + weights.PartialSuffix, "sub/x.json" + weights.PartialSuffix, "config.json" + transfer.LinkSuffix} {
		hfcachetest.WriteFile(t, filepath.Join(root, n), []byte("x"))
	}
	a := newAgent(t, "node-b", nil)
	res, err := run[contract.RemovePartialModelResult](a, a.node.Weights.RemovePartialModel, contract.RemovePartialModelRequest{Node: "node-b", Root: root})
	want := []string{"config.json" + transfer.LinkSuffix, "model-00001.safetensors" + weights.PartialSuffix, "sub/x.json" + weights.PartialSuffix}
	if err != nil || !slices.Equal(res.Removed, want) {
		t.Fatalf("removed %q, %v; want %q", res.Removed, err, want)
	}
	if _, err := os.Stat(filepath.Join(root, "model.safetensors")); err != nil {
		t.Errorf("a complete file was removed: %v", err)
	}
	if _, err := run[contract.RemovePartialModelResult](a, a.node.Weights.RemovePartialModel, contract.RemovePartialModelRequest{Node: "node-b", Root: filepath.Join(root, "nowhere")}); err != nil {
		t.Errorf("a directory that is not there: %v", err)
	}
}

// TestSyncModelThroughputOnLoopback copies a 200 MB shard (sha256 verified) over loopback
// and reports the rate.
func TestSyncModelThroughputOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 400 MB")
	}
	headDir, nodeDir := filepath.Join(t.TempDir(), "model"), filepath.Join(t.TempDir(), "model")
	data := randomBytes(200, 200_000_000)
	writeModelDir(t, headDir, []hfcachetest.File{{Name: "config.json", Data: []byte("{}")}, {Name: "model.safetensors", Data: data}})
	sum := sha256.Sum256(data)
	data = nil
	f := weights.File{Name: "model.safetensors", Size: 200_000_000, SHA256: hex.EncodeToString(sum[:])}
	a, b := newAgent(t, "node-a", nil), newAgent(t, "node-b", nil)
	key := b.copyKey(t)
	srv := a.open(t, headDir, []string{f.Name}, time.Minute, key)
	res, err := b.sync(contract.SyncModelRequest{From: srv.Addr, Key: key, Root: nodeDir, Files: []weights.File{f}})
	if err != nil || res.Bytes != f.Size {
		t.Fatalf("sync = %+v, %v", res, err)
	}
	t.Logf("loopback copy of %s, sha256 verified: %.2f s, %.0f MB/s", weights.HumanSize(res.Bytes), res.Seconds, res.MBps)
}

// A chain through real agents: node-a serves node-b, node-b serves node-c what it is
// itself receiving (OpenModelServer with Relay, into a snapshot not there yet), both
// copies run at once, each link carries one copy, and node-c ends with the head's model.
func TestSyncModelRelaysAlongAChain(t *testing.T) {
	headCache, bCache, cCache := t.TempDir(), t.TempDir(), t.TempDir()
	writeHFCache(t, headCache, tinyModelFiles(4, 2_000_000))
	a, b, c := newAgent(t, "node-a", nil), newAgent(t, "node-b", nil), newAgent(t, "node-c", nil)
	head := a.manifest(t, contract.ModelManifestRequest{HFCache: headCache, Repo: modelRepo})
	all := weights.Lacking(head, weights.Manifest{Absent: "no model"})
	relay := map[string]int64{}
	for _, f := range all {
		relay[f.Name] = f.Size
	}
	bKey, cKey := b.copyKey(t), c.copyKey(t)
	srvA := a.open(t, head.Dir, weights.Names(all), time.Minute, bKey)
	bRoot, cRoot := weights.HFSnapshotDir(bCache, modelRepo, head.Revision), weights.HFSnapshotDir(cCache, modelRepo, head.Revision)
	srvB, err := run[contract.ModelServer](b, b.node.Weights.OpenModelServer, contract.OpenModelServerRequest{Node: "node-b", Addr: loopback, Root: bRoot,
		Files: weights.Names(all), Relay: relay, Keys: []string{cKey}, Peers: []netip.Addr{loopback}, TTL: time.Minute})
	if err != nil {
		t.Fatalf("node-b's relay: %v", err)
	}
	t.Cleanup(func() { b.node.Weights.servers.Close(srvB.ID) })
	var wg sync.WaitGroup
	var resB, resC contract.SyncResult
	var errB, errC error
	wg.Go(func() {
		resB, errB = b.sync(contract.SyncModelRequest{From: srvA.Addr, Source: "node-a", Key: bKey, Root: bRoot, Layout: contract.ModelLayoutHF, Ref: "main", Files: all})
	})
	wg.Go(func() {
		resC, errC = c.sync(contract.SyncModelRequest{From: srvB.Addr, Source: "node-b", Key: cKey, Root: cRoot, Layout: contract.ModelLayoutHF, Ref: "main", Files: all})
	})
	wg.Wait()
	if errB != nil || errC != nil {
		t.Fatalf("node-b: %v; node-c: %v", errB, errC)
	}
	total := weights.CopySize(all)
	if resB.Bytes != total || resC.Bytes != total || a.served(t, srvA) != total || b.served(t, srvB) != total {
		t.Errorf("received %d and %d, served %d and %d; want one copy (%d) on every link", resB.Bytes, resC.Bytes, a.served(t, srvA), b.served(t, srvB), total)
	}
	for _, g := range []struct {
		a     *agent
		cache string
	}{{b, bCache}, {c, cCache}} {
		after := g.a.manifest(t, contract.ModelManifestRequest{HFCache: g.cache, Repo: modelRepo, Checksums: true})
		if ps := weights.Compare(head, g.a.node.Probe.name, after); len(ps) != 0 {
			t.Errorf("%s after the chain: %v", g.a.node.Probe.name, ps)
		}
	}
}
