//go:build integration

package e2e

import (
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
	"sync/atomic"
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
		_, _ = eng.ContainerRemove(context.Background(), contract.RouterContainer(theLab.Nodes[0].Name), client.ContainerRemoveOptions{Force: true})
		_ = os.RemoveAll(filepath.Join(theLab.NodeRoot(theLab.Nodes[0].Name), activities.RouterDir))
	})
}

// Two models, one per node, behind the one router endpoint: /v1/models lists both and each
// is answered through it. Then a staged redeploy of one of them (its only engine replaced)
// under a small load through the router fails no request: the router holds new requests
// while the new engine loads and the old engine's are let finish before it stops.
func TestRouterFrontsTwoModelsAndASwapFailsNoRequest(t *testing.T) {
	a := oneNodeRouted(t, "e2e-rt-a", theLab.Nodes[0].Name, "model-a")
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
	resp, err := http.Get(router + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Data []struct{ ID string } }
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	if err != nil || !slices.Equal(ids, []string{"model-a", "model-b"}) {
		t.Fatalf("router /v1/models: %v %v, want model-a and model-b", ids, err)
	}
	hc := &http.Client{Timeout: 3 * time.Minute}
	complete := func(model string) (int, error) {
		body := fmt.Sprintf(`{"model": %q, "prompt": "hello", "max_tokens": 4}`, model)
		resp, err := hc.Post(router+"/v1/completions", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var c struct{ Model string }
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
			return resp.StatusCode, err
		}
		if c.Model != model {
			return resp.StatusCode, fmt.Errorf("answered by %q", c.Model)
		}
		return resp.StatusCode, nil
	}
	for _, m := range []string{"model-a", "model-b"} {
		if code, err := complete(m); code != 200 || err != nil {
			t.Fatalf("completion of %s through the router: %d %v", m, code, err)
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

	// The swap under load: four clients through the router while model-a's only engine
	// is replaced by a staged redeploy (another spec: the simulator's pacing changed).
	var ok, failed atomic.Int64
	var mu sync.Mutex
	var longest time.Duration
	var errs []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				code, err := complete("model-a")
				took := time.Since(start)
				mu.Lock()
				longest = max(longest, took)
				if code != 200 || err != nil {
					failed.Add(1)
					errs = append(errs, fmt.Sprintf("%d %v", code, err))
				} else {
					ok.Add(1)
				}
				mu.Unlock()
			}
		}()
	}
	a2 := a
	a2.Nodes = slices.Clone(a.Nodes)
	a2.Nodes[0].Env = map[string]string{"TPDEPLOY_SIM_SHARDS": "3", "TPDEPLOY_SIM_SHARD_SECONDS": "0.2"}
	swapStart := time.Now()
	res := deployResult(t, deployFor(t, a2), 4*time.Minute)
	swapTook := time.Since(swapStart)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if res.Staged == nil || res.Staged.SwappedAt.IsZero() {
		t.Errorf("the redeploy was not a staged swap: %+v", res.Staged)
	}
	t.Logf("swap: redeploy %s; through the router %d requests answered, %d failed, the longest %s", swapTook.Round(time.Millisecond), ok.Load(), failed.Load(), longest.Round(time.Millisecond))
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Fatalf("%d requests failed during the swap (%d answered): %v; warnings %v", failed.Load(), ok.Load(), errs[:min(len(errs), 5)], res.Warnings)
	}
	var down sync.WaitGroup
	for _, name := range []string{a.Name, b.Name} {
		down.Go(func() { teardown(t, name) })
	}
	down.Wait()

	replicasBehindTheRouter(t, router)
}

// One model of two replicas (replicas: 2, TP=1, one per node) behind the same router, on
// the nodes the two models above left: /v1/models lists it once; a rolling image change
// under four clients fails no request and holds none (each replica's staged swap drains
// its route first, so the other answers); then one replica's engine killed mid-traffic
// fails only the requests in flight on it.
func replicasBehindTheRouter(t *testing.T, router string) {
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
	if ids := routerModels(t, router); !slices.Equal(ids, []string{"model-r"}) {
		t.Fatalf("router /v1/models: %v, want model-r once", ids)
	}
	held0 := routerHeld(t, "model-r")

	// The rolling image change under load.
	l := startLoad(router, "model-r", 4)
	changed := r
	changed.Image = "tpdeploy/sim:vllm-0.17.1"
	rollStart := time.Now()
	steps, err := control.Controller{Client: tc, SignKey: theLab.SignKey}.Roll(context.Background(), workflows.DeployRequest{Spec: changed, Trigger: "test", ReportEvery: spec.Duration(time.Second)}, nil)
	rollTook := time.Since(rollStart)
	time.Sleep(time.Second)
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
	t.Logf("rolling image change: %s; through the router %d answered, %d failed, %d held, the longest %s", rollTook.Round(time.Millisecond), ok, failed, held, longest.Round(time.Millisecond))
	if failed != 0 || ok == 0 || held != 0 {
		t.Fatalf("the roll failed %d requests and held %d (%d answered): %v", failed, held, ok, errs[:min(len(errs), 5)])
	}

	// One replica's engine killed mid-traffic: the requests in flight on it fail (the
	// router's 502 names the replica); the others, and every later one, go to the other.
	victim := members[1].Name
	l = startLoad(router, "model-r", 4)
	time.Sleep(time.Second)
	inFlight := routerOutstanding(t, "model-r", victim)
	for _, c := range containersOf(t, victim) {
		if _, err := eng.ContainerKill(context.Background(), c, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
			t.Errorf("kill %s: %v", c, err)
		}
	}
	killed := time.Now()
	time.Sleep(3 * time.Second)
	ok, failed, _, errs = l.stop()
	after := l.failedSince(killed)
	t.Logf("replica %s killed: %d in flight on it a moment before; %d failed, all sent before the kill, %d sent after it failed; %d answered", victim, inFlight, failed, after, ok)
	if failed > 4 || after > 0 || ok == 0 {
		t.Errorf("%d requests failed (4 clients, one request each in flight at most), %d of them sent after the kill, %d answered: %v", failed, after, ok, errs[:min(len(errs), 5)])
	}
	for _, e := range errs {
		if !strings.Contains(e, "replica "+victim) {
			t.Errorf("a failure not on the killed replica: %s", e)
		}
	}
}

// load is n clients sending completions through the router as fast as answered.
type load struct {
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

func startLoad(router, model string, n int) *load {
	l := &load{stopc: make(chan struct{})}
	hc := &http.Client{Timeout: 3 * time.Minute}
	body := fmt.Sprintf(`{"model": %q, "prompt": "hello", "max_tokens": 4}`, model)
	for range n {
		l.wg.Go(func() {
			for {
				select {
				case <-l.stopc:
					return
				default:
				}
				start := time.Now()
				msg := ""
				resp, err := hc.Post(router+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					msg = err.Error()
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					var c struct{ Model string }
					if resp.StatusCode != 200 || json.Unmarshal(b, &c) != nil || c.Model != model {
						msg = fmt.Sprintf("%d %s", resp.StatusCode, b)
					}
				}
				l.mu.Lock()
				l.longest = max(l.longest, time.Since(start))
				if msg != "" {
					l.errs, l.started = append(l.errs, msg), append(l.started, start)
				} else {
					l.ok++
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

// stop ends the load: answered, failed, the longest request, the failures.
func (l *load) stop() (int, int, time.Duration, []string) {
	close(l.stopc)
	l.wg.Wait()
	return l.ok, len(l.errs), l.longest, l.errs
}

func routerModels(t *testing.T, router string) []string {
	t.Helper()
	resp, err := http.Get(router + "/v1/models")
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
