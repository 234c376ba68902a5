package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The GCS: the head's registry of nodes, jobs, placement groups and tasks. Real Ray
// speaks gRPC; the simulator speaks JSON over HTTP for its own calls and, on the same
// port, the real gRPC methods tpdeploy calls (grpc.go), which is all that matters to
// reachability and to the agent.

type gcsNode struct {
	ID        string             `json:"node_id"`
	IP        string             `json:"node_ip"`
	Hostname  string             `json:"node_manager_hostname"`
	Head      bool               `json:"is_head_node"`
	State     string             `json:"state"`
	Resources map[string]float64 `json:"resources_total"`
	StartMS   int64              `json:"start_time_ms"`
	EndMS     int64              `json:"end_time_ms"`
	Name      string             `json:"node_name"`
	// RayletSocket and StoreSocket are the node's socket paths on its own filesystem.
	RayletSocket    string `json:"raylet_socket_name"`
	StoreSocket     string `json:"object_store_socket_name"`
	NodeManagerPort int    `json:"node_manager_port"`
	// DeathReason is EXPECTED_TERMINATION (the raylet unregistered) or
	// UNEXPECTED_TERMINATION (health checks failed); DeathMessage says why.
	DeathReason  string `json:"death_reason,omitempty"`
	DeathMessage string `json:"death_message,omitempty"`

	used map[string]float64
}

type placementGroup struct {
	ID      string               `json:"id"`
	Job     string               `json:"job"`
	Bundles []map[string]float64 `json:"bundles"`
	Nodes   []string             `json:"nodes,omitempty"` // per bundle, once placed
	State   string               `json:"state"`           // PENDING, CREATED
}

type task struct {
	ID   string          `json:"id"`
	Job  string          `json:"job"`
	Node string          `json:"node"`
	Spec json.RawMessage `json:"spec"`
}

type gcs struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change, for long polls
	nodes   map[string]*gcsNode
	order   []string
	jobs    map[string]bool
	pgs     map[string]*placementGroup
	tasks   []task
	logs    map[string][]string
	// results are what actors return to their driver, by job and key (the lab's stand-in
	// for Ray's object store).
	results map[string]map[string][]json.RawMessage
	kv      map[string]string
	// clusterID is the GCS's cluster ID (28 bytes, like Ray's ClusterID).
	clusterID []byte
	health    healthConfig
	// token is the cluster's authentication token, "" when token mode is off.
	token string
}

// newGCS makes the head's GCS. dashboard is the API server address it records, which a
// minimal Ray records too although nothing serves it.
func newGCS(session, dashboard, token string) *gcs {
	id := make([]byte, 28)
	_, _ = rand.Read(id)
	return &gcs{changed: make(chan struct{}), nodes: map[string]*gcsNode{}, jobs: map[string]bool{},
		pgs: map[string]*placementGroup{}, logs: map[string][]string{}, results: map[string]map[string][]json.RawMessage{}, clusterID: id, health: healthConfigFromEnv(), token: token,
		kv: map[string]string{"session_name": session, "temp_dir": rayTempDir, "dashboard": dashboard}}
}

func (g *gcs) notify() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// healthConfig is the GCS's health check of raylets (src/ray/common/ray_config_def.h),
// overridable as every Ray config is, by RAY_<name> in the GCS's environment.
type healthConfig struct {
	initialDelay, period, timeout time.Duration
	threshold                     int
}

func healthConfigFromEnv() healthConfig {
	ms := func(name string, def int) time.Duration {
		if v, err := strconv.Atoi(os.Getenv("RAY_" + name)); err == nil && v > 0 {
			return time.Duration(v) * time.Millisecond
		}
		return time.Duration(def) * time.Millisecond
	}
	threshold := 5
	if v, err := strconv.Atoi(os.Getenv("RAY_health_check_failure_threshold")); err == nil && v > 0 {
		threshold = v
	}
	return healthConfig{initialDelay: ms("health_check_initial_delay_ms", 5000), period: ms("health_check_period_ms", 3000),
		timeout: ms("health_check_timeout_ms", 10000), threshold: threshold}
}

// healthCheck checks one raylet as gcs_health_check_manager.cc does: after the initial
// delay, a check every period with a deadline; a success resets the count of remaining
// failures, and when none remain the node is dead.
func (g *gcs) healthCheck(ctx context.Context, id string) {
	g.mu.Lock()
	n := g.nodes[id]
	addr := net.JoinHostPort(n.IP, strconv.Itoa(n.NodeManagerPort))
	g.mu.Unlock()
	remaining := g.health.threshold
	wait := g.health.initialDelay
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = g.health.period
		g.mu.Lock()
		alive := g.nodes[id].State == "ALIVE"
		g.mu.Unlock()
		if !alive {
			return
		}
		c, err := net.DialTimeout("tcp", addr, g.health.timeout)
		if err == nil {
			c.Close()
			remaining = g.health.threshold
			continue
		}
		remaining--
		code := "UNAVAILABLE"
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			code = "DEADLINE_EXCEEDED"
		}
		rayCppLog("W", "gcs_health_check_manager.cc:182", fmt.Sprintf("Health check failed for node %s, remaining checks %d, status %s, response status 0, status message %s, status details ", id, remaining, code, err))
		if remaining > 0 {
			continue
		}
		rayCppLog("W", "gcs_health_check_manager.cc:195", "Node is dead because the health check failed. node_id="+id)
		g.mu.Lock()
		g.markDead(id, "UNEXPECTED_TERMINATION", "health check failed due to missing too many heartbeats")
		g.mu.Unlock()
		return
	}
}

// markDead removes a node from service: its bundles are released (the groups that used
// it go back to pending) and its tasks dropped.
func (g *gcs) markDead(id, reason, msg string) {
	n := g.nodes[id]
	if n == nil || n.State != "ALIVE" {
		return
	}
	n.State, n.EndMS, n.DeathReason, n.DeathMessage = "DEAD", time.Now().UnixMilli(), reason, msg
	if reason == "UNEXPECTED_TERMINATION" {
		rayCppLog("W", "gcs_node_manager.cc:356", fmt.Sprintf("The node with node id: %s and address: %s and node name: %s has been marked dead because the detector has missed too many heartbeats from it. This can happen when a \t(1) raylet crashes unexpectedly (OOM, etc.) \n\t(2) raylet has lagging heartbeats due to slow network or busy workload.", n.ID, n.IP, n.Name))
	}
	for _, pg := range g.pgs {
		if slices.Contains(pg.Nodes, id) {
			g.release(pg)
			pg.State = "PENDING"
		}
	}
	g.notify()
}

func (g *gcs) dropJob(job string) {
	delete(g.jobs, job)
	for id, pg := range g.pgs {
		if pg.Job == job {
			g.release(pg)
			delete(g.pgs, id)
		}
	}
	kept := g.tasks[:0]
	for _, t := range g.tasks {
		if t.Job != job {
			kept = append(kept, t)
		}
	}
	g.tasks = kept
	delete(g.logs, job)
	delete(g.results, job)
	g.notify()
}

func (g *gcs) release(pg *placementGroup) {
	for i, id := range pg.Nodes {
		if n := g.nodes[id]; n != nil {
			for r, v := range pg.Bundles[i] {
				n.used[r] -= v
			}
		}
	}
	pg.Nodes = nil
}

// place tries to place a pending group: bundles in order, each on the alive node with
// the most free capacity that satisfies it (a `node:<ip>` resource pins a bundle).
func (g *gcs) place(pg *placementGroup) {
	if pg.State == "CREATED" {
		return
	}
	free := map[string]map[string]float64{}
	for id, n := range g.nodes {
		if n.State != "ALIVE" {
			continue
		}
		f := map[string]float64{}
		for r, v := range n.Resources {
			f[r] = v - n.used[r]
		}
		free[id] = f
	}
	var chosen []string
	for _, b := range pg.Bundles {
		best := ""
		for _, id := range g.order {
			f, ok := free[id]
			if !ok || !fits(f, b) {
				continue
			}
			if best == "" || f["GPU"] > free[best]["GPU"] {
				best = id
			}
		}
		if best == "" {
			return
		}
		for r, v := range b {
			free[best][r] -= v
		}
		chosen = append(chosen, best)
	}
	for i, id := range chosen {
		for r, v := range pg.Bundles[i] {
			g.nodes[id].used[r] += v
		}
	}
	pg.Nodes, pg.State = chosen, "CREATED"
	g.notify()
}

func fits(free, want map[string]float64) bool {
	for r, v := range want {
		if free[r]+1e-9 < v {
			return false
		}
	}
	return true
}

// authorized says whether a request carries the cluster's token (always, with none).
func (g *gcs) authorized(authorization string) bool {
	return g.token == "" || authorization == "Bearer "+g.token
}

func (g *gcs) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/register", func(w http.ResponseWriter, r *http.Request) {
		var n gcsNode
		if !readJSON(w, r, &n) {
			return
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		n.ID, n.State, n.StartMS, n.used = randomHex(56), "ALIVE", time.Now().UnixMilli(), map[string]float64{}
		if n.Name == "" {
			n.Name = n.IP // NodeName defaults to the node IP
		}
		g.nodes[n.ID] = &n
		g.order = append(g.order, n.ID)
		g.notify()
		go g.healthCheck(context.Background(), n.ID)
		writeJSON(w, n)
	})
	// A raylet that stops gracefully unregisters: dead at once, expectedly.
	mux.HandleFunc("POST /v1/unregister", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.markDead(r.URL.Query().Get("node"), "EXPECTED_TERMINATION", "received SIGTERM")
	})
	mux.HandleFunc("GET /v1/kv", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		defer g.mu.Unlock()
		writeJSON(w, g.kv)
	})
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.jobs[r.URL.Query().Get("job")] = true
	})
	// The raylet reports a driver whose socket closed: its job is finished.
	mux.HandleFunc("POST /v1/jobs/finish", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.dropJob(r.URL.Query().Get("job"))
	})
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, g.nodeList())
	})
	mux.HandleFunc("GET /v1/pgs", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		defer g.mu.Unlock()
		var out []placementGroup
		for _, pg := range g.pgs {
			out = append(out, *pg)
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("POST /v1/pgs", func(w http.ResponseWriter, r *http.Request) {
		var pg placementGroup
		if !readJSON(w, r, &pg) {
			return
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		pg.ID, pg.State = randomHex(36), "PENDING"
		g.jobs[pg.Job] = true
		g.pgs[pg.ID] = &pg
		g.place(&pg)
		writeJSON(w, pg)
	})
	mux.HandleFunc("GET /v1/pgs/{id}", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		defer g.mu.Unlock()
		pg := g.pgs[r.PathValue("id")]
		if pg == nil {
			http.NotFound(w, r)
			return
		}
		g.place(pg)
		writeJSON(w, pg)
	})
	mux.HandleFunc("POST /v1/tasks", func(w http.ResponseWriter, r *http.Request) {
		var t task
		if !readJSON(w, r, &t) {
			return
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		t.ID = randomHex(16)
		g.tasks = append(g.tasks, t)
		g.notify()
		writeJSON(w, t)
	})
	mux.HandleFunc("GET /v1/tasks", func(w http.ResponseWriter, r *http.Request) {
		node := r.URL.Query().Get("node")
		g.mu.Lock()
		dead := g.nodes[node] == nil || g.nodes[node].State != "ALIVE"
		g.mu.Unlock()
		if dead {
			http.Error(w, "node is dead", http.StatusGone)
			return
		}
		mine := wait(g, r.Context(), func() ([]task, bool) {
			var mine []task
			kept := g.tasks[:0]
			for _, t := range g.tasks {
				if t.Node == node {
					mine = append(mine, t)
				} else {
					kept = append(kept, t)
				}
			}
			g.tasks = kept
			return mine, len(mine) > 0
		})
		writeJSON(w, mine)
	})
	mux.HandleFunc("POST /v1/results", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Job   string          `json:"job"`
			Key   string          `json:"key"`
			Value json.RawMessage `json:"value"`
		}
		if !readJSON(w, r, &in) {
			return
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.results[in.Job] == nil {
			g.results[in.Job] = map[string][]json.RawMessage{}
		}
		g.results[in.Job][in.Key] = append(g.results[in.Job][in.Key], in.Value)
		g.notify()
	})
	// GET /v1/results?job=J&key=K&n=N waits (a few seconds at most) for N values.
	mux.HandleFunc("GET /v1/results", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		n, _ := strconv.Atoi(q.Get("n"))
		vals := wait(g, r.Context(), func() ([]json.RawMessage, bool) {
			v := append([]json.RawMessage(nil), g.results[q.Get("job")][q.Get("key")]...)
			return v, len(v) >= max(n, 1)
		})
		writeJSON(w, vals)
	})
	mux.HandleFunc("POST /v1/logs", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Job  string `json:"job"`
			Line string `json:"line"`
		}
		if !readJSON(w, r, &in) {
			return
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if _, ok := g.jobs[in.Job]; ok {
			g.logs[in.Job] = append(g.logs[in.Job], in.Line)
			g.notify()
		}
	})
	mux.HandleFunc("GET /v1/logs", func(w http.ResponseWriter, r *http.Request) {
		job := r.URL.Query().Get("job")
		var after int
		fmt.Sscan(r.URL.Query().Get("after"), &after)
		lines := wait(g, r.Context(), func() ([]string, bool) {
			all := g.logs[job]
			if after >= len(all) {
				return nil, false
			}
			return append([]string(nil), all[after:]...), true
		})
		writeJSON(w, lines)
	})
	// In token mode every call needs the token, as every RPC of Ray's GCS does.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.authorized(r.Header.Get("Authorization")) {
			http.Error(w, rayUnauthenticated, http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// wait long-polls: it returns cond's value as soon as cond holds, or after a few seconds.
func wait[T any](g *gcs, ctx context.Context, cond func() (T, bool)) T {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		g.mu.Lock()
		v, ok := cond()
		ch := g.changed
		g.mu.Unlock()
		if ok {
			return v
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return v
		}
	}
}

func (g *gcs) nodeList() []gcsNode {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]gcsNode, 0, len(g.order))
	for _, id := range g.order {
		out = append(out, *g.nodes[id])
	}
	return out
}

// stateAPI serves the dashboard's `GET /api/v0/nodes` in Ray's envelope.
func (g *gcs) stateAPI() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v0/nodes", func(w http.ResponseWriter, r *http.Request) {
		nodes := g.nodeList()
		rows := make([]map[string]any, 0, len(nodes))
		for _, n := range nodes {
			rows = append(rows, map[string]any{
				"node_id": n.ID, "node_ip": n.IP, "is_head_node": n.Head, "state": n.State,
				"state_message": nil, "node_name": n.IP, "resources_total": n.Resources,
				"labels": map[string]string{"ray.io/node_id": n.ID}, "start_time_ms": n.StartMS, "end_time_ms": n.EndMS,
			})
		}
		writeJSON(w, map[string]any{"result": true, "msg": "", "data": map[string]any{"result": map[string]any{
			"total": len(rows), "num_after_truncation": len(rows), "num_filtered": len(rows), "result": rows,
			"partial_failure_warning": "", "warnings": nil,
		}}})
	})
	return mux
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// gcsClient talks to a GCS at addr (host:port).
type gcsClient struct {
	addr string
	http *http.Client
	// token is sent with every call (this process's Ray in token mode).
	token string
}

func newGCSClient(addr string) *gcsClient {
	return &gcsClient{addr: addr, http: &http.Client{Timeout: 10 * time.Second}, token: clientToken()}
}

func (c *gcsClient) call(ctx context.Context, method, path string, in, out any) error {
	var body bytes.Buffer
	if in != nil {
		if err := json.NewEncoder(&body).Encode(in); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.addr+path, &body)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return &statusError{code: resp.StatusCode, msg: strings.TrimSpace(b.String())}
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return fmt.Sprintf("gcs: %d %s", e.code, e.msg) }

// isUnauthenticated is the GCS refusing this process's token (or its lack of one): Ray's
// GCS client retries only UNAVAILABLE and UNKNOWN (grpc_util.h, IsGrpcRetryableStatus).
func isUnauthenticated(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == http.StatusUnauthorized
}

func isGone(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == http.StatusGone
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
