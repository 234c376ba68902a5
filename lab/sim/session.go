package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A Ray node's session directory and the way a driver attaches to its node's raylet, as
// upstream does it (python/ray/_private/node.py, services.py; global_state_accessor.cc;
// raylet_ipc_client.cc): the head names the session and publishes it in the GCS; every
// node makes <temp>/<session>/ on its own filesystem, records its node IP in
// node_ip_address.json there, and listens on <session>/sockets/raylet. A driver reads the
// session name from the GCS, its node IP from that file on ITS filesystem, asks the GCS for
// the raylet with that IP and connects to the socket path the raylet registered. A driver
// in another container has neither the file nor the socket, and fails as Ray does.

const (
	rayTempDir    = "/tmp/ray"
	sessionLatest = "session_latest"       // ray_constants.SESSION_LATEST
	nodeIPFile    = "node_ip_address.json" // ray_constants.RAY_NODE_IP_FILENAME
)

// newSessionName is the head's `session_{date}_{pid}` (node.py).
func newSessionName() string {
	return fmt.Sprintf("session_%s_%d", time.Now().Format("2006-01-02_15-04-05_000000"), os.Getpid())
}

// session is one node's share of the Ray session on its own filesystem.
type session struct {
	dir           string
	rayletL       net.Listener
	raylet, store string // socket paths
}

// openSession makes the node's session directory, writes its node IP, points
// session_latest at it and listens on the raylet and plasma-store sockets.
func openSession(name, nodeIP string) (*session, error) {
	dir := filepath.Join(rayTempDir, name)
	sockets := filepath.Join(dir, "sockets")
	if err := os.MkdirAll(sockets, 0o755); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(map[string]string{"node_ip_address": nodeIP})
	if err := os.WriteFile(filepath.Join(dir, nodeIPFile), b, 0o644); err != nil {
		return nil, err
	}
	latest := filepath.Join(rayTempDir, sessionLatest)
	_ = os.Remove(latest)
	_ = os.Symlink(dir, latest)
	s := &session{dir: dir, raylet: filepath.Join(sockets, "raylet"), store: filepath.Join(sockets, "plasma_store")}
	for _, p := range []string{s.raylet, s.store} {
		_ = os.Remove(p)
	}
	var err error
	if s.rayletL, err = net.Listen("unix", s.raylet); err != nil {
		return nil, fmt.Errorf("raylet socket: %w", err)
	}
	store, err := net.Listen("unix", s.store)
	if err != nil {
		return nil, fmt.Errorf("plasma store socket: %w", err)
	}
	go acceptAndHold(store)
	return s, nil
}

// serveRaylet accepts drivers on the raylet socket: a driver registers its job with one
// JSON line and the raylet answers with its node ID. When the driver's connection closes
// (it exited), its job is finished and its placement groups released, as the raylet
// reports a dead driver to the GCS.
func (s *session) serveRaylet(nodeID string, gc *gcsClient) {
	for {
		c, err := s.rayletL.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			r := bufio.NewReader(c)
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			var hello struct {
				Job string `json:"job"`
			}
			_ = json.Unmarshal([]byte(line), &hello)
			fmt.Fprintf(c, "{\"node_id\":%q}\n", nodeID)
			_, _ = r.ReadString(0)
			if hello.Job != "" {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				_ = gc.call(ctx, "POST", "/v1/jobs/finish?job="+hello.Job, nil, nil)
			}
		}()
	}
}

// driver is a process attached to its node's raylet: `vllm serve` with the Ray backend.
type driver struct {
	gc     *gcsClient
	addr   string
	nodeIP string
	node   gcsNode
	conn   net.Conn
}

// attachDriver does what ray.init(address=None) does in a driver: the cluster address
// from RAY_ADDRESS or this host's ray_current_cluster, the session from the GCS, this
// node's IP from the session's node_ip_address.json, the raylet with that IP from the
// GCS, then its socket. log prints in Ray's Python logger format.
func attachDriver(ctx context.Context, job string, log func(level, where, msg string)) (*driver, error) {
	addr := os.Getenv("RAY_ADDRESS")
	if addr == "" {
		b, err := os.ReadFile(clusterFile)
		if err != nil {
			// ray.init(address=None) would start a new local Ray instance without GPUs; the
			// lab does not model a local instance.
			return nil, errors.New("RuntimeError: no Ray cluster to connect to: RAY_ADDRESS is unset and " + clusterFile + " does not exist (the lab does not model starting a local Ray instance)")
		}
		addr = strings.TrimSpace(string(b))
	} else {
		log("INFO", "worker.py:1243", "Using address "+addr+" set in the environment variable RAY_ADDRESS")
	}
	gc := newGCSClient(addr)
	var kv map[string]string
	if err := gc.call(ctx, "GET", "/v1/kv", nil, &kv); err != nil {
		host, port, _ := net.SplitHostPort(addr)
		for range 3 {
			log("WARNING", "utils.py:1416", fmt.Sprintf("Unable to connect to GCS at %s:%s. Check that (1) Ray GCS with matching version started successfully at the specified address, and (2) there is no firewall setting preventing access.", host, port))
		}
		return nil, errors.New("ConnectionError: Could not read 'session_name' from GCS. Did GCS start successfully?")
	}
	log("INFO", "worker.py:1364", "Connecting to existing Ray cluster at address: "+addr+"...")
	dir := filepath.Join(kv["temp_dir"], kv["session_name"])
	ip, err := waitNodeIP(ctx, dir, log)
	if err != nil {
		return nil, err
	}
	d := &driver{gc: gc, addr: addr, nodeIP: ip}
	if d.node, err = nodeToConnectForDriver(ctx, gc, addr, ip, log); err != nil {
		return nil, err
	}
	if d.conn, err = connectRaylet(ctx, d.node.RayletSocket, log); err != nil {
		return nil, err
	}
	fmt.Fprintf(d.conn, "{\"driver_pid\":%d,\"job\":%q}\n", os.Getpid(), job)
	if _, err := bufio.NewReader(d.conn).ReadString('\n'); err != nil {
		return nil, fmt.Errorf("Failed to register worker to Raylet: IOError: Failed to read data from the socket: End of file")
	}
	log("INFO", "worker.py:2003", "Connected to Ray cluster.")
	return d, nil
}

// waitNodeIP reads this node's IP from the session directory on the driver's own
// filesystem, waiting 60 s for it as node.py's _wait_and_get_for_node_address does.
func waitNodeIP(ctx context.Context, dir string, log func(level, where, msg string)) (string, error) {
	path := filepath.Join(dir, nodeIPFile)
	wait := scaled(60 * time.Second)
	start := time.Now()
	lastLog := time.Time{}
	for {
		if b, err := os.ReadFile(path); err == nil {
			var v struct {
				IP string `json:"node_ip_address"`
			}
			if json.Unmarshal(b, &v) == nil && v.IP != "" {
				return v.IP, nil
			}
		}
		if time.Since(start) >= wait {
			return "", fmt.Errorf("ValueError: Can't find a `%s` file from %s. for 60 seconds. A ray instance hasn't started. Did you do `ray start` or `ray.init` on this host?", nodeIPFile, dir)
		}
		if time.Since(lastLog) >= scaled(10*time.Second) {
			log("INFO", "node.py:1072", fmt.Sprintf("Can't find a `%s` file from %s. Have you started Ray instance using `ray start` or `ray.init`?", nodeIPFile, dir))
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(min(scaled(time.Second), time.Second)):
		}
	}
}

// nodeToConnectForDriver is GlobalStateAccessor::GetNodeToConnectForDriver: the alive
// node whose address equals the driver's IP exactly, else the head's when it is the GCS
// host, else Ray's NotFound text.
func nodeToConnectForDriver(ctx context.Context, gc *gcsClient, gcsAddr, ip string, log func(level, where, msg string)) (gcsNode, error) {
	gcsHost, _, _ := net.SplitHostPort(gcsAddr)
	deadline := time.Now().Add(10 * time.Second) // raylet_start_wait_time_s
	for {
		var nodes []gcsNode
		if err := gc.call(ctx, "GET", "/v1/nodes", nil, &nodes); err != nil {
			return gcsNode{}, fmt.Errorf("RuntimeError: Failed to connect to GCS. Please check if the GCS server is running and if this node can connect to the head node.")
		}
		var head *gcsNode
		var addrs []string
		for i, n := range nodes {
			if n.State != "ALIVE" {
				continue
			}
			if n.IP == ip {
				return n, nil
			}
			addrs = append(addrs, n.IP)
			if n.IP == gcsHost {
				head = &nodes[i]
			}
		}
		if head != nil {
			log("INFO", "global_state_accessor.cc:432", fmt.Sprintf("This node has an IP address of %s, but we cannot find a local Raylet with the same address. This can happen when you connect to the Ray cluster with a different IP address or when connecting to a container.", ip))
			return *head, nil
		}
		if len(addrs) > 0 || time.Now().After(deadline) {
			if len(addrs) == 0 {
				return gcsNode{}, errors.New("RuntimeError: GCS has started but no raylets have registered yet.")
			}
			return gcsNode{}, fmt.Errorf("RuntimeError: This node has an IP address of %s, and Ray expects this IP address to be either the GCS address or one of the Raylet addresses. Connected to GCS at %s and found raylets at %s but none of these match this node's IP %s. Are any of these actually a different IP address for the same node?You might need to provide --node-ip-address to specify the IP address that the head should use when sending to this node.",
				ip, gcsHost, strings.Join(addrs, ", "), ip)
		}
		log("WARNING", "global_state_accessor.cc:461", "Some processes that the driver needs to connect to have not registered with GCS, so retrying. Have you run 'ray start' on this node?")
		time.Sleep(time.Second)
	}
}

// connectRaylet connects to the raylet's Unix socket as ConnectSocketRetry does: 10
// attempts a second apart, then the fatal line.
func connectRaylet(ctx context.Context, path string, log func(level, where, msg string)) (net.Conn, error) {
	const attempts = 10
	for i := 0; ; i++ {
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
		if err == nil {
			return c, nil
		}
		if i+1 >= attempts || ctx.Err() != nil {
			rayCppLog("C", "raylet_ipc_client.cc:51", "Failed to connect to socket at address:"+path)
			return nil, fmt.Errorf("Failed to connect to socket at address:%s", path)
		}
		if i > 0 {
			rayCppLog("I", "client_connection.cc:112", fmt.Sprintf("Retrying to connect to socket for endpoint %s (num_attempts = %d, num_retries = %d)", path, i, attempts))
		}
		time.Sleep(min(scaled(time.Second), time.Second))
	}
}
