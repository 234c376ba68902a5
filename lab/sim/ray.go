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
		return errors.New("Usage: ray [OPTIONS] COMMAND [ARGS]... (start, status)")
	}
	switch args[0] {
	case "start":
		return rayStart(args[1:])
	case "status":
		return rayStatus(args[1:])
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
	var gcsAddr, nodeID, ip string
	if f.head {
		if ip = f.nodeIP; ip == "" {
			ip = rayNodeIP()
		}
		gcsAddr = net.JoinHostPort(ip, strconv.Itoa(f.port))
		nodeID, err = startHead(ctx, f, ip)
		if err != nil {
			return err
		}
		rayLog("INFO", "scripts.py:744", "Local node IP: "+ip)
		rayLog("SUCC", "scripts.py:782", "--------------------")
		rayLog("SUCC", "scripts.py:783", "Ray runtime started.")
		rayLog("SUCC", "scripts.py:784", "--------------------")
		rayLog("INFO", "scripts.py:786", "Next steps")
		rayLog("INFO", "scripts.py:789", "  To add another node to this Ray cluster, run")
		rayLog("INFO", "scripts.py:792", "    ray start --address='"+gcsAddr+"'")
	} else {
		gcsAddr = f.address
		if ip = f.nodeIP; ip == "" {
			// A worker's auto-detected IP is the source of its route to the head.
			if ip, err = routeSource(gcsAddr); err != nil {
				ip = rayNodeIP()
			}
		}
		nodeID, err = joinCluster(ctx, gcsAddr, ip, f.numGPUs)
		if err != nil {
			return err
		}
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
	gc := newGCSClient(gcsAddr)
	go runTasks(ctx, gc, nodeID, ip)
	return heartbeat(ctx, gc, nodeID)
}

// startHead serves the GCS and the dashboard and registers the head itself.
func startHead(ctx context.Context, f startFlags, ip string) (string, error) {
	g := newGCS()
	gl, err := net.Listen("tcp", net.JoinHostPort("0.0.0.0", strconv.Itoa(f.port)))
	if err != nil {
		return "", fmt.Errorf("Failed to start the GCS server on port %d: %w", f.port, err)
	}
	dl, err := net.Listen("tcp", net.JoinHostPort(f.dashboardHost, strconv.Itoa(f.dashboardPort)))
	if err != nil {
		return "", fmt.Errorf("Failed to start the dashboard on %s:%d: %w", f.dashboardHost, f.dashboardPort, err)
	}
	go func() { _ = http.Serve(gl, g.handler()) }()
	go func() { _ = http.Serve(dl, g.stateAPI()) }()
	go g.reaper(ctx)
	var n gcsNode
	err = newGCSClient(gl.Addr().String()).call(ctx, "POST", "/v1/register",
		gcsNode{IP: ip, Head: true, Resources: resources(ip, f.numGPUs, true)}, &n)
	return n.ID, err
}

// joinCluster registers a worker node, retrying while the GCS does not answer as Ray does.
func joinCluster(ctx context.Context, addr, ip string, gpus float64) (string, error) {
	gc := newGCSClient(addr)
	gc.http.Timeout = 2 * time.Second
	deadline := time.Now().Add(max(scaled(60*time.Second), 3*time.Second))
	for {
		var n gcsNode
		err := gc.call(ctx, "POST", "/v1/register", gcsNode{IP: ip, Resources: resources(ip, gpus, false)}, &n)
		if err == nil {
			return n.ID, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			host, port, _ := net.SplitHostPort(addr)
			rayLog("ERROR", "utils.py:1371", fmt.Sprintf("Unable to connect to GCS at %s:%s. Check that (1) Ray GCS with matching version started successfully at the specified address, and (2) there is no firewall setting preventing access.", host, port))
			return "", fmt.Errorf("ConnectionError: Unable to connect to GCS at %s:%s", host, port)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// heartbeat keeps the node alive in the GCS until ctx ends or the GCS declares it dead.
func heartbeat(ctx context.Context, gc *gcsClient, nodeID string) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := gc.call(ctx, "POST", "/v1/heartbeat?node="+nodeID, nil, nil)
		if isGone(err) {
			rayLog("ERROR", "raylet.cc:321", "[raylet] The node with node id: "+nodeID+" has been marked dead because the detector has missed too many heartbeats from it. This can happen when a \t(1) raylet crashes unexpectedly (OOM, etc.) \n\t(2) raylet has lagging heartbeats due to slow network or busy workload.")
			return errors.New("raylet: node marked dead")
		}
	}
}

// runTasks runs the ranks vLLM places on this node, each as a simulated RayWorkerWrapper.
func runTasks(ctx context.Context, gc *gcsClient, nodeID, ip string) {
	for ctx.Err() == nil {
		var tasks []task
		if err := gc.call(ctx, "GET", "/v1/tasks?node="+nodeID, nil, &tasks); err != nil {
			time.Sleep(time.Second)
			continue
		}
		for _, t := range tasks {
			var rs rankSpec
			if err := json.Unmarshal(t.Spec, &rs); err != nil {
				continue
			}
			go runRemoteRank(ctx, gc, rs, ip)
		}
	}
}

func rayStatus(args []string) error {
	fs := flag.NewFlagSet("ray status", flag.ContinueOnError)
	addr := fs.String("address", os.Getenv("RAY_ADDRESS"), "GCS address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" {
		b, err := os.ReadFile(clusterFile)
		if err != nil {
			return errors.New("ConnectionError: Could not find any running Ray instance. Please specify the one to connect to by setting `--address` flag or `RAY_ADDRESS` environment variable.")
		}
		*addr = strings.TrimSpace(string(b))
	}
	gc := newGCSClient(*addr)
	ctx := context.Background()
	var nodes []gcsNode
	var pgs []placementGroup
	if err := gc.call(ctx, "GET", "/v1/nodes", nil, &nodes); err != nil {
		return fmt.Errorf("ConnectionError: Unable to connect to GCS at %s.", *addr)
	}
	_ = gc.call(ctx, "GET", "/v1/pgs", nil, &pgs)
	writeStatus(os.Stdout, time.Now(), nodes, pgs)
	return nil
}

// writeStatus prints the autoscaler v2 status in Ray's format.
func writeStatus(w io.Writer, now time.Time, nodes []gcsNode, pgs []placementGroup) {
	fmt.Fprintf(w, "======== Autoscaler status: %s ========\n", now.Format("2006-01-02 15:04:05.000000"))
	fmt.Fprintln(w, "Node status")
	fmt.Fprintln(w, "---------------------------------------------------------------")
	fmt.Fprintln(w, "Active:")
	var total, used map[string]float64 = map[string]float64{}, map[string]float64{}
	var dead []gcsNode
	for _, n := range nodes {
		if n.State != "ALIVE" {
			dead = append(dead, n)
			continue
		}
		fmt.Fprintf(w, " 1 node_%s\n", n.ID)
		for r, v := range n.Resources {
			total[r] += v
		}
	}
	fmt.Fprintln(w, "Pending:")
	fmt.Fprintln(w, " (no pending nodes)")
	fmt.Fprintln(w, "Recent failures:")
	if len(dead) == 0 {
		fmt.Fprintln(w, " (no failures)")
	}
	for _, n := range dead {
		fmt.Fprintf(w, " node_%s: NodeTerminated (ip: %s)\n", n.ID, n.IP)
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
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Resources")
	fmt.Fprintln(w, "---------------------------------------------------------------")
	fmt.Fprintln(w, "Total Usage:")
	fmt.Fprintf(w, " %.1f/%.1f CPU\n", used["CPU"], total["CPU"])
	fmt.Fprintf(w, " %.1f/%.1f GPU\n", used["GPU"], total["GPU"])
	fmt.Fprintf(w, " 0B/%.2fGiB memory\n", total["memory"]/(1<<30))
	fmt.Fprintf(w, " 0B/%.2fGiB object_store_memory\n", total["object_store_memory"]/(1<<30))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Total Constraints:")
	fmt.Fprintln(w, " (no request_resources() constraints)")
	fmt.Fprintln(w, "Total Demands:")
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
