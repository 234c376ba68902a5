package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// vLLM's Rust front end (VLLM_USE_RUST_FRONTEND=1; vLLM PRs #40848, #43283, RFC #40846), as
// vLLM's source has it (lab/README.md, "The Rust front end"):
//   - `vllm serve` runs run_rust_frontend instead of the Python API server: it binds the
//     HTTP socket itself (setup_server), starts the engines, and, while they start, the
//     bundled binary `<site>/vllm/vllm-rs` (VLLM_RUST_FRONTEND_PATH "auto") as
//     `vllm-rs frontend --listen-fd N --input-address ipc://… --output-address ipc://…
//     --engine-start-index 0 --engine-count 1 --data-parallel-size 1 --args-json {…}`,
//     logging that command line first (logger.info("Launching Rust frontend: %s", …), the
//     JSON with api_key and hf_token redacted) from a process that has no (APIServer pid=N)
//     prefix (no decorate_logs on that path: a nightly's line is `INFO 06-01 21:35:56
//     [utils.py:370] Launching Rust frontend: …`; a later one's `[utils.py:392]`).
//   - The vllm-rs process waits for the engines' handshake, binds, and logs
//     info!(%bind_address, %model, "starting OpenAI server") under the prefix
//     `(RustFrontend pid=N)` its lines carry; neither `Starting vLLM server on` nor
//     uvicorn's lines exist on this path.
//
// The lab's vllm-rs is this binary again, installed at the same path: it takes the HTTP
// socket from --listen-fd and hands every request to the Python side's engine client at
// --input-address (a unix socket here; upstream's are ZMQ ipc sockets carrying engine
// requests, not HTTP); that side answers errors as vllm-rs does (engineDeadResponse,
// streamError: vllm-rs's bodies, not the Python front end's). A dead engine: 500s with
// vllm-rs's server_error bodies, /health 503 (routes/health.rs: the client unhealthy), and
// `vllm serve` ends as soon as the engine process has (serveRust).

// hasRustFrontend: VLLM_USE_RUST_FRONTEND exists in the releases after 0.22.1 (a 0.22.1
// nightly logged it; among the modelled releases, 0.32.0 has it).
func (r release) hasRustFrontend() bool { return atLeast(r.vllm, "0.23") }

// rustFrontendOn is envs.py's VLLM_USE_RUST_FRONTEND: bool(int(os.getenv(name, "0"))); a
// value int() refuses ends vLLM in that ValueError.
func rustFrontendOn() (bool, error) {
	v, set := os.LookupEnv("VLLM_USE_RUST_FRONTEND")
	if !set {
		return false, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Errorf("ValueError: invalid literal for int() with base 10: '%s'", v)
	}
	return n != 0, nil
}

// rustFrontendBinary is where vLLM's wheel installs vllm-rs (VLLM_RUST_FRONTEND_PATH "auto").
func rustFrontendBinary() string { return filepath.Join(distPackages, "vllm", "vllm-rs") }

// rustFrontend is the started vllm-rs process and the engine client it reaches.
type rustFrontend struct {
	engine net.Listener // the Python side's engine client (--input-address)
	*child
}

// startRustFrontend binds the HTTP socket, logs the launch line and starts vllm-rs, before
// the engine is up (run_rust_frontend starts it inside launch_core_engines).
func startRustFrontend(f serveFlags) (*rustFrontend, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(f.host, strconv.Itoa(f.port)))
	if err != nil {
		return nil, fmt.Errorf("OSError: [Errno 98] error while attempting to bind on address ('%s', %d): address already in use", f.host, f.port)
	}
	defer l.Close()
	sock, err := l.(*net.TCPListener).File()
	if err != nil {
		return nil, err
	}
	defer sock.Close()
	in, out := "/tmp/"+uuid(), "/tmp/"+uuid()
	engine, err := net.Listen("unix", in)
	if err != nil {
		return nil, err
	}
	// ExtraFiles[0] is the child's fd 3.
	args := []string{rustFrontendBinary(), "frontend", "--listen-fd", "3", "--input-address", "ipc://" + in,
		"--output-address", "ipc://" + out, "--engine-start-index", "0", "--engine-count", "1", "--data-parallel-size", "1",
		"--args-json", rustArgsJSON(f, true)}
	emit(fmt.Sprintf("INFO %s [utils.py:392] Launching Rust frontend: %s", time.Now().Format("01-02 15:04:05"), strings.Join(args, " ")))
	args[len(args)-1] = rustArgsJSON(f, false)
	cmd := &exec.Cmd{Path: rustFrontendBinary(), Args: args, Stdout: os.Stdout, Stderr: os.Stderr,
		ExtraFiles: []*os.File{sock}, SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	c, err := startChild(cmd, rustFrontendBinary())
	if err != nil {
		engine.Close()
		return nil, err
	}
	return &rustFrontend{engine: engine, child: c}, nil
}

// rustArgsJSON is run_rust_frontend's --args-json: the non-default arguments
// (jsonify_non_default_args) plus the two env-driven values it forwards
// (VLLM_ENGINE_READY_TIMEOUT_S, default 600; VLLM_HTTP_TIMEOUT_KEEP_ALIVE, default 5),
// sort_keys=True; redacted for the log (redact_sensitive_args: api_key as "***").
func rustArgsJSON(f serveFlags, redact bool) string {
	m := map[string]any{
		"model": f.model, "host": f.host, "port": f.port, "tensor_parallel_size": f.tp,
		"engine_ready_timeout_secs": envInt("VLLM_ENGINE_READY_TIMEOUT_S", 600),
		"http_timeout_keep_alive":   envInt("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", 5),
	}
	if f.served != f.model {
		m["served_model_name"] = []string{f.served}
	}
	if f.pp != 1 {
		m["pipeline_parallel_size"] = f.pp
	}
	if f.backendSet {
		m["distributed_executor_backend"] = f.backend
	}
	if f.nnodes > 1 {
		m["nnodes"], m["node_rank"], m["master_addr"], m["master_port"] = f.nnodes, f.nodeRank, f.masterAddr, f.masterPort
	}
	if len(f.apiKeys) > 0 {
		keys := f.apiKeys
		if redact {
			keys = []string{"***"}
		}
		m["api_key"] = keys
	}
	b, _ := json.Marshal(m) // encoding/json sorts map keys, as sort_keys=True
	return strings.ReplaceAll(strings.ReplaceAll(string(b), `":`, `": `), `,"`, `, "`)
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name))); err == nil {
		return n
	}
	return def
}

// uuid is a random UUID's text, as vLLM names its ipc sockets (get_open_zmq_ipc_path).
func uuid() string {
	h := randomHex(32)
	return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:]
}

// serveRust serves the engine client to vllm-rs until a signal, vllm-rs's exit or the
// EngineCore process's end. There is no Python API server on this path, so no watchdog:
// run_multi_api_server waits in wait_for_completion_or_failure, whose engine monitor
// (CoreEngineProcManager.monitor_engine_liveness) wakes when the engine process exits
// non-zero (run_engine_core re-raises after _send_engine_dead); it raises
// RuntimeError("Engine core process EngineCore died unexpectedly."), logs it with
// logger.exception("Exception occurred while running API servers: %s", ...), and the
// finally shuts vllm-rs down: `vllm serve` ends with the exception, status 1
// (vllm/entrypoints/cli/serve.py, vllm/v1/utils.py; lab/README.md).
func (a *apiServer) serveRust(ctx context.Context, rf *rustFrontend) error {
	srv := &http.Server{Handler: authenticate(a.api(), apiTokens(a.flags))}
	stop := func() {
		rf.signal(syscall.SIGTERM)
		_ = srv.Close()
	}
	var engineExited atomic.Bool
	go func() {
		select {
		case <-ctx.Done():
			stop()
		case err := <-rf.done:
			rf.done <- err
			_ = srv.Close()
		case <-a.coreExited:
			engineExited.Store(true)
			stop()
		}
	}()
	if err := srv.Serve(rf.engine); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	select {
	case err := <-rf.done:
		if ctx.Err() == nil && !engineExited.Load() {
			return fmt.Errorf("RuntimeError: Rust frontend process exited: %v", err)
		}
	case <-time.After(5 * time.Second):
		rf.signal(os.Kill)
	}
	if engineExited.Load() && ctx.Err() == nil {
		msg := "Engine core process " + engineCoreName(a.flags.rel) + " died unexpectedly."
		plainLog("ERROR", "utils.py:1004", "Exception occurred while running API servers: "+msg)
		emit("Traceback (most recent call last):")
		return &exitError{code: 1, msg: "RuntimeError: " + msg}
	}
	return nil
}

// vllmRsMain is the lab's vllm-rs: `frontend` only.
func vllmRsMain(args []string) error {
	if len(args) == 0 || args[0] != "frontend" {
		return errors.New("usage: vllm-rs frontend --listen-fd FD --input-address ADDR ...")
	}
	var fd int
	var input, argsJSON string
	for i := 1; i+1 < len(args); i += 2 {
		switch args[i] {
		case "--listen-fd":
			fd, _ = strconv.Atoi(args[i+1])
		case "--input-address":
			input = strings.TrimPrefix(args[i+1], "ipc://")
		case "--args-json":
			argsJSON = args[i+1]
		}
	}
	var conf struct {
		Model        string   `json:"model"`
		Served       []string `json:"served_model_name"`
		ReadyTimeout int      `json:"engine_ready_timeout_secs"`
	}
	if err := json.Unmarshal([]byte(argsJSON), &conf); err != nil {
		return fmt.Errorf("--args-json: %w", err)
	}
	model := conf.Model
	if len(conf.Served) > 0 {
		model = conf.Served[0]
	}
	l, err := net.FileListener(os.NewFile(uintptr(fd), "listen-fd"))
	if err != nil {
		return fmt.Errorf("--listen-fd %d: %w", fd, err)
	}
	engine := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", input)
	}}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// build_state: the engines' handshake, bounded by engine_ready_timeout_secs.
	deadline := time.Now().Add(time.Duration(max(conf.ReadyTimeout, 1)) * time.Second)
	for {
		try, cancel := context.WithTimeout(ctx, 2*time.Second)
		req, _ := http.NewRequestWithContext(try, http.MethodGet, "http://engine/health", nil)
		resp, err := engine.RoundTrip(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for engine startup after %d seconds", conf.ReadyTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rustLog("INFO", "server.rs:118", fmt.Sprintf("starting OpenAI server bind_address=%s model=%s", l.Addr(), model))
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: "engine"})
	proxy.Transport = engine
	srv := &http.Server{Handler: proxy}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// rustLog is vllm-rs's line: vLLM's format under the (RustFrontend pid=N) prefix.
func rustLog(level, where, msg string) {
	emit(fmt.Sprintf("(RustFrontend pid=%d) %s %s [%s] %s", os.Getpid(), level, time.Now().Format("01-02 15:04:05"), where, msg))
}
