//go:build integration

package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// The seed's three runs, driven the way its shell script drove Ray and vLLM (docker run
// into each node's network namespace, no tpdeploy workflow), on a fresh two-node lab.

func upLab(t *testing.T) (*Lab, *client.Client) {
	t.Helper()
	eng, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	prefix := "tpd-seed-" + hex.EncodeToString(b)
	ctx := context.Background()
	l, err := Up(ctx, eng, "", Config{Prefix: prefix})
	if err != nil {
		t.Fatalf("lab up (needs the Docker engine and root): %v", err)
	}
	t.Cleanup(func() {
		if err := Down(context.Background(), eng, prefix); err != nil {
			t.Errorf("lab down: %v", err)
		}
		assertNoLeftovers(t, eng, prefix)
		eng.Close()
	})
	return l, eng
}

func assertNoLeftovers(t *testing.T, eng *client.Client, prefix string) {
	f := client.Filters{}
	f.Add("label", LabelLab+"="+prefix)
	if c, _ := eng.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: f}); len(c.Items) > 0 {
		t.Errorf("lab %s left %d containers", prefix, len(c.Items))
	}
	if n, _ := eng.NetworkList(context.Background(), client.NetworkListOptions{Filters: f}); len(n.Items) > 0 {
		t.Errorf("lab %s left %d networks", prefix, len(n.Items))
	}
}

// dockerRun starts the lab's release image as `docker run --network container:NODE IMAGE
// cmd...`.
func dockerRun(t *testing.T, l *Lab, eng *client.Client, node, name string, env []string, cmd ...string) string {
	t.Helper()
	id, err := tryDockerRun(t, l, eng, l.Image, node, name, env, cmd...)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// tryDockerRun starts image as `docker run --network container:NODE IMAGE cmd...` and
// removes the container when the (sub)test ends; the error is the engine's.
func tryDockerRun(t *testing.T, l *Lab, eng *client.Client, image, node, name string, env []string, cmd ...string) (string, error) {
	t.Helper()
	n, _ := l.Node(node)
	created, err := eng.ContainerCreate(context.Background(), client.ContainerCreateOptions{
		Name:       l.Prefix + "-" + name,
		Config:     &container.Config{Image: image, Entrypoint: cmd[:1], Cmd: cmd[1:], Env: env},
		HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode("container:" + n.Container)},
	})
	if err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	t.Cleanup(func() {
		_, _ = eng.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := eng.ContainerStart(context.Background(), created.ID, client.ContainerStartOptions{}); err != nil {
		return created.ID, fmt.Errorf("start %s: %w", name, err)
	}
	return created.ID, nil
}

// withImage is the lab with another release's image for the containers a test starts.
func withImage(l *Lab, r Release) *Lab {
	c := *l
	c.Release, c.Image = r, r.Image()
	return &c
}

func release(t *testing.T, name string) Release {
	t.Helper()
	r, ok := ReleaseNamed(name)
	if !ok {
		t.Fatalf("no release %s", name)
	}
	return r
}

// legacyRay are the releases and driver environments that run vLLM's legacy Ray executor.
var legacyRay = []struct {
	release string
	env     []string
}{
	{"vllm-0.11.0", nil},
	{"vllm-0.17.1", nil},
	{"vllm-0.22.1-ray", []string{"VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0"}},
}

func logsOf(t *testing.T, eng *client.Client, id string) string {
	t.Helper()
	rc, err := eng.ContainerLogs(context.Background(), id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var out bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &out, rc)
	return out.String()
}

// waitLogs waits until the container's output contains every string.
func waitLogs(t *testing.T, eng *client.Client, id string, within time.Duration, want ...string) string {
	t.Helper()
	// within is what the line takes on a quiet machine; the wait allows four times that
	// (at least a minute), because real torch's start-up on a loaded 2-core CI machine took
	// longer than 30 s once. A bound on a hang, not a speed assertion: a line that never
	// comes still fails.
	within = max(4*within, time.Minute)
	deadline := time.Now().Add(within)
	for {
		out := logsOf(t, eng, id)
		missing := ""
		for _, w := range want {
			if !strings.Contains(out, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the output lacks %q:\n%s", within, missing, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// execOut is a command run in a container with `docker exec`, its output collected.
type execOut struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	done chan struct{}
	id   string
	eng  *client.Client
}

func (o *execOut) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

func (o *execOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// dockerExec runs cmd in a running container, as the seed's script ran `vllm serve` in
// its Ray head's container (`docker exec`, with the node's variables given to the exec).
func dockerExec(t *testing.T, eng *client.Client, container string, env []string, cmd ...string) *execOut {
	t.Helper()
	ctx := context.Background()
	ex, err := eng.ExecCreate(ctx, container, client.ExecCreateOptions{Cmd: cmd, Env: env, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatalf("exec %v: %v", cmd, err)
	}
	att, err := eng.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("exec %v: %v", cmd, err)
	}
	o := &execOut{done: make(chan struct{}), id: ex.ID, eng: eng}
	go func() {
		defer close(o.done)
		defer att.Close()
		_, _ = stdcopy.StdCopy(o, o, att.Reader)
	}()
	return o
}

// waitOut waits until the exec's output contains every string.
func waitOut(t *testing.T, o *execOut, within time.Duration, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out := o.String()
		missing := ""
		for _, w := range want {
			if !strings.Contains(out, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the output lacks %q:\n%s", within, missing, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// exitCode waits for the exec to end and returns its exit code.
func (o *execOut) exitCode(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-o.done:
	case <-time.After(within):
		t.Fatalf("still running after %s:\n%s", within, o.String())
	}
	for i := 0; i < 50; i++ {
		in, err := o.eng.ExecInspect(context.Background(), o.id, client.ExecInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !in.Running {
			return in.ExitCode
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("exec still running after its output ended")
	return 0
}

// kill ends the exec's process by its PID (the engine reports the host's), never by name.
func (o *execOut) kill(t *testing.T) {
	t.Helper()
	in, err := o.eng.ExecInspect(context.Background(), o.id, client.ExecInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(in.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", in.PID, err)
	}
	select {
	case <-o.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the exec did not end after SIGKILL")
	}
}

// containerExit waits for a container to stop and returns its exit code.
func containerExit(t *testing.T, eng *client.Client, id string, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		info, err := eng.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !info.Container.State.Running {
			return info.Container.State.ExitCode
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running after %s", within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The seed's failure 1 under the legacy Ray executor of every release that has it: the
// head registers its default route's address, VLLM_HOST_IP names the fast one, bundle 0 is
// pinned to node:<fast ip>, and the group waits 42 minutes (scaled).
func TestSeedFailure1PlacementGroupPinnedToAnUnregisteredIP(t *testing.T) {
	base, eng := upLab(t)
	a, b := base.Nodes[0], base.Nodes[1]
	for _, tc := range legacyRay {
		t.Run(strings.Join(append([]string{tc.release}, tc.env...), ","), func(t *testing.T) {
			l := withImage(base, release(t, tc.release))
			// The seed's head: no --node-ip-address, so Ray registers the default route's address.
			head := dockerRun(t, l, eng, "node-a", tc.release+"-head", nil, "ray", "start", "--head", "--port=6379", "--block")
			waitLogs(t, eng, head, 10*time.Second, "Local node IP: "+a.Ext.String(), "Ray runtime started.")
			worker := dockerRun(t, l, eng, "node-b", tc.release+"-worker", nil, "ray", "start", "--address="+a.Fast.String()+":6379", "--node-ip-address="+b.Fast.String(), "--block")
			waitLogs(t, eng, worker, 10*time.Second, "Ray runtime started.")
			vllm := dockerExec(t, eng, head,
				append([]string{"RAY_ADDRESS=" + a.Fast.String() + ":6379", "VLLM_HOST_IP=" + a.Fast.String(), "TPDEPLOY_SIM_TIME_SCALE=0.002"}, tc.env...),
				"vllm", "serve", "/models/m", "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray")
			specs := fmt.Sprintf("specs=[{'GPU': 1.0, 'node:%s': 0.001}, {'GPU': 1.0}]", a.Fast)
			out := waitOut(t, vllm, seedServeWait,
				"Connected to Ray cluster.",
				"Waiting for creating a placement group of specs for 10 seconds. "+specs,
				"Waiting for creating a placement group of specs for 2550 seconds.",
				"ValueError: Cannot provide a placement group requiring 2.0 GPUs (placement_group_specs=[{'GPU': 1.0, 'node:"+a.Fast.String()+"': 0.001}, {'GPU': 1.0}]) within 1800 seconds.",
				"Tensor parallel size may exceed available GPUs in your cluster.")
			if n := strings.Count(out, "Waiting for creating a placement group"); n != 8 {
				t.Errorf("%d waiting lines, want vLLM's 8 (10, 30, 70 ... 2550 s)", n)
			}
			if code := vllm.exitCode(t, 10*time.Second); code == 0 {
				t.Error("vllm exited 0 after the placement group failed")
			}
		})
	}
}

// remoteRankStoreTimeout is torch's store timeout (seconds, before the lab's time scale) for
// the tests that read node-b's rank failing to reach rank 0's store. Node-b's rank prints
// torch's connect failure on its first retry, but its lines reach the driver through Ray's
// log forwarding (node-b's raylet, then the GCS), which lags by seconds on a loaded machine;
// when rank 0's store gives up first, vLLM kills the actors and those lines never arrive
// (4 s lost that race once in CI). The timeout only has to outlast that lag.
const remoteRankStoreTimeout = "20"

// The same seed under RayExecutorV2 (0.22.1 with Ray, its default): no node: pin, so the
// group is placed at once; rank 0's actor then opens the c10d store on its Ray node's
// registered address, the head's default-route address, which node-b cannot route to: the
// seed's failure 2, from the worker's RayWorkerProc.
func TestRayV2PlacesTheSeedsGroupAndFailsOnTheHeadsRayAddress(t *testing.T) {
	l, eng := upLab(t)
	a, b := l.Nodes[0], l.Nodes[1]
	head := dockerRun(t, l, eng, "node-a", "head", nil, "ray", "start", "--head", "--port=6379", "--block")
	waitLogs(t, eng, head, 10*time.Second, "Local node IP: "+a.Ext.String(), "Ray runtime started.")
	worker := dockerRun(t, l, eng, "node-b", "worker", nil, "ray", "start", "--address="+a.Fast.String()+":6379", "--node-ip-address="+b.Fast.String(), "--block")
	waitLogs(t, eng, worker, 10*time.Second, "Ray runtime started.")
	vllm := dockerExec(t, eng, head,
		[]string{"RAY_ADDRESS=" + a.Fast.String() + ":6379", "VLLM_HOST_IP=" + a.Fast.String(), "TPDEPLOY_SIM_STORE_TIMEOUT=" + remoteRankStoreTimeout},
		"vllm", "serve", "/models/m", "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray")
	waitOut(t, vllm, seedServeWait,
		"Connected to Ray cluster.",
		"(RayWorkerProc pid=",
		"distributed_init_method=tcp://"+a.Ext.String()+":",
		"The client socket has failed to connect to any network address of ("+a.Ext.String()+", ",
		"(errno: 101 - Network is unreachable)")
	// Rank 0's store gives up after remoteRankStoreTimeout; vLLM exits after that.
	if code := vllm.exitCode(t, 60*time.Second); code == 0 {
		t.Error("vllm exited 0 after the rendezvous failed")
	}
	out := vllm.String()
	for _, never := range []string{"Waiting for creating a placement group", "'node:", "Every node should have a unique IP", "RayWorkerWrapper", "Copying the following environment variables"} {
		if strings.Contains(out, never) {
			t.Errorf("RayExecutorV2 printed %q:\n%s", never, out)
		}
	}
	if !strings.Contains(out, "ip="+b.Fast.String()+")") {
		t.Errorf("the c10d failure is not attributed to node-b's worker:\n%s", out)
	}
}

func TestSeedFailure2RendezvousOnAnAddressTheWorkerCannotRoute(t *testing.T) {
	l, eng := upLab(t)
	l = withImage(l, release(t, "vllm-0.17.1"))
	a, b := l.Nodes[0], l.Nodes[1]
	head := dockerRun(t, l, eng, "node-a", "head", nil, "ray", "start", "--head", "--port=6379", "--block")
	waitLogs(t, eng, head, 10*time.Second, "Ray runtime started.")
	worker := dockerRun(t, l, eng, "node-b", "worker", nil, "ray", "start", "--address="+a.Fast.String()+":6379", "--node-ip-address="+b.Fast.String(), "--block")
	waitLogs(t, eng, worker, 10*time.Second, "Ray runtime started.")
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("node-b's Ray worker:\n" + logsOf(t, eng, worker))
		}
	})
	vllm := dockerExec(t, eng, head,
		[]string{"RAY_ADDRESS=" + a.Fast.String() + ":6379", "VLLM_HOST_IP=" + a.Ext.String(), "TPDEPLOY_SIM_STORE_TIMEOUT=" + remoteRankStoreTimeout},
		"vllm", "serve", "/models/m", "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray")
	out := waitOut(t, vllm, seedServeWait,
		"distributed_init_method=tcp://"+a.Ext.String()+":",
		"(RayWorkerWrapper pid=",
		"The client socket has failed to connect to any network address of ("+a.Ext.String()+", ",
		"(errno: 101 - Network is unreachable)",
		"torch.distributed.DistStoreError: Timed out after")
	if !strings.Contains(out, "ip="+b.Fast.String()+")") {
		t.Errorf("the c10d failure is not attributed to node-b's worker:\n%s", out)
	}
	if code := vllm.exitCode(t, 10*time.Second); code == 0 {
		t.Error("vllm exited 0 after the rendezvous failed")
	}
}

// seedFixRay starts the seed's fixed Ray cluster: every node on the fast subnet, each
// container with its own node's variables.
func seedFixRay(t *testing.T, l *Lab, eng *client.Client, envA, envB []string) (head string) {
	t.Helper()
	a, b := l.Nodes[0], l.Nodes[1]
	head = dockerRun(t, l, eng, "node-a", "head", envA, "ray", "start", "--head", "--node-ip-address="+a.Fast.String(), "--port=6379", "--block")
	waitLogs(t, eng, head, 10*time.Second, "Local node IP: "+a.Fast.String())
	worker := dockerRun(t, l, eng, "node-b", "worker", envB, "ray", "start", "--address="+a.Fast.String()+":6379", "--node-ip-address="+b.Fast.String(), "--block")
	waitLogs(t, eng, worker, 10*time.Second, "Ray runtime started.")
	return head
}

func fastIfaces(t *testing.T, l *Lab) (string, string) {
	t.Helper()
	ctx := context.Background()
	ifA, err := l.Iface(ctx, "node-a", "fast")
	if err != nil {
		t.Fatal(err)
	}
	ifB, err := l.Iface(ctx, "node-b", "fast")
	if err != nil {
		t.Fatal(err)
	}
	return ifA, ifB
}

var serveArgs = []string{"vllm", "serve", "/models/tiny", "--served-model-name", "tiny", "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray", "--host", "0.0.0.0", "--port", "8000"}

// The seed's fix with older vLLM, which copies only its own VLLM_* variables to its Ray
// workers: each node keeps its own NCCL_SOCKET_IFNAME and the model serves.
func TestSeedFixServesWithAVLLMThatCopiesOnlyItsOwnVariables(t *testing.T) {
	l, eng := upLab(t)
	l = withImage(l, release(t, "vllm-0.11.0"))
	a, b := l.Nodes[0], l.Nodes[1]
	ifA, ifB := fastIfaces(t, l)
	envA := []string{"NCCL_SOCKET_IFNAME==" + ifA, "GLOO_SOCKET_IFNAME=" + ifA, "VLLM_HOST_IP=" + a.Fast.String(), "RAY_ADDRESS=" + a.Fast.String() + ":6379"}
	envB := []string{"NCCL_SOCKET_IFNAME==" + ifB, "GLOO_SOCKET_IFNAME=" + ifB, "VLLM_HOST_IP=" + b.Fast.String()}
	head := seedFixRay(t, l, eng, envA, envB)
	vllm := dockerExec(t, eng, head, []string{"TPDEPLOY_SIM_SHARDS=4", "TPDEPLOY_SIM_SHARD_SECONDS=0.2"}, serveArgs...)
	out := waitOut(t, vllm, seedServeWait,
		"Copying the following environment variables to workers: [",
		": Using "+ifA+":"+a.Fast.String()+"<0>",
		": Using "+ifB+":"+b.Fast.String()+"<0>",
		"Loading safetensors checkpoint shards: 100% Completed | 4/4",
		"Application startup complete.")
	if strings.Contains(out, "Overwriting environment variable NCCL_SOCKET_IFNAME") {
		t.Errorf("vLLM 0.11 copied NCCL_SOCKET_IFNAME:\n%s", out)
	}
	assertServes(t, "http://"+a.Fast.String()+":8000")
}

// The seed's own fix (a per-node NCCL_SOCKET_IFNAME) under vLLM 0.17, which copies the
// driver's NCCL_* onto every Ray worker: node-b's worker gets node-a's interface name and
// NCCL fails there as measured on real GPUs (upstream.md §6).
func TestNewerVLLMCopiesTheDriversNCCLVariablesOntoItsWorkers(t *testing.T) {
	l, eng := upLab(t)
	l = withImage(l, release(t, "vllm-0.17.1"))
	a, b := l.Nodes[0], l.Nodes[1]
	ifA, ifB := fastIfaces(t, l)
	if ifA == ifB {
		t.Fatalf("the lab's nodes must name their fast interfaces differently (both %s)", ifA)
	}
	envA := []string{"NCCL_SOCKET_IFNAME==" + ifA, "GLOO_SOCKET_IFNAME=" + ifA, "VLLM_HOST_IP=" + a.Fast.String(), "RAY_ADDRESS=" + a.Fast.String() + ":6379"}
	envB := []string{"NCCL_SOCKET_IFNAME==" + ifB, "GLOO_SOCKET_IFNAME=" + ifB, "VLLM_HOST_IP=" + b.Fast.String()}
	head := seedFixRay(t, l, eng, envA, envB)
	vllm := dockerExec(t, eng, head, []string{"TPDEPLOY_SIM_STORE_TIMEOUT=4"}, serveArgs...)
	out := waitOut(t, vllm, seedServeWait,
		"Env var prefixes to copy: ['HF_', 'HUGGING_FACE_', 'LMCACHE_', 'NCCL_', 'UCX_', 'VLLM_']",
		"'NCCL_SOCKET_IFNAME'",
		"Overwriting environment variable NCCL_SOCKET_IFNAME from '="+ifB+"' to '="+ifA+"'",
		"(RayWorkerWrapper pid=", "NCCL WARN", "torch.distributed.DistBackendError: NCCL error")
	// Which NCCL failure depends on whether node-b has an interface of node-a's name: none
	// (bootstrap finds no interface, as measured) or another one (NCCL binds it and cannot
	// connect across).
	if !strings.Contains(out, "NCCL WARN Bootstrap : no socket interface found") && !strings.Contains(out, "NCCL WARN socketStartConnect: connect to "+a.Fast.String()) {
		t.Errorf("node-b's rank did not fail in NCCL on node-a's interface name:\n%s", out)
	}
	// The head's rank waits for node-b's in NCCL's bootstrap, forever, as measured.
	select {
	case <-vllm.done:
		t.Fatalf("vllm ended; the head's rank must hang:\n%s", vllm.String())
	case <-time.After(3 * time.Second):
	}
	vllm.kill(t)

	// Stopping the copy (vLLM's ray_non_carry_over_env_vars.json) keeps each node's own.
	cfg := dockerExec(t, eng, head, nil, "/bin/sh", "-c", `mkdir -p /root/.config/vllm && echo '["NCCL_SOCKET_IFNAME"]' >/root/.config/vllm/ray_non_carry_over_env_vars.json`)
	if code := cfg.exitCode(t, 10*time.Second); code != 0 {
		t.Fatalf("write the non-carry-over file: exit %d: %s", code, cfg.String())
	}
	vllm = dockerExec(t, eng, head, []string{"TPDEPLOY_SIM_SHARDS=2", "TPDEPLOY_SIM_SHARD_SECONDS=0.2"}, serveArgs...)
	out = waitOut(t, vllm, seedServeWait,
		"RAY_NON_CARRY_OVER_ENV_VARS from config: {'NCCL_SOCKET_IFNAME'}",
		": Using "+ifB+":"+b.Fast.String()+"<0>",
		"Application startup complete.")
	if strings.Contains(out, "Overwriting environment variable NCCL_SOCKET_IFNAME") {
		t.Errorf("NCCL_SOCKET_IFNAME was copied although listed as non-carry-over:\n%s", out)
	}
	assertServes(t, "http://"+a.Fast.String()+":8000")
}

// The planned environment (every layer on the fast subnet: Ray's node IPs, RAY_ADDRESS,
// VLLM_HOST_IP, each node's own NCCL/Gloo interface) serves under every release with Ray.
// Where the legacy executor overwrites the workers' NCCL_* with the driver's (0.17 on),
// the head's ray_non_carry_over_env_vars.json keeps each node's; RayExecutorV2 keeps them
// by itself (setdefault).
func TestPlannedEnvServesUnderEveryRayRelease(t *testing.T) {
	base, eng := upLab(t)
	a, b := base.Nodes[0], base.Nodes[1]
	ifA, ifB := fastIfaces(t, base)
	for _, tc := range []struct {
		release string
		env     []string
		v2      bool
	}{
		{"vllm-0.11.0", nil, false},
		{"vllm-0.17.1", nil, false},
		{"vllm-0.22.1-ray", []string{"VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0"}, false},
		{"vllm-0.22.1-ray", nil, true},
	} {
		t.Run(strings.Join(append([]string{tc.release}, tc.env...), ","), func(t *testing.T) {
			l := withImage(base, release(t, tc.release))
			envA := []string{"NCCL_SOCKET_IFNAME==" + ifA, "GLOO_SOCKET_IFNAME=" + ifA, "VLLM_HOST_IP=" + a.Fast.String(), "RAY_ADDRESS=" + a.Fast.String() + ":6379"}
			envB := []string{"NCCL_SOCKET_IFNAME==" + ifB, "GLOO_SOCKET_IFNAME=" + ifB, "VLLM_HOST_IP=" + b.Fast.String()}
			head := seedFixRay(t, l, eng, envA, envB)
			if tc.release != "vllm-0.11.0" && !tc.v2 {
				cfg := dockerExec(t, eng, head, nil, "/bin/sh", "-c", `mkdir -p /root/.config/vllm && echo '["NCCL_SOCKET_IFNAME"]' >/root/.config/vllm/ray_non_carry_over_env_vars.json`)
				if code := cfg.exitCode(t, 10*time.Second); code != 0 {
					t.Fatalf("write the non-carry-over file: exit %d: %s", code, cfg.String())
				}
			}
			vllm := dockerExec(t, eng, head, append([]string{"TPDEPLOY_SIM_SHARDS=2", "TPDEPLOY_SIM_SHARD_SECONDS=0.2"}, tc.env...), serveArgs...)
			out := waitOut(t, vllm, seedServeWait,
				"vLLM API server version "+l.Release.VLLM,
				"distributed_init_method=tcp://"+a.Fast.String()+":",
				": Using "+ifA+":"+a.Fast.String()+"<0>",
				": Using "+ifB+":"+b.Fast.String()+"<0>",
				"Loading safetensors checkpoint shards: 100% Completed | 2/2",
				"Application startup complete.")
			// Real torch ran both ranks' rendezvous and Gloo all_reduce, each on its own
			// node's interface.
			for _, w := range []string{
				"] torch 2.6.0+debian: rank 0/2 joined tcp://" + a.Fast.String() + ":",
				"] torch 2.6.0+debian: rank 1/2 joined tcp://" + a.Fast.String() + ":",
				"over Gloo (GLOO_SOCKET_IFNAME=" + ifA + "); all_reduce sum 3",
				"over Gloo (GLOO_SOCKET_IFNAME=" + ifB + "); all_reduce sum 3",
			} {
				if !strings.Contains(out, w) {
					t.Errorf("no %q: torch did not run the rendezvous:\n%s", w, out)
				}
			}
			// Rank 1 on node-b, under Ray's prefix; RayExecutorV2's workers nest vLLM's
			// WorkerProc prefix inside it (lab/README.md).
			rank1 := regexp.MustCompile(`, ip=` + regexp.QuoteMeta(b.Fast.String()) + `\)\x1b\[0m (\(Worker\S* pid=\d+\) )?\[tpdeploy-lab\] torch 2\.6\.0\+debian: rank 1/2`)
			if !rank1.MatchString(out) {
				t.Errorf("no line of rank 1 on node-b (%s): torch did not run the rendezvous there:\n%s", rank1, out)
			}
			if strings.Contains(out, "Overwriting environment variable NCCL_SOCKET_IFNAME") {
				t.Errorf("a worker's NCCL_SOCKET_IFNAME was overwritten:\n%s", out)
			}
			actor := "(RayWorkerWrapper pid="
			if tc.v2 {
				actor = "(RayWorkerProc pid="
				if strings.Contains(out, "Copying the following environment variables") || strings.Contains(out, "'node:") {
					t.Errorf("RayExecutorV2 logged the legacy env copy or a node: pin:\n%s", out)
				}
			}
			if !strings.Contains(out, actor) || !strings.Contains(out, ", ip="+b.Fast.String()+")") {
				t.Errorf("no %s... ip=%s) line:\n%s", actor, b.Fast, out)
			}
			assertServes(t, "http://"+a.Fast.String()+":8000")
			vllm.kill(t)
		})
	}
}

// A Ray driver must run in the container of its node's Ray: a `vllm serve` in a container
// of its own (here sharing the head node's network, as --network host would) finds no
// node_ip_address.json in its session directory and fails with Ray's text.
func TestVLLMInAContainerOfItsOwnCannotAttachToRay(t *testing.T) {
	l, eng := upLab(t)
	a, b := l.Nodes[0], l.Nodes[1]
	envA := []string{"VLLM_HOST_IP=" + a.Fast.String(), "RAY_ADDRESS=" + a.Fast.String() + ":6379"}
	seedFixRay(t, l, eng, envA, []string{"VLLM_HOST_IP=" + b.Fast.String()})
	vllm := dockerRun(t, l, eng, "node-a", "vllm", append(envA, "TPDEPLOY_SIM_TIME_SCALE=0.05"), serveArgs...)
	waitLogs(t, eng, vllm, 30*time.Second,
		"Can't find a `node_ip_address.json` file from /tmp/ray/session_",
		"ValueError: Can't find a `node_ip_address.json` file from /tmp/ray/session_",
		"for 60 seconds. A ray instance hasn't started. Did you do `ray start` or `ray.init` on this host?")
	if code := containerExit(t, eng, vllm, 10*time.Second); code == 0 {
		t.Error("vllm exited 0")
	}
}

// Ray as vLLM's images ship it has no dashboard: `ray list nodes` fails with Ray's text,
// `ray status` (the GCS) works. With ray[default] the state API answers.
func TestMinimalRayServesNoDashboard(t *testing.T) {
	l, eng := upLab(t)
	a := l.Nodes[0]
	head := seedFixRay(t, l, eng, []string{"RAY_ADDRESS=" + a.Fast.String() + ":6379"}, nil)
	list := dockerExec(t, eng, head, nil, "ray", "list", "nodes")
	if code := list.exitCode(t, 15*time.Second); code == 0 || !strings.Contains(list.String(), "Failed to connect to API server. Please check the API server log for details. Make sure dependencies are installed with `pip install ray[default]`.") {
		t.Errorf("ray list nodes on minimal Ray: exit %d: %s", code, list.String())
	}
	status := dockerExec(t, eng, head, nil, "ray", "status")
	if code := status.exitCode(t, 15*time.Second); code != 0 || strings.Count(status.String(), " 1 node_") != 2 {
		t.Errorf("ray status: exit %d:\n%s", code, status.String())
	}

	full := dockerRun(t, l, eng, "node-b", "full", []string{"TPDEPLOY_SIM_RAY_DEFAULT=1"}, "ray", "start", "--head", "--port=6390", "--dashboard-port=8290", "--node-ip-address="+l.Nodes[1].Fast.String(), "--block")
	waitLogs(t, eng, full, 10*time.Second, "Ray runtime started.")
	list = dockerExec(t, eng, full, nil, "ray", "list", "nodes")
	if code := list.exitCode(t, 15*time.Second); code != 0 || !strings.Contains(list.String(), l.Nodes[1].Fast.String()) {
		t.Errorf("ray list nodes with ray[default]: exit %d: %s", code, list.String())
	}
}

func assertServes(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Get(base + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/health: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var models struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &models); err != nil || len(models.Data) != 1 || models.Data[0].ID != "tiny" || models.Data[0].OwnedBy != "vllm" {
		t.Fatalf("/v1/models = %s (%v)", body, err)
	}
}

// seedServeWait bounds how long a seed test waits for vLLM's lines: the simulator, Ray and
// a real torch rendezvous on a shared CI machine, where 30 s ran out (two releases of
// TestPlannedEnvServesUnderEveryRayRelease, session 18, beside both e2e shards). A bound, not a
// speed target: the benchmarks measure speed.
const seedServeWait = 90 * time.Second
