package activities

import (
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/weights"
	"github.com/tpdeploy/tpdeploy/internal/weights/transfer"
)

// #36 finding 3: a container that shares the cache keeps CAP_MKNOD, so it can plant a FIFO
// or a device node where the agent reads: the scan hung on a FIFO index and read a
// /dev/zero index (or a sparse one) whole into memory; the model server opened what it
// served before looking at its type. Each is refused now, naming the path.

// replaceWith replaces p (a snapshot's link to its blob) with a FIFO, a /dev/zero-like
// device (1,5) or a sparse file of size bytes.
func replaceWith(t *testing.T, p, kind string, size int64) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	var err error
	switch kind {
	case "fifo":
		err = unix.Mkfifo(p, 0o644)
	case "device":
		if err = unix.Mknod(p, unix.S_IFCHR|0o644, int(unix.Mkdev(1, 5))); err != nil {
			t.Skipf("mknod: %v (needs root and a file system without nodev)", err)
		}
	case "sparse":
		var f *os.File
		if f, err = os.Create(p); err == nil {
			err = f.Truncate(size)
			f.Close()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// withinTime runs fn, failing the test when it does not return in 10 s; a FIFO planted at
// fifo is then opened for writing, which releases an open blocked on it.
func withinTime(t *testing.T, what, fifo string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		<-done
		t.Fatalf("%s did not return in 10 s: it opened the planted FIFO", what)
	}
}

func TestModelScanRefusesSpecialFiles(t *testing.T) {
	for _, tc := range []struct {
		kind, wantType string
		wants          []string
	}{
		{"fifo", contract.ErrPolicyDenied, []string{"model.safetensors.index.json", "special file"}},
		{"device", contract.ErrPolicyDenied, []string{"model.safetensors.index.json", "special file"}},
		{"sparse", contract.ErrModelCorrupt, []string{"model.safetensors.index.json", "more than the 67108864"}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			cache := t.TempDir()
			writeHFCache(t, cache, tinyModelFiles(2, 1000))
			g := guardedAgent(t, "node-a", cache)
			index := filepath.Join(weights.HFSnapshotDir(cache, modelRepo, modelCommit), "model.safetensors.index.json")
			replaceWith(t, index, tc.kind, 256<<20)
			var err error
			withinTime(t, "the model scan", index, func() {
				_, err = run[weights.Manifest](g, g.node.Weights.ModelManifest, contract.ModelManifestRequest{Node: "node-a", HFCache: cache, Repo: modelRepo})
			})
			if err == nil {
				t.Fatal("the planted index was scanned")
			}
			app := modelAppError(t, err)
			if app.Type() != tc.wantType {
				t.Fatalf("type %s, want %s: %s", app.Type(), tc.wantType, app.Message())
			}
			for _, w := range tc.wants {
				if !strings.Contains(app.Message(), w) {
					t.Errorf("refusal lacks %q: %s", w, app.Message())
				}
			}
		})
	}
}

func TestModelServerRefusesSpecialFiles(t *testing.T) {
	own := ownIPv4(t).Addr()
	cache := t.TempDir()
	files := tinyModelFiles(2, 1000)
	writeHFCache(t, cache, files)
	a := guardedAgent(t, "node-a", cache)
	snap := weights.HFSnapshotDir(cache, modelRepo, modelCommit)
	replaceWith(t, filepath.Join(snap, "config.json"), "fifo", 0)
	replaceWith(t, filepath.Join(snap, "tokenizer.json"), "device", 0)
	const secret = "a copy's secret"
	srv, err := run[contract.ModelServer](a, a.node.Weights.OpenModelServer, contract.OpenModelServerRequest{Node: "node-a", Addr: own, Root: snap,
		Files: []string{"config.json", "tokenizer.json", files[2].Name}, Keys: []string{transfer.KeyHash(secret)}, Peers: []netip.Addr{own}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.node.Weights.servers.Close(srv.ID) })
	for _, name := range []string{"config.json", "tokenizer.json"} {
		var code int
		var body string
		withinTime(t, "serving "+name, filepath.Join(snap, "config.json"), func() {
			code, body = getModelFile(t, &net.TCPAddr{IP: own.AsSlice()}, srv, name, secret, "")
		})
		if code != http.StatusForbidden || !strings.Contains(body, "not a regular file") {
			t.Errorf("GET %s (a planted special file): %d %q, want 403 naming it", name, code, body)
		}
	}
	if code, _ := getModelFile(t, &net.TCPAddr{IP: own.AsSlice()}, srv, files[2].Name, secret, ""); code != http.StatusOK {
		t.Errorf("GET %s: %d", files[2].Name, code)
	}
}

// The copy opened a planted partial file (O_RDWR) before looking at it: a device's driver
// ran, a disk would be written through; it failed only later, retryably, at a truncate.
// Now the open itself is refused, PolicyDenied naming the file.
func TestSyncModelRefusesSpecialPartialFiles(t *testing.T) {
	own := ownIPv4(t).Addr()
	files := tinyModelFiles(2, 100_000)
	for _, kind := range []string{"fifo", "device"} {
		t.Run(kind, func(t *testing.T) {
			headCache, nodeCache := t.TempDir(), t.TempDir()
			writeHFCache(t, headCache, files)
			a, b := guardedAgent(t, "node-a", headCache), guardedAgent(t, "node-b", nodeCache)
			head := a.manifest(t, contract.ModelManifestRequest{HFCache: headCache, Repo: modelRepo})
			snap := weights.HFSnapshotDir(nodeCache, modelRepo, head.Revision)
			if err := os.MkdirAll(snap, 0o755); err != nil {
				t.Fatal(err)
			}
			var partials []string
			for _, f := range head.Files {
				p := filepath.Join(snap, f.Name+weights.PartialSuffix)
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				replaceWith(t, p, kind, 0)
				partials = append(partials, p)
			}
			key := b.copyKey(t)
			srv, err := run[contract.ModelServer](a, a.node.Weights.OpenModelServer, contract.OpenModelServerRequest{Node: "node-a", Addr: own, Root: head.Dir, Files: weights.Names(head.Files),
				Keys: []string{key}, Peers: []netip.Addr{own}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.node.Weights.servers.Close(srv.ID) })
			withinTime(t, "the copy", partials[0], func() {
				_, err = b.sync(contract.SyncModelRequest{From: netip.AddrPortFrom(own, srv.Addr.Port()), Key: key, Addr: own, Root: snap,
					Layout: contract.ModelLayoutHF, Ref: "main", Files: head.Files})
			})
			if app := modelAppError(t, err); app.Type() != contract.ErrPolicyDenied || !strings.Contains(app.Message(), weights.PartialSuffix) {
				t.Errorf("sync into a planted %s: %v", kind, err)
			}
		})
	}
}
