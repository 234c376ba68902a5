package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

const vllmVersion = "0.17.0"

type serveFlags struct {
	model      string
	served     string
	tp, pp     int
	backend    string
	host       string
	port       int
	maxLen     int
	ignoredArg []string
}

// parseServe reads `vllm serve MODEL [flags]`, accepting `--flag value` and `--flag=value`.
// Flags the lab does not model are accepted and ignored, so real specs' extra args pass.
func parseServe(args []string) (serveFlags, error) {
	f := serveFlags{tp: 1, pp: 1, backend: "mp", host: "0.0.0.0", port: 8000, maxLen: 4096}
	if len(args) == 0 || args[0] != "serve" {
		return f, errors.New("usage: vllm serve MODEL [options]")
	}
	args = args[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			if f.model != "" {
				return f, fmt.Errorf("vllm: error: unrecognized arguments: %s", a)
			}
			f.model = a
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		takeVal := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("vllm serve: error: argument %s: expected one argument", name)
			}
			i++
			return args[i], nil
		}
		var err error
		var v string
		switch name {
		case "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--port", "--max-model-len":
			if v, err = takeVal(); err == nil {
				var n int
				if n, err = strconv.Atoi(v); err != nil {
					return f, fmt.Errorf("vllm serve: error: argument %s: invalid int value: '%s'", name, v)
				}
				switch name {
				case "--tensor-parallel-size", "-tp":
					f.tp = n
				case "--pipeline-parallel-size", "-pp":
					f.pp = n
				case "--port":
					f.port = n
				default:
					f.maxLen = n
				}
			}
		case "--distributed-executor-backend":
			f.backend, err = takeVal()
		case "--host":
			f.host, err = takeVal()
		case "--served-model-name":
			f.served, err = takeVal()
		default:
			// A boolean flag or a flag with a value; the lab cannot tell, so it looks ahead.
			if !hasVal && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
			}
			f.ignoredArg = append(f.ignoredArg, name)
		}
		if err != nil {
			return f, err
		}
	}
	if f.model == "" {
		return f, errors.New("vllm serve: error: the following arguments are required: model_tag")
	}
	if f.served == "" {
		f.served = f.model
	}
	return f, nil
}

func vllmMain(args []string) error {
	f, err := parseServe(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := func(level, where, msg string) { vllmLog("APIServer", level, where, msg) }
	log("INFO", "api_server.py:1885", "vLLM API server version "+vllmVersion)
	log("INFO", "utils.py:233", fmt.Sprintf("non-default args: {'model_tag': '%s', 'host': '%s', 'port': %d, 'model': '%s', 'served_model_name': ['%s'], 'tensor_parallel_size': %d, 'pipeline_parallel_size': %d, 'distributed_executor_backend': '%s'}",
		f.model, f.host, f.port, f.model, f.served, f.tp, f.pp, f.backend))
	if f.backend != "ray" {
		return errors.New("the lab simulates only --distributed-executor-backend ray")
	}
	e := &engine{flags: f, world: f.tp * f.pp, log: func(level, where, msg string) { vllmLog("EngineCore_DP0", level, where, msg) }}
	if err := e.start(ctx); err != nil {
		e.log("ERROR", "core.py:708", "EngineCore failed to start.")
		fatal("APIServer", strings.SplitN(err.Error(), ":", 2)[0], strings.TrimSpace(strings.SplitN(err.Error()+":", ":", 2)[1]))
	}
	return e.serve(ctx)
}

// engine is the driver: rank 0 on the head node, in vLLM's own container.
type engine struct {
	flags serveFlags
	world int
	log   rankLog
	gc    *gcsClient
	job   string
	peers []net.Conn
	dead  atomic.Bool
}

func (e *engine) start(ctx context.Context) error {
	addr := os.Getenv("RAY_ADDRESS")
	if addr == "" {
		return errors.New("ConnectionError: Could not find any running Ray instance. Please specify the one to connect to by setting `--address` flag or `RAY_ADDRESS` environment variable.")
	}
	e.gc, e.job = newGCSClient(addr), randomHex(8)
	var nodes []gcsNode
	if err := e.gc.call(ctx, "GET", "/v1/nodes", nil, &nodes); err != nil {
		return fmt.Errorf("ConnectionError: Failed to connect to GCS at address %s within 60 seconds.", addr)
	}
	e.log("INFO", "worker.py:1832", "Connecting to existing Ray cluster at address: "+addr+"...")
	e.log("INFO", "worker.py:2003", "Connected to Ray cluster.")
	go e.jobHeartbeat(ctx)

	ip := vllmHostIP()
	bundles := make([]map[string]float64, e.world)
	for i := range bundles {
		bundles[i] = map[string]float64{"GPU": 1}
	}
	bundles[0]["node:"+ip] = 0.001
	pg, err := e.placementGroup(ctx, bundles)
	if err != nil {
		return err
	}
	if err := e.uniqueIPs(ctx, pg); err != nil {
		return err
	}
	return e.initDistributed(ctx, ip, pg)
}

func (e *engine) jobHeartbeat(ctx context.Context) {
	for ctx.Err() == nil {
		_ = e.gc.call(ctx, "POST", "/v1/heartbeat?job="+e.job, nil, nil)
		time.Sleep(time.Second)
	}
}

// placementGroup creates the group and waits as vLLM does: a warning at 10, 30, 70, ...
// 2550 s (scaled), then the error.
func (e *engine) placementGroup(ctx context.Context, bundles []map[string]float64) (placementGroup, error) {
	var pg placementGroup
	if err := e.gc.call(ctx, "POST", "/v1/pgs", placementGroup{Job: e.job, Bundles: bundles}, &pg); err != nil {
		return pg, fmt.Errorf("RuntimeError: create placement group: %v", err)
	}
	specs := make([]string, len(bundles))
	for i, b := range bundles {
		specs[i] = pyDict(b)
	}
	specText := "[" + strings.Join(specs, ", ") + "]"
	start := time.Now()
	next, step := 10*time.Second, 20*time.Second
	for pg.State != "CREATED" {
		if time.Since(start) >= scaled(next) {
			if next > 2550*time.Second {
				return pg, fmt.Errorf("ValueError: Cannot provide a placement group requiring %d GPUs (placement_group_specs=%s) within 1800 seconds.", e.world, specText)
			}
			e.log("INFO", "ray_utils.py:241", fmt.Sprintf("Waiting for creating a placement group of specs for %d seconds. specs=%s. Check `ray status` and `ray list nodes` to see if you have enough resources, and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node.", int(next.Seconds()), specText))
			next += step
			step *= 2
		}
		select {
		case <-ctx.Done():
			return pg, ctx.Err()
		case <-time.After(min(max(scaled(time.Second), 50*time.Millisecond), time.Second)):
		}
		if err := e.gc.call(ctx, "GET", "/v1/pgs/"+pg.ID, nil, &pg); err != nil {
			return pg, fmt.Errorf("RuntimeError: placement group: %v", err)
		}
	}
	return pg, nil
}

func (e *engine) nodes(ctx context.Context) map[string]gcsNode {
	var list []gcsNode
	_ = e.gc.call(ctx, "GET", "/v1/nodes", nil, &list)
	m := map[string]gcsNode{}
	for _, n := range list {
		m[n.ID] = n
	}
	return m
}

func (e *engine) uniqueIPs(ctx context.Context, pg placementGroup) error {
	nodes := e.nodes(ctx)
	ids, ips := []string{}, []string{}
	seenID, seenIP := map[string]bool{}, map[string]bool{}
	for _, id := range pg.Nodes {
		if !seenID[id] {
			seenID[id] = true
			ids = append(ids, "'"+id+"'")
		}
		if ip := nodes[id].IP; !seenIP[ip] {
			seenIP[ip] = true
			ips = append(ips, "'"+ip+"'")
		}
	}
	if len(ips) < len(ids) {
		return fmt.Errorf("RuntimeError: Every node should have a unique IP address. Got %d nodes with node ids [%s] and %d unique IP addresses [%s]. Please check your network configuration. If you set `VLLM_HOST_IP` environment variable, make sure it is unique for each node.",
			len(ids), strings.Join(ids, ", "), len(ips), strings.Join(ips, ", "))
	}
	return nil
}

func (e *engine) loadFor() time.Duration {
	return time.Duration(envFloat(envShardSeconds, 0.5)*float64(time.Second)) * time.Duration(e.shards())
}

func (e *engine) shards() int { return int(envFloat(envShards, 8)) }

// initDistributed runs rank 0's side of the distributed init and starts the other ranks
// on the nodes the placement group chose.
func (e *engine) initDistributed(ctx context.Context, ip string, pg placementGroup) error {
	store, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		n, text := strerror(err)
		return fmt.Errorf("torch.distributed.DistNetworkError: The server socket has failed to bind to %s (errno: %d - %s).", net.JoinHostPort(ip, "0"), n, text)
	}
	defer store.Close()
	init := "tcp://" + store.Addr().String()
	e.log("DEBUG", "parallel_state.py:1104", fmt.Sprintf("world_size=%d rank=0 local_rank=0 distributed_init_method=%s backend=nccl", e.world, init))
	timeout := scaled(time.Duration(envFloat(envStoreTimeout, 600) * float64(time.Second)))
	vllmEnv := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "VLLM_") && k != "VLLM_HOST_IP" || k == "HF_TOKEN" {
			vllmEnv[k] = v
		}
	}
	go e.relayWorkerLogs(ctx)
	for rank := 1; rank < e.world; rank++ {
		spec, _ := json.Marshal(rankSpec{Job: e.job, Rank: rank, World: e.world, InitMethod: init, VLLMEnv: vllmEnv, StoreTimeout: timeout, LoadFor: e.loadFor()})
		if err := e.gc.call(ctx, "POST", "/v1/tasks", task{Job: e.job, Node: pg.Nodes[rank], Spec: spec}, nil); err != nil {
			return fmt.Errorf("RuntimeError: start RayWorkerWrapper rank %d: %v", rank, err)
		}
	}
	hellos, conns, err := e.gather(store, timeout)
	if err != nil {
		return err
	}
	ep, err := openEndpoints(os.Getenv, e.log)
	if err != nil {
		return err
	}
	me := hello{Rank: 0, NodeIP: ip, NCCL: ep.nccl.Addr().String(), NCCLIfs: len(ep.ifs), Gloo: ep.gloo.Addr().String()}
	table := peerTable{Peers: append([]hello{me}, hellos...)}
	for _, c := range conns {
		_ = json.NewEncoder(c).Encode(table)
	}
	if err := glooMesh(0, table.Peers); err != nil {
		return err
	}
	if ncclCountMismatch(len(ep.ifs), table.Peers) {
		return ncclCountError(len(ep.ifs), e.log)
	}
	// Every other rank connects to rank 0; a rank that never does leaves rank 0 waiting,
	// as NCCL does.
	for len(e.peers) < e.world-1 {
		c, err := ep.nccl.Accept()
		if err != nil {
			return err
		}
		e.peers = append(e.peers, c)
	}
	return e.load(ctx)
}

// gather accepts every other rank's hello within the store timeout.
func (e *engine) gather(store net.Listener, timeout time.Duration) ([]hello, []net.Conn, error) {
	deadline := time.Now().Add(timeout)
	var hellos []hello
	var conns []net.Conn
	for len(hellos) < e.world-1 {
		_ = store.(*net.TCPListener).SetDeadline(deadline)
		c, err := store.Accept()
		if err != nil {
			return nil, nil, fmt.Errorf("torch.distributed.DistStoreError: Timed out after %d seconds waiting for clients. %d/%d clients joined.", int(timeout.Seconds())+1, len(hellos)+1, e.world)
		}
		_ = c.SetReadDeadline(deadline)
		var h hello
		if err := json.NewDecoder(c).Decode(&h); err != nil {
			c.Close()
			continue
		}
		_ = c.SetReadDeadline(time.Time{})
		if h.Err != "" {
			return nil, nil, storeRecvError(h.Rank)
		}
		hellos, conns = append(hellos, h), append(conns, c)
	}
	return hellos, conns, nil
}

// relayWorkerLogs prints the remote ranks' lines as Ray forwards them to the driver.
func (e *engine) relayWorkerLogs(ctx context.Context) {
	after := 0
	for ctx.Err() == nil {
		var lines []string
		if err := e.gc.call(ctx, "GET", fmt.Sprintf("/v1/logs?job=%s&after=%d", e.job, after), nil, &lines); err != nil {
			time.Sleep(time.Second)
			continue
		}
		after += len(lines)
		for _, l := range lines {
			if p, rest, ok := strings.Cut(l, ") "); ok && strings.HasPrefix(p, "(") {
				l = "\x1b[36m" + p + ")\x1b[0m " + rest
			}
			emit(l)
		}
	}
}

// load prints the shard progress as tqdm does, watching the other ranks meanwhile.
func (e *engine) load(ctx context.Context) error {
	lost := make(chan error, len(e.peers))
	for _, c := range e.peers {
		go func() { lost <- liveness(ctx, c) }()
	}
	go func() {
		if err := <-lost; err != nil {
			e.engineDead(err)
		}
	}()
	n, per := e.shards(), time.Duration(envFloat(envShardSeconds, 0.5)*float64(time.Second))
	start := time.Now()
	e.log("INFO", "gpu_model_runner.py:2338", "Starting to load model "+e.flags.model+"...")
	for i := 0; i <= n; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(per):
			}
		}
		if e.dead.Load() {
			return fmt.Errorf("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
		}
		emit(tqdmLine(i, n, time.Since(start)))
	}
	e.log("INFO", "default_loader.py:267", fmt.Sprintf("Loading weights took %.2f seconds", time.Since(start).Seconds()))
	e.log("INFO", "gpu_model_runner.py:2392", fmt.Sprintf("Model loading took 0.0625 GiB and %.6f seconds", time.Since(start).Seconds()))
	return nil
}

func (e *engine) engineDead(cause error) {
	if e.dead.Swap(true) {
		return
	}
	e.log("ERROR", "core.py:776", "EngineCore encountered a fatal error: a RayWorkerWrapper stopped answering: "+cause.Error())
	vllmLog("APIServer", "ERROR", "async_llm.py:420", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.")
}

// tqdmLine renders tqdm's bar with vLLM's fixed format.
func tqdmLine(i, n int, elapsed time.Duration) string {
	pct := 100 * i / max(n, 1)
	rate, remaining := "?it/s", "?"
	if i > 0 {
		per := elapsed / time.Duration(i)
		rate = fmt.Sprintf("%5.2fs/it", per.Seconds())
		remaining = clock(per * time.Duration(n-i))
	}
	return fmt.Sprintf("Loading safetensors checkpoint shards: %3d%% Completed | %d/%d [%s<%s, %s]", pct, i, n, clock(elapsed), remaining, rate)
}

func clock(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	return fmt.Sprintf("%02d:%02d", s/60, s%60)
}

// serve runs the OpenAI-compatible server until a signal.
func (e *engine) serve(ctx context.Context) error {
	l, err := net.Listen("tcp", net.JoinHostPort(e.flags.host, strconv.Itoa(e.flags.port)))
	if err != nil {
		return fmt.Errorf("OSError: [Errno 98] error while attempting to bind on address ('%s', %d): address already in use", e.flags.host, e.flags.port)
	}
	log := func(msg string) { vllmLog("APIServer", "INFO", "api_server.py:1927", msg) }
	log(fmt.Sprintf("Starting vLLM server on http://%s", net.JoinHostPort(e.flags.host, strconv.Itoa(e.flags.port))))
	log("Available routes are:")
	for _, r := range []string{"/health, Methods: GET", "/v1/models, Methods: GET", "/v1/completions, Methods: POST"} {
		vllmLog("APIServer", "INFO", "launcher.py:37", "Route: "+r)
	}
	emit(fmt.Sprintf("(APIServer pid=%d) INFO:     Started server process [%d]", os.Getpid(), os.Getpid()))
	emit(fmt.Sprintf("(APIServer pid=%d) INFO:     Waiting for application startup.", os.Getpid()))
	emit(fmt.Sprintf("(APIServer pid=%d) INFO:     Application startup complete.", os.Getpid()))
	srv := &http.Server{Handler: e.api()}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (e *engine) api() http.Handler {
	created := time.Now().Unix()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if e.dead.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"object": "list", "data": []any{map[string]any{
			"id": e.flags.served, "object": "model", "created": created, "owned_by": "vllm", "root": e.flags.model,
			"parent": nil, "max_model_len": e.flags.maxLen,
			"permission": []any{map[string]any{"id": "modelperm-" + randomHex(32), "object": "model_permission", "created": created,
				"allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true, "allow_search_indices": false,
				"allow_view": true, "allow_fine_tuning": false, "organization": "*", "group": nil, "is_blocking": false}},
		}}})
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model     string `json:"model"`
			Prompt    string `json:"prompt"`
			MaxTokens int    `json:"max_tokens"`
		}
		if err := json.NewDecoder(bufio.NewReader(r.Body)).Decode(&req); err != nil {
			apiError(w, http.StatusBadRequest, "BadRequestError", err.Error())
			return
		}
		if req.Model != e.flags.served {
			apiError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
			return
		}
		if e.dead.Load() {
			apiError(w, http.StatusServiceUnavailable, "EngineDeadError", "EngineCore encountered an issue.")
			return
		}
		text, n := completion(req.Prompt, max(req.MaxTokens, 1))
		writeJSON(w, map[string]any{"id": "cmpl-" + randomHex(32), "object": "text_completion", "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": "length", "stop_reason": nil}},
			"usage":   map[string]int{"prompt_tokens": len(strings.Fields(req.Prompt)), "completion_tokens": n, "total_tokens": len(strings.Fields(req.Prompt)) + n}})
	})
	return mux
}

// completion is deterministic text for a prompt: the same prompt always gets the same words.
func completion(prompt string, tokens int) (string, int) {
	words := []string{"tensor", "parallel", "ranks", "agree", "on", "one", "subnet", "and", "the", "model", "serves"}
	sum := sha256.Sum256([]byte(prompt))
	var out []string
	for i := 0; i < min(tokens, 16); i++ {
		out = append(out, words[int(sum[i%len(sum)])%len(words)])
	}
	return " " + strings.Join(out, " "), len(out)
}

func apiError(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}
