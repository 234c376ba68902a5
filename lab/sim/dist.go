package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The distributed init of a vLLM engine: torch's own c10d TCPStore rendezvous and Gloo
// process group, run for real by each rank's torch process (torchrank.go), then the
// simulated NCCL: bootstrap over the interfaces NCCL_SOCKET_IFNAME selects on each rank's
// own node (from the rank's real environment), then one NCCL connection per rank that
// carries collectives and, like NCCL over sockets, has no timeout of its own.

const ncclVersion = "2.28.9"

// rankSpec is the task vLLM hands a remote RayWorkerWrapper.
type rankSpec struct {
	Job     string        `json:"job"`
	Rank    int           `json:"rank"`
	World   int           `json:"world"`
	LoadFor time.Duration `json:"load_for"`
	// Model is the model path every rank loads from its own node's disk.
	Model string `json:"model"`
	// TP is the tensor-parallel size (vLLM's communicators: fabric.go commGroupsOf).
	TP int `json:"tp,omitempty"`
	// V2 marks a RayWorkerProc of RayExecutorV2 (lab/sim/rayv2.go); the rest describe
	// what the driver hands it: its node (for Ray's log prefix), the model's size and the
	// store timeout (rank 0 hosts the store).
	V2           bool          `json:"v2,omitempty"`
	DriverNode   string        `json:"driver_node,omitempty"`
	Shards       int           `json:"shards,omitempty"`
	ShardTime    time.Duration `json:"shard_time,omitempty"`
	StoreTimeout time.Duration `json:"store_timeout,omitempty"`
	// GPUMemoryUtilization is the engine's --gpu-memory-utilization: every worker gets the
	// whole VllmConfig and sizes its own KV cache from its cache_config (vLLM's
	// gpu_worker.py determine_available_memory); 0 is vLLM's default.
	GPUMemoryUtilization float64 `json:"gpu_memory_utilization,omitempty"`
}

// errReported is a rank failure already logged in the rank's own words.
var errReported = errors.New("reported")

// initSpec is what the driver tells its workers for init_device.
type initSpec struct {
	InitMethod   string        `json:"init_method"` // tcp://host:port
	StoreTimeout time.Duration `json:"store_timeout"`
}

// hello is what each rank's simulated NCCL needs of the others; the ranks' torch processes
// all_gather it over their real Gloo group.
type hello struct {
	Rank    int    `json:"rank"`
	NodeIP  string `json:"node_ip"`
	NCCL    string `json:"nccl"`     // bootstrap listener, ip:port
	NCCLIfs int    `json:"nccl_ifs"` // interfaces NCCL's socket transport would use
	Err     string `json:"err"`      // set when the rank's NCCL cannot start
	// IB are the HCA ports the rank's NCCL would use (none: sockets) and IBKey names its
	// node, for the IB connections per link (fabric.go).
	IB    []ibPort `json:"ib,omitempty"`
	IBKey string   `json:"ib_key,omitempty"`
}

// strerror is C's text for the errnos a connect can return (Python prints these).
func strerror(err error) (int, string) {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENETUNREACH:
			return 101, "Network is unreachable"
		case syscall.ECONNREFUSED:
			return 111, "Connection refused"
		case syscall.EHOSTUNREACH:
			return 113, "No route to host"
		case syscall.ETIMEDOUT:
			return 110, "Connection timed out"
		case syscall.EADDRNOTAVAIL:
			return 99, "Cannot assign requested address"
		}
		return int(errno), errno.Error()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return 110, "Connection timed out"
	}
	return 0, err.Error()
}

// rankLog is where a rank's lines go: a remote rank's to its own stdout and, prefixed as
// Ray does, to the driver through the GCS.
type rankLog func(level, where, msg string)

// endpoints are a rank's simulated NCCL on its own node: the interfaces NCCL_SOCKET_IFNAME
// selects and the bootstrap listener on the first.
type endpoints struct {
	ifs  []netIf
	ib   []ibPort
	nccl net.Listener
	err  error
}

func (e *endpoints) Close() {
	if e != nil && e.nccl != nil {
		e.nccl.Close()
	}
}

// acceptAndHold accepts connections and keeps them open until the peer closes.
func acceptAndHold(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { _, _ = bufio.NewReader(c).ReadString(0); c.Close() }()
	}
}

// ncclEndpoints selects NCCL's interfaces from the rank's env on this node and listens on
// the first; nothing is logged until the NCCL phase (ncclStart), after torch's group is up,
// as vLLM's PyNcclCommunicator comes after the Gloo group.
func ncclEndpoints(getenv func(string) string) *endpoints {
	e := &endpoints{ifs: ncclSelect(getenv("NCCL_SOCKET_IFNAME"), localInterfaces()), ib: ncclIBPorts(getenv)}
	if len(e.ifs) == 0 {
		return e
	}
	var err error
	if e.nccl, err = net.Listen("tcp", net.JoinHostPort(e.ifs[0].Addr, "0")); err != nil {
		e.err = fmt.Errorf("torch.distributed.DistBackendError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version %s: %v", ncclVersion, err)
	}
	return e
}

func (e *endpoints) hello(rank int, ip string) hello {
	h := hello{Rank: rank, NodeIP: ip, NCCLIfs: len(e.ifs), IB: e.ib, IBKey: ip}
	switch {
	case len(e.ifs) == 0:
		h.Err = "no socket interface"
	case e.err != nil:
		h.Err = e.err.Error()
	default:
		h.NCCL = e.nccl.Addr().String()
	}
	return h
}

// ncclStart is the NCCL phase's start on a rank: NCCL's interface lines, or its failure.
func (e *endpoints) ncclStart(log rankLog) error {
	if len(e.ifs) == 0 {
		log("WARNING", "bootstrap.cc:114", "NCCL WARN Bootstrap : no socket interface found")
		return fmt.Errorf("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3135, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version %s", ncclVersion)
	}
	if e.err != nil {
		return e.err
	}
	log("INFO", "bootstrap.cc:121", "NCCL INFO "+bootstrapLine(ncclVersion, e.ifs[0].String()))
	if len(e.ib) > 0 {
		var line strings.Builder
		for i, p := range e.ib {
			fmt.Fprintf(&line, " [%d]%s:%d/RoCE", i, p.HCA, max(p.Port, 1))
		}
		log("INFO", "net_ib.cc:0", fmt.Sprintf("NCCL INFO NET/IB : Using%s [RO]; OOB %s", line.String(), e.ifs[0]))
		log("INFO", "init.cc:0", "NCCL INFO Using network IB")
		return nil
	}
	var using []string
	for i, f := range e.ifs {
		using = append(using, fmt.Sprintf("[%d]%s", i, f))
	}
	log("INFO", "net_socket.cc:94", "NCCL INFO NET/Socket : Using "+strings.Join(using, " "))
	return nil
}

// ncclCountMismatch reproduces the measured failure when ranks see different numbers of
// socket interfaces: the rank with fewer fails, the others wait for it forever.
func ncclCountMismatch(mine int, peers []hello) bool {
	for _, p := range peers {
		if p.NCCLIfs > mine {
			return true
		}
	}
	return false
}

func ncclCountError(mine int, log rankLog) error {
	log("WARNING", "net_socket.cc:372", fmt.Sprintf("NCCL WARN NET/Socket : ncclNetSocketListen dev=%d ncclNetIfs=%d", mine, mine))
	return fmt.Errorf("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3135, internal error - please report this issue to the NCCL developers, NCCL version %s", ncclVersion)
}

// dialNCCL connects from this rank's bootstrap interface to a peer's NCCL listener.
func dialNCCL(ctx context.Context, local string, peer string, log rankLog) (net.Conn, error) {
	d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.DialContext(ctx, "tcp", peer)
	if err != nil {
		_, text := strerror(err)
		host, port, _ := net.SplitHostPort(peer)
		// NCCL 2.27/2.28 src/misc/socket.cc socketConnectCheck, called by socketStartConnect:
		// WARN("%s: connect to %s failed : %s", funcName, ...) (2.24: "Connect to").
		log("WARNING", "misc/socket.cc:596", fmt.Sprintf("NCCL WARN socketStartConnect: connect to %s<%s> failed : %s", host, port, text))
		return nil, fmt.Errorf("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3135, remote process exited or there was a network error, NCCL version %s", ncclVersion)
	}
	return c, nil
}

// rankOut is where a rank's output goes: log for the lines the simulator writes in vLLM's
// and NCCL's words, raw for the lines of its torch process as they are.
type rankOut struct {
	log rankLog
	raw func(string)
}

// runRemoteRank is one RayWorkerWrapper on a worker node: it runs inside the node's Ray
// container, so every socket it opens is in that node's network namespace and its
// environment is that container's, overwritten by what the driver copies to it.
func runRemoteRank(ctx context.Context, gc *gcsClient, rs rankSpec, nodeID, nodeIP string) {
	if rs.V2 {
		runV2Rank(ctx, gc, rs, nodeID, nodeIP)
		return
	}
	prefix := fmt.Sprintf("(RayWorkerWrapper pid=%d, ip=%s)", os.Getpid()+rs.Rank, nodeIP)
	var mu sync.Mutex
	out := func(line string) {
		line = prefix + " " + line
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
	if err := remoteRank(ctx, gc, rs, env, rankOut{log, out}); err != nil && ctx.Err() == nil && !errors.Is(err, errReported) {
		log("ERROR", "worker_base.py:620", "Error executing method 'init_device'. This might cause deadlock in distributed execution.")
		if text, printed := exceptionText(err); !printed {
			log("ERROR", "worker_base.py:621", text)
		}
	}
}

// result waits for the driver's value under key.
func result(ctx context.Context, gc *gcsClient, job, key string, v any) error {
	for ctx.Err() == nil {
		var vals []json.RawMessage
		if err := gc.call(ctx, "GET", "/v1/results?job="+job+"&key="+key+"&n=1", nil, &vals); err == nil && len(vals) > 0 {
			return json.Unmarshal(vals[0], v)
		}
	}
	return ctx.Err()
}

func remoteRank(ctx context.Context, gc *gcsClient, rs rankSpec, env map[string]string, o rankOut) error {
	// vLLM's get_ip() in the worker: VLLM_HOST_IP, else the route to 8.8.8.8, else 0.0.0.0.
	ip := env["VLLM_HOST_IP"]
	if ip == "" {
		var err error
		if ip, err = routeSource("8.8.8.8:80"); err != nil {
			ip = "0.0.0.0"
			o.raw(getIPWarning)
		}
	}
	if err := gc.call(ctx, "POST", "/v1/results", map[string]any{"job": rs.Job, "key": "ip", "value": workerIP{Created: rs.Rank, IP: ip}}, nil); err != nil {
		return err
	}
	// adjust_rank: the rank the driver's sort gives this worker (vllm.go rerank) is the one
	// it joins the group with.
	var mapping map[int]int
	if err := result(ctx, gc, rs.Job, "rerank", &mapping); err != nil {
		return err
	}
	if r, ok := mapping[rs.Rank]; ok {
		rs.Rank = r
	}
	var copied map[string]string
	if err := result(ctx, gc, rs.Job, "env", &copied); err != nil {
		return err
	}
	keys := make([]string, 0, len(copied))
	for k := range copied {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if old, ok := env[k]; ok && old != copied[k] {
			o.log("WARNING", "system_utils.py:64", fmt.Sprintf("Overwriting environment variable %s from '%s' to '%s'", k, old, copied[k]))
		}
		env[k] = copied[k]
	}
	return joinAndLoad(ctx, gc, rs, ip, env, o)
}

// joinAndLoad is a worker rank after its environment is set: init_device (the group at the
// driver's init method), then load_model from this node's disk, then collectives.
func joinAndLoad(ctx context.Context, gc *gcsClient, rs rankSpec, ip string, env map[string]string, o rankOut, initialized ...func()) error {
	var in initSpec
	if err := result(ctx, gc, rs.Job, "init", &in); err != nil {
		return err
	}
	g, err := joinGroup(ctx, rs.Rank, rs.World, rs.TP, in.InitMethod, in.StoreTimeout, ip, env, o, nil)
	if err != nil {
		return err
	}
	defer g.Close()
	for _, f := range initialized {
		f()
	}
	// load_model reads this node's copy of the weights: a shard missing here fails this
	// rank, and the driver raises the rank's exception (Ray's ray.get of execute_method).
	if err := checkWeights(rs.Model, o.log); err != nil {
		o.log("ERROR", "worker_base.py:621", err.Error())
		_ = gc.call(ctx, "POST", "/v1/results", map[string]any{"job": rs.Job, "key": "loaded", "value": err.Error()}, nil)
		return errReported
	}
	// The weights' share, then the KV cache its own cache_config asks for (memory.go).
	w := newWeightLoad(rs.Model, rs.World, 1)
	w.all()
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(rs.LoadFor):
	}
	if err := w.kvCache(rs.GPUMemoryUtilization, o.log); err != nil {
		o.log("ERROR", "worker_base.py:621", err.Error())
		_ = gc.call(ctx, "POST", "/v1/results", map[string]any{"job": rs.Job, "key": "loaded", "value": err.Error()}, nil)
		return errReported
	}
	o.log("INFO", "default_loader.py:267", fmt.Sprintf("Loading weights took %.2f seconds", rs.LoadFor.Seconds()))
	if err := gc.call(ctx, "POST", "/v1/results", map[string]any{"job": rs.Job, "key": "loaded", "value": rs.Rank}, nil); err != nil {
		return err
	}
	return answerCollectives(ctx, g.nccl, o.log)
}

// answerCollectives echoes rank 0's collectives until the job ends; no deadline, as NCCL
// over sockets has none. A peer that goes away is NCCL's "remote process exited".
func answerCollectives(ctx context.Context, c net.Conn, log rankLog) error {
	go func() { <-ctx.Done(); c.Close() }()
	b := make([]byte, 1)
	for {
		if _, err := c.Read(b); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log("WARNING", "socket.cc:540", "NCCL WARN socketProgress: Connection closed by remote peer "+strings.ReplaceAll(c.RemoteAddr().String(), ":", "<")+">")
			return fmt.Errorf("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3135, remote process exited or there was a network error, NCCL version %s", ncclVersion)
		}
		if _, err := c.Write(b); err != nil {
			return nil
		}
	}
}

// group is a rank's share of the process group: its torch process (the real store and
// Gloo group), its simulated NCCL endpoints, the peers' hellos and, on a rank other than 0,
// its NCCL connection to rank 0.
type group struct {
	torch *torchProc
	ep    *endpoints
	peers []hello
	nccl  net.Conn
}

func (g *group) Close() {
	if g.nccl != nil {
		g.nccl.Close()
	}
	g.ep.Close()
	g.torch.Close()
}

// joinGroup is a rank's torch.distributed init at init (tcp://host:port, or store://host
// for RayExecutorV2's rank 0, which reports the method it made through onInit): the real
// rendezvous and Gloo group in the rank's torch process with the rank's environment, then
// the simulated NCCL: its interface lines, and on ranks other than 0 the connection to
// rank 0. Rank 0 accepts its peers' connections itself (acceptPeers).
func joinGroup(ctx context.Context, rank, world, tp int, init string, timeout time.Duration, ip string, env map[string]string, o rankOut, lost func() error, onInit ...func(string)) (*group, error) {
	getenv := func(k string) string { return env[k] }
	if !strings.HasPrefix(init, "store://") {
		o.log("DEBUG", "parallel_state.py:1104", fmt.Sprintf("world_size=%d rank=%d local_rank=0 distributed_init_method=%s backend=nccl", world, rank, init))
	}
	ep := ncclEndpoints(getenv)
	run := torchRun{Rank: rank, World: world, Init: init, Timeout: timeout, Env: environ(env), Hello: ep.hello(rank, ip), Raw: o.raw, Lost: lost}
	if len(onInit) > 0 {
		run.OnInit = onInit[0]
	}
	proc, peers, err := runTorch(ctx, run)
	if err != nil {
		ep.Close()
		return nil, err
	}
	g := &group{torch: proc, ep: ep, peers: peers}
	fail := func(err error) (*group, error) {
		g.Close()
		return nil, err
	}
	if err := ep.ncclStart(o.log); err != nil {
		return fail(err)
	}
	if len(ep.ib) == 0 && ncclCountMismatch(len(ep.ifs), peers) {
		return fail(ncclCountError(len(ep.ifs), o.log))
	}
	if err := ibConnect(ctx, rank, world, tp, getenv, ep.ib, peers, o.log); err != nil {
		return fail(err)
	}
	if rank == 0 {
		return g, nil
	}
	if len(peers) == 0 || peers[0].NCCL == "" {
		// Rank 0's NCCL did not start: this rank waits for rank 0's NCCL unique ID, which
		// never comes (measured with torch's ProcessGroupNCCL, upstream.md §6).
		return fail(storeRecvError(0))
	}
	if g.nccl, err = dialNCCL(ctx, ep.ifs[0].Addr, peers[0].NCCL, o.log); err != nil {
		return fail(err)
	}
	return g, nil
}

// acceptPeers is rank 0's side of the NCCL connections: every other rank connects; one
// that never does (its NCCL failed) leaves rank 0 waiting, as NCCL's bootstrap does.
func (g *group) acceptPeers(world int) ([]net.Conn, error) {
	var conns []net.Conn
	for len(conns) < world-1 {
		c, err := g.ep.nccl.Accept()
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func storeRecvError(rank int) error {
	return errors.New("torch.distributed.DistStoreError: store->get('" + strconv.Itoa(rank) + "') got error: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?")
}
