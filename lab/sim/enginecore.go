package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The API server and EngineCore are two processes, as vLLM v1 runs them: AsyncLLM and its
// client in the API server's process, EngineCoreProc's busy loop in a process of its own
// titled VLLM::EngineCore (vllm/v1/engine/core.py run_engine_core, run_busy_loop;
// vllm/v1/engine/core_client.py AsyncMPClient; ZMQ between them, a socket pair here).
// What follows from that, as upstream:
//   - /health asks the client whether the engine is dead (AsyncLLM.check_health raises only
//     when errored), which it is once the engine process exits (the client's monitor of the
//     engine processes) or reports a fatal error. A frozen engine (SIGSTOP, a deadlock, a
//     stuck CUDA call, an NCCL collective hung on a bad link) is alive, and /health stays
//     200: vLLM PR #36451 (open) proposes a ping for exactly this; issue #39863 reports it.
//   - /v1/models is the API server's own (OpenAIServingModels reads the model config):
//     it answers while the engine is frozen.
//   - A completion goes to the engine and waits for its output with no deadline; every
//     engine step of a multi-rank model runs collectives over all ranks (tensor parallel
//     all-reduce), so it hangs while the engine, or any rank, is frozen.

// engineMsg is one message between the API server and EngineCore: ready, failed, dead and
// out from the engine; req from the API server.
type engineMsg struct {
	T      string `json:"t"`
	ID     uint64 `json:"id,omitempty"`
	Prompt string `json:"prompt,omitempty"`
	Tokens int    `json:"tokens,omitempty"`
	Text   string `json:"text,omitempty"`
	Err    string `json:"err,omitempty"`
}

// ipc is one end of the API server-EngineCore socket pair.
type ipc struct {
	mu  sync.Mutex
	enc *json.Encoder
	dec *json.Decoder
}

func newIPC(f *os.File) (*ipc, error) {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	return &ipc{enc: json.NewEncoder(c), dec: json.NewDecoder(c)}, nil
}

func (p *ipc) send(m engineMsg) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.enc.Encode(m)
}

// messages delivers what arrives until the other end goes away, then closes.
func (p *ipc) messages() <-chan engineMsg {
	ch := make(chan engineMsg, 16)
	go func() {
		defer close(ch)
		for {
			var m engineMsg
			if err := p.dec.Decode(&m); err != nil {
				return
			}
			ch <- m
		}
	}()
	return ch
}

// apiServer is node 0's `vllm serve` process: it starts EngineCore, waits until the engine
// is up (its failure is the API server's traceback, as before), then serves the
// OpenAI-compatible API, every request going through the engine.
type apiServer struct {
	flags serveFlags
	p     *ipc
	dead  atomic.Bool
	mu    sync.Mutex
	next  uint64
	wait  map[uint64]chan engineMsg
	// gen counts the tokens the engine generated (vllm:generation_tokens_total), running
	// the requests in the engine (vllm:num_requests_running).
	gen     atomic.Int64
	running atomic.Int64
	// rust: vllm-rs serves the HTTP socket and hands requests on to this server, which
	// then answers errors as vllm-rs does (rustfrontend.go).
	rust bool
	// coreExited closes once the EngineCore process has ended.
	coreExited chan struct{}
}

func runAPIServer(ctx context.Context, f serveFlags, args []string) error {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "engine-core"), os.NewFile(uintptr(fds[1]), "api-server")
	core, err := spawn("VLLM::EngineCore", roleEngine, procInput{Args: args}, theirs)
	theirs.Close()
	if err != nil {
		return err
	}
	p, err := newIPC(mine)
	if err != nil {
		return err
	}
	a := &apiServer{flags: f, p: p, wait: map[uint64]chan engineMsg{}, coreExited: make(chan struct{})}
	msgs := p.messages()
	// The Rust front end starts while the engine starts (rustfrontend.go).
	var rf *rustFrontend
	if f.rel.hasRustFrontend() {
		on, err := rustFrontendOn()
		if err != nil {
			return err
		}
		if on {
			if rf, err = startRustFrontend(f); err != nil {
				return err
			}
			a.rust = true
		}
	}
	stop := func() {
		core.signal(syscall.SIGTERM)
		// route takes the engine's exit off core.done once serving; coreExited says so then.
		select {
		case <-core.done:
		case <-a.coreExited:
		case <-time.After(5 * time.Second):
			core.signal(syscall.SIGKILL)
		}
	}
	for up := false; !up; {
		select {
		case <-ctx.Done():
			stop()
			return nil
		case m, ok := <-msgs:
			switch {
			case !ok:
				err := <-core.done
				if ctx.Err() != nil {
					return nil
				}
				code := -1
				var ex *exec.ExitError
				if errors.As(err, &ex) {
					code = ex.ExitCode()
				}
				fatal("APIServer", "RuntimeError", fmt.Sprintf("Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': %d}", code))
			case m.T == "failed":
				exc, msg, _ := strings.Cut(m.Err, ":")
				fatal("APIServer", exc, strings.TrimSpace(msg))
			case m.T == "dead":
				a.engineDead()
			case m.T == "ready":
				up = true
			}
		}
	}
	go a.route(ctx, msgs, core)
	defer stop()
	if rf != nil {
		return a.serveRust(ctx, rf)
	}
	return a.serve(ctx)
}

// route hands the engine's outputs to the requests waiting for them; an engine that
// reports a fatal error or whose process ends is dead (core_client.py: the client's
// monitor logs "Engine core proc ... died unexpectedly, shutting down client.").
func (a *apiServer) route(ctx context.Context, msgs <-chan engineMsg, core *child) {
	for m := range msgs {
		switch m.T {
		case "dead":
			a.engineDead()
		case "out":
			a.mu.Lock()
			ch := a.wait[m.ID]
			delete(a.wait, m.ID)
			a.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}
	<-core.done
	close(a.coreExited)
	// The client's monitor of the engine processes returns early when the engine already
	// reported its death (core_client.py monitor_engine_cores: `if not _self or
	// _self.resources.engine_dead: return`), so the line is the mark of an engine that died
	// without a word (killed, OOM).
	if ctx.Err() == nil && !a.dead.Load() {
		vllmLog("APIServer", "ERROR", "core_client.py:564", "Engine core proc "+engineCoreName(a.flags.rel)+" died unexpectedly, shutting down client.")
		a.engineDead()
	}
}

// engineCoreName is EngineCore's process name in its log prefix and in the client's
// monitor: EngineCore_DP<rank> up to 0.17, EngineCore from 0.18 (lab/README.md: real lines
// of 0.14 and of 0.20 show each; vLLM PR #36822 is named for the change).
func engineCoreName(r release) string {
	if atLeast(r.vllm, "0.18") {
		return "EngineCore"
	}
	return "EngineCore_DP0"
}

// engineDead: AsyncLLM's output handler raised EngineDeadError (async_llm.py
// output_handler logs "AsyncLLM output_handler failed." and propagates the error to every
// request waiting); /health answers 503 from here (serve/instrumentator/health.py).
func (a *apiServer) engineDead() {
	if a.dead.Swap(true) {
		return
	}
	vllmLog("APIServer", "ERROR", "async_llm.py:483", "AsyncLLM output_handler failed.")
	vllmLog("APIServer", "ERROR", "async_llm.py:483", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.")
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, ch := range a.wait {
		ch <- engineMsg{T: "out", ID: id, Err: errDeadInFlight}
		delete(a.wait, id)
	}
}

// watchdogPeriod is the API server's watchdog (vllm/entrypoints/launcher.py watchdog_loop:
// VLLM_WATCHDOG_TIME_S = 5.0).
const watchdogPeriod = 5 * time.Second

// keepAliveOnEngineDeath is VLLM_KEEP_ALIVE_ON_ENGINE_DEATH (vllm/envs.py:
// bool(int(os.getenv(name, "0")))).
func keepAliveOnEngineDeath() bool {
	n, err := strconv.Atoi(strings.TrimSpace(os.Getenv("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH")))
	return err == nil && n != 0
}

// watchdog is launcher.py's watchdog_loop: every 5 s terminate_if_errored sets uvicorn's
// should_exit once the engine is errored, unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH; uvicorn
// then shuts down and `vllm serve` returns normally. It exits 0: vLLM issue #48966 (open)
// reports exactly that, systemd recording ExecMainStatus=0 after an EngineCore death.
// A request answered 500 calls terminate_if_errored too (the engine error handler), which
// here is the next tick of the same loop.
func (a *apiServer) watchdog(ctx context.Context, shutdown func()) {
	if keepAliveOnEngineDeath() {
		return
	}
	t := time.NewTicker(watchdogPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if a.dead.Load() {
				shutdown()
				return
			}
		}
	}
}

// What generate answers for a request the dead engine did not serve: errDeadAtSubmit when
// the engine was already dead as the request came (vLLM raises the client's dead_error
// before anything is streamed; vllm-rs's registry refuses the request), errDeadInFlight when
// it died while the request waited (AsyncLLM's output handler propagates EngineDeadError;
// vllm-rs's registry closes every open stream with its health error).
const (
	errDeadAtSubmit = "dead at submit"
	errDeadInFlight = "dead"
)

// generate sends one request to the engine and waits for its output, for as long as the
// client waits (a client that goes away aborts it).
func (a *apiServer) generate(ctx context.Context, prompt string, tokens int) (engineMsg, error) {
	ch := make(chan engineMsg, 1)
	a.mu.Lock()
	if a.dead.Load() {
		a.mu.Unlock()
		return engineMsg{Err: errDeadAtSubmit}, nil
	}
	a.next++
	id := a.next
	a.wait[id] = ch
	a.mu.Unlock()
	a.running.Add(1)
	defer a.running.Add(-1)
	if err := a.p.send(engineMsg{T: "req", ID: id, Prompt: prompt, Tokens: tokens}); err != nil {
		a.engineDead()
		return engineMsg{Err: errDeadAtSubmit}, nil
	}
	select {
	case m := <-ch:
		if m.Err == "" {
			a.gen.Add(int64(m.Tokens))
		}
		return m, nil
	case <-ctx.Done():
		a.mu.Lock()
		delete(a.wait, id)
		a.mu.Unlock()
		return engineMsg{}, ctx.Err()
	}
}

// childStart is what every child process of `vllm serve` does first: read the image's
// release, parse the command line it was given, and end on SIGTERM or SIGINT.
func childStart(in procInput) (context.Context, context.CancelFunc, serveFlags, error) {
	rel, err := imageRelease()
	if err != nil {
		return nil, nil, serveFlags{}, err
	}
	f, err := parseServe(in.Args, rel)
	if err != nil {
		return nil, nil, serveFlags{}, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	return ctx, stop, f, nil
}

// engineCoreMain is the VLLM::EngineCore process: the executor (the Ray driver, or rank 0
// of vLLM's own multi-node mode), then the busy loop.
func engineCoreMain(in procInput) error {
	ctx, stop, f, err := childStart(in)
	if err != nil {
		return err
	}
	defer stop()
	p, err := newIPC(os.NewFile(3, "api-server"))
	if err != nil {
		return err
	}
	e := &engine{flags: f, world: f.tp * f.pp, log: func(level, where, msg string) { vllmLog(engineCoreName(f.rel), level, where, msg) }}
	e.onDead = func() { _ = p.send(engineMsg{T: "dead"}) }
	if f.backend == "mp" {
		err = e.startMP(ctx, e.world/max(f.nnodes, 1))
	} else {
		if e.v2, err = f.rel.rayV2Switch(); err == nil {
			err = e.start(ctx)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		e.log("ERROR", "core.py:708", "EngineCore failed to start.")
		// The executor's shutdown (ray.kill of its actors) takes a moment, during which Ray
		// still forwards what the actors printed: a remote rank failing at about the same
		// time as rank 0 (both in torch's store timeout) is seen in the driver's output.
		time.Sleep(2 * time.Second)
		_ = p.send(engineMsg{T: "failed", Err: err.Error()})
		os.Exit(1)
	}
	if err := p.send(engineMsg{T: "ready"}); err != nil {
		return nil
	}
	e.timeout = executeTimeout(f, e)
	reqs := p.messages()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-reqs:
			if !ok {
				return nil // the API server is gone
			}
			if m.T == "req" {
				_ = p.send(e.execute(ctx, m))
				if e.dead.Load() {
					// run_engine_core re-raises after _send_engine_dead: the process ends.
					os.Exit(1)
				}
			}
		}
	}
}

// executeTimeout is MultiprocExecutor's deadline on each step's reply
// (vllm/v1/executor/multiproc_executor.py execute_model/sample_tokens: collective_rpc(...,
// timeout=envs.VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS); vllm/envs.py: int(os.getenv(name,
// "300"))). It bounds the mp executor and RayExecutorV2 (which inherits
// MultiprocExecutor); the legacy Ray executor waits on its Ray refs with none, and so does
// a world of one rank (UniProcExecutor). Zero is no deadline.
func executeTimeout(f serveFlags, e *engine) time.Duration {
	if e.world < 2 || (f.backend != "mp" && !e.v2) {
		return 0
	}
	n := 300
	if v, ok := os.LookupEnv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"); ok {
		var err error
		if n, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
			// envs.py's int() raises when the step reads it: the engine's first step fails.
			e.timeoutErr = fmt.Errorf("ValueError: invalid literal for int() with base 10: '%s'", v)
			return 0
		}
	}
	return time.Duration(n) * time.Second
}

// rpcMethod is the method whose reply the timeout names: with async scheduling (the default
// in the 0.20 releases: "RPC call to sample_tokens timed out." in vLLM 0.20.2's reports,
// verl#6583, spark-vllm-docker#321) the step's wait is on sample_tokens; before, on
// execute_model (vllm#17965, #19668).
func rpcMethod(r release) string {
	if atLeast(r.vllm, "0.20") {
		return "sample_tokens"
	}
	return "execute_model"
}

// execute runs one request: one engine step per request here (the lab has no batching),
// the step running a collective over every rank.
func (e *engine) execute(ctx context.Context, m engineMsg) engineMsg {
	out := engineMsg{T: "out", ID: m.ID}
	if err := e.lostErr(); err != nil {
		e.engineDead(err.Error())
	}
	if !e.dead.Load() {
		if err := e.stepWithin(ctx); err != nil {
			e.engineDead(err.Error())
		}
	}
	if e.dead.Load() {
		out.Err = "dead"
		return out
	}
	out.Text, out.Tokens = completion(m.Prompt, max(m.Tokens, 1))
	return out
}

// stepWithin is one step under the executor's deadline (executeTimeout): a rank that never
// answers (frozen, its collective hung) makes collective_rpc raise TimeoutError, which
// EngineCore's busy loop turns into its fatal error.
func (e *engine) stepWithin(ctx context.Context) error {
	if e.timeoutErr != nil {
		return e.timeoutErr
	}
	if e.timeout <= 0 {
		return e.step(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- e.step(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(e.timeout):
		return fmt.Errorf("TimeoutError: RPC call to %s timed out.", rpcMethod(e.flags.rel))
	}
}

// step is one forward pass: rank 0's collective with every other rank, with no deadline
// (NCCL has none). Under RayExecutorV2 the engine holds no rank: it hands the step to the
// actors (a message queue in vLLM; a connection to rank 0's actor here) and waits.
func (e *engine) step(ctx context.Context) error {
	if e.mq != nil {
		if _, err := e.mq.Write([]byte{'s'}); err == nil {
			if _, err = e.mq.Read(make([]byte, 1)); err == nil {
				return nil
			}
		}
		return errors.New("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n\tclass_name: RayWorkerProc")
	}
	return e.collective(ctx)
}

// serveSteps is rank 0's actor under RayExecutorV2 once the model is loaded: every step
// the engine sends runs a collective with the other ranks before it is answered.
func serveSteps(ctx context.Context, l net.Listener, r0 *engine) {
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			b := make([]byte, 1)
			for {
				if _, err := c.Read(b); err != nil {
					return
				}
				if err := r0.collective(ctx); err != nil {
					r0.log("ERROR", "ray_executor_v2.py:250", "RayWorkerProc failed: "+err.Error())
					return
				}
				if _, err := c.Write(b); err != nil {
					return
				}
			}
		}()
	}
}
