package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

type serveFlags struct {
	model      string
	served     string
	tp, pp     int
	backend    string
	host       string
	port       int
	maxLen     int
	ignoredArg []string
	// vLLM's own multi-node mode (ParallelConfig; defaults are vLLM's).
	nnodes, nodeRank int
	masterAddr       string
	masterPort       int
	headless         bool
	backendSet       bool
	// apiKeys are --api-key's values (cli_args.py), which win over VLLM_API_KEY.
	apiKeys []string
	// rel is the release the image holds; args the command line it was parsed from.
	rel  release
	args []string
	// util is the --gpu-memory-utilization a Ray worker rank was handed (rankSpec), whose
	// flags hold no command line.
	util float64
}

// gpuMemoryUtilization is --gpu-memory-utilization, 0 for vLLM's default.
func (f serveFlags) gpuMemoryUtilization() float64 {
	if f.util > 0 {
		return f.util
	}
	return utilization(f.args)
}

// exitError ends the process with a status of its own (argparse exits 2).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// vllmUsage is the top-level parser's usage line (vllm/entrypoints/cli/main.py): argparse
// prints it before an error the top-level parser reports.
const vllmUsage = "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ..."

// mpFlags are ParallelConfig's multi-node fields (vLLM PR #23691), which releases before
// v0.11.1 do not have.
var mpFlags = map[string]bool{"--nnodes": true, "-n": true, "--node-rank": true, "-r": true, "--master-addr": true, "--master-port": true}

// parseServe reads `vllm serve MODEL [flags]`, accepting `--flag value` and `--flag=value`.
// Flags the lab does not model are accepted and ignored, so real specs' extra args pass;
// the multi-node flags of a release that lacks them are argparse's unrecognized arguments,
// which the top-level parser reports (`parser.parse_args()` in cli/main.py): the usage line,
// then `vllm: error: unrecognized arguments: ...`, exit status 2.
func parseServe(args []string, rel release) (serveFlags, error) {
	f := serveFlags{tp: 1, pp: 1, backend: "mp", host: "0.0.0.0", port: 8000, maxLen: 4096,
		nnodes: 1, masterAddr: "127.0.0.1", masterPort: 29501, rel: rel, args: args}
	if len(args) == 0 || args[0] != "serve" {
		return f, errors.New("usage: vllm serve MODEL [options]")
	}
	args = args[1:]
	var unrecognized []string
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
		if mpFlags[name] && !rel.hasMultiNodeMP() {
			unrecognized = append(unrecognized, a)
			if !hasVal && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
				unrecognized = append(unrecognized, args[i])
			}
			continue
		}
		switch name {
		case "--headless":
			f.headless = true
		case "--master-addr":
			f.masterAddr, err = takeVal()
		case "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--port", "--max-model-len",
			"--nnodes", "-n", "--node-rank", "-r", "--master-port":
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
				case "--nnodes", "-n":
					f.nnodes = n
				case "--node-rank", "-r":
					f.nodeRank = n
				case "--master-port":
					f.masterPort = n
				default:
					f.maxLen = n
				}
			}
		case "--distributed-executor-backend":
			f.backend, err = takeVal()
			f.backendSet = true
		case "--host":
			f.host, err = takeVal()
		case "--api-key":
			if v, err = takeVal(); err == nil {
				f.apiKeys = append(f.apiKeys, v)
			}
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
	if len(unrecognized) > 0 {
		return f, &exitError{2, vllmUsage + "\nvllm: error: unrecognized arguments: " + strings.Join(unrecognized, " ")}
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
	rel, err := imageRelease()
	if err != nil {
		return fmt.Errorf("the lab's vllm reads its release from its image (lab/README.md): %v", err)
	}
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-v") {
		// argparse's version action prints importlib.metadata.version("vllm") and exits 0.
		fmt.Println(rel.vllm)
		return nil
	}
	f, err := parseServe(args, rel)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if f.nnodes > 1 && f.backendSet && f.backend != "mp" && f.backend != "uni" && f.backend != "external_launcher" {
		return errors.New("ValueError: nnodes > 1 can only be set when distributed executor backend is mp, uni or external_launcher.")
	}
	if f.backend == "mp" {
		return mpMain(ctx, f)
	}
	log := func(level, where, msg string) { vllmLog("APIServer", level, where, msg) }
	log("INFO", "api_server.py:1885", "vLLM API server version "+rel.vllm)
	log("INFO", "utils.py:233", fmt.Sprintf("non-default args: {'model_tag': '%s', 'host': '%s', 'port': %d, 'model': '%s', 'served_model_name': ['%s'], 'tensor_parallel_size': %d, 'pipeline_parallel_size': %d, 'distributed_executor_backend': '%s'}",
		f.model, f.host, f.port, f.model, f.served, f.tp, f.pp, f.backend))
	if f.backend != "ray" {
		return errors.New("the lab simulates --distributed-executor-backend ray and mp")
	}
	if rel.ray == "" {
		// ParallelConfig's validator calls ray_utils.assert_ray_available(); ray_utils caught
		// the ImportError at import and kept its text (vllm/v1/executor/ray_utils.py).
		fatal("APIServer", "pydantic_core._pydantic_core.ValidationError", fmt.Sprintf("1 validation error for ParallelConfig\n  Value error, Failed to import Ray: No module named 'ray'.Please install Ray with `pip install ray`. [type=value_error, input_value=ArgsKwargs((), {'pipeline_parallel_size': %d, 'tensor_parallel_size': %d, 'distributed_executor_backend': 'ray'}), input_type=ArgsKwargs]", f.pp, f.tp))
	}
	return runAPIServer(ctx, f, f.args)
}

// engine is the driver: rank 0 on the head node, in the Ray head's container, attached
// to that node's raylet.
type engine struct {
	flags serveFlags
	world int
	log   rankLog
	gc    *gcsClient
	job   string
	pg    placementGroup
	peers []net.Conn
	// group is rank 0's share of the process group (dist.go): its torch process and NCCL.
	group *group
	// lost is set when a node holding one of the engine's ranks died (Ray marked it dead);
	// the engine fails at its next step, as vLLM's next call to that actor does.
	lost atomic.Pointer[string]
	dead atomic.Bool
	// lostNode is the node whose death set lost.
	lostNode string
	// v2 says the engine runs RayExecutorV2 (lab/sim/rayv2.go).
	v2 bool
	// rankNodes are the Ray node IDs of the ranks, in rank order (V2).
	rankNodes []string
	// Under RayExecutorV2 rank 0 is an actor of its own (an engine value in the actor's
	// process): the model's size and the store timeout come from the driver, and the
	// actor's environment is not its process's.
	shardN       int
	shardT       time.Duration
	storeTimeout time.Duration
	actorEnv     map[string]string
	// out prints a line of the process's own output (tqdm's bar); nil is stdout.
	out func(string)
	// onGroup runs once the rank's process group is up (V2's rank 0: the second
	// setup_proc_title_and_log_prefix, after init_device).
	onGroup func()
	// mq is the engine's connection to rank 0's actor under RayExecutorV2 (vLLM's message
	// queue to the actors); onDead tells the API server the engine died.
	mq     net.Conn
	onDead func()
	// timeout is the executor's deadline on a step's reply (executeTimeout); zero is none.
	timeout    time.Duration
	timeoutErr error
}

func (e *engine) print(line string) {
	if e.out != nil {
		e.out(line)
		return
	}
	emit(line)
}

// rayPyLog prints in Ray's Python logger format, as the driver's Ray client logs.
func rayPyLog(level, where, msg string) { rayLog(level, where, msg) }

func (e *engine) start(ctx context.Context) error {
	e.job = randomHex(8)
	d, err := attachDriver(ctx, e.job, rayPyLog)
	if err != nil {
		return err
	}
	e.gc = d.gc
	if err := e.gc.call(ctx, "POST", "/v1/jobs?job="+e.job, nil, nil); err != nil {
		return fmt.Errorf("RuntimeError: register job: %v", err)
	}
	if e.v2 {
		return e.startV2(ctx, d)
	}
	ip := vllmHostIP()
	if d.node.Resources["GPU"] <= 0 {
		return fmt.Errorf("ValueError: Current node has no GPU available. current_node_resource=%s. vLLM engine cannot start without GPU. Make sure you have at least 1 GPU available in a node current_node_id='%s' current_ip='%s'.", pyDict(d.node.Resources), d.node.ID, ip)
	}
	bundles := make([]map[string]float64, e.world)
	for i := range bundles {
		bundles[i] = map[string]float64{"GPU": 1}
	}
	bundles[0]["node:"+ip] = 0.001
	if e.pg, err = e.placementGroup(ctx, bundles); err != nil {
		return err
	}
	go e.watchNodes(ctx)
	workers, err := e.startWorkers(ctx)
	if err != nil {
		return err
	}
	workerIPs := make([]string, len(workers))
	for i, w := range workers {
		workerIPs[i] = w.IP
	}
	if err := e.uniqueIPs(ip, workerIPs); err != nil {
		return err
	}
	if err := e.gc.call(ctx, "POST", "/v1/results", map[string]any{"job": e.job, "key": "rerank", "value": rerank(ip, workers)}, nil); err != nil {
		return fmt.Errorf("RuntimeError: adjust_rank: %v", err)
	}
	if err := e.copyEnv(ctx); err != nil {
		return err
	}
	return e.initDistributed(ctx, ip)
}

// placementGroup creates the group and waits as vLLM's _wait_until_pg_ready does: a line
// at 10, 30, 70, ... 2550 s (scaled), and the error right after the 2550 s line.
func (e *engine) placementGroup(ctx context.Context, bundles []map[string]float64) (placementGroup, error) {
	var pg placementGroup
	if err := e.gc.call(ctx, "POST", "/v1/pgs", placementGroup{Job: e.job, Bundles: bundles}, &pg); err != nil {
		return pg, fmt.Errorf("RuntimeError: create placement group: %v", err)
	}
	specs := make([]string, len(bundles))
	gpus := 0.0
	for i, b := range bundles {
		specs[i] = pyDict(b)
		gpus += b["GPU"]
	}
	specText := "[" + strings.Join(specs, ", ") + "]"
	start := time.Now()
	next, step := 10*time.Second, 20*time.Second
	for pg.State != "CREATED" {
		if time.Since(start) >= scaled(next) {
			e.log("INFO", "ray_utils.py:241", fmt.Sprintf("Waiting for creating a placement group of specs for %d seconds. specs=%s. Check `ray status` and `ray list nodes` to see if you have enough resources, and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node.", int(next.Seconds()), specText))
			if next >= 2550*time.Second {
				if gpus > 1 {
					return pg, fmt.Errorf("ValueError: Cannot provide a placement group requiring %s GPUs (placement_group_specs=%s) within 1800 seconds.\nTensor parallel size may exceed available GPUs in your cluster. Check resources with `ray status` and `ray list nodes`.\nIf running on K8s with limited GPUs, consider reducing --tensor-parallel-size to match available GPU resources.", strconv.FormatFloat(gpus, 'f', 1, 64), specText)
				}
				return pg, fmt.Errorf("ValueError: Cannot provide a placement group of placement_group_specs=%s within 1800 seconds. See `ray status` and `ray list nodes` to make sure the cluster has enough resources.", specText)
			}
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

// watchNodes follows the GCS's node table, as a driver receives node_removed errors: a
// node holding one of the engine's bundles that Ray marks dead kills the actor on it.
func (e *engine) watchNodes(ctx context.Context) {
	for ctx.Err() == nil && e.lost.Load() == nil {
		var nodes []gcsNode
		if err := e.gc.call(ctx, "GET", "/v1/nodes", nil, &nodes); err == nil {
			for _, n := range nodes {
				if n.State != "DEAD" || !slices.Contains(e.pg.Nodes, n.ID) {
					continue
				}
				if n.DeathReason == "UNEXPECTED_TERMINATION" {
					rayLog("WARNING", "worker.py:1866", fmt.Sprintf("The node with node id: %s and address: %s and node name: %s has been marked dead because the detector has missed too many heartbeats from it. This can happen when a \t(1) raylet crashes unexpectedly (OOM, etc.) \n\t(2) raylet has lagging heartbeats due to slow network or busy workload.", n.ID, n.IP, n.Name))
				}
				msg := fmt.Sprintf("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n\tclass_name: "+e.actorClass()+"\n\tactor_id: %s\n\tnamespace: %s\n\tip: %s\nThe actor is dead because its node has died. Node Id: %s", randomHex(32), e.job, n.IP, n.ID)
				e.lostNode = n.ID
				e.lost.Store(&msg)
				e.log("ERROR", "core.py:1210", msg)
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// lostErr is the actor death the engine learned of, or nil.
func (e *engine) lostErr() error {
	if m := e.lost.Load(); m != nil {
		return errors.New(*m)
	}
	return nil
}

// workerIP is a worker's answer to get_node_ip: the rank it was created with (its bundle)
// and its get_ip().
type workerIP struct {
	Created int    `json:"created"`
	IP      string `json:"ip"`
}

// rerank is the legacy executor's rerank_mapping, created rank to adjusted rank: the
// workers sorted by sort_by_driver_then_worker_ip, key (0 if ip == driver_ip else 1,
// ip_counts[ip], ip), the IP compared as a string (vllm/v1/executor/ray_executor.py
// _init_workers_ray, then collective_rpc("adjust_rank", rerank_mapping)). The driver is
// rank 0 and holds the first place its key gives it (its IP is driver_ip, its count that
// of its node).
func rerank(driverIP string, workers []workerIP) map[int]int {
	counts := map[string]int{driverIP: 1}
	for _, w := range workers {
		counts[w.IP]++
	}
	all := append([]workerIP{{Created: 0, IP: driverIP}}, workers...)
	key := func(w workerIP) (int, int, string) {
		first := 1
		if w.IP == driverIP {
			first = 0
		}
		return first, counts[w.IP], w.IP
	}
	slices.SortStableFunc(all, func(a, b workerIP) int {
		a1, a2, a3 := key(a)
		b1, b2, b3 := key(b)
		return cmp.Or(cmp.Compare(a1, b1), cmp.Compare(a2, b2), strings.Compare(a3, b3))
	})
	// The driver stays rank 0: its place is first among those on its node (stable sort).
	m := make(map[int]int, len(all))
	for i, w := range all {
		m[w.Created] = i
	}
	return m
}

// startWorkers creates a RayWorkerWrapper on every other bundle's node and asks each for
// its get_ip(), as vLLM's executor does before anything else.
func (e *engine) startWorkers(ctx context.Context) ([]workerIP, error) {
	go e.relayWorkerLogs(ctx)
	for rank := 1; rank < e.world; rank++ {
		spec, _ := json.Marshal(rankSpec{Job: e.job, Rank: rank, World: e.world, TP: e.flags.tp, LoadFor: e.loadFor(), Model: e.flags.model,
			GPUMemoryUtilization: e.flags.gpuMemoryUtilization()})
		if err := e.gc.call(ctx, "POST", "/v1/tasks", task{Job: e.job, Node: e.pg.Nodes[rank], Spec: spec}, nil); err != nil {
			return nil, fmt.Errorf("RuntimeError: start RayWorkerWrapper rank %d: %v", rank, err)
		}
	}
	var ips []workerIP
	for len(ips) < e.world-1 {
		if err := e.lostErr(); err != nil {
			return nil, err
		}
		var vals []json.RawMessage
		if err := e.gc.call(ctx, "GET", fmt.Sprintf("/v1/results?job=%s&key=ip&n=%d", e.job, e.world-1), nil, &vals); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		ips = ips[:0]
		for _, v := range vals {
			var w workerIP
			_ = json.Unmarshal(v, &w)
			ips = append(ips, w)
		}
	}
	// In the order the workers were created, as ray.get of their get_node_ip returns them.
	slices.SortFunc(ips, func(a, b workerIP) int { return cmp.Compare(a.Created, b.Created) })
	return ips, nil
}

// uniqueIPs is vLLM's duplicate-IP check: the distinct Ray nodes of the workers against
// the distinct get_ip() values of the workers and the driver (n_nodes != n_ips).
func (e *engine) uniqueIPs(driverIP string, workerIPs []string) error {
	var ids []string
	for _, id := range e.pg.Nodes {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	ips := []string{}
	for _, ip := range append([]string{driverIP}, workerIPs...) {
		if !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	if len(ids) == len(ips) {
		return nil
	}
	quoted := func(list []string) []string {
		out := make([]string, len(list))
		for i, v := range list {
			out[i] = "'" + v + "'"
		}
		return out
	}
	return fmt.Errorf("RuntimeError: Every node should have a unique IP address. Got %d nodes with node ids [%s] and %d unique IP addresses {%s}. Please check your network configuration. If you set `VLLM_HOST_IP` environment variable, make sure it is unique for each node.",
		len(ids), strings.Join(quoted(ids), ", "), len(ips), strings.Join(quoted(ips), ", "))
}

// copyEnv sends the driver's environment to the workers as vLLM's Ray executor does. Since
// vllm PR #34383 (0.17) every variable with a copied prefix goes, minus the worker-specific
// ones and those named in $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json
// (vllm/ray/ray_env.py get_env_vars_to_copy); before it, only vLLM's registered VLLM_*
// variables and the Hugging Face tokens. Each worker then overwrites its own values
// (update_environment_variables).
func (e *engine) copyEnv(ctx context.Context) error {
	worker := map[string]bool{"VLLM_HOST_IP": true, "VLLM_HOST_PORT": true, "LOCAL_RANK": true, "CUDA_VISIBLE_DEVICES": true}
	prefixes := []string{"VLLM_"}
	extra := map[string]bool{"HF_TOKEN": true, "HUGGING_FACE_HUB_TOKEN": true}
	// Every name vLLM registers is copied too (get_env_vars_to_copy starts from
	// set(envs.environment_variables)), the VLLM_ ones and these of vllm/envs.py.
	for _, n := range registeredNonVLLM {
		extra[n] = true
	}
	newer := e.flags.rel.copiesPrefixes()
	if newer {
		prefixes = []string{"HF_", "HUGGING_FACE_", "LMCACHE_", "NCCL_", "UCX_", "VLLM_"}
		extra["PYTHONHASHSEED"] = true
	}
	file := filepath.Join(vllmConfigRoot(), "ray_non_carry_over_env_vars.json")
	noCarry := map[string]bool{}
	if b, err := os.ReadFile(file); err == nil {
		var names []string
		if json.Unmarshal(b, &names) != nil {
			e.log("WARNING", "ray_env.py:31", fmt.Sprintf("Failed to parse %s. Using an empty set for non-carry-over env vars.", file))
		}
		for _, n := range names {
			noCarry[n] = true
		}
	}
	copied := map[string]string{}
	var names []string
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		want := extra[k]
		for _, p := range prefixes {
			want = want || strings.HasPrefix(k, p)
		}
		if want && !worker[k] && !noCarry[k] {
			copied[k] = v
			names = append(names, k)
		}
	}
	sort.Strings(names)
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "'" + n + "'"
	}
	if newer {
		qp := make([]string, len(prefixes))
		for i, p := range prefixes {
			qp[i] = "'" + p + "'"
		}
		e.log("INFO", "ray_env.py:70", "Env var prefixes to copy: ["+strings.Join(qp, ", ")+"]")
		e.log("INFO", "ray_env.py:71", "Copying the following environment variables to workers: ["+strings.Join(quoted, ", ")+"]")
		if len(noCarry) > 0 {
			e.log("INFO", "ray_env.py:75", "RAY_NON_CARRY_OVER_ENV_VARS from config: "+pySet(noCarry))
		}
		e.log("INFO", "ray_env.py:77", "To exclude env vars from copying, add them to "+file)
	} else {
		e.log("INFO", "ray_env.py:63", "RAY_NON_CARRY_OVER_ENV_VARS from config: "+pySet(noCarry))
		e.log("INFO", "ray_env.py:65", "Copying the following environment variables to workers: ["+strings.Join(quoted, ", ")+"]")
		e.log("INFO", "ray_env.py:68", "If certain env vars should NOT be copied, add them to "+file+" file")
	}
	return e.gc.call(ctx, "POST", "/v1/results", map[string]any{"job": e.job, "key": "env", "value": copied}, nil)
}

// vllmConfigRoot is envs.VLLM_CONFIG_ROOT: $VLLM_CONFIG_ROOT, else $XDG_CONFIG_HOME/vllm,
// else ~/.config/vllm.
func vllmConfigRoot() string {
	if v := os.Getenv("VLLM_CONFIG_ROOT"); v != "" {
		return v
	}
	if v := os.Getenv("XDG_CONFIG_HOME"); v != "" {
		return filepath.Join(v, "vllm")
	}
	home := os.Getenv("HOME")
	if home == "" {
		home = "/root"
	}
	return filepath.Join(home, ".config", "vllm")
}

func pySet(m map[string]bool) string {
	if len(m) == 0 {
		return "set()"
	}
	var names []string
	for n := range m {
		names = append(names, "'"+n+"'")
	}
	sort.Strings(names)
	return "{" + strings.Join(names, ", ") + "}"
}

func (e *engine) loadFor() time.Duration {
	return e.shardTime() * time.Duration(e.shards())
}

func (e *engine) shards() int {
	if e.shardN > 0 {
		return e.shardN
	}
	return int(envFloat(envShards, 8))
}

func (e *engine) shardTime() time.Duration {
	if e.shardN > 0 {
		return e.shardT
	}
	return time.Duration(envFloat(envShardSeconds, 0.5) * float64(time.Second))
}

// storeWait is the c10d store timeout (torch's default 600 s, scaled).
func (e *engine) storeWait() time.Duration {
	if e.storeTimeout > 0 {
		return e.storeTimeout
	}
	return scaled(time.Duration(envFloat(envStoreTimeout, 600) * float64(time.Second)))
}

// actorClass is the class of the executor's Ray actors.
func (e *engine) actorClass() string {
	if e.v2 {
		return "RayWorkerProc"
	}
	return "RayWorkerWrapper"
}

// initDistributed runs rank 0's side of the distributed init (dist.go): legacy, the driver
// builds tcp://<its get_ip()>:<a free port> (get_distributed_init_method with
// get_open_port) and its torch process hosts the store there; under RayExecutorV2 rank 0's
// actor opens the store on its Ray node's IP, port 0 (create_dist_init_method), and the
// method with torch's port goes to every rank.
func (e *engine) initDistributed(ctx context.Context, ip string) error {
	timeout := e.storeWait()
	post := func(init string) error {
		return e.gc.call(ctx, "POST", "/v1/results", map[string]any{"job": e.job, "key": "init", "value": map[string]any{"init_method": init, "store_timeout": timeout}}, nil)
	}
	init := "store://" + ip
	var onInit func(string)
	if e.v2 {
		// The driver's ray.get of create_dist_init_method, then initialize_worker on every
		// actor with it: rank 0 posts the method for the others itself.
		onInit = func(m string) {
			e.log("DEBUG", "parallel_state.py:1104", fmt.Sprintf("world_size=%d rank=0 local_rank=0 distributed_init_method=%s backend=nccl", e.world, m))
			_ = post(m)
		}
	} else {
		port, err := openPort()
		if err != nil {
			return fmt.Errorf("OSError: %v", err)
		}
		init = "tcp://" + net.JoinHostPort(ip, port)
		if err := post(init); err != nil {
			return fmt.Errorf("RuntimeError: init_device: %v", err)
		}
	}
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if e.actorEnv != nil {
		env = e.actorEnv
	}
	g, err := joinGroup(ctx, 0, e.world, e.flags.tp, init, timeout, ip, env, rankOut{e.log, e.raw}, e.lostErr, onInit)
	if err != nil {
		return err
	}
	if e.onGroup != nil {
		e.onGroup()
	}
	e.group = g
	if e.peers, err = g.acceptPeers(e.world); err != nil {
		return err
	}
	return e.load(ctx)
}

// openPort is vLLM's get_open_port(): bind port 0 on every address, keep the number, close.
func openPort() (string, error) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port, nil
}

// raw prints a line of the engine's own torch process: in the EngineCore's process prefix,
// or through the actor's output (V2's rank 0).
func (e *engine) raw(line string) {
	if e.out != nil {
		e.out(line)
		return
	}
	emit(fmt.Sprintf("(%s pid=%d) %s", engineCoreName(e.flags.rel), os.Getpid(), line))
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

// load prints the shard progress as tqdm does, waits for every rank's load_model, then
// runs one collective over the NCCL connections (vLLM's profiling run). A rank whose node
// Ray marked dead ends the load with Ray's ActorDiedError; a peer whose process died
// breaks the collective; a cut link makes the collective hang, as NCCL does.
func (e *engine) load(ctx context.Context) error {
	n, per := e.shards(), e.shardTime()
	start := time.Now()
	e.log("INFO", "gpu_model_runner.py:2338", "Starting to load model "+e.flags.model+"...")
	if err := checkWeights(e.flags.model, e.log); err != nil {
		return err // rank 0 reads the head node's copy
	}
	w := newWeightLoad(e.flags.model, e.world, n) // memory.go: what the load takes of the node's memory
	for i := 0; i <= n; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(per):
			}
			w.shard(i)
		}
		if err := e.lostErr(); err != nil {
			return err
		}
		e.print(tqdmLine(i, n, time.Since(start)))
	}
	e.log("INFO", "default_loader.py:267", fmt.Sprintf("Loading weights took %.2f seconds", time.Since(start).Seconds()))
	if err := e.waitLoaded(ctx); err != nil {
		return err
	}
	e.log("INFO", "gpu_model_runner.py:2392", fmt.Sprintf("Model loading took 0.0625 GiB and %.6f seconds", time.Since(start).Seconds()))
	// The profiling run: torch.compile (cold or from the cache, compile.go), then its
	// collective over every rank.
	if err := e.torchCompile(ctx); err != nil {
		return err
	}
	if err := e.collective(ctx); err != nil {
		return err
	}
	if err := w.kvCache(e.flags.gpuMemoryUtilization(), e.log); err != nil {
		return err
	}
	go func() {
		for ctx.Err() == nil && e.lostErr() == nil {
			time.Sleep(time.Second)
		}
		if err := e.lostErr(); err != nil {
			e.lostAfterStart()
		}
	}()
	return nil
}

// waitLoaded waits until every other rank has loaded its weights: over Ray, each posts
// to the GCS; in vLLM's own multi-node mode, each answers on its store connection.
func (e *engine) waitLoaded(ctx context.Context) error {
	if e.gc == nil {
		return e.waitLoadedMP(ctx)
	}
	for e.world > 1 {
		var vals []json.RawMessage
		err := e.gc.call(ctx, "GET", fmt.Sprintf("/v1/results?job=%s&key=loaded&n=%d", e.job, e.world-1), nil, &vals)
		for _, v := range vals {
			// A rank reports its rank when loaded, its exception when load_model failed:
			// the driver raises it (Ray's ray.get of execute_method).
			var msg string
			if json.Unmarshal(v, &msg) == nil {
				return errors.New(msg)
			}
		}
		if err == nil && len(vals) >= e.world-1 {
			break
		}
		if lost := e.lostErr(); lost != nil {
			return lost
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// collective sends one byte to every peer and waits for its echo, with no deadline: NCCL
// over sockets has none, so a silently cut link hangs here (measured, upstream.md §6).
func (e *engine) collective(ctx context.Context) error {
	for _, c := range e.peers {
		if _, err := c.Write([]byte{'.'}); err == nil {
			_, err = c.Read(make([]byte, 1))
			if err == nil {
				continue
			}
		}
		if lost := e.lostErr(); lost != nil {
			return lost
		}
		e.log("WARNING", "socket.cc:540", "NCCL WARN socketProgress: Connection closed by remote peer "+strings.ReplaceAll(c.RemoteAddr().String(), ":", "<")+">")
		return fmt.Errorf("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3135, remote process exited or there was a network error, NCCL version %s", ncclVersion)
	}
	return nil
}

// lostAfterStart: a rank's node died while the engine serves. Under the legacy executor
// vLLM's /health stays 200 until the next request reaches the dead actor and the engine
// dies with it; it prints nothing of its own meanwhile (vLLM has no "A RayWorkerWrapper
// died" line: the error surfaces from the next ray.get).
func (e *engine) lostAfterStart() {
	if e.v2 {
		e.v2Dead(e.lostNode)
	}
}

// engineDead is EngineCore's fatal error: the API server's client learns of it and the
// engine answers nothing more (EngineDeadError, /health 503).
func (e *engine) engineDead(cause string) {
	if e.dead.Swap(true) {
		return
	}
	e.log("ERROR", "core.py:776", "EngineCore encountered a fatal error.")
	e.log("ERROR", "core.py:777", cause)
	if e.onDead != nil {
		e.onDead()
	}
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
func (a *apiServer) serve(ctx context.Context) error {
	f := a.flags
	l, err := net.Listen("tcp", net.JoinHostPort(f.host, strconv.Itoa(f.port)))
	if err != nil {
		return fmt.Errorf("OSError: [Errno 98] error while attempting to bind on address ('%s', %d): address already in use", f.host, f.port)
	}
	log := func(msg string) { vllmLog("APIServer", "INFO", "api_server.py:1927", msg) }
	log(fmt.Sprintf("Starting vLLM server on http://%s", net.JoinHostPort(f.host, strconv.Itoa(f.port))))
	log("Available routes are:")
	for _, r := range []string{"/health, Methods: GET", "/metrics, Methods: GET", "/v1/models, Methods: GET", "/v1/chat/completions, Methods: POST", "/v1/completions, Methods: POST"} {
		vllmLog("APIServer", "INFO", "launcher.py:37", "Route: "+r)
	}
	emit(fmt.Sprintf("(APIServer pid=%d) INFO:     Started server process [%d]", os.Getpid(), os.Getpid()))
	emit(fmt.Sprintf("(APIServer pid=%d) INFO:     Waiting for application startup.", os.Getpid()))
	emit(fmt.Sprintf("(APIServer pid=%d) INFO:     Application startup complete.", os.Getpid()))
	srv := &http.Server{Handler: authenticate(a.api(), apiTokens(f)), IdleTimeout: keepAlive()}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	exited := make(chan struct{})
	go a.watchdog(ctx, func() {
		// uvicorn's shutdown once should_exit is set, as `vllm serve` prints it.
		pid := os.Getpid()
		emit(fmt.Sprintf("(APIServer pid=%d) INFO:     Shutting down", pid))
		_ = srv.Close()
		emit(fmt.Sprintf("(APIServer pid=%d) INFO:     Waiting for application shutdown.", pid))
		emit(fmt.Sprintf("(APIServer pid=%d) INFO:     Application shutdown complete.", pid))
		emit(fmt.Sprintf("(APIServer pid=%d) INFO:     Finished server process [%d]", pid, pid))
		close(exited)
	})
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	select {
	case <-exited:
	case <-ctx.Done():
	}
	return nil
}

func (a *apiServer) api() http.Handler {
	f := a.flags
	created := time.Now().Unix()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if a.dead.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	// The few series of vLLM's Prometheus exposition a scrape of an idle or serving engine
	// shows (vllm/v1/metrics/loggers.py PrometheusStatLogger); the API server's process
	// records them from the engine's outputs, so a frozen engine's stand still.
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		label := fmt.Sprintf(`{engine="0",model_name="%s"}`, f.served)
		fmt.Fprintf(w, "# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running%s %d.0\n", label, a.running.Load())
		fmt.Fprintf(w, "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total%s %d.0\n", label, a.gen.Load())
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"object": "list", "data": []any{map[string]any{
			"id": f.served, "object": "model", "created": created, "owned_by": "vllm", "root": f.model,
			"parent": nil, "max_model_len": f.maxLen,
			"permission": []any{map[string]any{"id": "modelperm-" + randomHex(32), "object": "model_permission", "created": created,
				"allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true, "allow_search_indices": false,
				"allow_view": true, "allow_fine_tuning": false, "organization": "*", "group": nil, "is_blocking": false}},
		}}})
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model         string         `json:"model"`
			Prompt        string         `json:"prompt"`
			MaxTokens     int            `json:"max_tokens"`
			Stream        bool           `json:"stream"`
			StreamOptions *streamOptions `json:"stream_options"`
		}
		if !a.readRequest(w, r, &req, &req.Model) {
			return
		}
		dead := a.dead.Load()
		out, err := a.generate(r.Context(), req.Prompt, max(req.MaxTokens, 1))
		if err != nil {
			return // the client went away: the request is aborted
		}
		prompt := len(strings.Fields(req.Prompt))
		if req.Stream && !dead && out.Err != errDeadAtSubmit {
			a.streamCompletion(w, req.Model, out.Text, prompt, req.StreamOptions, out.Err != "")
			return
		}
		if out.Err != "" {
			a.engineDeadResponse(w, "completion", out.Err == errDeadAtSubmit)
			return
		}
		writeJSON(w, map[string]any{"id": "cmpl-" + randomHex(32), "object": "text_completion", "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "text": out.Text, "logprobs": nil, "finish_reason": "length", "stop_reason": nil}},
			"usage":   map[string]int{"prompt_tokens": prompt, "completion_tokens": out.Tokens, "total_tokens": prompt + out.Tokens}})
	})
	// Chat: the messages' contents are the prompt (the lab has no chat template).
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
			MaxTokens           int            `json:"max_tokens"`
			MaxCompletionTokens int            `json:"max_completion_tokens"`
			Stream              bool           `json:"stream"`
			StreamOptions       *streamOptions `json:"stream_options"`
		}
		if !a.readRequest(w, r, &req, &req.Model) {
			return
		}
		var parts []string
		for _, m := range req.Messages {
			parts = append(parts, m.Content)
		}
		prompt := strings.Join(parts, "\n")
		dead := a.dead.Load()
		out, err := a.generate(r.Context(), prompt, max(req.MaxCompletionTokens, req.MaxTokens, 1))
		if err != nil {
			return
		}
		n := len(strings.Fields(prompt))
		if req.Stream && !dead && out.Err != errDeadAtSubmit {
			a.streamChat(w, req.Model, out.Text, n, req.StreamOptions, out.Err != "")
			return
		}
		if out.Err != "" {
			a.engineDeadResponse(w, "chat", out.Err == errDeadAtSubmit)
			return
		}
		writeJSON(w, map[string]any{"id": "chatcmpl-" + randomHex(32), "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": out.Text}, "logprobs": nil, "finish_reason": "length", "stop_reason": nil}},
			"usage":   map[string]int{"prompt_tokens": n, "completion_tokens": out.Tokens, "total_tokens": n + out.Tokens}})
	})
	return mux
}

// readRequest decodes a request's JSON body into req and checks its model; false when it
// answered the error.
func (a *apiServer) readRequest(w http.ResponseWriter, r *http.Request, req any, model *string) bool {
	if err := json.NewDecoder(bufio.NewReader(r.Body)).Decode(req); err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return false
	}
	// The body read to its end: from here a client that goes away cancels the request
	// (net/http watches the connection only then), as vLLM aborts it.
	_, _ = io.Copy(io.Discard, r.Body)
	if *model != a.flags.served {
		body := errorBody{errorInfo{Message: fmt.Sprintf("The model `%s` does not exist.", *model), Type: "NotFoundError", Code: http.StatusNotFound}}
		if modelParamOn404(a.flags.rel) {
			param := "model"
			body.Error.Param = &param
		}
		writeError(w, http.StatusNotFound, body)
		return false
	}
	return true
}

// engineDeadResponse answers a request the dead engine cannot serve, as the front end that
// serves it does (lab/README.md, "What a dead engine answers"):
//   - Python: EngineDeadError reaches the app's engine error handler: 500, type
//     InternalServerError, the exception's text, code 500, one body whether the request
//     arrived after the death (render_completion_request raises engine_client.dead_error) or
//     waited through it (vllm/entrypoints/serve/exception_handling/handlers/vllm_error.py
//     engine_error_handler, error_response.py create_error_response).
//   - Rust: vllm-rs's ApiError::ServerError, type and code "server_error", its message the
//     route's context and the engine-core client's sticky error, "engine core reported fatal
//     failure" (rust/src/server/src/error.rs text_submit_error/chat_submit_error;
//     routes/openai/completions.rs collect_completion; chat_completions.rs
//     collect_chat_completion).
//
// A streamed request whose engine dies once its stream began gets the error as an event
// instead (stream.go).
func (a *apiServer) engineDeadResponse(w http.ResponseWriter, route string, atSubmit bool) {
	if !a.rust {
		apiError(w, http.StatusInternalServerError, "InternalServerError", engineDeadMessage)
		return
	}
	writeError(w, http.StatusInternalServerError, rustServerError(rustDeadContext(route, atSubmit)+": "+rustEngineDeadMessage))
}

// rustDeadContext is the text vllm-rs puts before the engine client's error: the submit's
// context when the request arrived after the death, the collector's when it waited.
func rustDeadContext(route string, atSubmit bool) string {
	switch {
	case route == "chat" && atSubmit:
		return "failed to submit chat request"
	case route == "chat":
		return "failed to collect chat completion response"
	case atSubmit:
		return "failed to submit completion request"
	}
	return "completion stream failed"
}

// rustEngineDeadMessage is vllm-rs's Error::EngineCoreDead (rust/src/engine-core-client/src/
// error.rs: #[error("engine core reported fatal failure")]); the wrappers between it and
// the route (vllm_llm, vllm_text, vllm_chat, Error::Shared) are #[error(transparent)], so
// to_report_string() is this text alone.
const rustEngineDeadMessage = "engine core reported fatal failure"

// errorBody is the OpenAI error envelope in its fields' order: vLLM's ErrorInfo (message,
// type, param, code: the HTTP status as an int; vllm/entrypoints/serve/engine/protocol.py)
// and vllm-rs's ErrorDetail (the same names, code a string;
// rust/src/server/src/routes/openai/utils/types.rs).
type errorBody struct {
	Error errorInfo `json:"error"`
}

type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"`
}

func rustServerError(msg string) errorBody {
	return errorBody{errorInfo{Message: msg, Type: "server_error", Code: "server_error"}}
}

// compactJSON is the JSON both front ends send as a response body: Starlette's
// JSONResponse (json.dumps(..., ensure_ascii=False, separators=(",", ":"))) and axum's Json
// (serde_json::to_vec): no spaces, no escaping of <, > and &, no trailing newline.
func compactJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func writeError(w http.ResponseWriter, code int, body errorBody) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(compactJSON(body))
}

// apiTokens are the keys vLLM's API server wants: --api-key's, else VLLM_API_KEY
// (api_server.py build_app: `args.api_key or [envs.VLLM_API_KEY]`, empty ones dropped).
func apiTokens(f serveFlags) []string {
	keys := f.apiKeys
	if len(keys) == 0 {
		keys = []string{os.Getenv("VLLM_API_KEY")}
	}
	return slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == "" })
}

// authenticate is vLLM's AuthenticationMiddleware (vllm/entrypoints/serve/utils/
// server_utils.py), added only when there is a key: a request under /v1 (of the guarded
// prefixes, the only one this API has) without `Authorization: Bearer KEY` (the scheme in
// any case) is answered 401 {"error": "Unauthorized"}; OPTIONS and every other path
// (/health) pass.
func authenticate(next http.Handler, tokens []string) http.Handler {
	if len(tokens) == 0 {
		return next
	}
	sums := make([][32]byte, len(tokens))
	for i, t := range tokens {
		sums[i] = sha256.Sum256([]byte(t))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodOptions && strings.HasPrefix(r.URL.Path, "/v1") {
			scheme, param, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			got := sha256.Sum256([]byte(param))
			ok := 0
			for _, s := range sums {
				ok |= subtle.ConstantTimeCompare(got[:], s[:])
			}
			if !strings.EqualFold(scheme, "bearer") || ok == 0 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"error":"Unauthorized"}`))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
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

// engineDeadMessage is EngineDeadError's text (vllm/v1/engine/exceptions.py).
const engineDeadMessage = "EngineCore encountered an issue. See stack trace (above) for the root cause."

func apiError(w http.ResponseWriter, code int, typ, msg string) {
	writeError(w, code, errorBody{errorInfo{Message: msg, Type: typ, Code: code}})
}

// registeredNonVLLM are the names vllm/envs.py registers (environment_variables) that do not
// start with VLLM_: the build-time ones, the S3 credentials of the tensorizer loader and the
// NCCL library search path; LOCAL_RANK and CUDA_VISIBLE_DEVICES are registered but
// worker-specific, never copied.
var registeredNonVLLM = []string{"MAX_JOBS", "NVCC_THREADS", "CMAKE_BUILD_TYPE", "VERBOSE", "CUDA_HOME", "LD_LIBRARY_PATH",
	"S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY", "S3_ENDPOINT_URL"}

// keepAlive is how long the API server keeps an idle client connection open: uvicorn's
// timeout_keep_alive, which api_server.py sets from VLLM_HTTP_TIMEOUT_KEEP_ALIVE (default
// "5" seconds, vllm/envs.py).
func keepAlive() time.Duration {
	return time.Duration(envInt("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", 5)) * time.Second
}

// modelParamOn404 says whether the release's 404 for an unknown model names the field:
// _check_model passes param="model" to create_error_response at vllm-project/vllm
// 00bd1493b3e82d6c13c68ee8a0e1c5a96707e190 (vllm/entrypoints/openai/engine/serving.py), the
// front end the lab's 0.32 is read from; users' pastes from older releases show
// "param":null (vllm#3485, 2024). When it changed between them was not found, so the
// releases before 0.32 keep null.
func modelParamOn404(r release) bool { return atLeast(r.vllm, "0.32") }
