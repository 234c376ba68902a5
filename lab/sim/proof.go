package main

// The data-plane proof as the lab runs it. The agent runs `python3 <proof file>` in a
// node's container (dataplane.Program: torch.distributed + one NCCL all_reduce + timed
// sizes, printing NCCL's INFO lines and its own TPDEPLOY_PROOF JSON lines). The lab has
// no GPU and no NCCL, so the simulator is python3 first on PATH and answers exactly that
// program, with the program's documented output (dataplane/proof.py's header) and NCCL's
// lines as NCCL prints them; any other program runs on the image's real interpreter. What NCCL
// chooses follows NCCL's and rdma-core's source (lab/README.md, "The data plane"):
//   - libibverbs lists a device only when its sysfs entry has a character device the
//     process can see (rdma-core: /sys/class/infiniband_verbs/uverbsN/ibdev names the HCA,
//     /dev/infiniband/uverbsN is what open_cdev opens);
//   - NCCL's IB plugin keeps ACTIVE ports matching NCCL_IB_HCA (net_ib.cc), prints `NET/IB :
//     No device found.` then `NET/IB : Using [RO]; OOB …` with none, and falls back to
//     sockets unless NCCL_NET forces IB (`Failed to initialize any NET plugin`);
//   - registering NCCL's buffers (ibv_reg_mr) needs memlock: the kernel's ib_umem_get
//     refuses pinning past RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK.
// Bandwidth is a model: RDMA at 95% of each used HCA port's sysfs rate (NVIDIA measured
// 92.57 and 97.28 Gb/s on a Spark's 100 Gb/s halves, upstream.md §9), sockets at 24% of
// the bootstrap interface's speed (the ~3 GB/s a Spark pair shows off RDMA,
// dgx-spark-playbooks#102).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// labSysfs stands for the node's /sys in a lab container (the agent's --container-sysfs).
const labSysfs = "/run/tpdeploy/sys"

func sysfsRoot() string {
	if st, err := os.Stat(labSysfs); err == nil && st.IsDir() {
		return labSysfs
	}
	return "/sys"
}

// realPython is Debian's interpreter in the lab's images (the torch base, lab/torch.go).
const realPython = "/usr/bin/python3"

// pythonMain is `python3 ARGS`: tpdeploy's data-plane proof is answered here, with NCCL's
// transport choice modelled (the lab has no GPU and no NCCL); any other program runs on
// the image's real interpreter, as it would on a node.
func pythonMain(args []string) error {
	if len(args) > 0 && filepath.Base(args[0]) == "proof.py" {
		if _, err := os.Stat(args[0]); err != nil {
			return &exitError{code: 2, msg: fmt.Sprintf("python3: can't open file %q: [Errno 2] No such file or directory", args[0])}
		}
		return proofMain()
	}
	if err := syscall.Exec(realPython, append([]string{"python3"}, args...), os.Environ()); err != nil {
		return &exitError{code: 127, msg: fmt.Sprintf("python3: the image's interpreter %s: %v", realPython, err)}
	}
	return nil
}

type proofEnv struct {
	rank, world int
	master      string
	timeout     time.Duration
	nccl        string
}

func proofSay(event string, kv map[string]any) {
	kv["event"] = event
	b, _ := json.Marshal(kv)
	emit("TPDEPLOY_PROOF " + string(b))
}

var proofHost, _ = os.Hostname()

func ncclInfo(msg string) {
	emit(fmt.Sprintf("%s:%d:%d [0] NCCL INFO %s", proofHost, os.Getpid(), os.Getpid(), msg))
}

func ncclWarn(where, msg string) {
	emit(fmt.Sprintf("%s:%d:%d [0] %s NCCL WARN %s", proofHost, os.Getpid(), os.Getpid(), where, msg))
}

// imageNCCL is the version of the NCCL library the engine loads: the version string NCCL
// compiles in (src/init.cc VERSION_STRING, "NCCL version 2.28.9+cuda13.0") in the wheel's
// nvidia/nccl/lib/libnccl.so.2 (the lab's stand-in, lab/releases.go), else the NCCL
// wheel's record ("" when neither).
func imageNCCL() string {
	if b, err := os.ReadFile(filepath.Join(distPackages, "nvidia", "nccl", "lib", "libnccl.so.2")); err == nil {
		if m := ncclVersionString.FindSubmatch(b); m != nil {
			return string(m[1])
		}
	}
	for _, n := range []string{"nvidia_nccl_cu13", "nvidia_nccl_cu12"} {
		if v, err := distVersion(n); err == nil {
			return v
		}
	}
	return ""
}

var ncclVersionString = regexp.MustCompile(`NCCL version ([0-9]+\.[0-9]+\.[0-9]+)`)

// bootstrapLine is NCCL's bootstrap line: `Bootstrap: Using` since 2.24 (src/bootstrap.cc
// at v2.24.3-1: INFO(NCCL_BOOTSTRAP, "Bootstrap: Using%s", line); measured on 2.28.9),
// `Bootstrap : Using` before (v2.23.4-1).
func bootstrapLine(ncclVersion, iface string) string {
	if ncclVersion != "" && versionBefore(ncclVersion, "2.24") {
		return "Bootstrap : Using " + iface
	}
	return "Bootstrap: Using " + iface
}

func proofFail(e proofEnv, phase, text string) error {
	proofSay("error", map[string]any{"rank": e.rank, "phase": phase, "error": text})
	return &exitError{code: 2}
}

func invalidUsage(e proofEnv) string {
	return "DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version " + e.nccl
}

func proofMain() error {
	e := proofEnv{master: envOr("TPDEPLOY_PROOF_MASTER", "127.0.0.1:29599")}
	e.rank, _ = strconv.Atoi(envOr("TPDEPLOY_PROOF_RANK", "0"))
	e.world, _ = strconv.Atoi(envOr("TPDEPLOY_PROOF_WORLD", "1"))
	secs, _ := strconv.ParseFloat(envOr("TPDEPLOY_PROOF_TIMEOUT", "120"), 64)
	e.timeout = time.Duration(secs * float64(time.Second))
	e.nccl = imageNCCL()
	torch, _ := distVersion("torch")
	var rl syscall.Rlimit
	var memlock any = "unknown"
	if syscall.Getrlimit(8 /* RLIMIT_MEMLOCK */, &rl) == nil {
		if rl.Cur == ^uint64(0) {
			memlock = "unlimited"
		} else {
			memlock = rl.Cur
		}
	}
	ipcLock := hasIPCLock()
	uverbs := visibleUVerbs()
	proofSay("env", map[string]any{"rank": e.rank, "world": e.world, "memlock": memlock, "ipc_lock": ipcLock, "uverbs": uverbs,
		"torch": torch, "nccl": e.nccl, "device": "cuda:0"})

	ifs := ncclSelect(os.Getenv("NCCL_SOCKET_IFNAME"), localInterfaces())
	if len(ifs) == 0 {
		ncclWarn("bootstrap.cc:114", "Bootstrap : no socket interface found")
		return proofFail(e, "init", invalidUsage(e))
	}
	ncclInfo(bootstrapLine(e.nccl, ifs[0].String()))
	ncclInfo("NET/Plugin: Could not find: libnccl-net.so")
	transport, hcas := "Socket", []verbsPort(nil)
	netEnv := strings.TrimSpace(os.Getenv("NCCL_NET"))
	if !strings.EqualFold(netEnv, "Socket") {
		ok := false
		if v := strings.TrimSpace(os.Getenv("NCCL_IB_DISABLE")); v == "" || v == "0" {
			hcas = filterHCAs(os.Getenv("NCCL_IB_HCA"), verbsDevices())
			if len(hcas) == 0 {
				ncclInfo("NET/IB : No device found.")
			}
			var line strings.Builder
			for i, h := range hcas {
				fmt.Fprintf(&line, " [%d]%s:%d/%s", i, h.hca, h.port, h.layer)
			}
			ncclInfo(fmt.Sprintf("NET/IB : Using%s [RO]; OOB %s", line.String(), ifs[0].String()))
			ok = len(hcas) > 0
		}
		if ok {
			ncclInfo("Initialized NET plugin IB")
			transport = "IB"
		} else {
			ncclInfo("Failed to initialize NET plugin IB")
			if strings.EqualFold(netEnv, "IB") {
				ncclWarn("plugin/net.cc:379", "Failed to initialize any NET plugin")
				return proofFail(e, "init", invalidUsage(e))
			}
		}
	}
	if transport == "Socket" {
		var using []string
		for i, f := range ifs {
			using = append(using, fmt.Sprintf("[%d]%s", i, f))
		}
		ncclInfo("NET/Socket : Using " + strings.Join(using, " "))
		ncclInfo("Initialized NET plugin Socket")
	}
	ncclInfo("Assigned NET plugin " + transport + " to comm")
	ncclInfo("Using network " + transport)

	// The link each rank can drive, GB/s (see the file's comment).
	var gbs float64
	if transport == "IB" {
		for _, h := range hcas {
			gbs += float64(h.rateMbps) / 1000 * 0.95 / 8
		}
	} else {
		speed := readInt(filepath.Join(sysfsRoot(), "class/net", ifs[0].Name, "speed"))
		if speed <= 0 {
			speed = 10000
		}
		gbs = float64(speed) / 1000 * 0.24 / 8
	}
	me := proofHello{Rank: e.rank, GBs: gbs}
	if transport == "IB" {
		me.IB, me.Key = ibPortsOf(hcas), ifs[0].Addr
	}
	res, err := rendezvous(e, me)
	if err != nil {
		return err
	}
	if transport == "IB" {
		// Connecting registers NCCL's buffers: NCCL_BUFFSIZE (4 MiB) per channel, both
		// directions, two channels per peer.
		buff := int64(4 << 20)
		if v, err := strconv.ParseInt(os.Getenv("NCCL_BUFFSIZE"), 10, 64); err == nil && v > 0 {
			buff = v
		}
		need := uint64(buff) * 2 * 2 * uint64(max(e.world-1, 1))
		if memlock != "unlimited" && !ipcLock && rl.Cur < need {
			ncclWarn("misc/ibvwrap.cc:214", "Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory")
			return proofFail(e, "init", "DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version "+e.nccl)
		}
	}
	if transport == "IB" && e.world > 1 {
		// The connections per link (fabric.go): each over the HCA whose cable reaches the
		// peer, NCCL's failure where none does; a rank whose own links connect waits for a
		// communicator another pair of which failed (NCCL has no timeout there).
		var peers []hello
		for _, p := range res.Peers {
			peers = append(peers, hello{Rank: p.Rank, IB: p.IB, IBKey: p.Key})
		}
		log := func(level, where, msg string) {
			if m, ok := strings.CutPrefix(msg, "NCCL WARN "); ok {
				ncclWarn(where, m)
				return
			}
			ncclInfo(strings.TrimPrefix(msg, "NCCL INFO "))
		}
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(e.timeout))
		err := ibConnect(ctx, e.rank, e.world, e.world, os.Getenv, me.IB, peers, log)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				proofSay("error", map[string]any{"rank": e.rank, "phase": "timeout", "error": fmt.Sprintf("no result after %.0f s (in init): a rank did not join, or the collective hangs (NCCL over sockets has no timeout)", e.timeout.Seconds())})
				return &exitError{code: 3}
			}
			return proofFail(e, "init", "DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version "+e.nccl)
		}
		bw, failed := ibHopGBs(e.world, e.world, peers, hcas)
		if failed {
			time.Sleep(e.timeout)
			proofSay("error", map[string]any{"rank": e.rank, "phase": "timeout", "error": fmt.Sprintf("no result after %.0f s (in init): a rank did not join, or the collective hangs (NCCL over sockets has no timeout)", e.timeout.Seconds())})
			return &exitError{code: 3}
		}
		if bw > 0 {
			res.GBs = bw
		}
	} else {
		for c := 0; c < 2; c++ {
			peer := (e.rank + 1) % max(e.world, 1)
			ncclInfo(fmt.Sprintf("Channel %02d/0 : %d[0] -> %d[0] [send] via NET/%s/%d", c, e.rank, peer, transport, c%max(len(hcas), 1)))
		}
	}
	n := e.world
	busbw := res.GBs
	if n <= 1 {
		busbw = 0
	}
	best := 0.0
	for _, size := range []int64{1 << 20, 16 << 20, 64 << 20, 256 << 20} {
		factor := 1.0
		if n > 1 {
			factor = 2 * float64(n-1) / float64(n)
		}
		// Smaller sizes reach less of the link (latency): 1 MiB at half.
		eff := float64(size) / (float64(size) + float64(1<<20))
		algbw := res.GBs / factor * eff
		secs := float64(size) / (algbw * 1e9)
		b := busbw * eff
		best = max(best, b)
		proofSay("size", map[string]any{"rank": e.rank, "bytes": size, "seconds": secs, "algbw_gbs": round3(algbw), "busbw_gbs": round3(b)})
	}
	expected := float64(n*(n+1)) / 2
	proofSay("result", map[string]any{"rank": e.rank, "ok": res.Sum == expected, "sum_ok": res.Sum == expected, "expected": expected, "got": res.Sum, "busbw_gbs": round3(best)})
	return nil
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func readInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return v
}

// hasIPCLock reads CAP_IPC_LOCK (bit 14) from the process's effective capabilities.
func hasIPCLock() bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<14) != 0
		}
	}
	return false
}

func visibleUVerbs() []string {
	entries, _ := os.ReadDir("/dev/infiniband")
	out := []string{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "uverbs") {
			out = append(out, e.Name())
		}
	}
	return out
}

type verbsPort struct {
	hca, layer string
	port       int
	rateMbps   int
	netdev     string // gid_attrs/ndevs/0: the port's netdev (RoCE)
}

// verbsDevices is libibverbs' device list: every /sys/class/infiniband_verbs/uverbsN whose
// character device is present, with its HCA's ACTIVE ports.
func verbsDevices() []verbsPort {
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libibverbs.so.1"); err != nil {
		return nil // NCCL cannot load libibverbs: no IB plugin
	}
	root := sysfsRoot()
	entries, _ := os.ReadDir(filepath.Join(root, "class/infiniband_verbs"))
	var out []verbsPort
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "uverbs") {
			continue
		}
		if st, err := os.Stat("/dev/infiniband/" + e.Name()); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, "class/infiniband_verbs", e.Name(), "ibdev"))
		if err != nil {
			continue
		}
		hca := strings.TrimSpace(string(b))
		ports, _ := os.ReadDir(filepath.Join(root, "class/infiniband", hca, "ports"))
		for _, p := range ports {
			port, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			dir := filepath.Join(root, "class/infiniband", hca, "ports", p.Name())
			state, _ := os.ReadFile(filepath.Join(dir, "state"))
			if !strings.Contains(string(state), "ACTIVE") {
				continue
			}
			layer := "IB"
			if ll, _ := os.ReadFile(filepath.Join(dir, "link_layer")); strings.TrimSpace(string(ll)) == "Ethernet" {
				layer = "RoCE"
			}
			rate, _ := os.ReadFile(filepath.Join(dir, "rate"))
			mbps := 0
			if f := strings.Fields(string(rate)); len(f) > 0 {
				v, _ := strconv.ParseFloat(f[0], 64)
				mbps = int(v * 1000)
			}
			ndev, _ := os.ReadFile(filepath.Join(dir, "gid_attrs/ndevs/0"))
			out = append(out, verbsPort{hca: hca, port: port, layer: layer, rateMbps: mbps, netdev: strings.TrimSpace(string(ndev))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].hca < out[j].hca })
	return out
}

// filterHCAs applies NCCL_IB_HCA: entries `hca[:port]`, prefixes unless `=`, `^` to exclude.
func filterHCAs(spec string, devs []verbsPort) []verbsPort {
	if spec == "" {
		return devs
	}
	exclude := strings.HasPrefix(spec, "^")
	spec = strings.TrimPrefix(spec, "^")
	exact := strings.HasPrefix(spec, "=")
	spec = strings.TrimPrefix(spec, "=")
	match := func(d verbsPort) bool {
		for _, ent := range strings.Split(spec, ",") {
			name, port, hasPort := strings.Cut(strings.TrimSpace(ent), ":")
			if name == "" {
				continue
			}
			if (exact && d.hca != name) || (!exact && !strings.HasPrefix(d.hca, name)) {
				continue
			}
			if hasPort && port != strconv.Itoa(d.port) {
				continue
			}
			return true
		}
		return false
	}
	var out []verbsPort
	for _, d := range devs {
		if match(d) != exclude {
			out = append(out, d)
		}
	}
	return out
}

type proofResult struct {
	Sum float64 `json:"sum"`
	GBs float64 `json:"gbs"`
	// Peers are every rank's hello, in rank order (the IB ports per link, fabric.go).
	Peers []proofHello `json:"peers,omitempty"`
}

type proofHello struct {
	Rank int      `json:"rank"`
	GBs  float64  `json:"gbs"`
	IB   []ibPort `json:"ib,omitempty"`
	Key  string   `json:"key,omitempty"`
}

// rendezvous is the store and the all_reduce over real sockets: rank 0 listens on the
// master address, every other rank dials it from its own network namespace and sends
// rank+1; rank 0 answers with the sum and the slowest rank's link (the collective runs at
// the slowest link). A rank that never comes ends in the program's watchdog error.
func rendezvous(e proofEnv, me proofHello) (proofResult, error) {
	gbs := me.GBs
	deadline := time.Now().Add(e.timeout)
	timeoutErr := func() error {
		proofSay("error", map[string]any{"rank": e.rank, "phase": "timeout", "error": fmt.Sprintf("no result after %.0f s (in init): a rank did not join, or the collective hangs (NCCL over sockets has no timeout)", e.timeout.Seconds())})
		return &exitError{code: 3}
	}
	if e.world <= 1 {
		return proofResult{Sum: 1, GBs: gbs, Peers: []proofHello{me}}, nil
	}
	if e.rank == 0 {
		_, port, _ := net.SplitHostPort(e.master)
		l, err := net.Listen("tcp", ":"+port)
		if err != nil {
			return proofResult{}, proofFail(e, "init", "DistNetworkError: The server socket has failed to listen on any local network address. port: "+port+", useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")
		}
		defer l.Close()
		sum, slow := 1.0, gbs
		peers := []proofHello{me}
		var conns []net.Conn
		for len(conns) < e.world-1 {
			_ = l.(*net.TCPListener).SetDeadline(deadline)
			c, err := l.Accept()
			if err != nil {
				return proofResult{}, timeoutErr()
			}
			var h proofHello
			_ = c.SetDeadline(deadline)
			if err := json.NewDecoder(c).Decode(&h); err != nil {
				c.Close()
				continue
			}
			sum += float64(h.Rank + 1)
			slow = min(slow, h.GBs)
			peers = append(peers, h)
			conns = append(conns, c)
		}
		sort.Slice(peers, func(i, j int) bool { return peers[i].Rank < peers[j].Rank })
		res := proofResult{Sum: sum, GBs: slow, Peers: peers}
		for _, c := range conns {
			_ = json.NewEncoder(c).Encode(res)
			c.Close()
		}
		return res, nil
	}
	for {
		c, err := net.DialTimeout("tcp", e.master, time.Second)
		if err == nil {
			_ = c.SetDeadline(deadline)
			var res proofResult
			err = json.NewEncoder(c).Encode(me)
			if err == nil {
				err = json.NewDecoder(c).Decode(&res)
			}
			c.Close()
			if err == nil {
				return res, nil
			}
		}
		if time.Now().After(deadline) {
			return proofResult{}, timeoutErr()
		}
		time.Sleep(300 * time.Millisecond)
	}
}
