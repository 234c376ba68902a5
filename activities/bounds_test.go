package activities

import (
	"context"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/hfcachetest"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights/transfer"
)

// Issue #23 finding 5: everything the agent reads or keeps for a request is bounded, and
// each bound is tested at the bound.

func TestSecretFileBounds(t *testing.T) {
	dir := t.TempDir()
	pol, err := policy.Parse(nil, "/etc/tpdeploy/policy.yaml", policy.Overrides{SecretDirs: []string{dir, "/dev"}})
	if err != nil {
		t.Fatal(err)
	}
	a := New(Config{Name: "node-a", Policy: &pol})
	write := func(name string, n int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Repeat("t", n)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	at := write("at-bound", maxSecretSize)
	over := write("over-bound", maxSecretSize+1)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/etc/shadow", link); err != nil {
		t.Fatal(err)
	}
	if v, err := a.VLLM.resolveSecret("secrets.hf_token", spec.SecretRef{File: at}); err != nil || len(v) != maxSecretSize {
		t.Fatalf("a secret of exactly %d bytes: %d bytes, %v", maxSecretSize, len(v), err)
	}
	for _, tc := range []struct{ file, want string }{
		{over, "more than the 65536"},
		{"/dev/zero", "not a regular file"},
		{fifo, "not a regular file"},
		{link, "symbolic link"},
	} {
		start := time.Now()
		_, err := a.VLLM.resolveSecret("secrets.hf_token", spec.SecretRef{File: tc.file})
		app := appError(t, err)
		if app.Type() != contract.ErrPolicyDenied || !strings.Contains(app.Message(), tc.want) {
			t.Errorf("%s: %v, want PolicyDenied %q", tc.file, err, tc.want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s took %s", tc.file, d)
		}
	}
}

func TestListenerSetsAreBounded(t *testing.T) {
	own := ownIPv4(t)
	pol := policy.Default()
	a := New(Config{Name: "node-a", Policy: &pol})
	ctx := context.Background()
	var tokens []string
	t.Cleanup(func() {
		for _, tok := range tokens {
			a.Reachability.closeListeners(tok)
		}
	})
	for i := 0; i < maxListenerSets; i++ {
		res, err := a.Reachability.OpenProbeListeners(ctx, contract.ListenRequest{Node: "node-a", Addrs: []netip.Prefix{own}})
		if err != nil {
			t.Fatalf("set %d of %d: %v", i+1, maxListenerSets, err)
		}
		tokens = append(tokens, res.Token)
	}
	_, err := a.Reachability.OpenProbeListeners(ctx, contract.ListenRequest{Node: "node-a", Addrs: []netip.Prefix{own}})
	if app := appError(t, err); app.Type() != contract.ErrPolicyDenied {
		t.Fatalf("set %d: %v", maxListenerSets+1, err)
	}
	many := make([]netip.Prefix, maxListenersPerSet+1)
	for i := range many {
		many[i] = own
	}
	a.Reachability.closeListeners(tokens[0])
	_, err = a.Reachability.OpenProbeListeners(ctx, contract.ListenRequest{Node: "node-a", Addrs: many})
	if app := appError(t, err); app.Type() != contract.ErrPolicyDenied {
		t.Fatalf("%d listeners in one set: %v", len(many), err)
	}
	_, err = a.Reachability.DialPeers(ctx, contract.DialRequest{Node: "node-a", Targets: make([]netplan.Target, maxDialTargets+1)})
	if app := appError(t, err); app.Type() != contract.ErrPolicyDenied {
		t.Fatalf("%d dial targets: %v", maxDialTargets+1, err)
	}
}

func TestModelServersAreBoundedAndOnlyAKeyKeepsThemOpen(t *testing.T) {
	own := ownIPv4(t).Addr()
	dir := t.TempDir()
	hfcachetest.WriteFile(t, filepath.Join(dir, "m", "config.json"), []byte("{}"))
	g := guardedAgent(t, "node-a", dir)
	serve := func(edit func(*contract.OpenModelServerRequest)) contract.OpenModelServerRequest {
		r := contract.OpenModelServerRequest{Node: "node-a", Addr: own, Root: filepath.Join(dir, "m"), Files: []string{"config.json"},
			Keys: []string{transfer.KeyHash("secret")}, Peers: []netip.Addr{own}}
		if edit != nil {
			edit(&r)
		}
		return r
	}
	var ids []string
	t.Cleanup(func() {
		for _, id := range ids {
			g.node.Weights.servers.Close(id)
		}
	})
	for i := 0; i < transfer.MaxServers; i++ {
		srv, err := run[contract.ModelServer](g, g.node.Weights.OpenModelServer, serve(nil))
		if err != nil {
			t.Fatalf("server %d of %d: %v", i+1, transfer.MaxServers, err)
		}
		ids = append(ids, srv.ID)
	}
	_, err := run[contract.ModelServer](g, g.node.Weights.OpenModelServer, serve(nil))
	if app := modelAppError(t, err); app.Type() != contract.ErrPolicyDenied {
		t.Fatalf("server %d: %v", transfer.MaxServers+1, err)
	}
	for _, id := range ids {
		g.node.Weights.servers.Close(id)
	}
	// Many keys or peers are refused; so is a server for nobody.
	for what, req := range map[string]contract.OpenModelServerRequest{
		"too many keys":  serve(func(r *contract.OpenModelServerRequest) { r.Keys = slices.Repeat(r.Keys, transfer.MaxPeers+1) }),
		"too many peers": serve(func(r *contract.OpenModelServerRequest) { r.Peers = slices.Repeat(r.Peers, transfer.MaxPeers+1) }),
	} {
		if _, err := run[contract.ModelServer](g, g.node.Weights.OpenModelServer, req); modelAppError(t, err).Type() != contract.ErrPolicyDenied {
			t.Errorf("%s: %v", what, err)
		}
	}
	if _, err := run[contract.ModelServer](g, g.node.Weights.OpenModelServer, serve(func(r *contract.OpenModelServerRequest) { r.Keys = nil })); modelAppError(t, err).Type() != contract.ErrBadRequest {
		t.Errorf("a server without keys: %v", err)
	}
	// Requests without a key's secret, every 50 ms, do not keep a 300 ms server open.
	srv, err := run[contract.ModelServer](g, g.node.Weights.OpenModelServer, serve(func(r *contract.OpenModelServerRequest) { r.TTL = 300 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for g.isOpen(srv) && time.Now().Before(deadline) {
		resp, err := http.Get("http://" + srv.Addr.String() + "/config.json")
		if err == nil {
			resp.Body.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	if g.isOpen(srv) {
		g.node.Weights.servers.Close(srv.ID)
		t.Fatal("unauthenticated requests kept the model server open past its TTL")
	}
}

func TestCopyKeysAreBounded(t *testing.T) {
	g := newAgent(t, "node-b", nil)
	prepare := func(ttl time.Duration) (contract.ModelCopyKey, error) {
		return run[contract.ModelCopyKey](g, g.node.Weights.PrepareModelCopy, contract.PrepareModelCopyRequest{Node: "node-b", Root: "/", TTL: ttl})
	}
	var keys []string
	for i := 0; i < transfer.MaxKeys; i++ {
		keys = append(keys, g.copyKey(t))
	}
	if _, err := prepare(0); modelAppError(t, err).Type() != contract.ErrPolicyDenied {
		t.Fatalf("key %d: %v", transfer.MaxKeys+1, err)
	}
	// A key whose copy is done, and one unused past its TTL, free their places.
	g.node.Weights.keys.Forget(keys[0])
	if _, err := prepare(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if n := g.node.Weights.keys.Len(); n != transfer.MaxKeys-1 {
		t.Fatalf("%d keys kept, want %d", n, transfer.MaxKeys-1)
	}
	if k, err := prepare(0); err != nil || slices.Contains(keys, k.Key) {
		t.Fatalf("the freed place: %+v, %v", k, err)
	}
}
