package weights

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tpdeploy/tpdeploy/internal/confined"
	"github.com/tpdeploy/tpdeploy/internal/hfcachetest"
)

const (
	repo    = "Org/Tiny"
	commitA = "5f1c8d2a0b9e7c6d4f3a2b1c0d9e8f7a6b5c4d3e"
	commitB = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
)

func shardName(i, n int) string { return fmt.Sprintf("model-%05d-of-%05d.safetensors", i, n) }

// tinyModel is a four-shard model: sizes matter here, not content, but the content differs
// per shard so that blob names (content hashes) differ as they do on the Hub.
func tinyModel() []hfcachetest.File {
	files := []hfcachetest.File{
		{Name: "config.json", Data: []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`)},
		{Name: "generation_config.json", Data: []byte(`{"do_sample":true}`)},
		{Name: "tokenizer.json", Data: bytes.Repeat([]byte("tok "), 300)},
		{Name: "tokenizer_config.json", Data: []byte(`{"model_max_length":4096}`)},
		{Name: "model.safetensors.index.json", Data: []byte(`{"metadata":{"total_size":8600},"weight_map":{` +
			`"embed.weight":"model-00001-of-00004.safetensors","layers.0.w":"model-00001-of-00004.safetensors",` +
			`"layers.1.w":"model-00002-of-00004.safetensors","layers.2.w":"model-00003-of-00004.safetensors",` +
			`"layers.3.w":"model-00004-of-00004.safetensors","lm_head.weight":"model-00004-of-00004.safetensors"}}`)},
	}
	for i := 1; i <= 4; i++ {
		files = append(files, hfcachetest.File{Name: shardName(i, 4), Data: bytes.Repeat([]byte{byte('a' + i)}, 1900+100*i)})
	}
	return files
}

func without(files []hfcachetest.File, names ...string) []hfcachetest.File {
	return slices.DeleteFunc(slices.Clone(files), func(f hfcachetest.File) bool { return slices.Contains(names, f.Name) })
}

func replaced(files []hfcachetest.File, name string, data []byte) []hfcachetest.File {
	out := slices.Clone(files)
	for i := range out {
		if out[i].Name == name {
			out[i].Data = data
		}
	}
	return out
}

func messages(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Message)
	}
	return out
}

func TestScanHFAndCompare(t *testing.T) {
	model := tinyModel()
	shard2, shard4 := shardName(2, 4), shardName(4, 4)
	snapshot := func(files []hfcachetest.File) func(*testing.T, string) {
		return func(t *testing.T, cache string) { hfcachetest.WriteSnapshot(t, cache, repo, "main", commitA, files) }
	}
	for _, tc := range []struct {
		name      string
		node      func(t *testing.T, cache string)
		revision  string
		checksums bool
		missing   []string
		problems  []string
		check     []string // Check(node): what the node lacks by its own account
		lacking   []string
	}{
		{name: "identical", node: snapshot(model)},
		{name: "identical, checksums read", node: snapshot(model), checksums: true},
		{
			name:     "two shards missing",
			node:     snapshot(without(model, shard2, shard4)),
			missing:  []string{shard2, shard4},
			problems: []string{"node-b lacks model-00002-of-00004.safetensors (head has 2.1 kB)", "node-b lacks model-00004-of-00004.safetensors (head has 2.3 kB)"},
			check:    []string{"node-b lacks model-00002-of-00004.safetensors (the model's index lists it)", "node-b lacks model-00004-of-00004.safetensors (the model's index lists it)"},
			lacking:  []string{shard2, shard4},
		},
		{
			// huggingface_hub downloads into blobs/<sha>.incomplete and links the snapshot
			// entry only once the blob is complete.
			name: "half-finished download",
			node: func(t *testing.T, cache string) {
				hfcachetest.WriteSnapshot(t, cache, repo, "main", commitA, without(model, shard4))
				f := model[len(model)-1]
				hfcachetest.WriteFile(t, filepath.Join(HFRepoDir(cache, repo), "blobs", hfcachetest.BlobName(f)+".incomplete"), f.Data[:700])
			},
			missing:  []string{shard4},
			problems: []string{"node-b lacks model-00004-of-00004.safetensors (head has 2.3 kB)"},
			check:    []string{"node-b lacks model-00004-of-00004.safetensors (the model's index lists it)"},
			lacking:  []string{shard4},
		},
		{
			name: "a link whose blob is gone",
			node: func(t *testing.T, cache string) {
				hfcachetest.WriteSnapshot(t, cache, repo, "main", commitA, model)
				if err := os.Remove(filepath.Join(HFRepoDir(cache, repo), "blobs", hfcachetest.BlobName(model[len(model)-1]))); err != nil {
					t.Fatal(err)
				}
			},
			missing:  []string{shard4},
			problems: []string{"node-b lacks model-00004-of-00004.safetensors (head has 2.3 kB)"},
			check:    []string{"node-b lacks model-00004-of-00004.safetensors (the model's index lists it)"},
			lacking:  []string{shard4},
		},
		{
			name:     "a shard of another size",
			node:     snapshot(replaced(model, shard2, make([]byte, 1500))),
			problems: []string{"node-b has model-00002-of-00004.safetensors at 1.5 kB, head has 2.1 kB"},
			lacking:  []string{shard2},
		},
		{
			// Another download of other content: its blob has another name, so the
			// difference shows without reading a byte.
			name:     "a shard of other content, same size",
			node:     snapshot(replaced(model, shard2, bytes.Repeat([]byte{'x'}, 2100))),
			problems: []string{"node-b has model-00002-of-00004.safetensors with sha256 " + hfcachetest.BlobName(hfcachetest.File{Name: shard2, Data: bytes.Repeat([]byte{'x'}, 2100)})[:12] + ", head has " + hfcachetest.BlobName(model[6])[:12]},
			lacking:  []string{shard2},
		},
		{
			name: "a blob corrupted in place, not read",
			node: func(t *testing.T, cache string) {
				hfcachetest.WriteSnapshot(t, cache, repo, "main", commitA, model)
				hfcachetest.WriteFile(t, filepath.Join(HFRepoDir(cache, repo), "blobs", hfcachetest.BlobName(model[6])), bytes.Repeat([]byte{'x'}, 2100))
			},
		},
		{
			name: "a blob corrupted in place, read",
			node: func(t *testing.T, cache string) {
				hfcachetest.WriteSnapshot(t, cache, repo, "main", commitA, model)
				hfcachetest.WriteFile(t, filepath.Join(HFRepoDir(cache, repo), "blobs", hfcachetest.BlobName(model[6])), bytes.Repeat([]byte{'x'}, 2100))
			},
			checksums: true,
			problems:  []string{"node-b has model-00002-of-00004.safetensors with sha256 " + hfcachetest.BlobName(hfcachetest.File{Name: shard2, Data: bytes.Repeat([]byte{'x'}, 2100)})[:12] + ", head has " + hfcachetest.BlobName(model[6])[:12]},
			check:     []string{"node-b has model-00002-of-00004.safetensors with sha256 " + hfcachetest.BlobName(hfcachetest.File{Name: shard2, Data: bytes.Repeat([]byte{'x'}, 2100)})[:12] + ", but its blob is named " + hfcachetest.BlobName(model[6])[:12]},
			lacking:   []string{shard2},
		},
		{
			name:     "another revision",
			node:     func(t *testing.T, cache string) { hfcachetest.WriteSnapshot(t, cache, repo, "main", commitB, model) },
			problems: []string{"node-b holds revision " + commitB + ", head holds " + commitA},
			lacking:  Names(mustScan(t, model).Files),
		},
		{
			name: "the pinned revision, whatever main says",
			node: func(t *testing.T, cache string) {
				hfcachetest.WriteSnapshot(t, cache, repo, "", commitA, model)
				hfcachetest.WriteSnapshot(t, cache, repo, "main", commitB, without(model, shard2))
			},
			revision: commitA,
		},
		{
			name:     "no repository",
			node:     func(t *testing.T, cache string) {},
			problems: []string{"node-b lacks the model: no hub/models--Org--Tiny in the Hugging Face cache (head has 9 files, 10.2 kB)"},
			check:    []string{"node-b lacks the model: no hub/models--Org--Tiny in the Hugging Face cache"},
			lacking:  Names(mustScan(t, model).Files),
		},
		{
			name:     "no config.json",
			node:     snapshot(without(model, "config.json")),
			missing:  []string{"config.json"},
			problems: []string{"node-b lacks config.json (head has 59 B)"},
			check:    []string{"node-b lacks config.json"},
			lacking:  []string{"config.json"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			headCache, nodeCache := t.TempDir(), t.TempDir()
			rev := tc.revision
			if rev == "" {
				hfcachetest.WriteSnapshot(t, headCache, repo, "main", commitA, model)
			} else {
				hfcachetest.WriteSnapshot(t, headCache, repo, "", rev, model)
			}
			tc.node(t, nodeCache)
			head, err := scanHFAt(t, headCache, repo, rev, tc.checksums)
			if err != nil {
				t.Fatal(err)
			}
			if ps := Check("node-a", head); len(ps) != 0 || len(head.Files) != 9 || head.Revision != commitA {
				t.Fatalf("head: %v, %d files, revision %s", messages(ps), len(head.Files), head.Revision)
			}
			node, err := scanHFAt(t, nodeCache, repo, rev, tc.checksums)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(node.Missing, tc.missing) {
				t.Errorf("missing = %q, want %q", node.Missing, tc.missing)
			}
			if got := messages(Compare(head, "node-b", node)); !slices.Equal(got, tc.problems) {
				t.Errorf("problems:\n got %q\nwant %q", got, tc.problems)
			}
			if got := messages(Check("node-b", node)); !slices.Equal(got, tc.check) {
				t.Errorf("check:\n got %q\nwant %q", got, tc.check)
			}
			if got := Names(Lacking(head, node)); !slices.Equal(got, tc.lacking) {
				t.Errorf("lacking = %q, want %q", got, tc.lacking)
			}
		})
	}
}

// scanHFAt is ScanHF of the cache at an OS path, read as the agent reads it (package
// confined: no link followed by the kernel).
func scanHFAt(t *testing.T, cache, repo, revision string, checksums bool) (Manifest, error) {
	t.Helper()
	return ScanHF(context.Background(), openFS(t, cache), ".", repo, revision, Hashing{All: checksums})
}

// scanDirAt is ScanDir of the directory at an OS path, read beneath its parent.
func scanDirAt(t *testing.T, dir string, checksums bool) (Manifest, error) {
	t.Helper()
	return ScanDir(context.Background(), openFS(t, filepath.Dir(dir)), filepath.Base(dir), dir, Hashing{All: checksums})
}

func openFS(t *testing.T, root string) *confined.Dir {
	t.Helper()
	d, err := confined.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func mustScan(t *testing.T, files []hfcachetest.File) Manifest {
	t.Helper()
	cache := t.TempDir()
	hfcachetest.WriteSnapshot(t, cache, repo, "main", commitA, files)
	m, err := scanHFAt(t, cache, repo, "", false)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestScanHFDescribesEachFile(t *testing.T) {
	model := tinyModel()
	m := mustScan(t, append(model, hfcachetest.File{Name: "README.md", Data: []byte("# Tiny")}, hfcachetest.File{Name: "consolidated.safetensors", Data: []byte("unused")}))
	want := []string{"config.json", "generation_config.json", "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
		"model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}
	if got := Names(m.Files); !slices.Equal(got, want) {
		t.Fatalf("files = %q\nwant (README and the shard the index does not list left out) %q", got, want)
	}
	if m.Source != repo || m.Revision != commitA || !strings.HasSuffix(m.Dir, filepath.Join("hub", "models--Org--Tiny", "snapshots", commitA)) {
		t.Errorf("manifest = %+v", m)
	}
	for _, f := range m.Files {
		var src hfcachetest.File
		for _, s := range model {
			if s.Name == f.Name {
				src = s
			}
		}
		if f.Size != int64(len(src.Data)) || f.Blob != hfcachetest.BlobName(src) {
			t.Errorf("%s: size %d blob %s, want %d %s", f.Name, f.Size, f.Blob, len(src.Data), hfcachetest.BlobName(src))
		}
		// LFS files carry the sha256 their blob is named after; small files' blobs are git
		// sha1s, so their hash is unknown until read.
		if lfs := strings.HasSuffix(f.Name, ".safetensors"); lfs != (f.SHA256 == f.Blob) || !lfs && f.SHA256 != "" {
			t.Errorf("%s: sha256 %q blob %q", f.Name, f.SHA256, f.Blob)
		}
	}
	summed := mustScanChecksums(t, model)
	for _, f := range summed.Files {
		for _, s := range model {
			if s.Name == f.Name {
				if sum := sha256.Sum256(s.Data); f.SHA256 != hex.EncodeToString(sum[:]) {
					t.Errorf("%s: checksum %s", f.Name, f.SHA256)
				}
			}
		}
	}
}

func mustScanChecksums(t *testing.T, files []hfcachetest.File) Manifest {
	t.Helper()
	cache := t.TempDir()
	hfcachetest.WriteSnapshot(t, cache, repo, "main", commitA, files)
	m, err := scanHFAt(t, cache, repo, "main", true)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestScanDir(t *testing.T) {
	writeDir := func(t *testing.T, dir string, files []hfcachetest.File) {
		for _, f := range files {
			hfcachetest.WriteFile(t, filepath.Join(dir, f.Name), f.Data)
		}
	}
	single := []hfcachetest.File{{Name: "config.json", Data: []byte("{}")}, {Name: "model.safetensors", Data: make([]byte, 3000)}, {Name: "tokenizer.model", Data: make([]byte, 500)},
		{Name: "notes.md", Data: []byte("not a model file")}, {Name: "model.safetensors.tpdeploy-partial", Data: make([]byte, 100)}}
	for _, tc := range []struct {
		name    string
		files   []hfcachetest.File
		absent  bool
		names   []string
		missing []string
	}{
		{name: "sharded", files: tinyModel(), names: Names(mustScan(t, tinyModel()).Files)},
		{name: "one file, no index: the safetensors present", files: single, names: []string{"config.json", "model.safetensors", "tokenizer.model"}},
		{name: "shards and config missing", files: without(tinyModel(), "config.json", shardName(3, 4)),
			names:   dropNames(Names(mustScan(t, tinyModel()).Files), "config.json", shardName(3, 4)),
			missing: []string{"config.json", shardName(3, 4)}},
		{name: "no directory", absent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "model")
			if !tc.absent {
				writeDir(t, dir, tc.files)
			}
			m, err := scanDirAt(t, dir, true)
			if err != nil {
				t.Fatal(err)
			}
			if (m.Absent != "") != tc.absent || !slices.Equal(Names(m.Files), tc.names) || !slices.Equal(m.Missing, tc.missing) {
				t.Fatalf("manifest: absent %q files %q missing %q\nwant files %q missing %q", m.Absent, Names(m.Files), m.Missing, tc.names, tc.missing)
			}
			if tc.absent && m.Absent != "no directory "+dir {
				t.Errorf("absent = %q", m.Absent)
			}
			for _, f := range m.Files {
				if f.SHA256 == "" || f.Blob != "" || m.Revision != "" {
					t.Errorf("%s: %+v (revision %q): a directory's files are hashed when asked, and have no blobs", f.Name, f, m.Revision)
				}
			}
		})
	}
}

func dropNames(names []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(drop, n) })
}

func TestScanRefusesWhatIsNotAModel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, cache string)
		repo    string
		wantErr string
	}{
		{name: "index is not JSON", setup: func(t *testing.T, cache string) {
			hfcachetest.WriteSnapshot(t, cache, repo, "main", commitA, replaced(tinyModel(), "model.safetensors.index.json", []byte(`{"weight_map":`)))
		}, wantErr: "model.safetensors.index.json: invalid model: unexpected end of JSON input"},
		{name: "index leaves the directory", setup: func(t *testing.T, cache string) {
			hfcachetest.WriteSnapshot(t, cache, repo, "main", commitA, replaced(tinyModel(), "model.safetensors.index.json", []byte(`{"weight_map":{"a":"../../../etc/passwd"}}`)))
		}, wantErr: `weight_map lists "../../../etc/passwd", not a file in the model's directory`},
		{name: "ref holds no commit", setup: func(t *testing.T, cache string) {
			hfcachetest.WriteSnapshot(t, cache, repo, "main", commitA, tinyModel())
			hfcachetest.WriteFile(t, filepath.Join(HFRepoDir(cache, repo), "refs", "main"), []byte("garbage"))
		}, wantErr: `hub/models--Org--Tiny/refs/main holds "garbage", not a commit`},
		{name: "not Org/Name", setup: func(*testing.T, string) {}, repo: "../x", wantErr: `repository "../x" is not Org/Name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			tc.setup(t, cache)
			r := repo
			if tc.repo != "" {
				r = tc.repo
			}
			_, err := scanHFAt(t, cache, r, "", false)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want ErrInvalid with %q", err, tc.wantErr)
			}
		})
	}
}

// TestMessagesAsTheIssueWritesThem compares manifests of a 39-shard model with the sizes
// the issue quotes.
func TestMessagesAsTheIssueWritesThem(t *testing.T) {
	head := Manifest{Source: "Org/Big", Revision: "def456"}
	for i := 1; i <= 39; i++ {
		head.Files = append(head.Files, File{Name: shardName(i, 39), Size: 4_900_000_000})
	}
	node := head
	node.Files = slices.Clone(head.Files)
	node.Files[2].Size = 1_200_000_000
	node.Files = slices.Delete(node.Files, 6, 7)
	node.Files[10].Size++ // the same size to one decimal: the bytes are shown
	want := []string{
		"node-b has model-00003-of-00039.safetensors at 1.2 GB, head has 4.9 GB",
		"node-b lacks model-00007-of-00039.safetensors (head has 4.9 GB)",
		"node-b has model-00012-of-00039.safetensors at 4900000001 bytes, head has 4900000000 bytes",
	}
	if got := messages(Compare(head, "node-b", node)); !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	other := node
	other.Revision = "abc123"
	if got := messages(Compare(head, "node-b", other)); !reflect.DeepEqual(got, []string{"node-b holds revision abc123, head holds def456"}) {
		t.Errorf("revision: %q", got)
	}
	if n := len(Lacking(head, other)); n != 39 {
		t.Errorf("lacking at another revision = %d files, want all 39", n)
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 999: "999 B", 1000: "1.0 kB", 1949: "1.9 kB", 60: "60 B",
		4_900_000_000: "4.9 GB", 4_966_000_000: "5.0 GB", 999_960_000: "1.0 GB",
		123_456_789_012: "123.5 GB", 470_000_000_000_000: "470.0 TB",
	} {
		if got := HumanSize(n); got != want {
			t.Errorf("HumanSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// The scan resolves a model's links itself, within the file system it reads: a snapshot's
// entries lead to their blobs, and a link out of the file system — absolute, or up
// through .. — is refused, never described (its size, with checksums its hash, would
// otherwise reach workflow history).
func TestScanResolvesLinksWithinItsFileSystem(t *testing.T) {
	blob := strings.Repeat("a", 64)
	snap := "hub/models--Org--Tiny/snapshots/" + commitA
	link := func(target string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink}
	}
	model := func(config *fstest.MapFile) fstest.MapFS {
		return fstest.MapFS{
			"hub/models--Org--Tiny/refs/main":      {Data: []byte(commitA)},
			"hub/models--Org--Tiny/blobs/" + blob:  {Data: []byte("weights!")},
			"hub/models--Org--Tiny/blobs/cfg":      {Data: []byte(`{"model_type":"llama"}`)},
			snap + "/model.safetensors":            link("../../blobs/" + blob),
			snap + "/config.json":                  config,
			"hub/models--Org--Tiny/blobs/loop-one": link("loop-two"),
			"hub/models--Org--Tiny/blobs/loop-two": link("loop-one"),
			"secret":                               {Data: []byte("outside the model, inside the cache")},
		}
	}
	m, err := ScanHF(context.Background(), model(link("../../blobs/cfg")), ".", repo, "", Hashing{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := m.File("model.safetensors"); f.Size != 8 || f.Blob != blob {
		t.Errorf("a snapshot link to its blob: %+v", f)
	}
	if f, _ := m.File("config.json"); f.Size != 22 || f.SHA256 == "" {
		t.Errorf("a link to a blob of another name, hashed: %+v", f)
	}
	for target, want := range map[string]error{
		"/etc/passwd":               ErrLinkOutside,
		"../../../../../etc/passwd": ErrLinkOutside,
		"../../blobs/loop-one":      nil, // a loop: refused as one, whatever else
	} {
		_, err := ScanHF(context.Background(), model(link(target)), ".", repo, "", Hashing{All: true})
		if err == nil || want != nil && !errors.Is(err, want) {
			t.Errorf("config.json -> %s: err = %v, want %v", target, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "outside the model") {
			t.Errorf("config.json -> %s: the error quotes what is outside: %v", target, err)
		}
	}
	// A link that stays in the file system, out of the repository, is the file system's
	// to allow: the agent's is the allowed mount.
	if m, err := ScanHF(context.Background(), model(link("../../../../secret")), ".", repo, "", Hashing{}); err != nil || len(m.Missing) != 0 {
		t.Errorf("a link within the file system: %+v, %v", m, err)
	}
}
