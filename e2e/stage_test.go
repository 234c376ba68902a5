//go:build integration

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/lab"
	"github.com/tpdeploy/tpdeploy/lab/faultproxy"
)

// An image change deployed onto a serving cluster is staged: the old deployment answers
// every request until the swap (the first request that fails comes after it), the new one
// serves, and the result names the deployment it replaced. An arguments-only change
// after it still keeps Ray's containers.
func TestStagedImageChangeServesUntilTheSwap(t *testing.T) {
	s := labSpec(t, "e2e-stage")
	deployServing(t, s)
	defer teardown(t, s.Name)
	oldRun := servingRun(t, s.Name)
	head := rayHeadID(t, s)

	changed := s
	changed.Image = "tpdeploy/sim:vllm-0.17.1"
	// node-b's first look at the new image hangs 45 s (its agent gives up at its 30 s bound
	// on an engine call and asks again): staging lasts past several of the supervisor's checks, which go on watching the old deployment meanwhile. (What the
	// watch saw reaches `starter status` through its heartbeat, which the SDK sends at
	// most every 24 s for the watch's 30 s heartbeat timeout.)
	proxy := theLab.Proxy("node-b")
	slow := proxy.Add(faultproxy.Rule{Method: "GET", Path: `^/images/.*vllm-0\.17\.1/json$`, Action: faultproxy.Delay{D: 45 * time.Second}, Times: 1})
	defer proxy.Remove(slow)
	w := watchOutage(s)
	run := deployFor(t, changed)
	var last string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := (control.Controller{Client: tc}).Status(context.Background(), s.Name)
		if err == nil && st.Supervision != nil {
			last = fmt.Sprintf("healthy %v: %s", st.Supervision.Healthy, st.Supervision.Detail)
			if st.Supervision.Healthy && strings.Contains(st.Supervision.Detail, "staged beside it") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the supervisor did not report watching the old deployment beside the staged one; last: %s", last)
		}
		time.Sleep(time.Second)
	}
	res := deployResult(t, run, 3*time.Minute)
	out, began, fails, checks := w.outage()
	if res.Staged == nil || res.Staged.Serving.RunID != oldRun || res.Staged.Serving.SpecHash != s.Hash() || res.Staged.SwappedAt.IsZero() {
		t.Fatalf("staged = %+v, want run %s of spec %s replaced", res.Staged, oldRun, s.Hash())
	}
	t.Logf("image change: staged %.2fs beside the old deployment; outage %.2fs (%d of %d checks failed)", res.Staged.Took.Seconds(), out.Seconds(), fails, checks)
	// The poll's last answer before the outage, 25 ms apart, may come just before the
	// swap (and the workflow's clock is the server's).
	if slack := 250 * time.Millisecond; began.Before(res.Staged.SwappedAt.Add(-slack)) {
		t.Errorf("the endpoint stopped answering at %s, before the swap at %s: staging touched the serving deployment",
			began.Format(time.StampMilli), res.Staged.SwappedAt.Format(time.StampMilli))
	}
	if rayHeadID(t, s) == head {
		t.Error("the ray head of the old image was kept")
	}
	if err := endpointServes(t, changed); err != nil {
		t.Fatal(err)
	}
	if got := containersOf(t, s.Name); len(got) != 2 {
		t.Errorf("containers %v, want the ray head and worker", got)
	}
	status, code := runStarter(t, "status", s.Name)
	if code != 0 || !strings.Contains(status, "staged:") || !strings.Contains(status, "then replaced it") {
		t.Errorf("starter status (exit %d) does not say what was staged:\n%s", code, status)
	}

	// Arguments only: Ray's containers stay, vLLM restarts in the head's.
	head = rayHeadID(t, s)
	args := changed
	args.Model.ExtraArgs = []string{"--max-model-len", "2048"}
	w = watchOutage(s)
	res = deployResult(t, deployFor(t, args), 3*time.Minute)
	out2, _, _, _ := w.outage()
	t.Logf("arguments-only change: outage %.2fs", out2.Seconds())
	if rayHeadID(t, s) != head {
		t.Error("an arguments-only change replaced the ray head")
	}
	if res.Staged == nil {
		t.Error("the arguments-only change was not staged")
	}
	if got := maxModelLen(t, args); got != 2048 {
		t.Errorf("max_model_len %d after the change", got)
	}

	// Today's stock image has no Ray: executor auto moves the cluster to vLLM's own
	// multi-node mode, and the swap removes Ray's containers (the old vLLM in the Ray head
	// would keep vLLM's port), leaving one rank container per node.
	stock := args
	stock.Image = "tpdeploy/sim:vllm-0.22.1"
	res = deployResult(t, deployFor(t, stock), 3*time.Minute)
	if res.Engine == nil || res.Engine.Executor != spec.ExecutorMP || res.Staged == nil {
		t.Fatalf("engine %+v staged %+v, want mp, staged", res.Engine, res.Staged)
	}
	want := []string{contract.ContainerName(s.Name, "node-a", contract.RoleVLLM), contract.ContainerName(s.Name, "node-b", contract.RoleVLLM)}
	got := containersOf(t, s.Name)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("containers after the move to mp: %v, want %v", got, want)
	}
	if err := endpointServes(t, stock); err != nil {
		t.Fatal(err)
	}
}

// A staged change that fails — the image missing on node-b, node-b's policy refusing the
// new spec, node-b lacking part of the new model — leaves the old deployment serving
// untouched: its containers are the same, not one request to it fails, the failure says
// it still serves, `starter status` says both, and node-b's agent, restarted, keeps its
// containers (its reconcile asks what serves).
func TestStagedChangeThatFailsLeavesTheOldServing(t *testing.T) {
	s := labSpec(t, "e2e-stage-fail")
	deployServing(t, s)
	defer teardown(t, s.Name)
	before := containerIDs(t, s.Name)
	oldRun := servingRun(t, s.Name)
	newImage := "tpdeploy/sim:vllm-0.17.1"

	model := s
	model.Model.Path, model.Model.HostDir = "/models/e2e-stage-fail", "/models/e2e-stage-fail"
	makeModel(t, "node-a", model, 4, 1<<20)
	makeModel(t, "node-b", model, 4, 1<<20, 3)

	for _, tc := range []struct {
		name     string
		change   func(c *spec.Cluster)
		inject   func() func()
		wantType string
		wantMsg  string
	}{
		{"image missing on node-b", func(c *spec.Cluster) { c.Image = newImage }, func() func() {
			p := theLab.Proxy("node-b")
			id := p.Add(faultproxy.Rule{Method: "GET", Path: `^/images/.*vllm-0\.17\.1/json$`,
				Action: faultproxy.Fail{Status: 404, Message: "No such image: " + newImage}})
			return func() { p.Remove(id) }
		}, contract.ErrImageMissing, "node-b"},
		{"node-b's policy refuses the new spec", func(c *spec.Cluster) {
			c.Nodes[1].Env = map[string]string{"MY_TUNING": "1"}
		}, nil, contract.ErrPolicyDenied, "MY_TUNING"},
		{"node-b lacks part of the new model", func(c *spec.Cluster) { c.Model = model.Model }, nil,
			contract.ErrModelIncomplete, "node-b lacks " + lab.ShardName(3, 4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed := s
			changed.Nodes = append([]spec.Node(nil), s.Nodes...)
			tc.change(&changed)
			if tc.inject != nil {
				defer tc.inject()()
			}
			w := watchOutage(s)
			f, took := failure(t, deployFor(t, changed))
			out, _, fails, checks := w.outage()
			if f.Type != tc.wantType || !strings.Contains(f.Message, tc.wantMsg) {
				t.Fatalf("failure %s: %s; want %s naming %q", f.Type, f.Message, tc.wantType, tc.wantMsg)
			}
			if f.Staged == nil || f.Staged.Serving.RunID != oldRun || !strings.Contains(f.Message, "nothing was stopped") {
				t.Errorf("the failure does not say the old deployment still serves: staged %+v, %s", f.Staged, f.Message)
			}
			t.Logf("refused in %.2fs: %s; %d of %d checks of the old endpoint failed (longest %.2fs)", took.Seconds(), f.Type, fails, checks, out.Seconds())
			if fails != 0 {
				t.Errorf("%d requests to the serving deployment failed during the staged deploy", fails)
			}
			if got := containerIDs(t, s.Name); !maps.Equal(got, before) {
				t.Errorf("containers %v, want the serving ones untouched %v", got, before)
			}
			st, code := runStarter(t, "status", s.Name)
			if code != 0 || !strings.Contains(st, "run "+oldRun) || !strings.Contains(st, "refused:") || !strings.Contains(st, tc.wantType) {
				t.Errorf("starter status (exit %d) does not say both the serving run %s and the refusal:\n%s", code, oldRun, st)
			}
		})
	}

	// The supervisor's watch and a schedule's check see the old deployment serving.
	chk := control.Checks{Controller: control.Controller{Client: tc}}
	got, err := chk.CheckDeployment(context.Background(), contract.CheckDeploymentRequest{Cluster: s.Name})
	if err != nil || !got.Healthy || got.RunID != oldRun || got.SpecHash != s.Hash() {
		t.Errorf("CheckDeployment after the refusals = %+v %v, want run %s healthy", got, err, oldRun)
	}
	// node-b's agent restarts: its reconcile must keep the serving deployment's worker.
	since := time.Now()
	killWorker(t, theLab.Nodes[1].Container)
	// Its start-up reconcile is the controller's NodeStarted run, which has the agent
	// reconcile each cluster (ReconcileCluster logs it).
	waitForLog(t, theLab.Nodes[1].Container, since, "reconciled the cluster's containers", time.Minute)
	if got := containerIDs(t, s.Name); !maps.Equal(got, before) {
		t.Errorf("after node-b's agent restarted, containers %v, want %v", got, before)
	}
	if err := endpointServes(t, s); err != nil {
		t.Fatal(err)
	}
}

// servingRun is the run ID of the cluster's latest deploy.
func servingRun(t *testing.T, cluster string) string {
	t.Helper()
	st, err := (control.Controller{Client: tc}).Status(context.Background(), cluster)
	if err != nil || st.Result == nil {
		t.Fatalf("status of %s: %+v %v", cluster, st, err)
	}
	return st.RunID
}

// containerIDs are the IDs of the cluster's containers, by name.
func containerIDs(t *testing.T, cluster string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range containersOf(t, cluster) {
		info, err := eng.ContainerInspect(context.Background(), name, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatalf("inspect %s: %v", name, err)
		}
		out[name] = info.Container.ID
	}
	return out
}

// waitForLog waits until a container's output since a time holds a phrase.
func waitForLog(t *testing.T, container string, since time.Time, phrase string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		rc, err := eng.ContainerLogs(context.Background(), container, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Since: since.Format(time.RFC3339Nano)})
		if err == nil {
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(rc)
			rc.Close()
			if strings.Contains(buf.String(), phrase) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print %q within %s", container, phrase, within)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
