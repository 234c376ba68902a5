package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/logscan"
)

// rayNodesURL is the dashboard's state API on the head. The agent shares the head's
// network namespace (host networking, or the lab node's namespace), and Ray's dashboard
// listens on 127.0.0.1 by default.
func rayNodesURL(port int) string { return fmt.Sprintf("http://127.0.0.1:%d/api/v0/nodes", port) }

// stateNodes is the state API's envelope around its rows.
type stateNodes struct {
	Result bool   `json:"result"`
	Msg    string `json:"msg"`
	Data   struct {
		Result struct {
			Result []struct {
				NodeID    string             `json:"node_id"`
				NodeIP    string             `json:"node_ip"`
				IsHead    bool               `json:"is_head_node"`
				State     string             `json:"state"`
				Resources map[string]float64 `json:"resources_total"`
			} `json:"result"`
		} `json:"result"`
	} `json:"data"`
}

// parseStateNodes reads `GET /api/v0/nodes`.
func parseStateNodes(body []byte) ([]RegisteredNode, error) {
	var s stateNodes
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("ray state API: %w", err)
	}
	if !s.Result {
		return nil, fmt.Errorf("ray state API: %s", s.Msg)
	}
	var out []RegisteredNode
	for _, r := range s.Data.Result.Result {
		ip, err := netip.ParseAddr(r.NodeIP)
		if err != nil {
			return nil, fmt.Errorf("ray state API: node %s: ip %q: %w", r.NodeID, r.NodeIP, err)
		}
		out = append(out, RegisteredNode{NodeID: r.NodeID, IP: ip, Alive: r.State == "ALIVE", GPUs: r.Resources["GPU"], Head: r.IsHead})
	}
	return out, nil
}

// placementVerdict compares Ray's alive nodes with the plan. It returns nil when every
// planned node is alive under its planned address with enough GPUs; a non-retryable
// error when that can no longer happen by waiting (a node registered under another
// address, two nodes under one); and wait=true when nodes are still missing.
func placementVerdict(req PlacementRequest, nodes []RegisteredNode) (report PlacementReport, wait bool, err error) {
	planned := map[netip.Addr]string{}
	for _, n := range req.Plan.Nodes {
		planned[n.Address] = n.Name
	}
	seen := map[netip.Addr]int{}
	var unexpected []RegisteredNode
	for _, n := range nodes {
		if !n.Alive {
			continue
		}
		seen[n.IP]++
		if _, ok := planned[n.IP]; ok {
			report.Nodes = append(report.Nodes, n)
			report.GPUs += n.GPUs
		} else {
			unexpected = append(unexpected, n)
		}
	}
	for ip, count := range seen {
		if count > 1 {
			return report, false, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("%d Ray nodes registered under %s (vLLM refuses duplicate node IPs): give every node its own --node-ip-address", count, ip), ErrDuplicateAddress, nil)
		}
	}
	var missing []string
	for _, n := range req.Plan.Nodes {
		if seen[n.Address] == 0 {
			missing = append(missing, n.Name)
		}
	}
	if len(unexpected) > 0 {
		var parts []string
		for _, u := range unexpected {
			who := "a Ray node"
			switch {
			case u.Head:
				who = req.Plan.Head
			case len(missing) == 1 && len(unexpected) == 1:
				who = missing[0]
			}
			want := "an address in the plan"
			if np, ok := req.Plan.Node(who); ok {
				want = np.Address.String()
			}
			parts = append(parts, fmt.Sprintf("%s registered with Ray as %s, planned %s", who, u.IP, want))
		}
		return report, false, temporal.NewNonRetryableApplicationError(
			strings.Join(parts, "; ")+fmt.Sprintf(" (vLLM would pin its placement group to node:<planned address> and wait ~42 minutes; the Ray container must honour --node-ip-address)"),
			ErrPlacementMismatch, nil)
	}
	if len(missing) > 0 {
		return report, true, fmt.Errorf("not registered with Ray yet: %s", strings.Join(missing, ", "))
	}
	if report.GPUs+1e-9 < float64(req.NeedGPUs) {
		return report, false, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("Ray offers %.0f GPUs on the planned nodes, tensor x pipeline needs %d", report.GPUs, req.NeedGPUs), ErrInsufficientGPUs, nil)
	}
	sort.Slice(report.Nodes, func(i, j int) bool { return report.Nodes[i].IP.Less(report.Nodes[j].IP) })
	return report, false, nil
}

// CheckPlacement proves, before vLLM starts, that every planned node is alive in Ray under
// its planned address with enough GPUs. A node registered under another address (the
// seed's failure 1) fails at once instead of after vLLM's 42-minute wait.
func (a *Node) CheckPlacement(ctx context.Context, req PlacementRequest) (PlacementReport, error) {
	if err := a.checkNode(req.Node); err != nil {
		return PlacementReport{}, err
	}
	hc := &http.Client{Timeout: 3 * time.Second}
	// Give up a little before the step's own timeout, so the operator gets the reason (and
	// Ray's own view) rather than a bare timeout.
	deadline := time.Now().Add(time.Minute)
	if d := activity.GetInfo(ctx).Deadline; !d.IsZero() {
		deadline = d.Add(-3 * time.Second)
	}
	var last error
	for {
		activity.RecordHeartbeat(ctx, fmt.Sprint(last))
		body, err := a.fetch(ctx, hc, rayNodesURL(req.DashboardPort))
		if err == nil {
			var nodes []RegisteredNode
			if nodes, err = parseStateNodes(body); err == nil {
				report, wait, verr := placementVerdict(req, nodes)
				if !wait {
					return report, verr
				}
				err = verr
			}
		}
		last = err
		if time.Now().After(deadline) {
			return PlacementReport{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("placement not proven: %v%s", last, a.rayStatusSummary(ctx, req)), ErrNodeNotRegistered, nil)
		}
		select {
		case <-ctx.Done():
			return PlacementReport{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rayStatusSummary is Ray's own account for an error message, or "" when it cannot be had.
func (a *Node) rayStatusSummary(ctx context.Context, req PlacementRequest) string {
	if req.RayHead == "" {
		return ""
	}
	eng, _, err := a.engines.engine(req.DockerHost)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := execRayStatus(ctx, eng, req.RayHead)
	if err != nil {
		return fmt.Sprintf(" (ray status: %v)", err)
	}
	return " (ray status: " + st.String() + ")"
}

// RayNodesAlive checks once that every planned node is alive in Ray under its planned
// address (the supervisor's periodic Ray check): a node that died or came back under
// another address is an error naming it.
func (a *Node) RayNodesAlive(ctx context.Context, req PlacementRequest) (PlacementReport, error) {
	if err := a.checkNode(req.Node); err != nil {
		return PlacementReport{}, err
	}
	body, err := a.fetch(ctx, &http.Client{Timeout: 3 * time.Second}, rayNodesURL(req.DashboardPort))
	if err != nil {
		return PlacementReport{}, temporal.NewNonRetryableApplicationError("ray dashboard: "+err.Error(), ErrDashboard, nil)
	}
	nodes, err := parseStateNodes(body)
	if err != nil {
		return PlacementReport{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrDashboard, nil)
	}
	report, wait, err := placementVerdict(req, nodes)
	if wait {
		return report, temporal.NewNonRetryableApplicationError(err.Error(), ErrNodeNotRegistered, nil)
	}
	return report, err
}

func (a *Node) fetch(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	var body []byte
	err := a.inNetNS(func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err = io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return err
	})
	return body, err
}

// WatchServing follows vLLM's output from the cursor and its endpoint until it serves,
// a fatal line appears, the container exits, or ReportWithin passes (then it returns the
// progress so far, and the workflow calls again from there). It heartbeats its progress;
// a retried attempt (the agent restarted) resumes from the last heartbeat.
func (a *Node) WatchServing(ctx context.Context, req WatchRequest) (ServingProgress, error) {
	if err := a.checkNode(req.Node); err != nil {
		return ServingProgress{}, err
	}
	p := req.Cursor
	if activity.HasHeartbeatDetails(ctx) {
		var hb ServingProgress
		if activity.GetHeartbeatDetails(ctx, &hb) == nil && !hb.Since.Before(p.Since) {
			p = hb
		}
	}
	n, _ := req.Spec.Node(req.Node)
	eng, addr, err := a.engines.engine(n.DockerHost)
	if err != nil {
		return p, err
	}
	id := req.Container.ID
	if id == "" {
		id = req.Container.Name
	}
	info, err := eng.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return p, temporal.NewNonRetryableApplicationError(fmt.Sprintf("vllm container %s is gone", req.Container.Name), ErrContainerExited, nil)
	}
	if err != nil {
		return p, engineError(addr, "inspect "+req.Container.Name, err)
	}
	started := time.Now()
	if info.Container.State != nil {
		if t, err := time.Parse(time.RFC3339Nano, info.Container.State.StartedAt); err == nil {
			started = t
		}
	}

	wctx, cancel := context.WithTimeout(ctx, max(req.ReportWithin, 2*time.Second))
	defer cancel()
	var mu sync.Mutex // guards p while the follower updates it
	snapshot := func() ServingProgress {
		mu.Lock()
		defer mu.Unlock()
		q := p
		q.Elapsed = time.Since(started)
		return q
	}
	followed := make(chan error, 1)
	// announced is poked when vLLM logs that its server is up, so readiness is checked
	// then rather than on the next tick.
	announced := make(chan struct{}, 1)
	go func() {
		followed <- a.followVLLM(wctx, ctx, eng, id, req.Container.Name, &mu, &p, announced)
	}()
	ready := make(chan struct{}, 1)
	go func() {
		// Check at once, then every second: a short ReportWithin must not end each call
		// before the first check.
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			if a.serving(wctx, req) {
				ready <- struct{}{}
				return
			}
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			case <-announced:
			}
		}
	}()
	hb := time.NewTicker(2 * time.Second)
	defer hb.Stop()
	for {
		select {
		case <-ready:
			cancel()
			<-followed
			q := snapshot()
			q.Serving, q.Phase = true, "serving"
			return q, nil
		case err := <-followed:
			if err == nil && ctx.Err() != nil {
				err = ctx.Err()
			}
			q := snapshot()
			a.logger().Debug("vllm progress", zap.String("phase", q.Phase), zap.Int("shards", q.ShardsLoaded), zap.Error(err))
			return q, err
		case <-hb.C:
			activity.RecordHeartbeat(ctx, snapshot())
		}
	}
}

// followVLLM reads vLLM's output into *p (under mu) until wctx ends (nil), a fatal line
// appears (its typed error) or the output ends because the container stopped
// (ContainerExited with the exit code and the last lines).
func (a *Node) followVLLM(wctx, ctx context.Context, eng containerEngine, id, name string, mu *sync.Mutex, p *ServingProgress, announced chan<- struct{}) error {
	var tail []string
	cur := logCursor{Since: p.Since, Seen: p.SeenAtSince}
	_, err := followLogs(wctx, eng, id, cur, func(l logLine) error {
		line := logscan.Parse(l.Text)
		tail = append(tail, line.Text)
		if len(tail) > 5 {
			tail = tail[1:]
		}
		cur.advance(l.Time)
		mu.Lock()
		defer mu.Unlock()
		p.Since, p.SeenAtSince = cur.Since, cur.Seen
		if ph := logscan.Phase(line.Text); ph != "" {
			p.Phase = ph
			if ph == "ready" {
				select {
				case announced <- struct{}{}:
				default:
				}
			}
		}
		if sp, ok := logscan.ParseProgress(line.Text); ok {
			p.ShardsLoaded, p.ShardsTotal, p.Percent, p.ETA = sp.Loaded, sp.Total, sp.Percent, sp.Remaining
		}
		f := logscan.Classify(line)
		switch {
		case f == nil:
		case f.Fatal:
			return temporal.NewNonRetryableApplicationError(f.Message()+" [line: "+clipLine(f.Line)+"]", f.Type, nil)
		case !slices.Contains(p.Warnings, f.Message()):
			p.Warnings = append(p.Warnings, f.Message())
		}
		return nil
	})
	if err != nil || wctx.Err() != nil {
		return err
	}
	code := -1
	if info, err := eng.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err == nil && info.Container.State != nil {
		code = info.Container.State.ExitCode
	}
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("vllm container %s exited with code %d; last lines: %s", name, code, strings.Join(tail, " | ")), ErrContainerExited, nil)
}

func clipLine(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// serving is vLLM's readiness: /health answers 200, /v1/models lists the served model,
// and, when the spec asks for a smoke test, one completion answers.
func (a *Node) serving(ctx context.Context, req WatchRequest) bool {
	hc := &http.Client{Timeout: 3 * time.Second}
	fetch := func(ctx context.Context, url string) ([]byte, error) { return a.fetch(ctx, hc, url) }
	if CheckServing(ctx, fetch, req.Endpoint, req.Spec.Model.ServedName) != nil {
		return false
	}
	if req.Spec.SmokeTest {
		return a.smokeTest(ctx, req) == nil
	}
	return true
}

// CheckServing is the readiness test every part of tpdeploy uses: GET /health answers 200
// and GET /v1/models lists the served name. fetch returns a body for a 200 answer only.
func CheckServing(ctx context.Context, fetch func(ctx context.Context, url string) ([]byte, error), endpoint, served string) error {
	if _, err := fetch(ctx, endpoint+"/health"); err != nil {
		return err
	}
	body, err := fetch(ctx, endpoint+"/v1/models")
	if err != nil {
		return err
	}
	var models struct {
		Data []modelEntry `json:"data"`
	}
	if err := json.Unmarshal(body, &models); err != nil {
		return fmt.Errorf("GET %s/v1/models: %w", endpoint, err)
	}
	if !slices.Contains(models.Data, modelEntry{ID: served}) {
		return fmt.Errorf("GET %s/v1/models does not list %q", endpoint, served)
	}
	return nil
}

// modelEntry is the part of a /v1/models entry the readiness check compares.
type modelEntry struct {
	ID string `json:"id"`
}

func (a *Node) smokeTest(ctx context.Context, req WatchRequest) error {
	return a.inNetNS(func() error {
		b, _ := json.Marshal(map[string]any{"model": req.Spec.Model.ServedName, "prompt": "tpdeploy smoke test", "max_tokens": 4})
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, req.Endpoint+"/v1/completions", strings.NewReader(string(b)))
		if err != nil {
			return err
		}
		r.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(r)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var out struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil || len(out.Choices) == 0 {
			return fmt.Errorf("completion: %s", resp.Status)
		}
		return nil
	})
}
