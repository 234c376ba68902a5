package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// vLLM's own multi-node mode (--distributed-executor-backend mp with --nnodes > 1; vLLM
// PR #23691, v0.11.1+), as vLLM's source runs it:
//
//   - every node runs `vllm serve MODEL -tp T -pp P --nnodes N --node-rank R --master-addr
//     A --master-port P` (ParallelConfig: master_addr 127.0.0.1, master_port 29501, nnodes
//     1, node_rank 0); nodes other than 0 add --headless: no API server, only the node's
//     workers (vllm/entrypoints/cli/serve.py run_headless, which logs "Launching vLLM (v…)
//     headless multiproc executor, with head node address A:P for torch.distributed process
//     group.");
//   - each node runs world/N workers (local_world_size); global rank = local_world_size x
//     node_rank + local rank (vllm/v1/executor/multiproc_executor.py); every worker joins
//     torch.distributed at tcp://A:P (parallel_state.py init_distributed_environment with
//     nnodes > 1), where global rank 0 on node 0 hosts the c10d store on every interface
//     (torch's _create_c10d_store: start_daemon = rank == 0; master_addr is only what clients
//     dial) — so a node that cannot route to A fails with torch's connect texts;
//   - rank 0's engine drives every worker: a remote worker's exception in load_model comes
//     back as the executor's RuntimeError "Worker failed with error '…', please check the
//     stack trace above for the root cause"; a remote worker that dies is not noticed by
//     node 0 (its executor monitors only its own processes, and NCCL has no timeout);
//   - a headless node monitors only its own workers: when one dies it logs "Worker proc …
//     died unexpectedly, shutting down executor." and exits.

// mpMain runs one node of vLLM's own multi-node mode.
func mpMain(ctx context.Context, f serveFlags) error {
	world := f.tp * f.pp
	switch {
	case f.nnodes < 1:
		return fmt.Errorf("pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig\nnnodes\n  Input should be greater than or equal to 1 [type=greater_than_equal, input_value=%d, input_type=int]", f.nnodes)
	case f.nodeRank < 0:
		return fmt.Errorf("pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig\nnode_rank\n  Input should be greater than or equal to 0 [type=greater_than_equal, input_value=%d, input_type=int]", f.nodeRank)
	case world%f.nnodes != 0:
		// EngineArgs.create_engine_config's assert, before any executor (vllm/engine/
		// arg_utils.py: f"world_size={world_size} must be divisible by nnodes={self.nnodes}.").
		return fmt.Errorf("AssertionError: %s", mpDivisibility(world, f.nnodes))
	}
	local := world / f.nnodes
	if f.nodeRank > 0 {
		return headless(ctx, f, world, local)
	}
	log := func(level, where, msg string) { vllmLog("APIServer", level, where, msg) }
	log("INFO", "api_server.py:1885", "vLLM API server version "+f.rel.vllm)
	log("INFO", "utils.py:233", fmt.Sprintf("non-default args: {'model_tag': '%s', 'host': '%s', 'port': %d, 'model': '%s', 'served_model_name': ['%s'], 'tensor_parallel_size': %d, 'pipeline_parallel_size': %d, 'master_addr': '%s', 'master_port': %d, 'nnodes': %d}",
		f.model, f.host, f.port, f.model, f.served, f.tp, f.pp, f.masterAddr, f.masterPort, f.nnodes))
	return runAPIServer(ctx, f, f.args)
}

// workerName is the worker process's name in vLLM's log prefix, e.g. Worker_TP1.
func workerName(rank, tp, pp int) string {
	if pp > 1 {
		return fmt.Sprintf("Worker_PP%d_TP%d", rank/tp, rank%tp)
	}
	return fmt.Sprintf("Worker_TP%d", rank)
}

// plainLog is a line of a vLLM process that has no process prefix (the headless main).
func plainLog(level, where, msg string) {
	emit(fmt.Sprintf("%s %s [%s] %s", level, time.Now().Format("01-02 15:04:05"), where, msg))
}

func mpStoreTimeout() time.Duration {
	return scaled(time.Duration(envFloat(envStoreTimeout, 600) * float64(time.Second)))
}

// headless runs a node other than 0: its workers, until one of them dies.
func headless(ctx context.Context, f serveFlags, world, local int) error {
	if !f.headless {
		// vLLM starts an API server only on node 0; the lab requires what vLLM's docs do.
		return errors.New("ValueError: --node-rank > 0 requires --headless (only node 0 runs the API server)")
	}
	master := net.JoinHostPort(f.masterAddr, strconv.Itoa(f.masterPort))
	plainLog("INFO", "serve.py:209", fmt.Sprintf("Launching vLLM (v%s) headless multiproc executor, with head node address %s for torch.distributed process group.", f.rel.vllm, master))
	type death struct {
		name string
		err  error
	}
	died := make(chan death, local)
	var procs []*child
	for lr := 0; lr < local; lr++ {
		rank := local*f.nodeRank + lr
		name := workerName(rank, f.tp, f.pp)
		p, err := spawn("VLLM::"+name, roleMPWorker, procInput{Args: f.args, Rank: rank, World: world})
		if err != nil {
			return err
		}
		procs = append(procs, p)
		go func() { died <- death{name, <-p.done} }()
	}
	select {
	case <-ctx.Done():
		for _, p := range procs {
			p.signal(syscall.SIGTERM)
		}
		plainLog("INFO", "serve.py:231", "Shutting down.")
		return nil
	case d := <-died:
		if ctx.Err() != nil {
			return nil
		}
		plainLog("ERROR", "multiproc_executor.py:256", fmt.Sprintf("Worker proc %s died unexpectedly, shutting down executor.", d.name))
		os.Exit(1)
	}
	return nil
}

// mpWorkerMain is one headless worker's process (VLLM::Worker_TP<r>): it runs the rank
// and ends when the rank fails.
func mpWorkerMain(in procInput) error {
	ctx, stop, f, err := childStart(in)
	if err != nil {
		return err
	}
	defer stop()
	name := workerName(in.Rank, f.tp, f.pp)
	prefix := newWorkerPrefix(f.rel, name)
	log := func(level, where, msg string) { vllmLog(prefix.get(), level, where, msg) }
	err = mpRank(ctx, in.Rank, in.World, f, vllmHostIP(), mpOut(prefix), func() { prefix.initialized(name) })
	if ctx.Err() != nil {
		return nil
	}
	if err != nil && !errors.Is(err, errReported) {
		log("ERROR", "multiproc_executor.py:671", "WorkerProc failed to start.")
		if text, printed := exceptionText(err); !printed {
			log("ERROR", "multiproc_executor.py:671", text)
		}
	}
	os.Exit(1)
	return nil
}

// mpResult is what a worker tells rank 0 on its NCCL connection once load_model ran (vLLM
// answers over its message queues; the connection stands in for them).
type mpResult struct {
	Loaded bool   `json:"loaded,omitempty"`
	Error  string `json:"error,omitempty"`
}

// mpOut is a worker's output: vLLM's lines and its torch process's, under its log prefix
// (workerPrefix).
func mpOut(p *workerPrefix) rankOut {
	return rankOut{
		log: func(level, where, msg string) { vllmLog(p.get(), level, where, msg) },
		raw: func(line string) { emit(fmt.Sprintf("(%s pid=%d) %s", p.get(), os.Getpid(), line)) },
	}
}

// workerPrefix is a WorkerProc's log prefix. WorkerProc.__init__ calls
// setup_proc_title_and_log_prefix twice: before init_device, when the parallel groups do
// not exist yet (model_parallel_is_initialized() false: set_process_title(name="Worker"),
// decorate_logs("Worker")), and after it (Worker[_DP d][_PP p][_PCP c][_TP t]…, each part
// only when that size is over 1). init_device is where torch.distributed, Gloo and NCCL
// start, so their lines read (Worker pid=N) and the rest (Worker_TP1 pid=N)
// (vllm/v1/executor/multiproc_executor.py; vLLM's main as ROCm/vllm carries it at
// dd36ccb5d754a02fe09e6a4c6f2f3cff4bd07b33; lab/README.md). RayExecutorV2's RayWorkerProc
// is a WorkerProc and does the same under its Ray prefix; the legacy RayWorkerWrapper is not.
type workerPrefix struct {
	mu   sync.Mutex
	name string
}

// newWorkerPrefix is the prefix a worker starts with: "Worker" where the release calls
// setup_proc_title_and_log_prefix before init_device, else already its final name.
func newWorkerPrefix(r release, final string) *workerPrefix {
	if r.earlyWorkerPrefix() {
		return &workerPrefix{name: "Worker"}
	}
	return &workerPrefix{name: final}
}

func (p *workerPrefix) get() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.name
}

// initialized is the second setup_proc_title_and_log_prefix, once init_device is done.
func (p *workerPrefix) initialized(final string) {
	p.mu.Lock()
	p.name = final
	p.mu.Unlock()
}

// earlyWorkerPrefix: the releases modelled from vLLM's main (after 0.22.1) name a worker
// before init_device. When the early call came in is not known here (the PR was not
// found; vllm#24476 asked for it in 2025-09), so 0.22.1 and older keep the one call after
// init_device.
func (r release) earlyWorkerPrefix() bool { return atLeast(r.vllm, "0.23") }

func osEnv() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// mpRank is one worker of a headless node: it joins the group at the master address, loads
// its node's copy of the weights, reports to rank 0 and answers collectives.
func mpRank(ctx context.Context, rank, world int, f serveFlags, ip string, o rankOut, initialized func()) error {
	init := "tcp://" + net.JoinHostPort(f.masterAddr, strconv.Itoa(f.masterPort))
	g, err := joinGroup(ctx, rank, world, f.tp, init, mpStoreTimeout(), ip, osEnv(), o, nil)
	if err != nil {
		return err
	}
	initialized()
	defer g.Close()
	enc := json.NewEncoder(g.nccl)
	if err := checkWeights(f.model, o.log); err != nil {
		o.log("ERROR", "multiproc_executor.py:671", "WorkerProc hit an exception.")
		o.log("ERROR", "multiproc_executor.py:671", err.Error())
		_ = enc.Encode(mpResult{Error: err.Error()})
		return errReported
	}
	loadFor := time.Duration(envFloat(envShardSeconds, 0.5)*float64(time.Second)) * time.Duration(envFloat(envShards, 8))
	w := newWeightLoad(f.model, world, 1)
	w.all()
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(loadFor):
	}
	// The KV cache is allocated when the load ends, not after the profiling collective as
	// upstream does: the lab's worker answers collectives in a loop from here on.
	if err := w.kvCache(utilization(f.args), o.log); err != nil {
		_ = enc.Encode(mpResult{Error: err.Error()})
		return errReported
	}
	o.log("INFO", "default_loader.py:267", fmt.Sprintf("Loading weights took %.2f seconds", loadFor.Seconds()))
	if err := enc.Encode(mpResult{Loaded: true}); err != nil {
		return storeRecvError(0)
	}
	return answerCollectives(ctx, g.nccl, o.log)
}

// startMP is node 0's engine: global rank 0's torch process hosts the c10d store on the
// master port (torch binds every interface; master_addr is what the others dial), its
// node's other workers join as every remote one does, then the weights load as over Ray.
func (e *engine) startMP(ctx context.Context, local int) error {
	f := e.flags
	ip := vllmHostIP()
	init := "tcp://" + net.JoinHostPort(f.masterAddr, strconv.Itoa(f.masterPort))
	e.log("INFO", "multiproc_executor.py:130", fmt.Sprintf("DP group leader: node_rank=0, node_rank_within_dp=0, master_addr=%s, mq_connect_ip=%s (local), world_size=%d, local_world_size=%d", f.masterAddr, ip, e.world, local))
	for lr := 1; lr < local; lr++ {
		name := workerName(lr, f.tp, f.pp)
		go func() {
			prefix := newWorkerPrefix(f.rel, name)
			o := mpOut(prefix)
			if err := mpRank(ctx, lr, e.world, f, ip, o, func() { prefix.initialized(name) }); err != nil && ctx.Err() == nil {
				if text, printed := exceptionText(err); !printed {
					o.log("ERROR", "multiproc_executor.py:671", text)
				}
			}
		}()
	}
	g, err := joinGroup(ctx, 0, e.world, f.tp, init, mpStoreTimeout(), ip, osEnv(), rankOut{e.log, e.raw}, nil)
	if err != nil {
		return err
	}
	e.group = g
	if e.peers, err = g.acceptPeers(e.world); err != nil {
		return err
	}
	return e.load(ctx)
}

// waitLoadedMP reads every worker's load_model result from its store connection. A worker
// that raised comes back as the executor's error; one that died leaves rank 0 waiting, as
// vLLM's engine (which monitors only its own node's workers) does.
func (e *engine) waitLoadedMP(ctx context.Context) error {
	results := make(chan mpResult, len(e.peers))
	for _, c := range e.peers {
		go func() {
			// One line, read byte by byte: the connection then carries the collectives.
			var line []byte
			b := make([]byte, 1)
			for {
				if _, err := c.Read(b); err != nil {
					return
				}
				if b[0] == '\n' {
					break
				}
				line = append(line, b[0])
			}
			var r mpResult
			if json.Unmarshal(line, &r) == nil {
				results <- r
			}
		}()
	}
	for range e.peers {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case r := <-results:
			if r.Error != "" {
				_, msg, _ := strings.Cut(r.Error, ": ")
				return fmt.Errorf("RuntimeError: Worker failed with error '%s', please check the stack trace above for the root cause", msg)
			}
		}
	}
	return nil
}

// mpDivisibility is vLLM's text for a world that does not divide over the nodes.
func mpDivisibility(world, nnodes int) string {
	return fmt.Sprintf("world_size=%d must be divisible by nnodes=%d.", world, nnodes)
}
