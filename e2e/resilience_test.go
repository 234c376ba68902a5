//go:build integration

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/lab/faultproxy"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// restartNode is `docker restart` of a lab node: its agent, its init and its network
// namespace start over, with a new boot ID, as after a reboot.
func restartNode(t *testing.T, node string) {
	t.Helper()
	for _, n := range theLab.Nodes {
		if n.Name == node {
			if _, err := eng.ContainerRestart(context.Background(), n.Container, client.ContainerRestartOptions{}); err != nil {
				t.Fatalf("restart %s: %v", node, err)
			}
			return
		}
	}
	t.Fatalf("no lab node %s", node)
}

// node-b reboots while the weights load: the deploy hears node-b's new boot ID, removes
// what it started, starts over from probing and serves, with exactly one head and one
// worker.
func TestRebootDuringLoadingStartsOver(t *testing.T) {
	s := labSpec(t, "e2e-reboot-load")
	slowLoading(&s)
	s.Nodes[0].Env["TPDEPLOY_SIM_SHARDS"] = "12"
	run := deployFor(t, s)
	defer teardown(t, s.Name)
	waitPhase(t, run, "loading")
	restartNode(t, "node-b")
	res := deployResult(t, run, 4*time.Minute)
	if len(res.Restarts) == 0 || !strings.Contains(strings.Join(res.Restarts, "\n"), "node-b") {
		t.Fatalf("deploy served without starting over for node-b's reboot: restarts %q", res.Restarts)
	}
	t.Logf("restarts: %q", res.Restarts)
	if got := containersOf(t, s.Name); len(got) != 2 {
		t.Errorf("containers %v, want exactly the ray head and worker", got)
	}
	if err := endpointServes(t, s); err != nil {
		t.Fatal(err)
	}
}

// node-b reboots at an exact step — its agent holds the engine call that creates the Ray
// worker (held at the fault proxy's barrier) — and the deploy starts over and serves.
// The create held when node-b went down never reaches the engine.
func TestRebootWhileJoiningWorker(t *testing.T) {
	s := labSpec(t, "e2e-reboot-join")
	proxy := theLab.Proxy("node-b")
	worker := contract.ContainerName(s.Name, "node-b", contract.RoleRayWorker)
	barrier := proxy.Add(faultproxy.Rule{Method: "POST", Path: `^/containers/create$`,
		Query: map[string]string{"name": worker}, Action: faultproxy.Pause{}, Times: 1})
	defer proxy.Remove(barrier)
	run := deployFor(t, s)
	defer teardown(t, s.Name)
	select {
	case <-proxy.Reached(barrier):
	case <-time.After(2 * time.Minute):
		t.Fatal("the deploy never created node-b's ray worker")
	}
	restartNode(t, "node-b")
	res := deployResult(t, run, 4*time.Minute)
	if len(res.Restarts) == 0 {
		t.Fatal("deploy served without starting over for node-b's reboot")
	}
	var held *faultproxy.Call
	for _, c := range proxy.Calls() {
		if c.Rule == barrier {
			held = &c
		}
	}
	if held == nil || held.Err == "" {
		t.Errorf("the create held at the barrier reached the engine: %+v", held)
	}
	if got := containersOf(t, s.Name); len(got) != 2 {
		t.Errorf("containers %v, want exactly the ray head and worker", got)
	}
}

// node-b goes down during loading and stays down: the deploy fails naming node-b
// (NodeDown, or Ray's own verdict that it is dead), removes what it started on node-a,
// and node-b's agent removes node-b's leftovers when it is back.
func TestNodeDownDuringLoading(t *testing.T) {
	s := labSpec(t, "e2e-node-down")
	slowLoading(&s)
	run := deployFor(t, s)
	waitPhase(t, run, "loading")
	b := theLab.Nodes[1]
	if _, err := eng.ContainerStop(context.Background(), b.Container, client.ContainerStopOptions{}); err != nil {
		t.Fatal(err)
	}
	started := false
	defer func() {
		if !started {
			_, _ = eng.ContainerStart(context.Background(), b.Container, client.ContainerStartOptions{})
		}
	}()
	f, took := failure(t, run)
	if (f.Type != contract.ErrNodeDown && f.Type != contract.ErrRayNodeDead) || !strings.Contains(f.Message, "node-b") {
		t.Fatalf("failure %s: %s; want NodeDown or RayNodeDead naming node-b", f.Type, f.Message)
	}
	t.Logf("node-b down classified as %s in %.1fs: %s", f.Type, took.Seconds(), f.Message)
	for _, c := range containersOf(t, s.Name) {
		if strings.Contains(c, "node-a") {
			t.Errorf("node-a's container %s left after the failure", c)
		}
	}
	if _, err := eng.ContainerStart(context.Background(), b.Container, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	started = true
	eventually(t, 90*time.Second, "node-b's agent removed node-b's leftovers", func() bool {
		return len(containersOf(t, s.Name)) == 0
	})
}

// A changed spec's deploy fails after touching the serving cluster (its head registers
// under the wrong address): the supervisor puts the spec that served back, and it serves.
func TestFailedChangedDeployRollsBack(t *testing.T) {
	s := labSpec(t, "e2e-rollback")
	deployServing(t, s)
	defer teardown(t, s.Name)
	eventually(t, 30*time.Second, "the supervisor runs", func() bool { _, ok := supervision(t, s.Name); return ok })
	served := maxModelLen(t, s)
	bad := s
	bad.Model.ExtraArgs = []string{"--max-model-len", "1024"}
	bad.Nodes = append(bad.Nodes[:0:0], s.Nodes...)
	bad.Nodes[0].Env = map[string]string{"TPDEPLOY_SIM_IGNORE_NODE_IP": "1"}
	f, _ := failure(t, deployFor(t, bad))
	if f.Type != contract.ErrPlacementMismatch {
		t.Fatalf("changed deploy failed with %s: %s; want PlacementMismatch", f.Type, f.Message)
	}
	defer func() {
		if t.Failed() {
			sv, _ := supervision(t, s.Name)
			t.Logf("supervisor's incidents: %+v", sv.Incidents)
			if st, err := (control.Controller{Client: tc, SignKey: theLab.SignKey}).Status(context.Background(), s.Name); err == nil {
				t.Logf("latest deploy: running %v, closed %q, err %v, phase %s: %s", st.Running, st.Closed, st.Err, st.State.Phase, st.State.Details)
			}
		}
	}()
	var inc workflows.Incident
	eventually(t, 3*time.Minute, "the supervisor rolled back and serves", func() bool {
		sv, _ := supervision(t, s.Name)
		for _, i := range sv.Incidents {
			if i.Cause == workflows.CauseRollback && i.Outcome == workflows.OutcomeServing {
				inc = i
				return true
			}
		}
		return false
	})
	t.Logf("rollback: %s -> %s in %s", inc.Seen, inc.Outcome, inc.Took.Round(time.Millisecond))
	if !strings.Contains(inc.Seen, bad.Hash()) || !strings.Contains(inc.Seen, s.Hash()) {
		t.Errorf("incident %q does not name both specs (%s failed, %s put back)", inc.Seen, bad.Hash(), s.Hash())
	}
	if err := endpointServes(t, s); err != nil {
		t.Fatal(err)
	}
	if got := maxModelLen(t, s); got != served || got == 1024 {
		t.Errorf("serving max_model_len %d after rollback, want the original spec's %d", got, served)
	}
}
