package activities

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/hfcachetest"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/weights"
	"github.com/tpdeploy/tpdeploy/internal/weights/transfer"
)

// Issue #23 finding 3: the Hugging Face cache is mounted read-write into containers that
// run whatever the model brings, so they can plant links there. The agent, root on the
// node, must never read or write through one out of its allowed mounts.

// guardedAgent is a test agent whose policy allows only root as a mount.
func guardedAgent(t *testing.T, name, root string) *agent {
	t.Helper()
	pol, err := policy.Parse([]byte("allowed_mounts: ["+root+"]\n"), "/etc/tpdeploy/policy.yaml", policy.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	return newAgentWith(t, Config{Name: name, Policy: &pol}, nil)
}

func TestModelServerRefusesPlantedLinks(t *testing.T) {
	own := ownIPv4(t).Addr()
	cache := t.TempDir()
	files := tinyModelFiles(2, 4000)
	writeHFCache(t, cache, files)
	a := guardedAgent(t, "node-a", cache)
	snap := weights.HFSnapshotDir(cache, modelRepo, modelCommit)
	// A container replaced two snapshot entries with links out of the cache.
	for name, target := range map[string]string{
		"config.json":    "/etc/passwd",
		"tokenizer.json": strings.Repeat("../", 16) + "etc/passwd",
	} {
		p := filepath.Join(snap, name)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "a copy's secret"
	srv, err := run[contract.ModelServer](a, a.node.Weights.OpenModelServer, contract.OpenModelServerRequest{Node: "node-a", Addr: own, Root: snap,
		Files: []string{"config.json", "tokenizer.json", files[2].Name}, Keys: []string{transfer.KeyHash(secret)}, Peers: []netip.Addr{own}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.node.Weights.servers.Close(srv.ID) })
	get := func(name string) (int, []byte) {
		code, body := getModelFile(t, &net.TCPAddr{IP: own.AsSlice()}, srv, name, secret, "")
		return code, []byte(body)
	}
	passwd, _ := os.ReadFile("/etc/passwd")
	for _, name := range []string{"config.json", "tokenizer.json"} {
		code, body := get(name)
		if code == http.StatusOK || (len(passwd) > 0 && bytes.Contains(body, passwd[:min(len(passwd), 16)])) {
			t.Errorf("%s (a link to /etc/passwd) served: %d %q", name, code, body[:min(len(body), 60)])
		}
	}
	// The snapshot's own links into ../../blobs still serve.
	if code, body := get(files[2].Name); code != http.StatusOK || !bytes.Equal(body, files[2].Data) {
		t.Errorf("a shard (a link to its blob) = %d, %d bytes", code, len(body))
	}
}

func TestSyncModelRefusesPlantedLinks(t *testing.T) {
	own := ownIPv4(t).Addr()
	files := tinyModelFiles(2, 4000)
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, snap, repo, outside string)
	}{
		{"a partial file that links to a file outside", func(t *testing.T, snap, _, outside string) {
			if err := os.MkdirAll(snap, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(outside, "authorized_keys"), filepath.Join(snap, files[2].Name+weights.PartialSuffix)); err != nil {
				t.Fatal(err)
			}
		}},
		{"a blobs directory that links outside", func(t *testing.T, _, repo, outside string) {
			if err := os.MkdirAll(repo, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(repo, "blobs")); err != nil {
				t.Fatal(err)
			}
		}},
		{"a snapshots directory that links outside", func(t *testing.T, _, repo, outside string) {
			if err := os.MkdirAll(repo, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(repo, "snapshots")); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			headCache, nodeCache, outside := t.TempDir(), t.TempDir(), t.TempDir()
			victim := filepath.Join(outside, "authorized_keys")
			if err := os.WriteFile(victim, []byte("ssh-ed25519 AAAA the operator's key\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			writeHFCache(t, headCache, files)
			a, b := guardedAgent(t, "node-a", headCache), guardedAgent(t, "node-b", nodeCache)
			head := a.manifest(t, contract.ModelManifestRequest{HFCache: headCache, Repo: modelRepo})
			snap := weights.HFSnapshotDir(nodeCache, modelRepo, head.Revision)
			tc.plant(t, snap, weights.HFRepoDir(nodeCache, modelRepo), outside)
			key := b.copyKey(t)
			srv, err := run[contract.ModelServer](a, a.node.Weights.OpenModelServer, contract.OpenModelServerRequest{Node: "node-a", Addr: own, Root: head.Dir, Files: weights.Names(head.Files),
				Keys: []string{key}, Peers: []netip.Addr{own}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.node.Weights.servers.Close(srv.ID) })
			_, err = b.sync(contract.SyncModelRequest{From: netip.AddrPortFrom(own, srv.Addr.Port()), Key: key, Addr: own, Root: snap,
				Layout: contract.ModelLayoutHF, Ref: "main", Files: head.Files})
			if app := modelAppError(t, err); app.Type() != contract.ErrPolicyDenied {
				t.Errorf("sync through a planted link: %v", err)
			}
			if got, _ := os.ReadFile(victim); string(got) != "ssh-ed25519 AAAA the operator's key\n" {
				t.Errorf("the file outside was overwritten: %q", got)
			}
			entries, _ := os.ReadDir(outside)
			if len(entries) != 1 {
				t.Errorf("the copy wrote outside the cache: %d entries there", len(entries))
			}
		})
	}
}

// The compensation removes a planted partial link itself, never what it points to.
func TestRemovePartialModelRemovesALinkNotItsTarget(t *testing.T) {
	cache, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "precious")
	hfcachetest.WriteFile(t, victim, []byte("keep"))
	snap := weights.HFSnapshotDir(cache, modelRepo, modelCommit)
	hfcachetest.WriteFile(t, filepath.Join(snap, "config.json"), []byte("{}"))
	if err := os.Symlink(victim, filepath.Join(snap, "x"+weights.PartialSuffix)); err != nil {
		t.Fatal(err)
	}
	g := guardedAgent(t, "node-a", cache)
	res, err := run[contract.RemovePartialModelResult](g, g.node.Weights.RemovePartialModel, contract.RemovePartialModelRequest{Node: "node-a", Root: snap})
	if err != nil || len(res.Removed) != 1 {
		t.Fatalf("removed %v, %v", res.Removed, err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
		t.Errorf("the link's target: %q, %v", b, err)
	}
}

// The model scan (ModelManifest) reads beneath the allowed mount without the kernel
// following any link: a snapshot's links to its blobs are resolved by the scan, a link a
// container planted out of the mount is refused — its target's size and, with checksums,
// its hash would otherwise go into workflow history — and so is a directory on the way
// that is a link.
func TestModelScanRefusesPlantedLinks(t *testing.T) {
	files := tinyModelFiles(2, 4000)
	secret := []byte("root:$y$j9T$the-host's-shadow-line:19000:0:99999:7:::\n")
	sum := sha256.Sum256(secret)
	secretHash := hex.EncodeToString(sum[:])
	for _, tc := range []struct {
		name  string
		hf    bool
		plant func(t *testing.T, model, outside string)
	}{
		{"a host_dir file that links out by an absolute path", false, func(t *testing.T, model, outside string) {
			relink(t, filepath.Join(model, "config.json"), filepath.Join(outside, "shadow"))
		}},
		{"a snapshot entry that links up and out of the cache", true, func(t *testing.T, snap, outside string) {
			relink(t, filepath.Join(snap, "tokenizer.json"), strings.Repeat("../", 8)+strings.TrimPrefix(filepath.Join(outside, "shadow"), "/"))
		}},
		{"a snapshot directory on the way that links out", true, func(t *testing.T, snap, outside string) {
			hfcachetest.WriteFile(t, filepath.Join(outside, "sub", files[2].Name), secret)
			if err := os.Symlink(filepath.Join(outside, "sub"), filepath.Join(snap, "sub")); err != nil {
				t.Fatal(err)
			}
			relinkData(t, filepath.Join(snap, "model.safetensors.index.json"), []byte(`{"weight_map":{"a":"sub/`+files[2].Name+`"}}`))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache, outside := t.TempDir(), t.TempDir()
			hfcachetest.WriteFile(t, filepath.Join(outside, "shadow"), secret)
			g := guardedAgent(t, "node-a", cache)
			req := contract.ModelManifestRequest{Node: "node-a", Checksums: true}
			model := filepath.Join(cache, "model")
			if tc.hf {
				writeHFCache(t, cache, files)
				model = weights.HFSnapshotDir(cache, modelRepo, modelCommit)
				req.HFCache, req.Repo = cache, modelRepo
			} else {
				writeModelDir(t, model, files)
				req.Dir = model
			}
			// Unplanted, the model scans: the snapshot's own links to its blobs resolve.
			if m, err := run[weights.Manifest](g, g.node.Weights.ModelManifest, req); err != nil || len(m.Files) != len(files) || len(m.Missing) != 0 {
				t.Fatalf("the model before the plant: %+v, %v", m, err)
			}
			tc.plant(t, model, outside)
			m, err := run[weights.Manifest](g, g.node.Weights.ModelManifest, req)
			for _, f := range m.Files {
				if f.Size == int64(len(secret)) || f.SHA256 == secretHash {
					t.Errorf("the manifest describes the file outside: %+v", f)
				}
			}
			if err == nil {
				t.Fatalf("a planted link was scanned through: %+v", m)
			}
			if app := modelAppError(t, err); app.Type() != contract.ErrPolicyDenied || strings.Contains(app.Message(), secretHash) {
				t.Fatalf("type %s: %s", app.Type(), app.Message())
			}
		})
	}
}

// relink replaces p with a link to target.
func relink(t *testing.T, p, target string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// relinkData replaces p (a snapshot link) with a regular file holding data.
func relinkData(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	hfcachetest.WriteFile(t, p, data)
}
