package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// The GCS: the head's registry of nodes, jobs, placement groups and tasks. Real Ray
// speaks gRPC; the simulator speaks JSON over HTTP on the same port, which is all that
// matters to reachability.

// deadAfter is how long a node or job may go silent before it is declared dead.
const deadAfter = 5 * time.Second

type gcsNode struct {
	ID        string             `json:"node_id"`
	IP        string             `json:"node_ip"`
	Head      bool               `json:"is_head_node"`
	State     string             `json:"state"`
	Resources map[string]float64 `json:"resources_total"`
	StartMS   int64              `json:"start_time_ms"`
	EndMS     int64              `json:"end_time_ms"`
	Name      string             `json:"node_name"`

	lastSeen time.Time
	used     map[string]float64
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
	jobs    map[string]time.Time
	pgs     map[string]*placementGroup
	tasks   []task
	logs    map[string][]string
}

func newGCS() *gcs {
	return &gcs{changed: make(chan struct{}), nodes: map[string]*gcsNode{}, jobs: map[string]time.Time{},
		pgs: map[string]*placementGroup{}, logs: map[string][]string{}}
}

func (g *gcs) notify() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// reap marks silent nodes dead and drops silent jobs with their groups and tasks.
func (g *gcs) reap(now time.Time) {
	for _, n := range g.nodes {
		if n.State == "ALIVE" && now.Sub(n.lastSeen) > deadAfter {
			n.State, n.EndMS = "DEAD", now.UnixMilli()
			g.notify()
		}
	}
	for j, seen := range g.jobs {
		if now.Sub(seen) > deadAfter {
			g.dropJob(j)
		}
	}
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

func (g *gcs) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/register", func(w http.ResponseWriter, r *http.Request) {
		var n gcsNode
		if !readJSON(w, r, &n) {
			return
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		n.ID, n.State, n.StartMS, n.lastSeen, n.used = randomHex(56), "ALIVE", time.Now().UnixMilli(), time.Now(), map[string]float64{}
		g.nodes[n.ID] = &n
		g.order = append(g.order, n.ID)
		g.notify()
		writeJSON(w, n)
	})
	mux.HandleFunc("POST /v1/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if id := r.URL.Query().Get("node"); id != "" {
			n := g.nodes[id]
			if n == nil || n.State != "ALIVE" {
				http.Error(w, "node is dead", http.StatusGone)
				return
			}
			n.lastSeen = time.Now()
		}
		if job := r.URL.Query().Get("job"); job != "" {
			g.jobs[job] = time.Now()
		}
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
		g.jobs[pg.Job] = time.Now()
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
	return mux
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

// run serves until ctx ends, reaping silent nodes and jobs once a second.
func (g *gcs) reaper(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			g.mu.Lock()
			g.reap(now)
			g.mu.Unlock()
		}
	}
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
}

func newGCSClient(addr string) *gcsClient {
	return &gcsClient{addr: addr, http: &http.Client{Timeout: 10 * time.Second}}
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
