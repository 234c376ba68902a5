package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// What a dying engine does, against vLLM's own strings and values.

func TestExecuteTimeoutIsUpstreamsAndBoundsOnlyMultiprocExecutors(t *testing.T) {
	mp := serveFlags{backend: "mp", rel: release{vllm: "0.22.1"}}
	ray := serveFlags{backend: "ray", rel: release{vllm: "0.22.1", ray: "2.55.0"}}
	cases := []struct {
		name  string
		f     serveFlags
		world int
		v2    bool
		env   string
		want  time.Duration
	}{
		// vllm/envs.py: int(os.getenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "300"))
		{"mp default", mp, 2, false, "", 300 * time.Second},
		{"mp shortened", mp, 2, false, "7", 7 * time.Second},
		{"V2 inherits MultiprocExecutor", ray, 2, true, "", 300 * time.Second},
		{"legacy Ray executor has none", ray, 2, false, "7", 0},
		{"one rank is UniProcExecutor", mp, 1, false, "7", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", c.env)
			}
			e := &engine{world: c.world, v2: c.v2}
			if got := executeTimeout(c.f, e); got != c.want || e.timeoutErr != nil {
				t.Errorf("timeout %s (%v), want %s", got, e.timeoutErr, c.want)
			}
		})
	}
	t.Setenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "5m")
	e := &engine{world: 2}
	executeTimeout(mp, e)
	if e.timeoutErr == nil || e.timeoutErr.Error() != "ValueError: invalid literal for int() with base 10: '5m'" {
		t.Errorf("a value int() refuses: %v", e.timeoutErr)
	}
}

// A step whose rank never answers ends in multiproc_executor.py's TimeoutError, named for
// the method the step waits on.
func TestAHungStepTimesOutWithUpstreamsError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hang := make(chan struct{})
	defer close(hang)
	for _, c := range []struct{ vllm, want string }{
		{"0.17.1", "TimeoutError: RPC call to execute_model timed out."},
		{"0.22.1", "TimeoutError: RPC call to sample_tokens timed out."},
	} {
		a, b := net.Pipe()
		go func() { _, _ = b.Read(make([]byte, 1)); <-hang; b.Close() }() // never echoes: a frozen rank
		e := &engine{flags: serveFlags{rel: release{vllm: c.vllm}}, timeout: 50 * time.Millisecond, peers: []net.Conn{a}, log: func(string, string, string) {}}
		t0 := time.Now()
		err := e.stepWithin(ctx)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.vllm, err, c.want)
		}
		if time.Since(t0) > 5*time.Second {
			t.Errorf("%s: the step took %s past its deadline", c.vllm, time.Since(t0))
		}
	}
}

func TestEngineCoreIsNamedAsItsRelease(t *testing.T) {
	// 0.14's lines read (EngineCore_DP0 pid=N) (vllm#32468), 0.20's (EngineCore pid=N)
	// (vllm#41647, verl#6583).
	for v, want := range map[string]string{"0.11.0": "EngineCore_DP0", "0.17.1": "EngineCore_DP0", "0.18.0": "EngineCore", "0.22.1": "EngineCore"} {
		if got := engineCoreName(release{vllm: v}); got != want {
			t.Errorf("%s: %q, want %q", v, got, want)
		}
	}
}

// A request while the engine is dead, as each front end answers it, byte for byte:
//   - Python: 500 InternalServerError with EngineDeadError's text (engine_error_handler,
//     create_error_response; Starlette's JSONResponse: compact, ErrorInfo's field order);
//   - Rust: 500 server_error, the route's context before the engine client's "engine core
//     reported fatal failure" (vllm-rs error.rs; axum's Json).
//
// /health answers 503 with an empty body under both (instrumentator/health.py
// Response(status_code=503); vllm-rs routes/health.rs StatusCode::SERVICE_UNAVAILABLE);
// /v1/models is the server's own and still answers.
func TestADeadEngineAnswers500AndHealth503(t *testing.T) {
	const py = `{"error":{"message":"EngineCore encountered an issue. See stack trace (above) for the root cause.","type":"InternalServerError","param":null,"code":500}}`
	for _, c := range []struct {
		name, path, body string
		rust             bool
		want             string
	}{
		{"python completion", "/v1/completions", `{"model":"tiny","prompt":"hi","max_tokens":1}`, false, py},
		{"python chat", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`, false, py},
		{"python streamed completion", "/v1/completions", `{"model":"tiny","prompt":"hi","stream":true}`, false, py},
		{"rust completion", "/v1/completions", `{"model":"tiny","prompt":"hi","max_tokens":1}`, true,
			`{"error":{"message":"failed to submit completion request: engine core reported fatal failure","type":"server_error","param":null,"code":"server_error"}}`},
		{"rust chat", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true}`, true,
			`{"error":{"message":"failed to submit chat request: engine core reported fatal failure","type":"server_error","param":null,"code":"server_error"}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := &apiServer{flags: serveFlags{served: "tiny", model: "/models/tiny"}, wait: map[uint64]chan engineMsg{}, rust: c.rust}
			a.dead.Store(true)
			srv := httptest.NewServer(a.api())
			defer srv.Close()
			resp, err := http.Post(srv.URL+c.path, "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusInternalServerError || string(raw) != c.want || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%d %s %q\nwant 500 application/json %s", resp.StatusCode, resp.Header.Get("Content-Type"), raw, c.want)
			}
			for path, code := range map[string]int{"/health": http.StatusServiceUnavailable, "/v1/models": http.StatusOK} {
				r, err := http.Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(r.Body)
				r.Body.Close()
				if r.StatusCode != code || (path == "/health" && len(b) != 0) {
					t.Errorf("%s: %d %q, want %d", path, r.StatusCode, b, code)
				}
			}
		})
	}
}

// A request that waits through the engine's death: the Python front end answers it as
// one that came after (the output handler's EngineDeadError reaches the same handler);
// vllm-rs names the collector's context instead of the submit's; a stream already begun
// ends in an error event and [DONE], Python's through json.dumps (spaces), vllm-rs's as
// compact JSON.
func TestARequestWaitingThroughTheDeath(t *testing.T) {
	for _, c := range []struct {
		name, path, body string
		rust             bool
		code             int
		want             string
	}{
		{"python completion", "/v1/completions", `{"model":"tiny","prompt":"hi"}`, false, 500,
			`{"error":{"message":"EngineCore encountered an issue. See stack trace (above) for the root cause.","type":"InternalServerError","param":null,"code":500}}`},
		{"rust completion", "/v1/completions", `{"model":"tiny","prompt":"hi"}`, true, 500,
			`{"error":{"message":"completion stream failed: engine core reported fatal failure","type":"server_error","param":null,"code":"server_error"}}`},
		{"rust chat", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`, true, 500,
			`{"error":{"message":"failed to collect chat completion response: engine core reported fatal failure","type":"server_error","param":null,"code":"server_error"}}`},
		{"python stream", "/v1/completions", `{"model":"tiny","prompt":"hi","stream":true}`, false, 200,
			"data: {\"error\": {\"message\": \"EngineCore encountered an issue. See stack trace (above) for the root cause.\", \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}\n\ndata: [DONE]\n\n"},
		{"rust stream", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true}`, true, 200,
			"data: {\"error\":{\"message\":\"engine core reported fatal failure\",\"type\":\"server_error\",\"param\":null,\"code\":\"server_error\"}}\n\ndata: [DONE]\n\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			api := &apiServer{flags: serveFlags{served: "tiny", model: "/models/tiny"}, wait: map[uint64]chan engineMsg{}, rust: c.rust,
				p: &ipc{enc: json.NewEncoder(a), dec: json.NewDecoder(a)}}
			// The engine takes the request, then dies before it answers.
			go func() {
				var m engineMsg
				if json.NewDecoder(b).Decode(&m) == nil {
					api.engineDead()
				}
			}()
			srv := httptest.NewServer(api.api())
			defer srv.Close()
			resp, err := http.Post(srv.URL+c.path, "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code || string(raw) != c.want {
				t.Errorf("%d %q\nwant %d %q", resp.StatusCode, raw, c.code, c.want)
			}
		})
	}
}

// The watchdog (launcher.py watchdog_loop, every 5 s) ends the server once the engine is
// dead, unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH is a non-zero integer.
func TestTheWatchdogEndsTheServerUnlessKeptAlive(t *testing.T) {
	for _, c := range []struct {
		env  string
		exit bool
	}{{"", true}, {"0", true}, {"1", false}} {
		t.Setenv("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", c.env)
		a := &apiServer{}
		a.dead.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), watchdogPeriod+2*time.Second)
		ended := make(chan struct{}, 1)
		t0 := time.Now()
		a.watchdog(ctx, func() { ended <- struct{}{} })
		cancel()
		select {
		case <-ended:
			if !c.exit {
				t.Errorf("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=%q: the server ended", c.env)
			} else if d := time.Since(t0); d > watchdogPeriod+time.Second {
				t.Errorf("ended after %s, want within one watchdog period", d)
			}
		default:
			if c.exit {
				t.Errorf("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=%q: the server did not end", c.env)
			}
		}
	}
}

// vllm/engine/arg_utils.py create_engine_config: assert world_size % self.nnodes == 0,
// (f"world_size={world_size} must be divisible by nnodes={self.nnodes}.").
func TestMPDivisibilityIsArgUtilsAssert(t *testing.T) {
	if got, want := mpDivisibility(3, 2), "world_size=3 must be divisible by nnodes=2."; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// vllm/utils/network_utils.py get_ip: warnings.warn("Failed to get the IP address, using
// 0.0.0.0 by default." "The value can be set by the environment variable" " VLLM_HOST_IP
// or HOST_IP.", stacklevel=2) — Python prints it as FILE:LINE: UserWarning: TEXT.
func TestGetIPWarningIsUpstreams(t *testing.T) {
	if !strings.HasSuffix(getIPWarning, ": UserWarning: Failed to get the IP address, using 0.0.0.0 by default.The value can be set by the environment variable VLLM_HOST_IP or HOST_IP.") {
		t.Errorf("%q", getIPWarning)
	}
}

// NVIDIA/nccl src/bootstrap.cc: INFO(NCCL_BOOTSTRAP, "Bootstrap : Using%s", line) at
// v2.23.4-1, "Bootstrap: Using%s" from v2.24.3-1 (and at 2.27.3, 2.27.5, 2.28.9).
func TestBootstrapLineLosesItsSpaceIn224(t *testing.T) {
	for v, want := range map[string]string{"2.23.4": "Bootstrap : Using eth0", "2.24.3": "Bootstrap: Using eth0", "2.27.3": "Bootstrap: Using eth0", "2.28.9": "Bootstrap: Using eth0"} {
		if got := bootstrapLine(v, "eth0"); got != want {
			t.Errorf("NCCL %s: %q, want %q", v, got, want)
		}
	}
}

// get_env_vars_to_copy starts from vLLM's registered names (vllm/ray/ray_env.py:
// result = set(envs.environment_variables)); vllm/envs.py registers these, e.g.
// "LD_LIBRARY_PATH": lambda: os.environ.get("LD_LIBRARY_PATH", None) and the tensorizer's
// "S3_ENDPOINT_URL": lambda: os.environ.get("S3_ENDPOINT_URL", None).
func TestTheLegacyCopyCoversRegisteredNames(t *testing.T) {
	for _, n := range []string{"LD_LIBRARY_PATH", "CUDA_HOME", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY", "S3_ENDPOINT_URL"} {
		if !slices.Contains(registeredNonVLLM, n) {
			t.Errorf("%s is registered in vllm/envs.py and copied", n)
		}
	}
	for _, n := range []string{"LOCAL_RANK", "CUDA_VISIBLE_DEVICES"} {
		if slices.Contains(registeredNonVLLM, n) {
			t.Errorf("%s is worker-specific: never copied", n)
		}
	}
}

// Under the Rust front end there is no Python API server and no watchdog: `vllm serve`
// ends as soon as the EngineCore process has, with wait_for_completion_or_failure's
// RuntimeError, status 1 (vllm/v1/utils.py; vllm/entrypoints/cli/serve.py).
func TestTheRustPathEndsWhenTheEngineProcessEnds(t *testing.T) {
	l, err := net.Listen("unix", t.TempDir()+"/in")
	if err != nil {
		t.Fatal(err)
	}
	a := &apiServer{flags: serveFlags{rel: release{vllm: "0.32.0"}}, wait: map[uint64]chan engineMsg{}, rust: true, coreExited: make(chan struct{})}
	rf := &rustFrontend{engine: l, child: &child{cmd: &exec.Cmd{}, done: make(chan error, 1)}}
	go func() { time.Sleep(50 * time.Millisecond); rf.done <- nil }() // vllm-rs ends once told to
	a.dead.Store(true)
	close(a.coreExited)
	t0 := time.Now()
	err = a.serveRust(context.Background(), rf)
	var ex *exitError
	if !errors.As(err, &ex) || ex.code != 1 || ex.msg != "RuntimeError: Engine core process EngineCore died unexpectedly." {
		t.Errorf("%v, want status 1 with the RuntimeError", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("ended after %s: the engine's exit ends it at once, not at a watchdog tick", d)
	}
}

// The API server keeps an idle connection as uvicorn does under vLLM: 5 s unless
// VLLM_HTTP_TIMEOUT_KEEP_ALIVE says otherwise (vllm/envs.py; api_server.py passes it as
// timeout_keep_alive).
func TestTheAPIServersKeepAliveIsVLLMs(t *testing.T) {
	for env, want := range map[string]time.Duration{"": 5 * time.Second, "300": 300 * time.Second, "2": 2 * time.Second} {
		t.Setenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", env)
		if got := keepAlive(); got != want {
			t.Errorf("VLLM_HTTP_TIMEOUT_KEEP_ALIVE=%q: keep-alive %s, want %s", env, got, want)
		}
	}
}

// An unknown model is 404 NotFoundError; from 0.32 (the front end read at 00bd149) the
// error names the field, param "model", and before it param is null.
func TestUnknownModelIs404NamingTheFieldFrom032(t *testing.T) {
	for vllm, want := range map[string]string{
		"0.32.0": `{"error":{"message":"The model ` + "`other`" + ` does not exist.","type":"NotFoundError","param":"model","code":404}}`,
		"0.22.1": `{"error":{"message":"The model ` + "`other`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}}`,
	} {
		a := &apiServer{flags: serveFlags{served: "tiny", model: "/models/tiny", rel: release{vllm: vllm}}, wait: map[uint64]chan engineMsg{}}
		srv := httptest.NewServer(a.api())
		resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"other","prompt":"hi","max_tokens":1}`))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != http.StatusNotFound || string(raw) != want {
			t.Errorf("vLLM %s: %d %s, want 404 %s", vllm, resp.StatusCode, raw, want)
		}
	}
}
