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

// The distributed init of a vLLM engine over Ray, on real sockets: the c10d TCP store at
// the driver's address, NCCL bootstrap over the interfaces NCCL_SOCKET_IFNAME selects on
// each rank's own node, a Gloo mesh over GLOO_SOCKET_IFNAME, then one NCCL connection per
// rank that carries collectives and, like NCCL over sockets, has no timeout of its own.

const ncclVersion = "2.28.9"

// rankSpec is the task vLLM hands a remote RayWorkerWrapper.
type rankSpec struct {
	Job     string        `json:"job"`
	Rank    int           `json:"rank"`
	World   int           `json:"world"`
	LoadFor time.Duration `json:"load_for"`
	// Model is the model path every rank loads from its own node's disk.
	Model string `json:"model"`
	// V2 marks a RayWorkerProc of RayExecutorV2 (lab/sim/rayv2.go); the rest describe
	// what the driver hands it: its node (for Ray's log prefix), the model's size and the
	// store timeout (rank 0 hosts the store).
	V2           bool          `json:"v2,omitempty"`
	DriverNode   string        `json:"driver_node,omitempty"`
	Shards       int           `json:"shards,omitempty"`
	ShardTime    time.Duration `json:"shard_time,omitempty"`
	StoreTimeout time.Duration `json:"store_timeout,omitempty"`
}

// errReported is a rank failure already logged in the rank's own words.
var errReported = errors.New("reported")

// initSpec is what the driver tells its workers for init_device.
type initSpec struct {
	InitMethod   string        `json:"init_method"` // tcp://host:port
	StoreTimeout time.Duration `json:"store_timeout"`
}

// hello is what each rank tells rank 0 through the store.
type hello struct {
	Rank    int    `json:"rank"`
	NodeIP  string `json:"node_ip"`
	NCCL    string `json:"nccl"`     // bootstrap listener, ip:port
	NCCLIfs int    `json:"nccl_ifs"` // interfaces NCCL's socket transport would use
	Gloo    string `json:"gloo"`     // ip:port
	Err     string `json:"err"`      // set when the rank cannot go on
}

type peerTable struct {
	Peers []hello `json:"peers"`
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

// dialStore connects a rank to the c10d store, retrying as torch 2.11 does until the
// store timeout, and returns torch's error text when it gives up.
func dialStore(ctx context.Context, host, port string, timeout time.Duration, log rankLog) (net.Conn, error) {
	deadline := time.Now().Add(timeout)
	addr := net.JoinHostPort(host, port)
	var last error
	for try := 0; ; try++ {
		c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		last = err
		n, text := strerror(err)
		if n == 111 {
			log("WARNING", "socket.cpp:813", fmt.Sprintf("[c10d] No socket on (%s, %s) is listening yet, will retry.", host, port))
		} else {
			log("WARNING", "socket.cpp:879", fmt.Sprintf("[c10d] The client socket has failed to connect to any network address of (%s, %s). The client socket has failed to connect to %s:%s (errno: %d - %s).", host, port, host, port, n, text))
			log("WARNING", "socket.cpp:921", fmt.Sprintf("[c10d] TCP client failed to connect/validate to host %s:%s - retrying (try=%d, timeout=%dms, delay=%dms)", host, port, try, timeout.Milliseconds(), 500))
		}
		if time.Now().Add(500*time.Millisecond).After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	n, text := strerror(last)
	if n == 111 || n == 110 {
		return nil, fmt.Errorf("torch.distributed.DistNetworkError: The client socket has timed out after %ds while trying to connect to (%s, %s).", int(timeout.Seconds()), host, port)
	}
	return nil, fmt.Errorf("torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of (%s, %s). The client socket has failed to connect to %s:%s (errno: %d - %s).", host, port, host, port, n, text)
}

// endpoints are a rank's NCCL and Gloo listeners on its own node.
type endpoints struct {
	ifs        []netIf
	nccl, gloo net.Listener
}

func (e *endpoints) Close() {
	if e.nccl != nil {
		e.nccl.Close()
	}
	if e.gloo != nil {
		e.gloo.Close()
	}
}

// openEndpoints resolves NCCL's and Gloo's interfaces from env on this node and listens on
// them, logging what NCCL and Gloo log. The error is the exception the rank raises.
func openEndpoints(env func(string) string, log rankLog) (*endpoints, error) {
	all := localInterfaces()
	e := &endpoints{ifs: ncclSelect(env("NCCL_SOCKET_IFNAME"), all)}
	if len(e.ifs) == 0 {
		log("WARNING", "bootstrap.cc:114", "NCCL WARN Bootstrap : no socket interface found")
		return nil, fmt.Errorf("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3135, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version %s", ncclVersion)
	}
	log("INFO", "bootstrap.cc:102", "NCCL INFO "+bootstrapLine(imageNCCL(), e.ifs[0].String()))
	var using []string
	for i, f := range e.ifs {
		using = append(using, fmt.Sprintf("[%d]%s", i, f))
	}
	log("INFO", "net_socket.cc:94", "NCCL INFO NET/Socket : Using "+strings.Join(using, " "))
	var err error
	if e.nccl, err = net.Listen("tcp", net.JoinHostPort(e.ifs[0].Addr, "0")); err != nil {
		return nil, fmt.Errorf("torch.distributed.DistBackendError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version %s: %v", ncclVersion, err)
	}
	gaddr, missing, set := glooSelect(env("GLOO_SOCKET_IFNAME"), all)
	if missing != "" {
		e.Close()
		return nil, fmt.Errorf("RuntimeError: [../third_party/gloo/gloo/transport/tcp/device.cc:88] Unable to find address for: %s", missing)
	}
	if !set {
		log("WARNING", "ProcessGroupGloo.cpp:759", "Unable to resolve hostname to a (local) address. Using the loopback address as fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME.")
	}
	if e.gloo, err = net.Listen("tcp", net.JoinHostPort(gaddr, "0")); err != nil {
		e.Close()
		return nil, fmt.Errorf("RuntimeError: Gloo listen on %s: %v", gaddr, err)
	}
	go acceptAndHold(e.gloo)
	return e, nil
}

// acceptAndHold accepts Gloo pair connections and keeps them open.
func acceptAndHold(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { _, _ = bufio.NewReader(c).ReadString(0); c.Close() }()
	}
}

// glooMesh dials every other rank's Gloo address, as connectFullMesh does.
func glooMesh(me int, peers []hello) error {
	for _, p := range peers {
		if p.Rank == me {
			continue
		}
		c, err := net.DialTimeout("tcp", p.Gloo, 2*time.Second)
		if err != nil {
			_, text := strerror(err)
			host, port, _ := net.SplitHostPort(p.Gloo)
			return fmt.Errorf("RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:152] timed out connecting: SO_ERROR: %s, remote=[%s]:%s", text, host, port)
		}
		c.Close()
	}
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
		log("WARNING", "socket.cc:484", fmt.Sprintf("NCCL WARN Net : Connect to %s<%s> failed : %s", host, port, text))
		return nil, fmt.Errorf("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3135, remote process exited or there was a network error, NCCL version %s", ncclVersion)
	}
	return c, nil
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
	log := func(level, where, msg string) {
		line := fmt.Sprintf("%s %s %s [%s] %s", prefix, level, time.Now().Format("01-02 15:04:05"), where, msg)
		mu.Lock()
		defer mu.Unlock()
		emit(line)
		_ = gc.call(ctx, "POST", "/v1/logs", map[string]string{"job": rs.Job, "line": line}, nil)
	}
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	getenv := func(k string) string { return env[k] }
	if err := remoteRank(ctx, gc, rs, env, getenv, log); err != nil && ctx.Err() == nil && !errors.Is(err, errReported) {
		log("ERROR", "worker_base.py:620", "Error executing method 'init_device'. This might cause deadlock in distributed execution.")
		log("ERROR", "worker_base.py:621", err.Error())
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

func remoteRank(ctx context.Context, gc *gcsClient, rs rankSpec, env map[string]string, getenv func(string) string, log rankLog) error {
	// vLLM's get_ip() in the worker: VLLM_HOST_IP, else the route to 8.8.8.8, else 0.0.0.0.
	ip := getenv("VLLM_HOST_IP")
	if ip == "" {
		var err error
		if ip, err = routeSource("8.8.8.8:80"); err != nil {
			ip = "0.0.0.0"
			log("WARNING", "network_utils.py:64", "Failed to get the IP address, using 0.0.0.0 by default.The value can be set by the environment variable VLLM_IP or HOST_IP.")
		}
	}
	if err := gc.call(ctx, "POST", "/v1/results", map[string]any{"job": rs.Job, "key": "ip", "value": ip}, nil); err != nil {
		return err
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
			log("WARNING", "system_utils.py:64", fmt.Sprintf("Overwriting environment variable %s from '%s' to '%s'", k, old, copied[k]))
		}
		env[k] = copied[k]
	}
	return joinAndLoad(ctx, gc, rs, ip, getenv, log)
}

// joinAndLoad is a worker rank after its environment is set: init_device (the group at the
// driver's init method), then load_model from this node's disk, then collectives.
func joinAndLoad(ctx context.Context, gc *gcsClient, rs rankSpec, ip string, getenv func(string) string, log rankLog) error {
	var in initSpec
	if err := result(ctx, gc, rs.Job, "init", &in); err != nil {
		return err
	}
	hostPort := strings.TrimPrefix(in.InitMethod, "tcp://")
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return fmt.Errorf("ValueError: bad init method %q", in.InitMethod)
	}
	store, ep, c, err := joinGroup(ctx, rs.Rank, rs.World, host, port, in.StoreTimeout, ip, getenv, log)
	if err != nil {
		return err
	}
	defer store.Close()
	defer ep.Close()
	defer c.Close()
	// load_model reads this node's copy of the weights: a shard missing here fails this
	// rank, and the driver raises the rank's exception (Ray's ray.get of execute_method).
	if err := checkWeights(rs.Model, log); err != nil {
		log("ERROR", "worker_base.py:621", err.Error())
		_ = gc.call(ctx, "POST", "/v1/results", map[string]any{"job": rs.Job, "key": "loaded", "value": err.Error()}, nil)
		return errReported
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(rs.LoadFor):
	}
	log("INFO", "default_loader.py:267", fmt.Sprintf("Loading weights took %.2f seconds", rs.LoadFor.Seconds()))
	if err := gc.call(ctx, "POST", "/v1/results", map[string]any{"job": rs.Job, "key": "loaded", "value": rs.Rank}, nil); err != nil {
		return err
	}
	return answerCollectives(ctx, c, log)
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

// joinGroup is a rank's side of torch.distributed's init over tcp://host:port: it dials
// the c10d store (rank 0 hosts it), says hello, receives the peer table, connects the Gloo
// mesh and its NCCL connection to rank 0. The store connection stays open: it carries the
// rank's load result back to rank 0.
func joinGroup(ctx context.Context, rank, world int, host, port string, timeout time.Duration, ip string, getenv func(string) string, log rankLog) (store net.Conn, ep *endpoints, nccl net.Conn, err error) {
	log("DEBUG", "parallel_state.py:1104", fmt.Sprintf("world_size=%d rank=%d local_rank=0 distributed_init_method=tcp://%s backend=nccl", world, rank, net.JoinHostPort(host, port)))
	store, err = dialStore(ctx, host, port, timeout, log)
	if err != nil {
		return nil, nil, nil, err
	}
	fail := func(err error) (net.Conn, *endpoints, net.Conn, error) {
		store.Close()
		if ep != nil {
			ep.Close()
		}
		return nil, nil, nil, err
	}
	ep, err = openEndpoints(getenv, log)
	enc := json.NewEncoder(store)
	if err != nil {
		_ = enc.Encode(hello{Rank: rank, Err: err.Error()})
		return fail(err)
	}
	me := hello{Rank: rank, NodeIP: ip, NCCL: ep.nccl.Addr().String(), NCCLIfs: len(ep.ifs), Gloo: ep.gloo.Addr().String()}
	if err := enc.Encode(me); err != nil {
		return fail(storeRecvError(0))
	}
	var table peerTable
	if err := json.NewDecoder(bufio.NewReader(store)).Decode(&table); err != nil {
		return fail(storeRecvError(0))
	}
	if err := glooMesh(rank, table.Peers); err != nil {
		return fail(err)
	}
	if ncclCountMismatch(len(ep.ifs), table.Peers) {
		return fail(ncclCountError(len(ep.ifs), log))
	}
	c, err := dialNCCL(ctx, ep.ifs[0].Addr, table.Peers[0].NCCL, log)
	if err != nil {
		return fail(err)
	}
	return store, ep, c, nil
}

func storeRecvError(rank int) error {
	return errors.New("torch.distributed.DistStoreError: store->get('" + strconv.Itoa(rank) + "') got error: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?")
}
