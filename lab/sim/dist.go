package main

import (
	"bufio"
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

// The distributed init of a vLLM engine over Ray, on real sockets: the c10d TCP store at
// the driver's address, NCCL bootstrap over the interfaces NCCL_SOCKET_IFNAME selects on
// each rank's own node, a Gloo mesh over GLOO_SOCKET_IFNAME, then a liveness channel per
// rank (standing in for NCCL's connections) that notices a lost rank in seconds.

const ncclVersion = "2.28.9"

// rankSpec is the task vLLM hands a remote RayWorkerWrapper.
type rankSpec struct {
	Job          string            `json:"job"`
	Rank         int               `json:"rank"`
	World        int               `json:"world"`
	InitMethod   string            `json:"init_method"` // tcp://host:port
	VLLMEnv      map[string]string `json:"vllm_env"`    // vLLM forwards only VLLM_* (and HF_TOKEN)
	StoreTimeout time.Duration     `json:"store_timeout"`
	LoadFor      time.Duration     `json:"load_for"`
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
	log("INFO", "bootstrap.cc:102", "NCCL INFO Bootstrap : Using "+e.ifs[0].String())
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

// liveness exchanges a byte every half second on c and reports when the peer goes
// silent for 3 s or the connection breaks.
func liveness(ctx context.Context, c net.Conn) error {
	errc := make(chan error, 2)
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				errc <- nil
				return
			case <-t.C:
			}
			_ = c.SetWriteDeadline(time.Now().Add(3 * time.Second))
			if _, err := c.Write([]byte{'.'}); err != nil {
				errc <- err
				return
			}
		}
	}()
	go func() {
		b := make([]byte, 64)
		for {
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := c.Read(b); err != nil {
				errc <- err
				return
			}
		}
	}()
	err := <-errc
	c.Close()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// runRemoteRank is one RayWorkerWrapper on a worker node: it runs inside the node's Ray
// container, so every socket it opens is in that node's network namespace.
func runRemoteRank(ctx context.Context, gc *gcsClient, rs rankSpec, nodeIP string) {
	prefix := fmt.Sprintf("(RayWorkerWrapper pid=%d, ip=%s)", os.Getpid()+rs.Rank, nodeIP)
	var mu sync.Mutex
	log := func(level, where, msg string) {
		line := fmt.Sprintf("%s %s %s [%s] %s", prefix, level, time.Now().Format("01-02 15:04:05"), where, msg)
		mu.Lock()
		defer mu.Unlock()
		emit(line)
		_ = gc.call(ctx, "POST", "/v1/logs", map[string]string{"job": rs.Job, "line": line}, nil)
	}
	env := func(k string) string {
		if v, ok := rs.VLLMEnv[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
	if err := remoteRank(ctx, rs, env, log); err != nil {
		log("ERROR", "worker_base.py:620", "Error executing method 'init_device'. This might cause deadlock in distributed execution.")
		log("ERROR", "worker_base.py:621", err.Error())
	}
}

func remoteRank(ctx context.Context, rs rankSpec, env func(string) string, log rankLog) error {
	hostPort := strings.TrimPrefix(rs.InitMethod, "tcp://")
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return fmt.Errorf("ValueError: bad init method %q", rs.InitMethod)
	}
	log("DEBUG", "parallel_state.py:1104", fmt.Sprintf("world_size=%d rank=%d local_rank=0 distributed_init_method=%s backend=nccl", rs.World, rs.Rank, rs.InitMethod))
	store, err := dialStore(ctx, host, port, rs.StoreTimeout, log)
	if err != nil {
		return err
	}
	defer store.Close()
	ep, err := openEndpoints(env, log)
	enc := json.NewEncoder(store)
	if err != nil {
		_ = enc.Encode(hello{Rank: rs.Rank, Err: err.Error()})
		return err
	}
	defer ep.Close()
	me := hello{Rank: rs.Rank, NodeIP: env("VLLM_HOST_IP"), NCCL: ep.nccl.Addr().String(), NCCLIfs: len(ep.ifs), Gloo: ep.gloo.Addr().String()}
	if err := enc.Encode(me); err != nil {
		return storeRecvError(0)
	}
	var table peerTable
	if err := json.NewDecoder(bufio.NewReader(store)).Decode(&table); err != nil {
		return storeRecvError(0)
	}
	if err := glooMesh(rs.Rank, table.Peers); err != nil {
		return err
	}
	if ncclCountMismatch(len(ep.ifs), table.Peers) {
		return ncclCountError(len(ep.ifs), log)
	}
	c, err := dialNCCL(ctx, ep.ifs[0].Addr, table.Peers[0].NCCL, log)
	if err != nil {
		return err
	}
	go func() {
		time.Sleep(rs.LoadFor)
		log("INFO", "default_loader.py:267", fmt.Sprintf("Loading weights took %.2f seconds", rs.LoadFor.Seconds()))
	}()
	if err := liveness(ctx, c); err != nil {
		log("WARNING", "socket.cc:567", "NCCL WARN NET/Socket : peer "+table.Peers[0].NCCL+" connection lost: "+err.Error())
		return fmt.Errorf("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3135, remote process exited or there was a network error, NCCL version %s", ncclVersion)
	}
	return nil
}

func storeRecvError(rank int) error {
	return errors.New("torch.distributed.DistStoreError: store->get('" + strconv.Itoa(rank) + "') got error: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?")
}
