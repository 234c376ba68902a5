package dataplane

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// NCCL 2.28.9's lines with no RDMA device, measured (upstream.md §9), with the host:pid
// prefix NCCL puts before them.
const socketFallback = `h200:1234:1234 [0] NCCL INFO Bootstrap: Using eth0:192.0.2.2<0>
h200:1234:1234 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so
h200:1234:1234 [0] NCCL INFO NET/IB : No device found.
h200:1234:1234 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:192.0.2.2<0>
h200:1234:1234 [0] NCCL INFO Failed to initialize NET plugin IB
h200:1234:1234 [0] NCCL INFO NET/Socket : Using [0]eth0:192.0.2.2<0>
h200:1234:1234 [0] NCCL INFO Initialized NET plugin Socket
h200:1234:1234 [0] NCCL INFO Assigned NET plugin Socket to comm
h200:1234:1234 [0] NCCL INFO Using network Socket
h200:1234:1240 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
`

// RoCE lines from NVIDIA/nccl-tests#185 (NCCL 2.19.3, two H100 nodes, two HCAs).
const roceTwoHCAs = `dgxh100-4:460770:460770 [0] NCCL INFO Bootstrap : Using enp220s0np0:11.1.128.136<0>
dgxh100-4:460770:460770 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or directory No plugin found (libnccl-net.so), using internal implementation
dgxh100-4:460770:460842 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:11.1.128.136<0>
dgxh100-4:460770:460842 [0] NCCL INFO Using non-device net plugin version 0
dgxh100-4:460770:460842 [0] NCCL INFO Using network IB
dgxh100-4:460770:460850 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0
dgxh100-4:460770:460850 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [receive] via NET/IB/1
`

// InfiniBand without relaxed ordering, from ROCm/rccl#419 (`… ; OOB`: a space, no [RO]).
const ibNoRO = `e05r3n09:929:929 [2] NCCL INFO Bootstrap : Using ib0:11.5.5.50<0>
e05r3n09:929:929 [2] NCCL INFO NET/IB : Using [0]mlx5_3:1/IB [1]mlx5_2:1/IB [2]mlx5_1:1/IB [3]mlx5_0:1/IB ; OOB ib0:11.5.5.50<0>
e05r3n09:929:929 [2] NCCL INFO Using network IB
`

// NCCL_NET=IB with no device (upstream.md §9): the forced transport fails loudly.
const forcedIBNoDevice = `h200:1:1 [0] NCCL INFO Bootstrap: Using eth0:192.0.2.2<0>
h200:1:1 [0] NCCL INFO NET/IB : No device found.
h200:1:1 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:192.0.2.2<0>
h200:1:1 [0] NCCL INFO Failed to initialize NET plugin IB
h200:1:1 [0] plugin/net.cc:379 NCCL WARN Failed to initialize any NET plugin
TPDEPLOY_PROOF {"event": "error", "phase": "init", "rank": 0, "error": "DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9"}
`

// The merged form NCCL_IB_MERGE_NICS prints (net_ib.cc: " [%d]={[%d] %s:%d/%s, ...}").
const merged = `x:1:1 [0] NCCL INFO NET/IB : Using [0]={[0] rocep1s0f1:1/RoCE, [1] roceP2p1s0f1:1/RoCE} [RO]; OOB enp1s0f1np1:192.168.100.10<0>
x:1:1 [0] NCCL INFO Using network IB
`

func proof(rank int, transportLines string, busbw float64) string {
	return transportLines + `TPDEPLOY_PROOF {"event": "env", "rank": ` + itoa(rank) + `, "world": 2, "memlock": "unlimited", "ipc_lock": true, "uverbs": ["uverbs0", "uverbs1"], "torch": "2.11.0+cu130", "nccl": "2.28.9", "device": "cuda:0"}
TPDEPLOY_PROOF {"event": "size", "rank": ` + itoa(rank) + `, "bytes": 268435456, "seconds": 0.011, "algbw_gbs": ` + ftoa(busbw) + `, "busbw_gbs": ` + ftoa(busbw) + `}
TPDEPLOY_PROOF {"event": "result", "rank": ` + itoa(rank) + `, "ok": true, "sum_ok": true, "expected": 3.0, "got": 3.0, "busbw_gbs": ` + ftoa(busbw) + `}
`
}

func itoa(i int) string     { return string(rune('0' + i)) }
func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name      string
		out       string
		transport string
		hcas      string
		bootstrap string
		noDevice  bool
		forced    bool
	}{
		{"2.28.9 fallback: the empty [RO] is no device", socketFallback, Socket, "", "eth0:192.0.2.2<0>", true, false},
		{"RoCE, two HCAs, older Bootstrap : spelling", roceTwoHCAs, IB, "mlx5_10:1,mlx5_11:1", "enp220s0np0:11.1.128.136<0>", false, false},
		{"IB without [RO]", ibNoRO, IB, "mlx5_3:1,mlx5_2:1,mlx5_1:1,mlx5_0:1", "ib0:11.5.5.50<0>", false, false},
		{"NCCL_NET=IB without devices", forcedIBNoDevice, "", "", "eth0:192.0.2.2<0>", true, true},
		{"merged NICs", merged, IB, "rocep1s0f1:1,roceP2p1s0f1:1", "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Parse(tc.out)
			if r.Transport != tc.transport || strings.Join(r.HCAs, ",") != tc.hcas || r.Bootstrap != tc.bootstrap || r.IBNoDevice != tc.noDevice || r.NoNetPlugin != tc.forced {
				t.Fatalf("got %+v", r)
			}
		})
	}
	r := Parse(roceTwoHCAs)
	if r.ChannelsIB != 2 || r.LinkLayer != "RoCE" {
		t.Fatalf("channels %d link %q", r.ChannelsIB, r.LinkLayer)
	}
	r = Parse(socketFallback)
	if r.ChannelsSocket != 1 {
		t.Fatalf("socket channels %d", r.ChannelsSocket)
	}
}

func TestParseProofLines(t *testing.T) {
	r := Parse(proof(1, roceTwoHCAs, 23.1))
	if r.Rank != 1 || r.World != 2 || !r.Finished || !r.SumOK || r.BusBW != 23.1 || !r.MemlockUnlimited() || len(r.UVerbs) != 2 || r.NCCL != "2.28.9" || len(r.Sizes) != 1 {
		t.Fatalf("got %+v", r)
	}
	r = Parse(`TPDEPLOY_PROOF {"event": "env", "rank": 0, "world": 2, "memlock": 8388608, "ipc_lock": false, "uverbs": []}`)
	if r.Memlock != "8388608" || r.MemlockUnlimited() {
		t.Fatalf("memlock %+v", r)
	}
	r = Parse(`x [0] NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory`)
	if !strings.Contains(r.RegMR, "Cannot allocate memory") {
		t.Fatalf("reg_mr %+v", r)
	}
	// A Ray prefix before the line, and garbage JSON, are fine.
	r = Parse("(RayWorkerProc pid=7, ip=10.0.0.2) TPDEPLOY_PROOF {\"event\": \"result\", \"rank\": 1, \"sum_ok\": true}\nTPDEPLOY_PROOF {not json")
	if !r.Finished || r.Rank != 1 {
		t.Fatalf("prefixed %+v", r)
	}
}

func TestBusBW(t *testing.T) {
	if BusBW(10, 2) != 10 || BusBW(10, 4) != 15 || BusBW(10, 1) != 0 {
		t.Fatal(BusBW(10, 2), BusBW(10, 4))
	}
}

func node(name string, rank int, out string) Node {
	return Node{Node: name, Rank: rank, HCAs: []string{"rocep1s0f1:1", "roceP2p1s0f1:1"}, Mapped: []string{"uverbs0", "uverbs1"}, Verbs: true, LinkGbps: 200, Output: Parse(out)}
}

func TestDecide(t *testing.T) {
	ib := proof(0, merged, 23.7)
	sock := proof(1, socketFallback, 2.9)
	twoRails := Expect{Mode: Require, RDMA: true, Rails: 2}

	v := Decide(twoRails, []Node{node("node-a", 0, ib), node("node-b", 1, ib)})
	if v.ErrType != "" || v.Transport != IB || v.Rails != 2 || v.Summary != "IB on 2 rails, 23.7 GB/s bus bandwidth" || len(v.Warnings) != 0 {
		t.Fatalf("both on IB: %+v", v)
	}

	b := node("node-b", 1, strings.Replace(sock, `"uverbs0", "uverbs1"`, "", 1))
	b.Mapped, b.MapNote = nil, "this node's policy does not map RDMA devices (rdma_devices: none)"
	v = Decide(twoRails, []Node{node("node-a", 0, ib), b})
	if v.ErrType != failure.DataPlaneDegraded || !strings.Contains(v.Err, "node-b (rank 1) is on Socket") || !strings.Contains(v.Err, "no /dev/infiniband/uverbs* device") || !strings.Contains(v.Err, "rdma_devices: none") {
		t.Fatalf("node-b on sockets: %+v", v)
	}
	if !strings.HasPrefix(v.Transport, "mixed: node-a IB, node-b Socket") {
		t.Fatalf("transport %q", v.Transport)
	}

	v = Decide(Expect{Mode: Warn, RDMA: true, Rails: 2}, []Node{b, b})
	if v.ErrType != "" || len(v.Warnings) == 0 || !strings.HasPrefix(v.Summary, "Socket: NCCL is NOT using RDMA") {
		t.Fatalf("warn mode: %+v", v)
	}

	noVerbs := node("node-b", 1, sock)
	noVerbs.Verbs = false
	if v := Decide(twoRails, []Node{noVerbs}); !strings.Contains(v.Err, "no libibverbs") {
		t.Fatalf("no verbs: %+v", v)
	}

	memlock := node("node-b", 1, roceTwoHCAs+"x [0] NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory\n"+
		`TPDEPLOY_PROOF {"event": "env", "rank": 1, "world": 2, "memlock": 8388608, "ipc_lock": false, "uverbs": ["uverbs0"]}
TPDEPLOY_PROOF {"event": "error", "rank": 1, "phase": "init", "error": "DistBackendError: unhandled system error"}`)
	if v := Decide(twoRails, []Node{memlock}); v.ErrType != failure.DataPlaneDegraded || !strings.Contains(v.Err, "memlock: RLIMIT_MEMLOCK is 8388608 bytes") {
		t.Fatalf("memlock: %+v", v)
	}

	forced := node("node-b", 1, forcedIBNoDevice)
	forced.Mapped = nil
	if v := Decide(twoRails, []Node{forced}); v.ErrType != failure.DataPlaneDegraded || !strings.Contains(v.Err, "Failed to initialize any NET plugin") {
		t.Fatalf("forced: %+v", v)
	}

	disabled := node("node-b", 1, sock)
	disabled.EnvDisables = "NCCL_IB_DISABLE=1"
	if v := Decide(twoRails, []Node{disabled}); !strings.Contains(v.Err, "its env sets NCCL_IB_DISABLE=1") {
		t.Fatalf("disabled: %+v", v)
	}

	wrongHCA := node("node-b", 1, proof(1, strings.Replace(socketFallback, "NET/IB : No device found.", "NET/IB : nothing", 1), 2.9))
	if v := Decide(twoRails, []Node{wrongHCA}); !strings.Contains(v.Err, "matches none of the HCAs") {
		t.Fatalf("wrong hca: %+v", v)
	}

	// One rail of two: a warning about the HCAs, and about the bandwidth.
	half := node("node-a", 0, proof(0, roceTwoHCAs[:strings.Index(roceTwoHCAs, "[1]")]+"[RO]; OOB x\nx [0] NCCL INFO Using network IB\n", 11.0))
	v = Decide(twoRails, []Node{half})
	if v.ErrType != "" || len(v.Warnings) != 2 || v.Rails != 1 {
		t.Fatalf("half: %+v", v)
	}

	// No RDMA planned: sockets are what was asked for.
	v = Decide(Expect{Mode: Require}, []Node{node("a", 0, sock), node("b", 1, sock)})
	if v.ErrType != "" || v.Summary != "Socket (no RDMA planned), 2.9 GB/s bus bandwidth" {
		t.Fatalf("no rdma: %+v", v)
	}

	// A collective that timed out.
	hung := node("b", 1, socketFallback+`TPDEPLOY_PROOF {"event": "error", "rank": 1, "phase": "timeout", "error": "no result after 60 s"}`)
	if v := Decide(Expect{Mode: Require}, []Node{hung}); v.ErrType != failure.DataPlaneFailed || !strings.Contains(v.Err, "failed in timeout") {
		t.Fatalf("hung: %+v", v)
	}
}

func TestProgramEmbedded(t *testing.T) {
	for _, want := range []string{"TPDEPLOY_PROOF", "init_process_group", "all_reduce", "2 * (world - 1) / world", "os._exit(3)"} {
		if !strings.Contains(Program, want) {
			t.Fatalf("proof.py lacks %q", want)
		}
	}
}

// BenchmarkParseAndDecide is the pure part's cost per deploy of two ranks.
func BenchmarkParseAndDecide(b *testing.B) {
	out := proof(0, merged+socketFallback, 23.7)
	for b.Loop() {
		n := []Node{{Node: "a", Output: Parse(out), Verbs: true, Mapped: []string{"uverbs0"}}, {Node: "b", Rank: 1, Output: Parse(out), Verbs: true, Mapped: []string{"uverbs0"}}}
		_ = Decide(Expect{Mode: Require, RDMA: true, Rails: 2}, n)
	}
}

// After launch, vLLM's own NCCL lines (with NCCL_DEBUG=INFO) are held against the proof.
func TestServingTransportAgainstTheProof(t *testing.T) {
	ib := Verdict{Transport: "IB", Rails: 2}
	for _, tc := range []struct {
		line, transport string
		warns           bool
	}{
		{"(RayWorkerProc pid=2158, ip=10.200.1.13) vm:2158:2158 [0] NCCL INFO Using network Socket", "Socket", true},
		{"vm:667:667 [0] NCCL INFO Using network IB", "IB", false},
		{"INFO 12-01 10:02:36 [api_server.py:573] Starting vLLM server on http://0.0.0.0:8000", "", false},
		{"print('Using network Socket')", "", false},
	} {
		got := ServingTransport(tc.line)
		if got != tc.transport {
			t.Errorf("%q: transport %q, want %q", tc.line, got, tc.transport)
		}
		if w := ib.Contradicts("node-b", got); (w != "") != tc.warns || tc.warns && !strings.Contains(w, "node-b uses network Socket, but the data-plane proof found IB") {
			t.Errorf("%q: warning %q, want one: %v", tc.line, w, tc.warns)
		}
	}
	if w := (Verdict{}).Contradicts("node-b", "Socket"); w != "" {
		t.Errorf("no proof ran, yet: %q", w)
	}
}

// A proof that never ran (the image has no python3) says so, not a guess about NCCL.
func TestProofThatNeverRan(t *testing.T) {
	v := Decide(Expect{Mode: "require", RDMA: true, Rails: 1}, []Node{{Node: "node-a", HCAs: []string{"mlx5_0:1"}, Mapped: []string{"uverbs0"}, Verbs: true, ExitCode: 127, Output: Parse("env: can't execute 'python3': No such file or directory\n")}})
	if v.ErrType == "" || !strings.Contains(v.Err, "the proof's program did not run (exit 127") || strings.Contains(v.Err, "NCCL_IB_HCA") {
		t.Fatalf("%+v", v)
	}
}

// TestDecidePerLink: on a ring of four the proof's ranks go round the cables; each rank's
// channel lines (`… [send] via NET/IB/…`, `… [receive] …`) give the transport per pair,
// and the summary counts the links and gives the per-hop bandwidth; a pair on sockets is
// DataPlaneDegraded naming the pair.
func TestDecidePerLink(t *testing.T) {
	ring := []string{"node-a", "node-b", "node-c", "node-d"}
	links := [][2]string{{"node-a", "node-b"}, {"node-b", "node-c"}, {"node-c", "node-d"}, {"node-d", "node-a"}}
	chans := func(rank int) string {
		n, p := (rank+1)%4, (rank+3)%4
		return "x:1:1 [0] NCCL INFO Using network IB\n" +
			"x:1:1 [0] NCCL INFO Channel 00/0 : " + itoa(rank) + "[0] -> " + itoa(n) + "[0] [send] via NET/IB/0\n" +
			"x:1:1 [0] NCCL INFO Channel 01/0 : " + itoa(p) + "[1b000] -> " + itoa(rank) + "[1b000] [receive] via NET/IB/1/GDRDMA\n"
	}
	nodes := func() []Node {
		var out []Node
		for i, n := range ring {
			out = append(out, Node{Node: n, Rank: i, HCAs: []string{"rocep1s0f0:1", "rocep1s0f1:1"}, Mapped: []string{"/dev/infiniband/uverbs0"}, Verbs: true,
				Output: Parse(chans(i) + proof(i, "", 21.7))})
		}
		return out
	}
	got := nodes()
	if p := got[1].Output.Peers; len(p) != 2 || p[0] != (Peer{Rank: 2, Transport: IB}) || p[1] != (Peer{Rank: 0, Transport: IB}) {
		t.Fatalf("node-b peers %+v, want node-c (send) and node-a (receive) on IB", p)
	}
	e := Expect{Mode: Require, RDMA: true, Links: links, Shape: "ring node-a-node-b-node-c-node-d"}
	v := Decide(e, got)
	if v.Summary != "IB on 4 links (ring node-a-node-b-node-c-node-d), 21.7 GB/s per hop" || v.ErrType != "" || len(v.Links) != 4 {
		t.Errorf("verdict %+v", v)
	}
	// node-b's channel to node-c on sockets, as Parse reads it.
	ns := nodes()
	ns[1].Output = Parse(strings.Replace(chans(1), "[send] via NET/IB/0", "[send] via NET/Socket/0", 1) + proof(1, "", 21.7))
	v = Decide(e, ns)
	if v.ErrType != "DataPlaneDegraded" || !strings.Contains(v.Err, "node-b-node-c is on Socket, not RDMA") || !strings.Contains(v.Err, "RDMA on 4 link(s)") {
		t.Errorf("a pair on sockets: %+v", v)
	}
	// A hop is one cable: 11.8 GB/s on 100 Gb/s ports is no warning, though the node's two
	// ports make 200 Gb/s; 3 GB/s is.
	hop := nodes()
	for i := range hop {
		hop[i].LinkGbps = 200
		hop[i].Output = Parse(chans(i) + proof(i, "", 11.8))
	}
	bandwidth := func(v Verdict) (out []string) {
		for _, w := range v.Warnings {
			if strings.Contains(w, "bus bandwidth") {
				out = append(out, w)
			}
		}
		return out
	}
	if w := bandwidth(Decide(e, hop)); len(w) != 0 {
		t.Errorf("a 100 Gb/s hop at 11.8 GB/s warned: %q", w)
	}
	hop[2].Output = Parse(chans(2) + proof(2, "", 3))
	if w := bandwidth(Decide(e, hop)); len(w) != 1 || !strings.Contains(w[0], "node-c: bus bandwidth 3.0 GB/s is below 50% of one planned link's 100 Gb/s") {
		t.Errorf("a slow hop: %q", w)
	}
	// A rail pair keeps today's line.
	if v := Decide(Expect{Mode: Require, RDMA: true, Rails: 2}, got[:2]); v.Summary != "IB on 0 rails, 21.7 GB/s bus bandwidth" {
		t.Errorf("rails summary %q", v.Summary)
	}
}
