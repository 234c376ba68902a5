package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clusterFile is where `ray start` records the cluster address for later `ray status`.
const clusterFile = "/tmp/ray/ray_current_cluster"

func rayMain(args []string) error {
	if len(args) == 0 {
		return errors.New("Usage: ray [OPTIONS] COMMAND [ARGS]... (start, status, list)")
	}
	switch args[0] {
	case "start":
		return rayStart(args[1:])
	case "status":
		return rayStatus(args[1:])
	case "list":
		return rayList(args[1:])
	}
	return fmt.Errorf("Error: No such command '%s'.", args[0])
}

type startFlags struct {
	head          bool
	port          int
	address       string
	nodeIP        string
	numGPUs       float64
	block         bool
	dashboardHost string
	dashboardPort int
}

func parseStart(args []string) (startFlags, error) {
	var f startFlags
	fs := flag.NewFlagSet("ray start", flag.ContinueOnError)
	fs.BoolVar(&f.head, "head", false, "start the head node")
	fs.IntVar(&f.port, "port", 6379, "GCS port (head)")
	fs.StringVar(&f.address, "address", "", "GCS address to join (worker)")
	fs.StringVar(&f.nodeIP, "node-ip-address", "", "the IP this node registers under")
	fs.Float64Var(&f.numGPUs, "num-gpus", -1, "GPUs this node offers")
	fs.BoolVar(&f.block, "block", false, "block until terminated")
	fs.StringVar(&f.dashboardHost, "dashboard-host", "127.0.0.1", "dashboard bind address")
	fs.IntVar(&f.dashboardPort, "dashboard-port", 8265, "dashboard port")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if !f.head && f.address == "" {
		return f, errors.New("ray start: either --head or --address is required")
	}
	if f.numGPUs < 0 {
		f.numGPUs = envFloat(envGPUs, 1)
	}
	if os.Getenv(envIgnoreNodeIP) != "" {
		f.nodeIP = "" // a wrapper script that drops the flag: the seed's head registration
	}
	return f, nil
}

func resources(ip string, gpus float64, head bool) map[string]float64 {
	r := map[string]float64{"CPU": 20, "memory": 64 << 30, "object_store_memory": 16 << 30, "node:" + ip: 1}
	if gpus > 0 {
		r["GPU"] = gpus
	}
	if head {
		r["node:__internal_head__"] = 1
	}
	return r
}

func rayStart(args []string) error {
	f, err := parseStart(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rayLog("INFO", "usage_lib.py:467", "Usage stats collection is disabled.")
	var gcsAddr, ip, sessionName string
	if f.head {
		if ip = f.nodeIP; ip == "" {
			ip = rayNodeIP()
		}
		gcsAddr = net.JoinHostPort(ip, strconv.Itoa(f.port))
		sessionName = newSessionName()
		token, err := startAuth(true)
		if err != nil {
			return err
		}
		if err := startHead(ctx, f, sessionName, token); err != nil {
			return err
		}
	} else {
		if _, err := startAuth(false); err != nil {
			return err
		}
		gcsAddr = f.address
		if ip = f.nodeIP; ip == "" {
			// A worker's auto-detected IP is the source of its route to the head.
			if ip, err = routeSource(gcsAddr); err != nil {
				ip = rayNodeIP()
			}
		}
		var kv map[string]string
		if kv, err = readGCSKV(ctx, gcsAddr); err != nil {
			return err
		}
		sessionName = kv["session_name"]
	}
	sess, err := openSession(sessionName, ip)
	if err != nil {
		return err
	}
	// The raylet's node manager port: the GCS health-checks the node through it.
	nm, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return fmt.Errorf("raylet: listen on %s: %w", ip, err)
	}
	go acceptAndHold(nm)
	gc := newGCSClient(gcsAddr)
	hostname, _ := os.Hostname()
	var n gcsNode
	err = gc.call(ctx, "POST", "/v1/register", gcsNode{IP: ip, Head: f.head, Hostname: hostname, Resources: resources(ip, f.numGPUs, f.head),
		RayletSocket: sess.raylet, StoreSocket: sess.store, NodeManagerPort: nm.Addr().(*net.TCPAddr).Port}, &n)
	if err != nil {
		return fmt.Errorf("raylet: register with the GCS at %s: %w", gcsAddr, err)
	}
	go sess.serveRaylet(n.ID, gc)
	if f.head {
		rayLog("INFO", "scripts.py:744", "Local node IP: "+ip)
		rayLog("SUCC", "scripts.py:782", "--------------------")
		rayLog("SUCC", "scripts.py:783", "Ray runtime started.")
		rayLog("SUCC", "scripts.py:784", "--------------------")
		rayLog("INFO", "scripts.py:786", "Next steps")
		rayLog("INFO", "scripts.py:789", "  To add another node to this Ray cluster, run")
		rayLog("INFO", "scripts.py:792", "    ray start --address='"+gcsAddr+"'")
	} else {
		rayLog("INFO", "scripts.py:926", "Local node IP: "+ip)
		rayLog("SUCC", "scripts.py:939", "--------------------")
		rayLog("SUCC", "scripts.py:940", "Ray runtime started.")
		rayLog("SUCC", "scripts.py:941", "--------------------")
	}
	if err := os.MkdirAll(filepath.Dir(clusterFile), 0o755); err == nil {
		_ = os.WriteFile(clusterFile, []byte(gcsAddr), 0o644)
	}
	if !f.block {
		return nil
	}
	rayLog("INFO", "scripts.py:953", "--block")
	rayLog("INFO", "scripts.py:954", "This command will now block forever until terminated by a signal.")
	rayLog("INFO", "scripts.py:957", "Running subprocesses are monitored and a message will be printed if any of them terminate unexpectedly. Subprocesses exit with SIGTERM will be treated as graceful, thus NOT reported.")
	err = runTasks(ctx, gc, n.ID, ip)
	if ctx.Err() != nil {
		// A graceful stop unregisters the node: dead at once, expectedly.
		uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = gc.call(uctx, "POST", "/v1/unregister?node="+n.ID, nil, nil)
		return nil
	}
	return err
}

// startHead serves the GCS, and the dashboard's HTTP API when Ray's dashboard
// dependencies are installed (ray[default]); a minimal Ray, as vLLM's images ship it,
// serves no HTTP on the dashboard port (services.py start_api_server, dashboard/head.py).
func startHead(ctx context.Context, f startFlags, session, token string) error {
	g := newGCS(session, net.JoinHostPort(f.dashboardHost, strconv.Itoa(f.dashboardPort)), token)
	gl, err := net.Listen("tcp", net.JoinHostPort("0.0.0.0", strconv.Itoa(f.port)))
	if err != nil {
		return fmt.Errorf("Failed to start the GCS server on port %d: %w", f.port, err)
	}
	go g.serve(gl)
	if os.Getenv(envRayDefault) != "" {
		dl, err := net.Listen("tcp", net.JoinHostPort(f.dashboardHost, strconv.Itoa(f.dashboardPort)))
		if err != nil {
			return fmt.Errorf("Failed to start the dashboard on %s:%d: %w", f.dashboardHost, f.dashboardPort, err)
		}
		go func() { _ = http.Serve(dl, g.stateAPI()) }()
	}
	return nil
}

// readGCSKV reads the session from the GCS as a joining node does, retrying while the GCS
// does not answer with Ray's warning on each retry (utils.internal_kv_get_with_retry).
func readGCSKV(ctx context.Context, addr string) (map[string]string, error) {
	gc := newGCSClient(addr)
	gc.http.Timeout = 2 * time.Second
	host, port, _ := net.SplitHostPort(addr)
	deadline := time.Now().Add(max(scaled(40*time.Second), 3*time.Second))
	for {
		var kv map[string]string
		err := gc.call(ctx, "GET", "/v1/kv", nil, &kv)
		if err == nil {
			return kv, nil
		}
		if isUnauthenticated(err) {
			// Not retried: no retry brings a token.
			return nil, fmt.Errorf("ray.exceptions.AuthenticationError: the GCS at %s refused the call: %s", addr, rayUnauthenticated)
		}
		rayLog("WARNING", "utils.py:1416", fmt.Sprintf("Unable to connect to GCS at %s:%s. Check that (1) Ray GCS with matching version started successfully at the specified address, and (2) there is no firewall setting preventing access.", host, port))
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, errors.New("ConnectionError: Could not read 'session_name' from GCS. Did GCS start successfully?")
		}
		time.Sleep(min(scaled(2*time.Second), 2*time.Second))
	}
}

// runTasks runs the ranks vLLM places on this node, each as a simulated RayWorkerWrapper,
// until ctx ends or the GCS says this node is dead (then the raylet exits, as a raylet
// that learns it was marked dead does).
func runTasks(ctx context.Context, gc *gcsClient, nodeID, ip string) error {
	for ctx.Err() == nil {
		var tasks []task
		err := gc.call(ctx, "GET", "/v1/tasks?node="+nodeID, nil, &tasks)
		if isGone(err) {
			rayCppLog("C", "node_manager.cc:1040", "[Timeout] Exiting because this node manager has mistakenly been marked as dead by the GCS: GCS failed to check the health of this node for 5 times. This is likely because the machine or raylet has become overloaded.")
			return errors.New("raylet: node marked dead")
		}
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		for _, t := range tasks {
			var rs rankSpec
			if err := json.Unmarshal(t.Spec, &rs); err != nil {
				continue
			}
			// Each actor runs in a worker process of its own (ray::<ClassName>), which
			// dies with the raylet.
			title := "ray::RayWorkerWrapper"
			if rs.V2 {
				title = "ray::RayWorkerProc"
			}
			p, err := spawn(title, roleRayRank, procInput{GCS: gc.addr, Spec: rs, NodeID: nodeID, NodeIP: ip})
			if err != nil {
				rayCppLog("E", "worker_pool.cc:563", "Failed to start the worker process: "+err.Error())
				continue
			}
			go func() { <-ctx.Done(); p.signal(syscall.SIGTERM) }()
		}
	}
	return nil
}

// rayRankMain is an actor's worker process: the rank, until the raylet stops it.
func rayRankMain(in procInput) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	runRemoteRank(ctx, newGCSClient(in.GCS), in.Spec, in.NodeID, in.NodeIP)
	<-ctx.Done()
	return nil
}

func rayStatus(args []string) error {
	fs := flag.NewFlagSet("ray status", flag.ContinueOnError)
	addr := fs.String("address", "", "GCS address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	gc, err := cliGCS(*addr)
	if err != nil {
		return err
	}
	ctx := context.Background()
	var nodes []gcsNode
	var pgs []placementGroup
	if err := gc.call(ctx, "GET", "/v1/nodes", nil, &nodes); err != nil {
		return fmt.Errorf("ConnectionError: Unable to connect to GCS at %s.", gc.addr)
	}
	_ = gc.call(ctx, "GET", "/v1/pgs", nil, &pgs)
	writeStatus(os.Stdout, time.Now(), nodes, pgs, os.Getenv("RAY_enable_autoscaler_v2") == "1")
	return nil
}

// cliGCS is the GCS a CLI command talks to: --address, RAY_ADDRESS, else this host's
// ray_current_cluster (canonicalize_bootstrap_address_or_die).
func cliGCS(flagAddr string) (*gcsClient, error) {
	addr := flagAddr
	if addr == "" {
		addr = os.Getenv("RAY_ADDRESS")
	}
	if addr == "" {
		b, err := os.ReadFile(clusterFile)
		if err != nil {
			return nil, errors.New("ConnectionError: Could not find any running Ray instance. Please specify the one to connect to by setting the `--address` flag or `RAY_ADDRESS` environment variable.")
		}
		addr = strings.TrimSpace(string(b))
	}
	return newGCSClient(addr), nil
}

// rayList is `ray list nodes`: the state API, served by the dashboard's HTTP server, which
// a minimal Ray does not run (python/ray/util/state/api.py).
func rayList(args []string) error {
	if len(args) == 0 || args[0] != "nodes" {
		return errors.New("Usage: ray list nodes (the lab lists nodes only)")
	}
	gc, err := cliGCS("")
	if err != nil {
		return err
	}
	var kv map[string]string
	if err := gc.call(context.Background(), "GET", "/v1/kv", nil, &kv); err != nil {
		return errors.New("ConnectionError: Could not read 'dashboard' from GCS. Did GCS start successfully?")
	}
	url := "http://" + kv["dashboard"]
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url + "/api/v0/nodes")
	if err != nil {
		return fmt.Errorf("ray.util.state.exception.ServerUnavailable: Failed to make request to %s/api/v0/nodes. Failed to connect to API server. Please check the API server log for details. Make sure dependencies are installed with `pip install ray[default]`. Please also check dashboard is available, and included when starting ray cluster, i.e. `ray start --include-dashboard=True --head`. ", url)
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Result struct {
				Result []gcsNode `json:"result"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	fmt.Println("======== List: " + time.Now().Format("2006-01-02 15:04:05.000000") + " ========")
	fmt.Printf("Stats:\n------------------------------\nTotal: %d\n\nTable:\n------------------------------\n", len(body.Data.Result.Result))
	fmt.Println("    NODE_ID                                                   NODE_IP        IS_HEAD_NODE    STATE")
	for i, n := range body.Data.Result.Result {
		fmt.Printf("%2d  %s  %-13s  %-14v  %s\n", i, n.ID, n.IP, n.Head, n.State)
	}
	return nil
}

// writeStatus prints `ray status` as Ray's autoscaler formats it: the default (v1,
// autoscaler/_private/util.py format_info_string; a manually started cluster has no Idle
// section) or autoscaler v2 (autoscaler/v2/utils.py, RAY_enable_autoscaler_v2=1).
func writeStatus(w io.Writer, now time.Time, nodes []gcsNode, pgs []placementGroup, v2 bool) {
	header := fmt.Sprintf("======== Autoscaler status: %s ========", now.Format("2006-01-02 15:04:05.000000"))
	sep := strings.Repeat("-", len(header))
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, "Node status")
	fmt.Fprintln(w, sep)
	fmt.Fprintln(w, "Active:")
	total, used := map[string]float64{}, map[string]float64{}
	var dead []gcsNode
	active := 0
	for _, n := range nodes {
		if n.State != "ALIVE" {
			dead = append(dead, n)
			continue
		}
		active++
		fmt.Fprintf(w, " 1 node_%s\n", n.ID)
		for r, v := range n.Resources {
			total[r] += v
		}
	}
	if active == 0 {
		fmt.Fprintln(w, " (no active nodes)")
	}
	if v2 {
		fmt.Fprintln(w, "Idle:")
		fmt.Fprintln(w, " (no idle nodes)")
	}
	fmt.Fprintln(w, "Pending:")
	fmt.Fprintln(w, " (no pending nodes)")
	fmt.Fprintln(w, "Recent failures:")
	if len(dead) == 0 {
		fmt.Fprintln(w, " (no failures)")
	}
	for _, n := range dead {
		if v2 {
			fmt.Fprintf(w, " node_%s: NodeTerminated (instance_id: )\n", n.ID)
		} else {
			fmt.Fprintf(w, " node_%s: NodeTerminated (ip: %s)\n", n.ID, n.IP)
		}
	}
	var pending []string
	for _, pg := range pgs {
		if pg.State == "CREATED" {
			for _, b := range pg.Bundles {
				for r, v := range b {
					used[r] += v
				}
			}
			continue
		}
		var parts []string
		for _, b := range pg.Bundles {
			parts = append(parts, pyDict(b)+" * 1")
		}
		pending = append(pending, " "+strings.Join(parts, ", ")+" (PACK): 1+ pending placement groups")
	}
	usage, demands := "Usage:", "Demands:"
	if v2 {
		usage, demands = "Total Usage:", "Total Demands:"
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Resources")
	fmt.Fprintln(w, sep)
	fmt.Fprintln(w, usage)
	fmt.Fprintf(w, " %.1f/%.1f CPU\n", used["CPU"], total["CPU"])
	fmt.Fprintf(w, " %.1f/%.1f GPU\n", used["GPU"], total["GPU"])
	fmt.Fprintf(w, " 0B/%.2fGiB memory\n", total["memory"]/(1<<30))
	fmt.Fprintf(w, " 0B/%.2fGiB object_store_memory\n", total["object_store_memory"]/(1<<30))
	if v2 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Total Constraints:")
		fmt.Fprintln(w, " (no request_resources() constraints)")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, demands)
	if len(pending) == 0 {
		fmt.Fprintln(w, " (no resource demands)")
	}
	for _, p := range pending {
		fmt.Fprintln(w, p)
	}
}

// pyDict renders a resource bundle as Python prints a dict.
func pyDict(m map[string]float64) string {
	keys := sortedKeys(m)
	// Ray lists GPU first, as vLLM builds the bundle.
	for i, k := range keys {
		if k == "GPU" && i > 0 {
			copy(keys[1:i+1], keys[0:i])
			keys[0] = "GPU"
		}
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("'%s': %s", k, strconv.FormatFloat(m[k], 'f', -1, 64))
		if m[k] == float64(int(m[k])) {
			parts[i] += ".0"
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
