package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// VLLM_USE_RUST_FRONTEND is vllm/envs.py's bool(int(os.getenv(name, "0"))), and only the
// releases after 0.22.1 have it.
func TestRustFrontEndSwitch(t *testing.T) {
	for v, want := range map[string]bool{"0.22.1": false, "0.23.0": true, "0.32.0": true} {
		if got := (release{vllm: v}).hasRustFrontend(); got != want {
			t.Errorf("%s: hasRustFrontend %v, want %v", v, got, want)
		}
	}
	for _, tc := range []struct {
		val     string
		set, on bool
		err     bool
	}{{"", false, false, false}, {"1", true, true, false}, {"0", true, false, false}, {" 1", true, true, false}, {"true", true, false, true}} {
		if tc.set {
			t.Setenv("VLLM_USE_RUST_FRONTEND", tc.val)
		} else {
			_ = os.Unsetenv("VLLM_USE_RUST_FRONTEND")
		}
		on, err := rustFrontendOn()
		if on != tc.on || (err != nil) != tc.err {
			t.Errorf("%q: on %v err %v", tc.val, on, err)
		}
	}
}

// The launch line's --args-json is sort_keys JSON with Python's separators, and the log's
// copy redacts the API key (redact_sensitive_args) while the process gets the key.
func TestRustFrontEndArgsJSON(t *testing.T) {
	f := serveFlags{model: "/models/m", served: "m", host: "0.0.0.0", port: 8000, tp: 2, pp: 1, apiKeys: []string{"sekrit"}}
	logged, given := rustArgsJSON(f, true), rustArgsJSON(f, false)
	want := `{"api_key": ["***"], "engine_ready_timeout_secs": 600, "host": "0.0.0.0", "http_timeout_keep_alive": 5, "model": "/models/m", "port": 8000, "served_model_name": ["m"], "tensor_parallel_size": 2}`
	if logged != want {
		t.Errorf("logged args\n %s\nwant\n %s", logged, want)
	}
	if strings.Contains(logged, "sekrit") || !strings.Contains(given, `"sekrit"`) {
		t.Errorf("redaction: logged %s, given %s", logged, given)
	}
}

// vllm-rs waits for the engine at --input-address, then logs its one ready line under
// (RustFrontend pid=N) and serves the HTTP socket --listen-fd names through it.
func TestVllmRsServesOnceTheEngineIsUp(t *testing.T) {
	dir := t.TempDir()
	engineAddr := filepath.Join(dir, "in")
	engine, err := net.Listen("unix", engineAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sock, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	r, w, _ := os.Pipe()
	stdout := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = stdout }()
	go func() {
		_ = vllmRsMain([]string{"frontend", "--listen-fd", strconv.Itoa(int(sock.Fd())), "--input-address", "ipc://" + engineAddr,
			"--args-json", `{"model": "/models/m", "served_model_name": ["m"], "engine_ready_timeout_secs": 30}`})
	}()
	// The engine comes up after the front end started: nothing is logged before.
	time.Sleep(300 * time.Millisecond)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"data":[{"id":"m"}]}`)) })
	go func() { _ = http.Serve(engine, mux) }()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(line, "(RustFrontend pid=") || !strings.Contains(line, "[server.rs:118] starting OpenAI server bind_address="+l.Addr().String()+" model=m") {
		t.Errorf("ready line %q", line)
	}
	resp, err := http.Get("http://" + l.Addr().String() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"id":"m"`) {
		t.Errorf("through vllm-rs: %d %s", resp.StatusCode, body)
	}
}
