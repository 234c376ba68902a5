package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/deptest"
)

// start runs the router with args until the test ends; it returns the API's base URL and an
// HTTP client for the admin socket.
func start(t *testing.T, args ...string) (api string, admin *http.Client, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, args, func(a string) { addrs <- a }) }()
	var got string
	select {
	case got = <-addrs:
	case err := <-errc:
		cancel()
		t.Fatalf("router: %v", err)
	}
	apiAddr, adminAddr, _ := strings.Cut(got, " ")
	admin = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", adminAddr)
	}}}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("router: %v", err)
		}
	}
	t.Cleanup(stop)
	return "http://" + apiAddr, admin, stop
}

// The binary end to end: routes pushed over the admin socket are served, kept in the state
// file and served again by the next router at once; the API key is asked for.
func TestRoutesPushedAndKeptAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	defer engine.Close()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte("sk-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "admin", "router.sock")
	state := filepath.Join(dir, "routes.json")
	args := []string{"--listen", "127.0.0.1:0", "--admin", "unix:" + sock, "--state", state, "--api-key-file", keyFile, "--hold", "200ms"}
	api, admin, stop := start(t, args...)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket: %v %v", fi.Mode(), err)
	}
	req, _ := http.NewRequest("PUT", "http://admin/routes", strings.NewReader(`{"models": [{"id": "m", "replicas": [{"name": "c1", "url": "`+engine.URL+`"}]}]}`))
	resp, err := admin.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT /routes: %d", resp.StatusCode)
	}
	ask := func(api string) int {
		req, _ := http.NewRequest("POST", api+"/v1/completions", strings.NewReader(`{"model": "m", "prompt": "hi"}`))
		req.Header.Set("Authorization", "Bearer sk-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == 200 && !strings.Contains(string(b), `"prompt": "hi"`) {
			t.Fatalf("body %s", b)
		}
		return resp.StatusCode
	}
	if code := ask(api); code != 200 {
		t.Fatalf("through the router: %d", code)
	}
	stop()
	var kept struct{ Models []struct{ ID string } }
	if b, err := os.ReadFile(state); err != nil || json.Unmarshal(b, &kept) != nil || len(kept.Models) != 1 || kept.Models[0].ID != "m" {
		t.Fatalf("state file: %s %v", b, err)
	}
	api, _, _ = start(t, args...) // the old socket is replaced
	if code := ask(api); code != 200 {
		t.Fatalf("after a restart, before any push: %d", code)
	}
}

// An admin address other than loopback or a unix socket is refused (it asks no
// credentials), as are a relative socket path, an empty key file and stray arguments.
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, nil, 0o600)
	badState := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(badState, []byte(`{"models": [{"id": ""}]}`), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--admin", "0.0.0.0:9000"}, "not loopback"},
		{[]string{"--admin", "10.0.0.1:9000"}, "not loopback"},
		{[]string{"--admin", "unix:rel.sock"}, "must be absolute"},
		{[]string{"--api-key-file", empty}, "no key in it"},
		{[]string{"--state", badState}, "models[0].id: empty"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		args := append([]string{"--listen", "127.0.0.1:0", "--admin", "unix:" + filepath.Join(dir, "s.sock")}, tc.args...)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := run(ctx, args, func(string) { t.Errorf("%v: started", tc.args) })
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// The router is a small proxy: it links neither the agent's Docker and netlink code nor the
// Temporal SDK.
func TestRouterLinksNoAgentNorTemporal(t *testing.T) {
	for _, dep := range deptest.Find(t, ".", append([]string{"go.temporal.io"}, deptest.Agent...)) {
		t.Errorf("the router links %s", dep)
	}
}
