package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// RayExecutorV2 (vllm/v1/executor/ray_executor_v2.py; vLLM PR #36836, the default from
// v0.21.0, PR #41421), as the lab's scenarios see it:
//
//   - initialize_ray_cluster(parallel_config, require_gpu_on_driver=False) (ray_utils.py):
//     no "Current node has no GPU available" check and no node:<ip> resource on bundle 0;
//     the group is world × {GPU: 1}, and it still waits (and fails) as _wait_until_pg_ready
//     does.
//   - Every rank, rank 0 included, is a RayWorkerProc actor in a bundle; ranks follow
//     get_bundles_sorted_by_node: bundles on the driver's node first, then by node ID.
//   - The driver's environment: get_driver_env_vars (ray_env_utils.py) offers every
//     variable of os.environ but WORKER_SPECIFIC_ENV_VARS (ray_utils.py) and the names in
//     $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json; RayWorkerProc.initialize_worker
//     applies them with os.environ.setdefault, so the actor's own value stays. Nothing is
//     logged about it.
//   - Rank 0's actor opens the torch TCPStore on ray.util.get_node_ip_address() (its Ray
//     node's registered IP), port 0, and that is the distributed_init_method every rank
//     dials (create_dist_init_method): VLLM_HOST_IP does not decide it.
//   - No duplicate-IP check. Ray forwards actor output with (RayWorkerProc pid=N, ip=X), the
//     ip part only for an actor on another node than the driver (python/ray/_private/
//     worker.py print_worker_logs).
//   - The executor watches its actors (start_worker_monitor): one that dies is logged as
//     "RayWorkerProc rank=[r] died unexpectedly, shutting down executor." and the engine
//     dies with it (failure_callback), without waiting for a request.

// workerSpecificEnvVars is ray_utils.py's WORKER_SPECIFIC_ENV_VARS.
var workerSpecificEnvVars = []string{"VLLM_HOST_IP", "VLLM_HOST_PORT", "VLLM_NIXL_SIDE_CHANNEL_HOST", "LOCAL_RANK",
	"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}

// nonCarryOver is RAY_NON_CARRY_OVER_ENV_VARS (vllm/ray/ray_env.py): the names listed in
// $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json; unreadable or unparsable, none.
func nonCarryOver() map[string]bool {
	names := map[string]bool{}
	b, err := os.ReadFile(filepath.Join(vllmConfigRoot(), "ray_non_carry_over_env_vars.json"))
	if err != nil {
		return names
	}
	var list []string
	_ = json.Unmarshal(b, &list)
	for _, n := range list {
		names[n] = true
	}
	return names
}

// driverEnvVars is get_driver_env_vars(worker_specific_vars=WORKER_SPECIFIC_ENV_VARS).
func driverEnvVars() map[string]string {
	exclude := nonCarryOver()
	for _, n := range workerSpecificEnvVars {
		exclude[n] = true
	}
	out := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if !exclude[k] {
			out[k] = v
		}
	}
	return out
}

// startV2 is RayExecutorV2._init_executor on the driver: the group, the actors in
// driver-first bundle order, the driver's environment, then the ranks' readiness.
func (e *engine) startV2(ctx context.Context, d *driver) error {
	bundles := make([]map[string]float64, e.world)
	for i := range bundles {
		bundles[i] = map[string]float64{"GPU": 1}
	}
	var err error
	if e.pg, err = e.placementGroup(ctx, bundles); err != nil {
		return err
	}
	go e.watchNodes(ctx)
	order := make([]int, len(e.pg.Nodes))
	for i := range order {
		order[i] = i
	}
	key := func(b int) string {
		if e.pg.Nodes[b] == d.node.ID {
			return "0"
		}
		return "1" + e.pg.Nodes[b]
	}
	sort.SliceStable(order, func(i, j int) bool { return key(order[i]) < key(order[j]) })
	if err := e.gc.call(ctx, "POST", "/v1/results", map[string]any{"job": e.job, "key": "env", "value": driverEnvVars()}, nil); err != nil {
		return fmt.Errorf("RuntimeError: driver env: %v", err)
	}
	go e.relayWorkerLogs(ctx)
	for rank, b := range order {
		node := e.pg.Nodes[b]
		e.rankNodes = append(e.rankNodes, node)
		spec, _ := json.Marshal(rankSpec{Job: e.job, Rank: rank, World: e.world, TP: e.flags.tp, LoadFor: e.loadFor(), Model: e.flags.model,
			V2: true, DriverNode: d.node.ID, Shards: e.shards(), ShardTime: e.shardTime(), StoreTimeout: e.storeWait(),
			GPUMemoryUtilization: e.flags.gpuMemoryUtilization()})
		if err := e.gc.call(ctx, "POST", "/v1/tasks", task{Job: e.job, Node: node, Spec: spec}, nil); err != nil {
			return fmt.Errorf("RuntimeError: start RayWorkerProc rank %d: %v", rank, err)
		}
	}
	// ray.get of the actors' initialize_worker and the ready barrier: the first failure
	// raises in the driver; rank 0 answers once the model is loaded and profiled.
	for {
		if err := e.lostErr(); err != nil {
			return err
		}
		var vals []json.RawMessage
		if err := e.gc.call(ctx, "GET", fmt.Sprintf("/v1/results?job=%s&key=ready&n=1", e.job), nil, &vals); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		if len(vals) == 0 {
			continue
		}
		var msg string
		if json.Unmarshal(vals[0], &msg) == nil {
			return errors.New(msg)
		}
		break
	}
	var mq string
	if err := result(ctx, e.gc, e.job, "mq", &mq); err != nil {
		return err
	}
	var err2 error
	if e.mq, err2 = net.Dial("tcp", mq); err2 != nil {
		return fmt.Errorf("RuntimeError: connect to the workers' message queue at %s: %v", mq, err2)
	}
	go func() {
		for ctx.Err() == nil && e.lostErr() == nil {
			time.Sleep(time.Second)
		}
		if e.lostErr() != nil {
			e.lostAfterStart()
		}
	}()
	return nil
}

// deadRanks are the ranks on the node whose death the engine learned of.
func (e *engine) deadRanks(node string) []int {
	var ranks []int
	for r, n := range e.rankNodes {
		if n == node {
			ranks = append(ranks, r)
		}
	}
	return ranks
}

// runV2Rank is one RayWorkerProc, run by its node's raylet (in that node's Ray container,
// with that container's environment and network namespace).
func runV2Rank(ctx context.Context, gc *gcsClient, rs rankSpec, nodeID, nodeIP string) {
	pid := os.Getpid() + rs.Rank + 1
	prefix := fmt.Sprintf("(RayWorkerProc pid=%d, ip=%s)", pid, nodeIP)
	if nodeID == rs.DriverNode {
		prefix = fmt.Sprintf("(RayWorkerProc pid=%d)", pid)
	}
	// RayWorkerProc is a WorkerProc: its own decorate_logs prefix follows Ray's (mp.go
	// workerPrefix), "Worker" until init_device is done.
	final := workerName(rs.Rank, max(rs.TP, 1), max(rs.World/max(rs.TP, 1), 1))
	rel, _ := imageRelease()
	wp := newWorkerPrefix(rel, final)
	var mu sync.Mutex
	out := func(line string) {
		line = fmt.Sprintf("%s (%s pid=%d) %s", prefix, wp.get(), pid, line)
		mu.Lock()
		defer mu.Unlock()
		emit(line)
		_ = gc.call(ctx, "POST", "/v1/logs", map[string]string{"job": rs.Job, "line": line}, nil)
	}
	log := func(level, where, msg string) {
		out(fmt.Sprintf("%s %s [%s] %s", level, time.Now().Format("01-02 15:04:05"), where, msg))
	}
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	fail := func(err error) {
		if ctx.Err() != nil {
			return
		}
		if text, printed := exceptionText(err); !errors.Is(err, errReported) && !printed {
			log("ERROR", "ray_executor_v2.py:250", "RayWorkerProc failed: "+text)
		}
		_ = gc.call(ctx, "POST", "/v1/results", map[string]any{"job": rs.Job, "key": "ready", "value": err.Error()}, nil)
	}
	// initialize_worker: the driver's variables with setdefault.
	var driverEnv map[string]string
	if err := result(ctx, gc, rs.Job, "env", &driverEnv); err != nil {
		return
	}
	for k, v := range driverEnv {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
	if rs.Rank > 0 {
		// A load_model failure was posted for rank 0's wait, which raises it.
		if err := joinAndLoad(ctx, gc, rs, nodeIP, env, rankOut{log, out}, func() { wp.initialized(final) }); err != nil && !errors.Is(err, errReported) {
			fail(err)
		}
		return
	}
	r0 := &engine{flags: serveFlags{model: rs.Model, util: rs.GPUMemoryUtilization}, world: rs.World, log: log, gc: gc, job: rs.Job, v2: true,
		shardN: max(rs.Shards, 1), shardT: rs.ShardTime, storeTimeout: rs.StoreTimeout, actorEnv: env, out: out,
		onGroup: func() { wp.initialized(final) }}
	// create_dist_init_method: the TCPStore on ray.util.get_node_ip_address(), port 0.
	if err := r0.initDistributed(ctx, nodeIP); err != nil {
		fail(err)
		return
	}
	// The engine's steps reach the actors through vLLM's message queue, bound to the Ray
	// node's IP (not modelled beyond this: one connection to rank 0's actor, which runs
	// each step's collective with the other ranks).
	mq, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	if err != nil {
		fail(err)
		return
	}
	_ = gc.call(ctx, "POST", "/v1/results", map[string]any{"job": rs.Job, "key": "mq", "value": mq.Addr().String()}, nil)
	_ = gc.call(ctx, "POST", "/v1/results", map[string]any{"job": rs.Job, "key": "ready", "value": 0}, nil)
	serveSteps(ctx, mq, r0)
	<-ctx.Done()
}

// v2Dead is the executor's monitor noticing dead actors (start_worker_monitor).
func (e *engine) v2Dead(node string) {
	ranks := e.deadRanks(node)
	list := make([]string, len(ranks))
	for i, r := range ranks {
		list[i] = fmt.Sprint(r)
	}
	e.log("ERROR", "ray_executor_v2.py:455", "RayWorkerProc rank=["+strings.Join(list, ", ")+"] died unexpectedly, shutting down executor.")
	e.engineDead(*e.lost.Load())
}
