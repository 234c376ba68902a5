package logscan

import (
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		typ       string // "" = no finding
		fatal     bool
		mentions  []string
	}{
		{"placement wait (seed failure 1)",
			"(EngineCore_DP0 pid=2301) INFO 04-08 20:32:02 [ray_utils.py:241] Waiting for creating a placement group of specs for 10 seconds. specs=[{'GPU': 1.0, 'node:192.168.200.12': 0.001}, {'GPU': 1.0}]. Check `ray status` and `ray list nodes` to see if you have enough resources, and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node.",
			failure.PlacementGroupPending, false, []string{"node:192.168.200.12", "--node-ip-address"}},
		{"placement gives up",
			"ValueError: Cannot provide a placement group requiring 2 GPUs (placement_group_specs=[{'GPU': 1.0, 'node:10.0.0.5': 0.001}, {'GPU': 1.0}]) within 1800 seconds.",
			failure.PlacementGroupPending, true, []string{"node:10.0.0.5"}},
		{"c10d unreachable from a remote worker (seed failure 2), coloured Ray prefix",
			"\x1b[36m(RayWorkerWrapper pid=3173774, ip=192.168.200.13)\x1b[0m WARNING 11-30 00:28:34 [socket.cpp:879] [c10d] The client socket has failed to connect to any network address of (10.1.230.180, 55053). The client socket has failed to connect to 10.1.230.180:55053 (errno: 101 - Network is unreachable).",
			failure.C10dUnreachable, true, []string{"10.1.230.180:55053", "errno 101 - Network is unreachable", "RayWorkerWrapper pid=3173774, ip=192.168.200.13"}},
		{"c10d final error",
			"torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of (10.1.230.180, 55053). The client socket has failed to connect to 10.1.230.180:55053 (errno: 113 - No route to host).",
			failure.C10dUnreachable, true, []string{"errno 113"}},
		{"c10d refused is retried by torch", "[c10d] The client socket has failed to connect to 10.0.0.1:5 (errno: 111 - Connection refused).", "", false, nil},
		{"c10d server timeout", "torch.distributed.DistStoreError: Timed out after 26 seconds waiting for clients. 1/2 clients joined.", failure.C10dUnreachable, true, []string{"1/2"}},
		{"nccl no interface", "bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found", failure.NCCLNoInterface, true, []string{"NCCL_SOCKET_IFNAME"}},
		{"nccl invalid usage", "DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3135, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9", failure.NCCLError, true, []string{"invalid usage"}},
		{"nccl interface count", "NCCL WARN NET/Socket : ncclNetSocketListen dev=1 ncclNetIfs=1", failure.NCCLError, true, nil},
		{"gloo loopback warning", "Unable to resolve hostname to a (local) address. Using the loopback address as fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME.", failure.GlooLoopback, false, []string{"GLOO_SOCKET_IFNAME"}},
		{"gloo mesh", "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:152] timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:9096", failure.GlooLoopback, true, []string{"loopback", "127.0.0.1"}},
		{"cuda oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", failure.CUDAOutOfMemory, true, []string{"gpu-memory-utilization"}},
		{"engine dead", "(APIServer pid=1) ERROR 11-30 00:28:34 [async_llm.py:420] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.", failure.EngineDead, true, nil},
		{"duplicate ip", "RuntimeError: Every node should have a unique IP address. Got 2 nodes with node ids ['a', 'b'] and 1 unique IP addresses ['10.0.0.1']. Please check your network configuration.", failure.DuplicateAddress, true, nil},
		{"one node, two ips", "RuntimeError: Every node should have a unique IP address. Got 1 nodes with node ids ['e5'] and 2 unique IP addresses {'172.18.0.2', '172.18.0.3'}. Please check your network configuration.", failure.DuplicateAddress, true, []string{"workers on 1 Ray node(s) report 2 addresses", "differs from the --node-ip-address"}},
		{"gcs unreachable", "2024-04-02 01:39:24,189\tERROR utils.py:1371 -- Unable to connect to GCS at 10.0.0.1:6379. Check that (1) Ray GCS with matching version started successfully", failure.GCSUnreachable, true, []string{"10.0.0.1:6379"}},
		{"no gpu", "ValueError: Current node has no GPU available. current_node_resource={'CPU': 1.0}.", failure.InsufficientGPUs, true, nil},
		{"progress line", "Loading safetensors checkpoint shards:  21% Completed | 8/39 [00:41<01:59,  3.84s/it]", "", false, nil},
		{"ordinary", "(APIServer pid=1) INFO 04-08 20:32:02 [api_server.py:573] Starting vLLM server on http://0.0.0.0:8080", "", false, nil},
		{"garbage", "\x00\xff((((pid=)))) errno: x", "", false, nil},
		{"empty", "", "", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Classify(Parse(tc.raw))
			if tc.typ == "" {
				if f != nil {
					t.Fatalf("got %s %q, want no finding", f.Type, f.Diagnosis)
				}
				return
			}
			if f == nil {
				t.Fatalf("no finding, want %s", tc.typ)
			}
			if f.Type != tc.typ || f.Fatal != tc.fatal {
				t.Fatalf("got %s fatal=%v, want %s fatal=%v", f.Type, f.Fatal, tc.typ, tc.fatal)
			}
			msg := f.Message()
			for _, m := range tc.mentions {
				if !strings.Contains(msg, m) {
					t.Errorf("message %q does not mention %q", msg, m)
				}
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct{ raw, source, text string }{
		{"\x1b[36m(RayWorkerWrapper pid=2981, ip=10.254.20.30)\x1b[0m INFO hello", "RayWorkerWrapper pid=2981, ip=10.254.20.30", "INFO hello"},
		{"(EngineCore_DP0 pid=2301) (RayWorkerWrapper pid=2981, ip=10.0.0.2) x", "EngineCore_DP0 pid=2301 / RayWorkerWrapper pid=2981, ip=10.0.0.2", "x"},
		{"(not a prefix) text", "", "(not a prefix) text"},
		{"Loading:  0%|\rLoading: 50%|\r\n", "", "Loading: 50%|"},
		{"(unclosed pid=1", "", "(unclosed pid=1"},
		// Nested parentheses in a prefix (Ray Data), and a prefix without pid (raylet).
		{"(MapWorker(MapBatches(vLLMEngineStageUDF)) pid=162837) (Worker pid=186718) INFO 09-23 17:01:42 [cuda.py:362] x", "MapWorker(MapBatches(vLLMEngineStageUDF)) pid=162837 / Worker pid=186718", "INFO 09-23 17:01:42 [cuda.py:362] x"},
		{"(raylet, ip=10.0.0.3) y", "raylet, ip=10.0.0.3", "y"},
		// One space goes with the prefix; a traceback's indentation stays.
		{"(APIServer pid=151)     sys.exit(main())", "APIServer pid=151", "    sys.exit(main())"},
		{"(APIServer pid=2960) (Worker_TP0 pid=1)", "APIServer pid=2960 / Worker_TP0 pid=1", ""},
		// RayExecutorV2 (vLLM ≥ 0.21): the remote actor is RayWorkerProc, nested under the
		// engine and above the worker's own prefix.
		{"\x1b[36m(RayWorkerProc pid=2158, ip=192.168.10.254)\x1b[0m double free or corruption (fasttop)", "RayWorkerProc pid=2158, ip=192.168.10.254", "double free or corruption (fasttop)"},
		{"(EngineCore_DP0 pid=2490) (RayWorkerProc pid=471, ip=10.0.14.41) (Worker_TP1 pid=471) INFO x", "EngineCore_DP0 pid=2490 / RayWorkerProc pid=471, ip=10.0.14.41 / Worker_TP1 pid=471", "INFO x"},
	} {
		got := Parse(tc.raw)
		if got.Source != tc.source || got.Text != tc.text {
			t.Errorf("Parse(%q) = %+v, want source %q text %q", tc.raw, got, tc.source, tc.text)
		}
	}
}

// TestNodeV2 checks Line.Node for both Ray executors' prefixes: the legacy RayWorkerWrapper
// and V2's RayWorkerProc, alone or nested; a local line has no node.
func TestNodeV2(t *testing.T) {
	for raw, want := range map[string]string{
		"(RayWorkerWrapper pid=3173774, ip=192.168.200.13) x":                                      "192.168.200.13",
		"(RayWorkerProc pid=2158, ip=192.168.10.254) x":                                            "192.168.10.254",
		"(EngineCore_DP0 pid=2301) (RayWorkerProc pid=2981, ip=10.0.0.2) x":                        "10.0.0.2",
		"(EngineCore_DP0 pid=2490) (RayWorkerProc pid=471, ip=10.0.14.41) (Worker_TP1 pid=471) x":  "10.0.14.41",
		"(EngineCore pid=676) (RayWorkerProc pid=918) (Worker_TP0 pid=918) x":                      "",
		"\x1b[36m(EngineCore_DP0 pid=1)\x1b[0m \x1b[36m(RayWorkerProc pid=2, ip=fd00::2)\x1b[0m x": "fd00::2",
	} {
		if got := Parse(raw).Node(); got != want {
			t.Errorf("Node(%q) = %q, want %q", raw, got, want)
		}
	}
	// A V2 remote worker's failure names its node and process.
	f := Classify(Parse("(EngineCore_DP0 pid=2301) (RayWorkerProc pid=2981, ip=192.168.200.13) WARNING 11-30 00:28:34 [socket.cpp:879] [c10d] The client socket has failed to connect to 10.1.230.180:55053 (errno: 101 - Network is unreachable)."))
	if f == nil || f.Type != failure.C10dUnreachable || f.Node != "192.168.200.13" || !strings.Contains(f.Diagnosis, "RayWorkerProc pid=2981") {
		t.Fatalf("V2 remote line: got %+v", f)
	}
}

func TestParseProgress(t *testing.T) {
	p, ok := ParseProgress("Loading safetensors checkpoint shards:  21% Completed | 8/39 [00:41<01:59,  3.84s/it]")
	if !ok || p.Loaded != 8 || p.Total != 39 || p.Percent != 21 || p.Elapsed != 41*time.Second || p.Remaining != 119*time.Second {
		t.Fatalf("got %+v %v", p, ok)
	}
	p, ok = ParseProgress("Loading safetensors checkpoint shards:   0% Completed | 0/39 [00:00<?, ?it/s]")
	if !ok || p.Loaded != 0 || p.Total != 39 || p.Remaining != 0 {
		t.Fatalf("got %+v %v", p, ok)
	}
	if _, ok := ParseProgress("Loading safetensors checkpoint shards: garbage"); ok {
		t.Fatal("garbage parsed as progress")
	}
}

func TestPhase(t *testing.T) {
	for text, want := range map[string]string{
		"Connected to Ray cluster.": "placement",
		"world_size=2 rank=0 local_rank=0 distributed_init_method=tcp://10.0.0.1:1 backend=nccl": "rendezvous",
		"Loading safetensors checkpoint shards:   0% Completed | 0/3 [00:00<?, ?it/s]":           "loading",
		"Model loading took 41.0417 GiB and 15.405849 seconds":                                   "warming",
		"INFO:     Application startup complete.":                                                "ready",
		"something else": "",
	} {
		if got := Phase(text); got != want {
			t.Errorf("Phase(%q) = %q, want %q", text, got, want)
		}
	}
}

func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		"\x1b[36m(RayWorkerWrapper pid=1, ip=1.2.3.4)\x1b[0m [c10d] The client socket has failed to connect to 1.2.3.4:5 (errno: 101 - Network is unreachable).",
		"Waiting for creating a placement group of specs for 10 seconds. specs=[{'GPU': 1.0, 'node:1.2.3.4': 0.001}]. Check",
		"Loading safetensors checkpoint shards:  21% Completed | 8/39 [00:41<01:59,  3.84s/it]",
		"(((pid=", "\r\r\r", "Gloo connectFullMesh failed with remote=[",
	} {
		f.Add(s)
	}
	f.Add("(A pid=1) Traceback (most recent call last):\n(A pid=1)   File \"x\", line 1, in f\n(B pid=2) RuntimeError: NCCL error: x\n(A pid=1)     raise X(\n(A pid=1) ValueError: y")
	f.Add("ERROR 04-30 10:20:36 [core.py:396] EngineCore failed to start.\n^[[31mERROR^[[0m x [repeated 2x across cluster]^M")
	f.Fuzz(func(t *testing.T, raw string) {
		var s Scanner
		for _, part := range strings.Split(raw, "\n") {
			if _, f := s.Scan(part); f != nil && (f.Type == "" || f.Diagnosis == "" || f.Fix == "") {
				t.Fatalf("incomplete scanner finding %+v for %q", f, part)
			}
		}
		if f := s.Flush(); f != nil && (f.Type == "" || f.Diagnosis == "" || f.Fix == "" || !f.Fatal) {
			t.Fatalf("incomplete flushed finding %+v", f)
		}
		l := Parse(raw)
		if again := Parse(l.Text); l.Source == "" && again.Text != l.Text && !strings.HasPrefix(l.Text, "(") {
			t.Fatalf("Parse not stable: %q -> %q -> %q", raw, l.Text, again.Text)
		}
		if f := Classify(l); f != nil && (f.Type == "" || f.Diagnosis == "" || f.Fix == "") {
			t.Fatalf("incomplete finding %+v for %q", f, raw)
		} else if f != nil && f.Type == failure.PlacementGroupPending && f.Waited < 0 {
			t.Fatalf("negative wait %+v", f)
		}
		if p, ok := ParseProgress(l.Text); ok && (p.Loaded < 0 || p.Total < 0) {
			t.Fatalf("negative progress %+v", p)
		}
	})
}
