package logscan

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// scanAll feeds lines to one Scanner and returns the findings in order (Flush included).
func scanAll(lines ...string) []*Finding {
	var s Scanner
	var out []*Finding
	for _, raw := range lines {
		if _, f := s.Scan(raw); f != nil {
			out = append(out, f)
		}
	}
	if f := s.Flush(); f != nil {
		out = append(out, f)
	}
	return out
}

func firstFatal(fs []*Finding) *Finding {
	for _, f := range fs {
		if f.Fatal {
			return f
		}
	}
	return nil
}

// A Ray worker's traceback as vllm#7074 shows it (prefix, vLLM header), ending like the
// traceback of vLLM's troubleshooting guide: the source line `raise RuntimeError(f"NCCL
// error: {error_str}")` is code; the exception line after it is the failure.
func TestTracebackTakesTheException(t *testing.T) {
	const w = "(RayWorkerWrapper pid=1890, ip=10.41.0.8) ERROR 08-02 08:50:03 worker_base.py:382] "
	fs := scanAll(
		w+"Error executing method init_device. This might cause deadlock in distributed execution.",
		w+"Traceback (most recent call last):",
		w+`  File "/usr/local/lib/python3.12/dist-packages/vllm/distributed/device_communicators/pynccl_wrapper.py", line 277, in ncclCommInitRank`,
		w+`    self.NCCL_CHECK(self._funcs["ncclCommInitRank"](ctypes.byref(comm),`,
		w+`  File "/usr/local/lib/python3.12/dist-packages/vllm/distributed/device_communicators/pynccl_wrapper.py", line 256, in NCCL_CHECK`,
		w+`    raise RuntimeError(f"NCCL error: {error_str}")`,
		w+"RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
	)
	if len(fs) != 1 {
		t.Fatalf("got %d findings, want 1: %+v", len(fs), fs)
	}
	f := fs[0]
	if f.Type != failure.NCCLError || !f.Fatal || f.Node != "10.41.0.8" {
		t.Fatalf("got %+v", f)
	}
	if strings.Contains(f.Line, "raise") || strings.Contains(f.Message(), "error_str") {
		t.Errorf("the source line was taken: %q", f.Message())
	}
	for _, want := range []string{"unhandled system error", "10.41.0.8"} {
		if !strings.Contains(f.Message(), want) {
			t.Errorf("message %q does not mention %q", f.Message(), want)
		}
	}
}

// Source lines are code whether or not indentation survived the paste (gpustack#5181 lost
// it), and Python 3.13 spreads a raise over several lines (vllm#27508).
func TestTracebackSourceLines(t *testing.T) {
	const e = "(EngineCore_DP0 pid=89) "
	fs := scanAll(
		e+"Traceback (most recent call last):",
		e+`File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap`,
		e+"self.run()",
		e+`File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 1104, in run_engine_core`,
		e+"raise e",
		e+`File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py", line 699, in check_enough_kv_cache_memory`,
		e+`    raise ValueError("No available memory for the cache blocks. "`,
		e+"                     \"Try increasing `gpu_memory_utilization` when \"",
		e+`                     "initializing the engine.")`,
		e+"    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
		e+"ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
	)
	if len(fs) != 1 || fs[0].Type != failure.KVCacheTooSmall || !strings.HasPrefix(fs[0].Line, "ValueError") {
		t.Fatalf("got %+v", fs)
	}
}

// An engine line announcing a traceback waits for the cause the traceback ends with.
func TestEngineHeaderWaitsForItsCause(t *testing.T) {
	const h = "ERROR 04-30 10:20:36 [core.py:396] "
	fs := scanAll(
		h+"EngineCore failed to start.",
		h+"Traceback (most recent call last):",
		h+`  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 387, in run_engine_core`,
		h+"    engine_core = EngineCoreProc(*args, **kwargs)",
		h+"                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
		h+"ValueError: To serve at least one request with the models's max seq len (262144), (24.0 GiB KV cache is needed, which is larger than the available KV cache memory (3.18 GiB). Based on the available memory, the estimated maximum model length is 34736. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
	)
	if f := firstFatal(fs); f == nil || f.Type != failure.KVCacheTooSmall || !strings.Contains(f.Fix, "34736") {
		t.Fatalf("got %+v", fs)
	}

	// A chained traceback: the first exception is generic, the cause comes after
	// "The above exception was the direct cause …".
	fs = scanAll(
		"ERROR 02-13 15:12:54 registry.py:299] Traceback (most recent call last):",
		`ERROR 02-13 15:12:54 registry.py:299]   File "/usr/lib/python3.11/subprocess.py", line 502, in check_returncode`,
		"ERROR 02-13 15:12:54 registry.py:299]     raise CalledProcessError(self.returncode, self.args, self.stdout,",
		"(EngineCore_DP0 pid=7) ERROR 01-01 00:00:00 [core.py:1] EngineCore failed to start.",
		"(EngineCore_DP0 pid=7) Traceback (most recent call last):",
		`(EngineCore_DP0 pid=7)   File "/x/registry.py", line 495, in _run_in_subprocess`,
		"(EngineCore_DP0 pid=7)     returned.check_returncode()",
		"(EngineCore_DP0 pid=7) subprocess.CalledProcessError: Command '['python', '-m', 'vllm.model_executor.models.registry']' returned non-zero exit status 1.",
		"(EngineCore_DP0 pid=7) ",
		"(EngineCore_DP0 pid=7) The above exception was the direct cause of the following exception:",
		"(EngineCore_DP0 pid=7) ",
		"(EngineCore_DP0 pid=7) Traceback (most recent call last):",
		`(EngineCore_DP0 pid=7)   File "/x/config.py", line 1, in __init__`,
		"(EngineCore_DP0 pid=7)     raise ValueError(",
		"(EngineCore_DP0 pid=7) ValueError: Model architectures ['Qwen3_5MoeForConditionalGeneration'] failed to be inspected. Please check the logs for more details.",
	)
	if f := firstFatal(fs); f == nil || f.Type != failure.ModelUnsupported {
		for _, f := range fs {
			t.Logf("%+v", *f)
		}
		t.Fatalf("chained: got %d findings", len(fs))
	}

	// No specific cause: EngineDead, naming the exception rather than the header.
	fs = scanAll(
		"(EngineCore_DP0 pid=3639978) ERROR 10-14 00:03:16 [core.py:710] EngineCore encountered a fatal error.",
		"(EngineCore_DP0 pid=3639978) ERROR 10-14 00:03:16 [core.py:710] Traceback (most recent call last):",
		`(EngineCore_DP0 pid=3639978) ERROR 10-14 00:03:16 [core.py:710]   File "/x/serial_utils.py", line 1, in decode`,
		"(EngineCore_DP0 pid=3639978) ERROR 10-14 00:03:16 [core.py:710]     assert deserialized_tensor_placeholders == set(range(len(tensors)))",
		"(EngineCore_DP0 pid=3639978) ERROR 10-14 00:03:16 [core.py:710] AssertionError",
		"(EngineCore_DP0 pid=3639978) INFO 10-14 00:03:16 [ray_distributed_executor.py:122] Shutting down Ray distributed executor.",
	)
	if len(fs) != 1 || fs[0].Type != failure.EngineDead || !strings.Contains(fs[0].Diagnosis, "AssertionError") || !strings.Contains(fs[0].Diagnosis, "EngineCore_DP0") {
		t.Fatalf("unclassified cause: got %+v", fs)
	}

	// The output ends before the traceback does: Flush reports the header.
	var s Scanner
	if _, f := s.Scan("ERROR 06-30 13:53:19 [core.py:515] EngineCore failed to start."); f != nil {
		t.Fatalf("header reported at once: %+v", f)
	}
	if f := s.Flush(); f == nil || f.Type != failure.EngineDead || !f.Fatal {
		t.Fatalf("flush: got %+v", f)
	}
	if f := s.Flush(); f != nil {
		t.Fatalf("second flush: got %+v", f)
	}

	// A header whose traceback never comes is reported after maxPending lines.
	s = Scanner{}
	s.Scan("WorkerProc failed to start.")
	var got *Finding
	for i := 0; i <= maxPending && got == nil; i++ {
		_, got = s.Scan("INFO 01-01 00:00:00 [x.py:1] still going")
	}
	if got == nil || got.Type != failure.EngineDead {
		t.Fatalf("bound: got %+v", got)
	}
}

// Lines of two processes interleave; each keeps its own traceback state. With one shared
// state, B's exception line would be taken for the source line after A's frame.
func TestInterleavedProcesses(t *testing.T) {
	const a = "(RayWorkerWrapper pid=2981, ip=192.168.200.13) "
	const b = "(EngineCore_DP0 pid=2301) "
	var s Scanner
	steps := []struct {
		raw  string
		want string // finding type, "" none
	}{
		{a + "Traceback (most recent call last):", ""},
		{a + `  File "/x/pynccl_wrapper.py", line 256, in NCCL_CHECK`, ""},
		{b + "RuntimeError: NCCL error: remote process exited or there was a network error", failure.NCCLError},
		{a + `    raise RuntimeError(f"NCCL error: {error_str}")`, ""},
		{b + `  File "/x/socket.py", line 1, in f`, ""},
		{a + "torch.distributed.DistNetworkError: The client socket has timed out after 60s while trying to connect to (10.1.16.222, 29400).", failure.C10dUnreachable},
		{b + "    raise DistNetworkError(msg)", ""},
		{"INFO 07-25 06:50:45 config.py:718] Defaulting to use ray for distributed inference", ""},
	}
	for i, st := range steps {
		l, f := s.Scan(st.raw)
		got := ""
		if f != nil {
			got = f.Type
		}
		if got != st.want {
			t.Errorf("step %d %q: got %q, want %q", i, l.Text, got, st.want)
		}
		if got == failure.C10dUnreachable && f.Node != "192.168.200.13" {
			t.Errorf("step %d: node %q", i, f.Node)
		}
	}
}

func TestRepeatedSuffix(t *testing.T) {
	l := Parse("(EngineCore_DP0 pid=1769) (RayWorkerWrapper pid=274, ip=10.2.1.15) [Gloo] Rank 0 is connected to 0 peer ranks. Expected number of connected peer ranks is : 0 [repeated 8x across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io/en/master/ray-observability/user-guides/configure-logging.html#log-deduplication for more options.)")
	if l.Source != "EngineCore_DP0 pid=1769 / RayWorkerWrapper pid=274, ip=10.2.1.15" || l.Repeated != 8 || l.Node() != "10.2.1.15" ||
		l.Text != "[Gloo] Rank 0 is connected to 0 peer ranks. Expected number of connected peer ranks is : 0" {
		t.Fatalf("got %+v", l)
	}
	// FastChat's prefix hides Ray's, the suffix still goes; errno 97 is not a failure.
	l = Parse("2023-09-28 09:22:34 | ERROR | stderr | (RayWorker pid=3346) [W socket.cpp:601] [c10d] The client socket cannot be initialized to connect to [::ffff:172.17.0.3]:49345 (errno: 97 - Address family not supported by protocol). [repeated 2x across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io/en/master/ray-observability/ray-logging.html#log-deduplication for more options.)")
	if l.Repeated != 2 || !strings.HasSuffix(l.Text, "(errno: 97 - Address family not supported by protocol).") || Classify(l) != nil {
		t.Fatalf("got %+v", l)
	}
	f := Classify(Parse("(RayWorkerWrapper pid=1978, ip=10.41.0.8) [rank9]:[W ProcessGroupGloo.cpp:721] Warning: Unable to resolve hostname to a (local) address. Using the loopback address as fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME. (function operator()) [repeated 3x across cluster]"))
	if f == nil || f.Type != failure.GlooLoopback || !strings.Contains(f.Diagnosis, "repeated 3x") || !strings.Contains(f.Diagnosis, "10.41.0.8") {
		t.Fatalf("got %+v", f)
	}
}

// Escapes as pasted into issues: "^[[36m" for ESC[36m, "^M" for a carriage return.
func TestCaretEscapes(t *testing.T) {
	// vllm#33297, verbatim.
	raw := "[2026-01-26T17:25:37Z] ^[[0;36m(EngineCore_DP0 pid=738)^[[0;0m ^[[31mERROR^[[0m ^[[90m01-26 09:25:37^[[0m ^[[90m[core.py:935]^[[0m ValueError: Free memory on device cuda:0 (1.54/22.05 GiB) on startup is less than desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
	l := Parse(raw)
	if strings.Contains(l.Text, "^[") || !strings.Contains(l.Text, "ERROR 01-26 09:25:37 [core.py:935] ValueError: Free memory") {
		t.Fatalf("text %q", l.Text)
	}
	if f := Classify(l); f == nil || f.Type != failure.ResourcesBusy || !strings.Contains(f.Diagnosis, "20.51 GiB") {
		t.Fatalf("got %+v", f)
	}
	l = Parse("^[[36m(RayWorkerWrapper pid=2981, ip=10.254.20.30)^[[0m INFO hello")
	if l.Source != "RayWorkerWrapper pid=2981, ip=10.254.20.30" || l.Text != "INFO hello" {
		t.Fatalf("got %+v", l)
	}
	l = Parse("Loading safetensors checkpoint shards:   0% Completed | 0/2 [00:00<?, ?it/s]^MLoading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.56s/it]^M")
	if p, ok := ParseProgress(l.Text); !ok || p.Loaded != 1 || p.Total != 2 {
		t.Fatalf("got %q %+v", l.Text, p)
	}
	// Real and caret escapes mixed, and an escape split by another one.
	if got := Parse("^[[\x1b[0m0m\x1b[31mfoo^[[0m").Text; got != "foo" {
		t.Fatalf("got %q", got)
	}
}

func TestClassifyIgnoresCode(t *testing.T) {
	for _, line := range []string{
		`raise RuntimeError(f"NCCL error: {error_str}")`,
		`            raise RuntimeError(f"NCCL error: {error_str}")`,
		`                f"Every node should have a unique IP address. Got {n_nodes}"`,
		`ERROR 11-18 18:07:28 engine.py:366]     raise ValueError("No available memory for the cache blocks. "`,
		`            "Cannot provide a placement group of "`,
		`assert self.total_num_heads % tp_size == 0`,
		`  File "/x/pynccl_wrapper.py", line 256, in NCCL_CHECK`,
		`[rank0]:     raise ValueError(f"Total number of attention heads ({total_num_attention_heads}) must be divisible by tensor parallel size ({tensor_parallel_size}).")`,
		`logger.warning("Gloo connectFullMesh failed with %s", e)`,
	} {
		if f := Classify(Parse(line)); f != nil {
			t.Errorf("%q classified as %s", line, f.Type)
		}
	}
}

func TestResolvePending(t *testing.T) {
	wait := func(secs int, pin string) *Finding {
		specs := "[{'GPU': 1.0}, {'GPU': 1.0}]"
		if pin != "" {
			specs = "[{'GPU': 1.0, 'node:" + pin + "': 0.001}, {'GPU': 1.0}]"
		}
		f := Classify(Parse("(EngineCore_DP0 pid=2301) INFO 04-08 20:32:02 [ray_utils.py:241] Waiting for creating a placement group of specs for " +
			itoa(secs) + " seconds. specs=" + specs + ". Check `ray status` and `ray list nodes` to see if you have enough resources, and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node."))
		if f == nil || f.Type != failure.PlacementGroupPending || f.Fatal || f.Pinned != pin || f.Waited != time.Duration(secs)*time.Second {
			t.Fatalf("wait line: got %+v", f)
		}
		return f
	}
	nodes := []string{"10.1.230.180", "192.168.200.13"}
	bound := 5 * time.Minute
	// Seed failure 1: pinned to an address no Ray node has.
	if d := wait(10, "192.168.200.12").ResolvePending(nodes, bound); d == nil || d.Type != failure.PlacementGroupPending || !d.Fatal ||
		!strings.Contains(d.Message(), "192.168.200.12") || !strings.Contains(d.Message(), "10.1.230.180") {
		t.Fatalf("unknown pin: got %+v", d)
	}
	// Pinned to a live node: wait within the bound, then ResourcesBusy.
	if d := wait(70, "10.1.230.180").ResolvePending(nodes, bound); d != nil {
		t.Fatalf("live pin within bound: got %+v", d)
	}
	if d := wait(310, "10.1.230.180").ResolvePending(nodes, bound); d == nil || d.Type != failure.ResourcesBusy || !d.Fatal {
		t.Fatalf("live pin past bound: got %+v", d)
	}
	// Nothing pinned (newer vLLM), or Ray's nodes unknown: only the bound decides.
	if d := wait(630, "").ResolvePending(nodes, bound); d == nil || d.Type != failure.ResourcesBusy {
		t.Fatalf("no pin: got %+v", d)
	}
	if d := wait(30, "192.168.200.12").ResolvePending(nil, bound); d != nil {
		t.Fatalf("nodes unknown: got %+v", d)
	}
	// vLLM gave up with the group pinned to a live node: busy, not an address mismatch.
	gaveUp := Classify(Parse("ValueError: Cannot provide a placement group requiring 2.0 GPUs (placement_group_specs=[{'GPU': 1.0, 'node:10.1.230.180': 0.001}, {'GPU': 1.0}]) within 1800 seconds."))
	if gaveUp == nil || !gaveUp.Fatal || gaveUp.Pinned != "10.1.230.180" || gaveUp.Waited != 1800*time.Second {
		t.Fatalf("gave up: got %+v", gaveUp)
	}
	if d := gaveUp.ResolvePending(nodes, bound); d == nil || d.Type != failure.ResourcesBusy || !d.Fatal {
		t.Fatalf("gave up, live pin: got %+v", d)
	}
	if d := Classify(Parse("torch.OutOfMemoryError: CUDA out of memory.")).ResolvePending(nodes, bound); d != nil {
		t.Fatalf("other type: got %+v", d)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
