//go:build integration

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
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
}
