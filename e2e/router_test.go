//go:build integration

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	tclient "go.temporal.io/sdk/client"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/router"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// oneNodeRouted is the lab spec on one node alone (TP=1), serving model served, routed
// through the router on node-a.
func oneNodeRouted(t *testing.T, name, node, served string) spec.Cluster {
	s := labSpec(t, name)
	n := s.Nodes[0]
	n.Name = node
	n.Env = map[string]string{"TPDEPLOY_SIM_SHARDS": "2", "TPDEPLOY_SIM_SHARD_SECONDS": "0.2"}
	s.Nodes = []spec.Node{n}
	s.Parallel.Tensor = 1
	s.Model.ServedName = served
	s.Router = &spec.Router{Node: theLab.Nodes[0].Name}
	return s
}

// removeRouter removes the router's container on node-a and its routes, which no
// cluster's teardown removes (the router is the fleet's).
func removeRouter(t *testing.T) {
	t.Cleanup(func() {
		_, _ = eng.ContainerRemove(context.Background(), labRouter(), client.ContainerRemoveOptions{Force: true})
		_ = os.RemoveAll(filepath.Join(theLab.NodeRoot(theLab.Nodes[0].Name), activities.RouterDir))
	})
}

// labRouter is the name of the router's container on the lab's node-a (the agent's network
// mode there: container:NODE-CONTAINER).
func labRouter() string {
	return contract.RouterContainer(theLab.Nodes[0].Name, "container:"+theLab.Nodes[0].Container)
}

// Two models, one per node, behind the one router endpoint: /v1/models lists both and each
// is answered through it. Then a staged redeploy of one of them (its only engine replaced)
// under a small load through the router fails no request: the router holds new requests
// while the new engine loads and the old engine's are let finish before it stops.
func TestRouterFrontsTwoModelsAndASwapFailsNoRequest(t *testing.T) {
	// model-a's cluster has an API key (the lab's), model-b's none: behind the one endpoint
	// each keeps its own (the router asks for model-a's key for model-a alone).
	a := oneNodeRouted(t, "e2e-rt-a", theLab.Nodes[0].Name, "model-a")
	a.Secrets.APIKey = &spec.SecretRef{Env: "VLLM_API_KEY"}
	b := oneNodeRouted(t, "e2e-rt-b", theLab.Nodes[1].Name, "model-b")
	removeRouter(t)
	runA, runB := deployFor(t, a), deployFor(t, b)
	resA, resB := deployResult(t, runA, 4*time.Minute), deployResult(t, runB, 4*time.Minute)
	if resA.Router == "" || resB.Router == "" {
		t.Fatalf("no router endpoint: %q %q (warnings %v %v)", resA.Router, resB.Router, resA.Warnings, resB.Warnings)
	}
	router := resA.Router
	t.Logf("router %s (model-b's deploy: %s); model-a at %s, model-b at %s", router, resB.Router, resA.Endpoint, resB.Endpoint)
	out, _ := runStarter(t, "status", a.Name)
	if !bytes.Contains([]byte(out), []byte("router: "+router+"\n")) {
		t.Errorf("starter status lacks the router line:\n%s", out)
	}
	if ids := routerModels(t, router, theLab.APIKey); !slices.Equal(ids, []string{"model-a", "model-b"}) {
		t.Fatalf("router /v1/models with model-a's key: %v, want model-a and model-b", ids)
	}
	if ids := routerModels(t, router, ""); !slices.Equal(ids, []string{"model-b"}) {
		t.Fatalf("router /v1/models without a key: %v, want model-b alone (model-a's cluster has a key)", ids)
	}
	for _, tc := range []struct {
		model, key string
		want       int
	}{{"model-a", theLab.APIKey, 200}, {"model-a", "", 401}, {"model-a", "sk-not-the-key", 401}, {"model-b", "", 200}} {
		if code, err := streamOnce(http.DefaultClient, router, tc.model, tc.key); code != tc.want || (tc.want == 200 && err != nil) {
			t.Fatalf("streamed completion of %s through the router with key %q: %d %v, want %d", tc.model, strings.Replace(tc.key, theLab.APIKey, "the lab's", 1), code, err, tc.want)
		}
	}

	// A third cluster on node-a, whose one GPU model-a's engine holds, is refused at
	// preflight naming the cluster, and leaves nothing.
	c := oneNodeRouted(t, "e2e-rt-c", theLab.Nodes[0].Name, "model-c")
	f, took := failure(t, deployFor(t, c))
	if f.Type != contract.ErrGPUsInUse || !strings.Contains(f.Message, "cluster "+a.Name) {
		t.Errorf("colliding deploy: %s: %s, want GPUsInUse naming cluster %s", f.Type, f.Message, a.Name)
	}
	if left := containersOf(t, c.Name); len(left) > 0 {
		t.Errorf("the refused deploy left %v", left)
	}
	t.Logf("collision refused in %s: %s", took.Round(time.Millisecond), f.Message)

	// The image change under load: eight streaming clients through the router while
	// model-a's only engine is replaced by a staged redeploy on another image (another
	// compilation key: the new engine compiles again, as it would on real nodes). The router
	// holds the requests sent while no engine serves; none fails.
	routerAtSwap := routerContainer(t)
	l := startLoad(router, "model-a", theLab.APIKey, loadClients)
	a2 := a
	a2.Image = "tpdeploy/sim:vllm-0.17.1"
	swapStart := time.Now()
	res := deployResult(t, deployFor(t, a2), 4*time.Minute)
	swapTook := time.Since(swapStart)
	time.Sleep(time.Second)
	ok, failed, longest, errs := l.stop()
	held := routerHeld(t, "model-a")
	if res.Staged == nil || res.Staged.SwappedAt.IsZero() {
		t.Errorf("the redeploy was not a staged swap: %+v; warnings %v", res.Staged, res.Warnings)
	}
	t.Logf("image change of one replica: redeploy %s; %d clients for %s: %d streams answered, %d failed, %d held, the longest %s",
		swapTook.Round(time.Millisecond), loadClients, l.ran.Round(time.Millisecond), ok, failed, held, longest.Round(time.Millisecond))
	if failed != 0 || ok == 0 {
		t.Fatalf("%d streams failed during the swap (%d answered): %v; warnings %v", failed, ok, errs[:min(len(errs), 5)], res.Warnings)
	}
	if logs := clusterLogs(t, a.Name, swapStart); !strings.Contains(logs, "Compiling a graph for dynamic compile range takes") {
		t.Errorf("model-a on a new image did not compile again:\n%s", grepLines(logs, "torch.compile", "compiled graph", "Compiling a graph"))
	}
	var down sync.WaitGroup
	for _, name := range []string{a.Name, b.Name} {
		down.Go(func() { teardown(t, name) })
	}
	down.Wait()
	if after := routerContainer(t); after != routerAtSwap {
		t.Logf("the router's container changed during the swap or the teardowns: %s before, %s after", routerAtSwap, after)
	}

	replicasBehindTheRouter(t, router, l.ran)
}

// loadClients is how many clients stream through the router during the changes, and
// loadFor how long they stream in all, across the one-replica image change and the rolling
// change (#37: eight concurrent streaming clients for 60 s). The rolling change's load goes
// on past the roll until the two make loadFor: the new replicas take it.
const (
	loadClients = 8
	loadFor     = 60 * time.Second
)

// One model of two replicas (replicas: 2, TP=1, one per node) behind the same router, on
// the nodes the two models above left: /v1/models lists it once; a rolling change under
// eight clients fails no request and holds none (each replica's staged swap drains its
// route first, so the other answers), the load going on until it and the one-replica
// change's (loaded, how long that ran) make loadFor; then one replica's engine killed
// mid-traffic fails only the requests in flight on it.
func replicasBehindTheRouter(t *testing.T, router string, loaded time.Duration) {
	r := labSpec(t, "e2e-rt-r")
	r.Parallel.Tensor, r.Replicas = 1, 2
	r.Model.ServedName = "model-r"
	r.Router = &spec.Router{Node: theLab.Nodes[0].Name}
	r.Nodes = slices.Clone(r.Nodes)
	for i := range r.Nodes {
		r.Nodes[i].Env = map[string]string{"TPDEPLOY_SIM_SHARDS": "2", "TPDEPLOY_SIM_SHARD_SECONDS": "0.2"}
	}
	members := r.Members()
	since := time.Now()
	for _, m := range members {
		t.Cleanup(func() { finishCluster(t, m.Name, since) })
	}
	// The router outlives these clusters: remove it before their checks for containers of
	// no cluster run (cleanups run last first). It is the same container as before they
	// began unless something replaced it; if so, say when (CI saw a router created after
	// this point once, cause not found).
	removeRouter(t)
	routerBefore := routerContainer(t)
	defer func() {
		if after := routerContainer(t); after != routerBefore {
			t.Logf("the router's container changed during the replicas' part: %s before, %s after", routerBefore, after)
		}
	}()
	defer func() {
		var down sync.WaitGroup
		for _, m := range members {
			down.Go(func() { teardown(t, m.Name) })
		}
		down.Wait()
	}()
	// The first deploy has nothing to roll away from: both replicas at once.
	runs := make([]tclient.WorkflowRun, len(members))
	for i, m := range members {
		runs[i] = deployFor(t, m)
	}
	for _, run := range runs {
		deployResult(t, run, 4*time.Minute)
	}
	if ids := routerModels(t, router, ""); !slices.Equal(ids, []string{"model-r"}) {
		t.Fatalf("router /v1/models: %v, want model-r once", ids)
	}
	held0 := routerHeld(t, "model-r")

	// The rolling change under load (another spec: the simulator's pacing; not its
	// compilation: each new engine loads the graphs its node's first one compiled, from the
	// node's compilation cache).
	l := startLoad(router, "model-r", "", loadClients)
	changed := r
	changed.Nodes = slices.Clone(r.Nodes)
	for i := range changed.Nodes {
		changed.Nodes[i].Env = map[string]string{"TPDEPLOY_SIM_SHARDS": "3", "TPDEPLOY_SIM_SHARD_SECONDS": "0.2"}
	}
	rollStart := time.Now()
	steps, err := control.Controller{Client: tc, SignKey: theLab.SignKey}.Roll(context.Background(), workflows.DeployRequest{Spec: changed, Trigger: "test", ReportEvery: spec.Duration(time.Second)}, nil)
	rollTook := time.Since(rollStart)
	time.Sleep(max(time.Second, loadFor-loaded-time.Since(l.began)))
	ok, failed, longest, errs := l.stop()
	held := routerHeld(t, "model-r") - held0
	if err != nil {
		t.Fatalf("roll: %v", err)
	}
	for _, st := range steps {
		if st.Result.Staged == nil || st.Result.Staged.SwappedAt.IsZero() {
			t.Errorf("%s: not a staged swap: %+v", st.Member, st.Result.Staged)
		}
		t.Logf("%s rolled in %s", st.Member, st.Took.Round(time.Millisecond))
	}
	t.Logf("rolling change of two replicas: %s; %d clients for %s: %d answered, %d failed, %d held, the longest %s; %s of load across both changes",
		rollTook.Round(time.Millisecond), loadClients, l.ran.Round(time.Millisecond), ok, failed, held, longest.Round(time.Millisecond), (loaded + l.ran).Round(time.Millisecond))
	if failed != 0 || ok == 0 || held != 0 {
		t.Fatalf("the roll failed %d requests and held %d (%d answered): %v", failed, held, ok, errs[:min(len(errs), 5)])
	}
	if loaded+l.ran < loadFor {
		t.Errorf("the clients streamed for %s across both changes, want %s", loaded+l.ran, loadFor)
	}
	// The compilation cache: each replacement (same image, model, TP and args) loaded
	// what its node's first engine compiled.
	for _, m := range members {
		if logs := clusterLogs(t, m.Name, rollStart); !strings.Contains(logs, "Directly load the compiled graph(s) for dynamic shape from the cache") || strings.Contains(logs, "Compiling a graph for ") {
			t.Errorf("%s's new engine did not load the cached graphs (containers %v, %d bytes of logs since the roll):\n%s", m.Name, containersOf(t, m.Name), len(logs), grepLines(logs, "torch.compile", "compiled graph", "Compiling a graph", "Loading weights", "Starting vLLM"))
		}
	}

	// One replica's engine killed mid-traffic: the requests in flight on it fail (the
	// router's 502 names the replica); the others, and every later one, go to the other.
	victim := members[1].Name
	l = startLoad(router, "model-r", "", 4)
	time.Sleep(time.Second)
	inFlight := routerOutstanding(t, "model-r", victim)
	killing := time.Now()
	for _, c := range containersOf(t, victim) {
		if _, err := eng.ContainerKill(context.Background(), c, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
			t.Errorf("kill %s: %v", c, err)
		}
	}
	killed := time.Now()
	time.Sleep(3 * time.Second)
	ok, failed, _, errs = l.stop()
	// The kill is one engine call per container; a stream sent while they run may still
	// find the engine up and be cut by a later one, so only those sent before the first
	// (one per client at most) and after the last (none) are bounded.
	before, after := failed-l.failedSince(killing), l.failedSince(killed)
	t.Logf("replica %s killed in %s: %d in flight on it a moment before; %d failed: %d sent before the kill, %d during it, %d after it; %d answered", victim, killed.Sub(killing).Round(time.Millisecond), inFlight, failed, before, failed-before-after, after, ok)
	if before > 4 || after > 0 || ok == 0 {
		t.Errorf("%d streams failed, %d sent before the kill (4 clients, one stream each in flight at most), %d after it, %d answered: %v", failed, before, after, ok, errs[:min(len(errs), 5)])
	}
	for _, e := range errs {
		// The router's 502 names the replica; a stream the kill cut once its events had
		// begun ends early instead (the router aborts the client's connection); and one
		// whose engine core died a moment before its API server ends with vLLM's
		// EngineDeadError event (lab/sim's engine-death path, as vLLM's), which names no
		// replica: the counts above bound those to the kill.
		if !strings.Contains(e, "replica "+victim) && !strings.Contains(e, "stream cut") && !strings.Contains(e, "without [DONE]") &&
			!strings.Contains(e, "EngineCore encountered an issue") {
			t.Errorf("a failure not on the killed replica: %s", e)
		}
	}
}

// load is n clients streaming completions through the router as fast as answered, from
// began, for ran (once stopped).
type load struct {
	began   time.Time
	ran     time.Duration
	stopc   chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	ok      int
	errs    []string
	started []time.Time // when each failed request was sent
	longest time.Duration
}

// failedSince is how many of the failed requests were sent at or after t.
func (l *load) failedSince(t time.Time) int {
	n := 0
	for _, s := range l.started {
		if !s.Before(t) {
			n++
		}
	}
	return n
}

// streamOnce sends one streamed completion of model through the router with key (none:
// no Authorization) and reads its events: an error unless every chunk is model's and the
// stream ends with [DONE] (a stream cut mid-way, or vLLM's error event, is a failure).
func streamOnce(hc *http.Client, router, model, key string) (int, error) {
	body := fmt.Sprintf(`{"model": %q, "prompt": "hello", "max_tokens": 4, "stream": true}`, model)
	req, err := http.NewRequest(http.MethodPost, router+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, fmt.Errorf("%s %s", resp.Header.Get("Content-Type"), b)
	}
	sc := bufio.NewScanner(resp.Body)
	chunks, done := 0, false
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		switch {
		case !ok:
			continue
		case d == "[DONE]":
			done = true
			continue
		}
		var c struct {
			Model string          `json:"model"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil || c.Error != nil || c.Model != model {
			return resp.StatusCode, fmt.Errorf("event %s: %v", d, err)
		}
		chunks++
	}
	if err := sc.Err(); err != nil {
		return resp.StatusCode, fmt.Errorf("stream cut after %d chunks: %w", chunks, err)
	}
	if !done || chunks == 0 {
		return resp.StatusCode, fmt.Errorf("stream ended after %d chunks without [DONE]", chunks)
	}
	return resp.StatusCode, nil
}

func startLoad(router, model, key string, n int) *load {
	l := &load{stopc: make(chan struct{}), began: time.Now()}
	hc := &http.Client{Timeout: 3 * time.Minute}
	for range n {
		l.wg.Go(func() {
			for {
				select {
				case <-l.stopc:
					return
				default:
				}
				start := time.Now()
				code, err := streamOnce(hc, router, model, key)
				l.mu.Lock()
				l.longest = max(l.longest, time.Since(start))
				if err != nil {
					l.errs, l.started = append(l.errs, fmt.Sprintf("%d %v", code, err)), append(l.started, start)
				} else {
					l.ok++
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

// clusterLogs is the output of every container of the cluster since a time, and the
// output of the vLLM now running in each (the launch wrapper's log, vllmproc.go): rank 0's
// lines are in the container's output where a Ray worker runs it (RayExecutorV2), in
// vLLM's own output where the driver does (the legacy executor).
func clusterLogs(t testing.TB, cluster string, since time.Time) string {
	t.Helper()
	var buf bytes.Buffer
	for _, c := range containersOf(t, cluster) {
		if rc, err := eng.ContainerLogs(context.Background(), c, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Since: since.Format(time.RFC3339Nano)}); err == nil {
			_, _ = buf.ReadFrom(rc)
			rc.Close()
		}
		if out, err := execOut(c, "cat", "/tmp/tpdeploy/vllm/log"); err == nil {
			buf.WriteString(out)
		}
	}
	return buf.String()
}

// grepLines are the lines of s holding any of the phrases.
func grepLines(s string, phrases ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, p := range phrases {
			if strings.Contains(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// stop ends the load: answered, failed, the longest request, the failures.
func (l *load) stop() (int, int, time.Duration, []string) {
	close(l.stopc)
	l.wg.Wait()
	l.ran = time.Since(l.began)
	return l.ok, len(l.errs), l.longest, l.errs
}

// routerModels are the models GET /v1/models lists to a client with key (none: no
// Authorization).
func routerModels(t *testing.T, router, key string) []string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, router+"/v1/models", nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Data []struct{ ID string } }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids
}

// routerAdmin GETs path from the router's admin API on its socket (the lab's node root).
func routerAdmin(t *testing.T, path string) []byte {
	t.Helper()
	sock := filepath.Join(theLab.NodeRoot(theLab.Nodes[0].Name), activities.RouterDir, "router.sock")
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://router" + path)
	if err != nil {
		t.Fatalf("router admin %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return b
}

// routerHeld is how many requests for model the router has held so far (its hold
// histogram's count).
func routerHeld(t *testing.T, model string) int {
	t.Helper()
	prefix := router.MetricHoldDuration + `_count{model="` + model + `"} `
	for _, line := range strings.Split(string(routerAdmin(t, "/metrics")), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// routerOutstanding is the replica's requests in flight, as the router's state says.
func routerOutstanding(t *testing.T, model, replica string) int {
	t.Helper()
	var st []router.ModelState
	if err := json.Unmarshal(routerAdmin(t, "/state"), &st); err != nil {
		t.Fatalf("router state: %v", err)
	}
	for _, m := range st {
		for _, r := range m.Replicas {
			if m.ID == model && r.Name == replica {
				return r.Outstanding
			}
		}
	}
	return -1
}

// routerContainer is the router's container on node-a, its ID and when it was created.
func routerContainer(t *testing.T) string {
	t.Helper()
	info, err := eng.ContainerInspect(context.Background(), labRouter(), client.ContainerInspectOptions{})
	if err != nil {
		return "none (" + err.Error() + ")"
	}
	return info.Container.ID[:12] + " created " + info.Container.Created
}
