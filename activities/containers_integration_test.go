//go:build integration

package activities

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/internal/labtest"
	"github.com/tpdeploy/tpdeploy/internal/logscan"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// These tests run against this machine's Docker engine (CI has one) with FROM-scratch
// images built from this repository.

var buildOnce sync.Once
var buildErr error

func engineForTest(t *testing.T) *client.Client {
	t.Helper()
	eng, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { eng.Close() })
	buildOnce.Do(func() {
		ctx := context.Background()
		buildErr = labtest.BuildImages(ctx, eng)
		if buildErr != nil {
			return
		}
		dir, err := os.MkdirTemp("", "tpd-chatter-")
		if err != nil {
			buildErr = err
			return
		}
		defer os.RemoveAll(dir)
		bin, err := images.GoBinary(ctx, "./internal/testprog/chatter", dir)
		if err != nil {
			buildErr = err
			return
		}
		// With a shell and tail, as vLLM's images have: vLLM's wrapper runs in it.
		_, buildErr = images.Ensure(ctx, eng, images.Image{Tag: chatterImage, Files: map[string]string{"chatter": bin, "busybox": "/bin/busybox"}, Dirs: []string{"tmp"},
			Dockerfile: "FROM scratch\nCOPY chatter /\nCOPY busybox /bin/\nCOPY tmp /tmp\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\nENV PATH=/bin\nENTRYPOINT [\"/bin/sleep\", \"3600\"]\n"})
	})
	if buildErr != nil {
		t.Fatalf("build test images (Docker engine required): %v", buildErr)
	}
	return eng
}

const chatterImage = "tpdeploy/chatter:test"

func testCluster(t *testing.T) spec.Cluster {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	c := spec.Cluster{
		Name: "tpdtest-" + hex.EncodeToString(b), Image: labtest.SimImage,
		Model:    spec.Model{Path: "/models/m", ServedName: "m"},
		Parallel: spec.Parallel{Tensor: 2},
		Nodes:    []spec.Node{{Name: "node-a", Role: spec.RoleHead, GPUs: 1}, {Name: "node-b", Role: spec.RoleWorker, GPUs: 1}},
		HFCache:  t.TempDir(),
	}.WithDefaults()
	t.Cleanup(func() { removeCluster(t, c.Name) })
	return c
}

// removeCluster removes whatever a test left with the cluster's label.
func removeCluster(t *testing.T, cluster string) {
	eng, err := client.New(client.FromEnv)
	if err != nil {
		return
	}
	defer eng.Close()
	for _, c := range containersOf(t, eng, cluster) {
		_, _ = eng.ContainerRemove(context.Background(), c, client.ContainerRemoveOptions{Force: true})
	}
}

func containersOf(t *testing.T, eng *client.Client, cluster string) []string {
	t.Helper()
	f := client.Filters{}
	f.Add("label", LabelCluster+"="+cluster)
	list, err := eng.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var names []string
	for _, c := range list.Items {
		names = append(names, strings.TrimPrefix(c.Names[0], "/"))
	}
	return names
}

// onHostNetwork is an agent whose containers share its network namespace ("host"), as on
// a real node.
func onHostNetwork(name string) *Agent {
	c := testConfig(name)
	c.Containers.Network = "host"
	return New(c)
}

func running(t *testing.T, eng *client.Client, id string) bool {
	t.Helper()
	info, err := eng.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return info.Container.State.Running
}

func TestStartCreatesAdoptsAndReplaces(t *testing.T) {
	eng := engineForTest(t)
	ctx := context.Background()
	c := testCluster(t)
	a := testNode("node-a")
	env := map[string]string{"VLLM_HOST_IP": "127.0.0.1", "NCCL_SOCKET_IFNAME": "=lo"}

	first, err := a.Ray.StartRayHead(ctx, headRequest(c, "run-1", env))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if first.Adopted || first.Name != contract.ContainerName(c.Name, "node-a", contract.RoleRayHead) || !running(t, eng, first.ID) {
		t.Fatalf("first start = %+v", first)
	}
	info, _ := eng.ContainerInspect(ctx, first.ID, client.ContainerInspectOptions{})
	cfg := info.Container.Config
	for k, want := range map[string]string{LabelCluster: c.Name, LabelDeployment: "run-1", LabelRole: contract.RoleRayHead, LabelNode: "node-a"} {
		if cfg.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, cfg.Labels[k], want)
		}
	}
	wantCmd := []string{"start", "--head", "--node-ip-address=127.0.0.1", "--port=6379", "--dashboard-port=8265", "--num-gpus=1", "--block"}
	if strings.Join(cfg.Cmd, " ") != strings.Join(wantCmd, " ") || cfg.Entrypoint[0] != "ray" {
		t.Errorf("command = %v %v, want ray %v", cfg.Entrypoint, cfg.Cmd, wantCmd)
	}
	if !containsAll(cfg.Env, "NCCL_SOCKET_IFNAME==lo", "VLLM_HOST_IP=127.0.0.1") {
		t.Errorf("env = %v", cfg.Env)
	}

	// The same spec from another deployment run adopts the running container.
	again, err := a.Ray.StartRayHead(ctx, headRequest(c, "run-2", env))
	if err != nil || !again.Adopted || again.ID != first.ID {
		t.Fatalf("second start = %+v, %v; want the first container adopted", again, err)
	}
	// A changed spec replaces it.
	env["NCCL_SOCKET_IFNAME"] = "=eth0"
	replaced, err := a.Ray.StartRayHead(ctx, headRequest(c, "run-3", env))
	if err != nil || replaced.Adopted || replaced.ID == first.ID || !running(t, eng, replaced.ID) {
		t.Fatalf("changed spec = %+v, %v; want a new container", replaced, err)
	}
	if names := containersOf(t, eng, c.Name); len(names) != 1 {
		t.Fatalf("containers after replace = %v, want exactly one", names)
	}
}

func containsAll(list []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, l := range list {
			found = found || l == w
		}
		if !found {
			return false
		}
	}
	return true
}

func TestRetryAfterCrashBetweenCreateAndStart(t *testing.T) {
	eng := engineForTest(t)
	ctx := context.Background()
	c := testCluster(t)
	a := testNode("node-a")
	req := headRequest(c, "run-1", nil)
	// The first attempt created the container and died before starting it.
	opts, err := rayHeadSpec(req, a.Ray.docker.opts).createOptions()
	if err != nil {
		t.Fatal(err)
	}
	created, err := eng.ContainerCreate(ctx, opts)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	ref, err := a.Ray.StartRayHead(ctx, req)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if ref.ID != created.ID || !ref.Adopted || !running(t, eng, ref.ID) {
		t.Fatalf("retry = %+v, want the created container %s started", ref, created.ID[:12])
	}
	if names := containersOf(t, eng, c.Name); len(names) != 1 {
		t.Fatalf("containers = %v, want one", names)
	}
}

func TestRemoveContainersByLabels(t *testing.T) {
	eng := engineForTest(t)
	ctx := context.Background()
	c := testCluster(t)
	a, b := testNode("node-a"), testNode("node-b")
	if _, err := a.Ray.StartRayHead(ctx, headRequest(c, "run-1", nil)); err != nil {
		t.Fatal(err)
	}
	workerReq := contract.StartRayRequest{Node: "node-b", Deployment: contract.Deployment{Cluster: c.Name, ID: "run-1"}, Spec: c, RayAddress: "127.0.0.1:6379",
		Plan: netplan.NodePlan{Name: "node-b", Address: netip.MustParseAddr("127.0.0.1")}}
	if _, err := b.Ray.StartRayWorker(ctx, workerReq); err != nil {
		t.Fatal(err)
	}
	// Both nodes share this engine, as lab nodes do: node-a's teardown must leave node-b's.
	res, err := a.Containers.RemoveContainers(ctx, contract.RemoveRequest{Node: "node-a", Cluster: c.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) != 1 || res.Removed[0] != contract.ContainerName(c.Name, "node-a", contract.RoleRayHead) {
		t.Fatalf("removed %v", res.Removed)
	}
	if left := containersOf(t, eng, c.Name); len(left) != 1 || !strings.Contains(left[0], "node-b") {
		t.Fatalf("left %v, want node-b's worker only", left)
	}
	again, err := a.Containers.RemoveContainers(ctx, contract.RemoveRequest{Node: "node-a", Cluster: c.Name})
	if err != nil || len(again.Removed) != 0 {
		t.Fatalf("second removal = %+v, %v; want nothing, no error", again, err)
	}
	if _, err := b.Containers.RemoveContainers(ctx, contract.RemoveRequest{Node: "node-b", Cluster: c.Name, Roles: []string{contract.RoleVLLM}}); err != nil {
		t.Fatal(err)
	}
	if left := containersOf(t, eng, c.Name); len(left) != 1 {
		t.Fatalf("a vllm-only removal removed the worker: left %v", left)
	}
	if res, err := b.Containers.RemoveContainers(ctx, contract.RemoveRequest{Node: "node-b", Cluster: c.Name}); err != nil || len(res.Removed) != 1 {
		t.Fatalf("node-b teardown = %+v, %v", res, err)
	}
	if left := containersOf(t, eng, c.Name); len(left) != 0 {
		t.Fatalf("left %v after teardown of both nodes", left)
	}
	if res, err := b.Containers.RemoveContainers(ctx, contract.RemoveRequest{Node: "node-b", Cluster: "tpdtest-never-deployed"}); err != nil || len(res.Removed) != 0 {
		t.Fatalf("unknown deployment = %+v, %v; want a no-op", res, err)
	}
}

func TestPreflightImage(t *testing.T) {
	engineForTest(t)
	ctx := context.Background()
	b := testNode("node-b")
	res, err := b.Containers.PreflightNode(ctx, contract.PreflightRequest{Node: "node-b", Image: labtest.SimImage})
	if err != nil || !strings.HasPrefix(res.ImageID, "sha256:") {
		t.Fatalf("present image = %+v, %v", res, err)
	}
	_, err = b.Containers.PreflightNode(ctx, contract.PreflightRequest{Node: "node-b", Image: "vllm/vllm-openai:v0.17.0-tpdtest-absent"})
	app := appError(t, err)
	if app.Type() != contract.ErrImageMissing || !app.NonRetryable() || !strings.Contains(app.Message(), "image vllm/vllm-openai:v0.17.0-tpdtest-absent not present") {
		t.Fatalf("missing image: type %s non-retryable %v: %s", app.Type(), app.NonRetryable(), app.Message())
	}
}

// TestVLLMOutputResumes runs a chatty process under vLLM's wrapper in a container and
// reads its output in pieces by byte offset, as a watch does across agent restarts: every
// line arrives exactly once, in order, whole (40 kB lines included), and the exit code is
// reported once the output is drained.
func TestVLLMOutputResumes(t *testing.T) {
	eng := engineForTest(t)
	ctx := context.Background()
	c := testCluster(t)
	const lines = 80
	created, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       "tpd-" + c.Name + "-chatter",
		Config:     &container.Config{Image: chatterImage, Labels: map[string]string{LabelCluster: c.Name}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	env := []string{"CHATTER_LINES=" + strconv.Itoa(lines), "CHATTER_EVERY=15ms"}
	if err := execDetached(ctx, eng, created.ID, shScript(vllmLaunchScript, "hash", "/chatter"), env); err != nil {
		t.Fatal(err)
	}
	out := vllmOutput{eng: eng, container: created.ID}
	var got []string
	var offset int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		batch, next, st, err := out.read(ctx, offset)
		if err != nil {
			t.Fatal(err)
		}
		if next < offset || (len(batch) > 0) != (next > offset) {
			t.Fatalf("offset %d -> %d with %d lines", offset, next, len(batch))
		}
		got, offset = append(got, batch...), next
		if st.State == "exited" && len(batch) == 0 {
			if st.ExitCode != 0 {
				t.Fatalf("exit code %d", st.ExitCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not finished after 30 s: %d lines, status %+v", len(got), st)
		}
		time.Sleep(40 * time.Millisecond)
	}
	if len(got) != lines {
		t.Fatalf("got %d lines, want %d (lost or duplicated)", len(got), lines)
	}
	for i, text := range got {
		l := logscan.Parse(text)
		want := fmt.Sprintf("line %d", i+1)
		if !strings.HasPrefix(l.Text, want) || (len(l.Text) > len(want) && l.Text[len(want)] != ' ') {
			t.Fatalf("line %d = %.60q, want %q", i+1, l.Text, want)
		}
		if (i+1)%10 == 0 && (i+1)%7 != 0 && len(l.Text) != len(want)+1+40000 {
			t.Errorf("long line %d has %d bytes, want %d (split or cut)", i+1, len(l.Text), len(want)+40001)
		}
		if (i+1)%7 == 0 && l.Source != fmt.Sprintf("RayWorkerWrapper pid=%d, ip=10.0.0.2", i+1) {
			t.Errorf("line %d: Ray prefix %q", i+1, l.Source)
		}
	}
}

// TestVLLMRunsInTheRayHeadContainer launches vLLM (the lab's) inside a real (simulated)
// Ray head's container: the launch names its process, a retried launch adopts it instead
// of starting a second one, the watch reads it to serving from a cursor carried across
// calls, a vllm-only removal stops it gracefully and leaves Ray, and the watch then
// reports that vLLM ended.
func TestVLLMRunsInTheRayHeadContainer(t *testing.T) {
	eng := engineForTest(t)
	ctx := context.Background()
	c := testCluster(t)
	c.Parallel.Tensor = 1
	c.Ports.Ray, c.Ports.VLLM = freePort(t), freePort(t)
	c.Nodes = c.Nodes[:1]
	a := onHostNetwork("node-a")
	env := map[string]string{"VLLM_HOST_IP": "127.0.0.1", "RAY_ADDRESS": fmt.Sprintf("127.0.0.1:%d", c.Ports.Ray),
		"TPDEPLOY_SIM_SHARDS": "4", "TPDEPLOY_SIM_SHARD_SECONDS": "0.3"}
	if _, err := a.Ray.StartRayHead(ctx, headRequest(c, "run-1", env)); err != nil {
		t.Fatal(err)
	}
	plan := netplan.Plan{Head: "node-a", RayAddress: env["RAY_ADDRESS"], Nodes: []netplan.NodePlan{
		{Name: "node-a", Role: spec.RoleHead, Address: netip.MustParseAddr("127.0.0.1"), Env: env}}}
	launch := contract.LaunchRequest{Node: "node-a", Deployment: contract.Deployment{Cluster: c.Name, ID: "run-1"}, Spec: c, Plan: plan}
	ref, err := a.VLLM.LaunchVLLM(ctx, launch)
	if err != nil {
		t.Fatal(err)
	}
	head := contract.ContainerName(c.Name, "node-a", contract.RoleRayHead)
	if ref.Name != head || ref.Role != contract.RoleVLLM || ref.PID == 0 || ref.Adopted {
		t.Fatalf("launch = %+v, want a new vllm process in %s", ref, head)
	}
	again, err := a.VLLM.LaunchVLLM(ctx, launch)
	if err != nil || !again.Adopted || again.PID != ref.PID {
		t.Fatalf("second launch = %+v, %v; want pid %d adopted", again, err, ref.PID)
	}
	if names := containersOf(t, eng, c.Name); len(names) != 1 {
		t.Fatalf("containers %v: vllm must not get a container of its own", names)
	}
	watch := contract.WatchRequest{Node: "node-a", Container: ref, Spec: c, Endpoint: fmt.Sprintf("http://127.0.0.1:%d", c.Ports.VLLM),
		ReportWithin: 500 * time.Millisecond, Plan: &plan}
	var suite testsuite.WorkflowTestSuite
	aenv := suite.NewTestActivityEnvironment()
	registerAgent(aenv, a)
	watchOnce := func() (contract.ServingProgress, error) {
		var p contract.ServingProgress
		v, err := aenv.ExecuteActivity(a.VLLM.WatchServing, watch)
		if err == nil {
			err = v.Get(&p)
		}
		return p, err
	}
	var p contract.ServingProgress
	calls := 0
	for !p.Serving {
		if calls++; calls > 60 {
			t.Fatalf("not serving after %d calls: %+v", calls, p)
		}
		watch.Cursor = p
		if p, err = watchOnce(); err != nil {
			t.Fatalf("watch call %d: %v", calls, err)
		}
	}
	if p.ShardsTotal != 4 || p.ShardsLoaded != 4 || p.Offset == 0 {
		t.Errorf("progress at serving = %+v", p)
	}
	res, err := a.Containers.RemoveContainers(ctx, contract.RemoveRequest{Node: "node-a", Cluster: c.Name, Roles: []string{contract.RoleVLLM}})
	if err != nil || len(res.Removed) != 1 || res.Removed[0] != "vllm in "+head {
		t.Fatalf("vllm-only removal = %+v, %v", res, err)
	}
	if !running(t, eng, head) {
		t.Fatal("stopping vllm stopped the ray head")
	}
	// vLLM's last lines (its shutdown) are delivered before its end is reported, so the
	// exit may come a call or two later.
	for i := 0; i < 20; i++ {
		watch.Cursor = p
		if p, err = watchOnce(); err != nil {
			break
		}
	}
	app := appError(t, err)
	if app.Type() != contract.ErrVLLMExited || !strings.Contains(app.Message(), "exited with code") {
		t.Fatalf("watch after the stop: type %s: %s", app.Type(), app.Message())
	}
	relaunched, err := a.VLLM.LaunchVLLM(ctx, launch)
	if err != nil || relaunched.Adopted || relaunched.PID == ref.PID {
		t.Fatalf("relaunch after the stop = %+v, %v; want a new process", relaunched, err)
	}
	// A changed vLLM command replaces the running vLLM; the Ray head stays.
	launch.Spec.Model.ExtraArgs = []string{"--max-model-len", "2048"}
	changed, err := a.VLLM.LaunchVLLM(ctx, launch)
	if err != nil || changed.Adopted || changed.PID == relaunched.PID {
		t.Fatalf("launch of a changed command = %+v, %v; want the running vllm replaced", changed, err)
	}
	if !running(t, eng, head) {
		t.Fatal("replacing vllm stopped the ray head")
	}
}

// TestPlacementNotProvenSaysWhatRaySees runs a real (simulated) Ray head on host
// networking with ports of its own, plans a second node that never joins, and expects
// CheckPlacement to give up before its step times out, naming the missing node and
// quoting `ray status` from the head's container.
func TestPlacementNotProvenSaysWhatRaySees(t *testing.T) {
	engineForTest(t)
	c := testCluster(t)
	c.Ports.Ray, c.Ports.Dashboard = freePort(t), freePort(t)
	a := onHostNetwork("node-a")
	if _, err := a.Ray.StartRayHead(context.Background(), headRequest(c, "run-1", nil)); err != nil {
		t.Fatal(err)
	}
	// Ray as vLLM's images ship it: no dashboard, so the node table comes from the GCS.
	plan := netplan.Plan{Head: "node-a", RayAddress: fmt.Sprintf("127.0.0.1:%d", c.Ports.Ray), Nodes: []netplan.NodePlan{
		{Name: "node-a", Role: spec.RoleHead, Address: netip.MustParseAddr("127.0.0.1")},
		{Name: "node-b", Role: spec.RoleWorker, Address: netip.MustParseAddr("127.0.0.2")},
	}}
	req := contract.PlacementRequest{Node: "node-a", Plan: plan, NeedGPUs: 2, RayHead: contract.ContainerName(c.Name, "node-a", contract.RoleRayHead)}
	// A one-activity workflow gives the activity the step's StartToClose deadline.
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(30 * time.Second)
	registerAgent(env, a)
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 8 * time.Second,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
		return workflow.ExecuteActivity(ctx, a.Ray.CheckPlacement, req).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: "placement"})
	start := time.Now()
	env.ExecuteWorkflow("placement")
	app := appError(t, env.GetWorkflowError())
	if app.Type() != contract.ErrNodeNotRegistered || !app.NonRetryable() {
		t.Fatalf("type %s non-retryable %v: %s", app.Type(), app.NonRetryable(), app.Message())
	}
	for _, want := range []string{"not registered with Ray yet: node-b", "ray status: 1 active nodes, 0/1 GPUs"} {
		if !strings.Contains(app.Message(), want) {
			t.Errorf("message %q lacks %q", app.Message(), want)
		}
	}
	t.Logf("gave up after %.1fs: %s", time.Since(start).Seconds(), app.Message())
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A container of the wanted name that another cluster owns is never replaced.
func TestNeverReplacesAnotherClustersContainer(t *testing.T) {
	eng := engineForTest(t)
	ctx := context.Background()
	c := testCluster(t)
	a := testNode("node-a")
	other, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       contract.ContainerName(c.Name, "node-a", contract.RoleRayHead),
		Config:     &container.Config{Image: chatterImage, Labels: map[string]string{LabelCluster: c.Name + "-other"}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = eng.ContainerRemove(ctx, other.ID, client.ContainerRemoveOptions{Force: true}) })
	_, err = a.Ray.StartRayHead(ctx, headRequest(c, "run-1", nil))
	app := appError(t, err)
	if app.Type() != contract.ErrBadRequest || !strings.Contains(app.Message(), "belongs to cluster "+c.Name+"-other") {
		t.Fatalf("type %s: %s", app.Type(), app.Message())
	}
	if _, err := eng.ContainerInspect(ctx, other.ID, client.ContainerInspectOptions{}); err != nil {
		t.Fatalf("the other cluster's container is gone: %v", err)
	}
	if contract.ContainerName("x-node", "a", contract.RoleRayHead) == contract.ContainerName("x", "node-a", contract.RoleRayHead) {
		t.Error("two clusters share a container name")
	}
}

// TestPreflightRefusesABusyHeadPort: something else listening on the head's Ray port (a
// Ray left from another deploy) fails the preflight naming the port, its spec field and
// the node, instead of letting the workers join that stranger's Ray; the same port held
// by this cluster's own head (a redeploy) passes.
func TestPreflightRefusesABusyHeadPort(t *testing.T) {
	engineForTest(t)
	ctx := context.Background()
	c := testCluster(t)
	c.Parallel.Tensor = 1
	c.Nodes = c.Nodes[:1]
	c.Ports.VLLM = freePort(t)
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.Ports.Ray = other.Addr().(*net.TCPAddr).Port
	a := onHostNetwork("node-a")
	_, err = a.Containers.PreflightNode(ctx, contract.PreflightRequest{Node: "node-a", Image: c.Image, Spec: &c})
	app := appError(t, err)
	want := fmt.Sprintf("port %d (ports.ray) already in use on node-a", c.Ports.Ray)
	if app.Type() != contract.ErrResourcesBusy || !app.NonRetryable() || !strings.Contains(app.Message(), want) {
		t.Fatalf("busy port: type %s non-retryable %v: %s\nwant %s containing %q", app.Type(), app.NonRetryable(), app.Message(), contract.ErrResourcesBusy, want)
	}
	other.Close()
	if _, err := a.Containers.PreflightNode(ctx, contract.PreflightRequest{Node: "node-a", Image: c.Image, Spec: &c}); err != nil {
		t.Fatalf("freed port: %v", err)
	}
	env := map[string]string{"VLLM_HOST_IP": "127.0.0.1", "RAY_ADDRESS": fmt.Sprintf("127.0.0.1:%d", c.Ports.Ray)}
	if _, err := a.Ray.StartRayHead(ctx, headRequest(c, "run-1", env)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", c.Ports.Ray))
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the head does not listen on its Ray port: %v", err)
		}
	}
	if _, err := a.Containers.PreflightNode(ctx, contract.PreflightRequest{Node: "node-a", Image: c.Image, Spec: &c}); err != nil {
		t.Fatalf("port held by the cluster's own head: %v", err)
	}
}
