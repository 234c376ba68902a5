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
	"strings"
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

// dockerRun starts the simulator as `docker run --network container:NODE IMAGE cmd...`.
func dockerRun(t *testing.T, l *Lab, eng *client.Client, node, name string, env []string, cmd ...string) string {
	t.Helper()
	n, _ := l.Node(node)
	created, err := eng.ContainerCreate(context.Background(), client.ContainerCreateOptions{
		Name:       l.Prefix + "-" + name,
		Config:     &container.Config{Image: SimImage, Entrypoint: cmd[:1], Cmd: cmd[1:], Env: env},
		HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode("container:" + n.Container)},
	})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	if _, err := eng.ContainerStart(context.Background(), created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return created.ID
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

func exitCode(t *testing.T, eng *client.Client, id string, within time.Duration) int {
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

func TestSeedFailure1PlacementGroupPinnedToAnUnregisteredIP(t *testing.T) {
	l, eng := upLab(t)
	a, b := l.Nodes[0], l.Nodes[1]
	// The seed's head: no --node-ip-address, so Ray registers the default route's address.
	head := dockerRun(t, l, eng, "node-a", "head", nil, "ray", "start", "--head", "--port=6379", "--block")
	waitLogs(t, eng, head, 10*time.Second, "Local node IP: "+a.Ext.String(), "Ray runtime started.")
	worker := dockerRun(t, l, eng, "node-b", "worker", nil, "ray", "start", "--address="+a.Fast.String()+":6379", "--node-ip-address="+b.Fast.String(), "--block")
	waitLogs(t, eng, worker, 10*time.Second, "Ray runtime started.")
	vllm := dockerRun(t, l, eng, "node-a", "vllm",
		[]string{"RAY_ADDRESS=" + a.Fast.String() + ":6379", "VLLM_HOST_IP=" + a.Fast.String(), "TPDEPLOY_SIM_TIME_SCALE=0.002"},
		"vllm", "serve", "/models/m", "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray")
	specs := fmt.Sprintf("specs=[{'GPU': 1.0, 'node:%s': 0.001}, {'GPU': 1.0}]", a.Fast)
	out := waitLogs(t, eng, vllm, 30*time.Second,
		"Waiting for creating a placement group of specs for 10 seconds. "+specs,
		"Waiting for creating a placement group of specs for 2550 seconds.",
		"ValueError: Cannot provide a placement group requiring 2 GPUs (placement_group_specs=[{'GPU': 1.0, 'node:"+a.Fast.String()+"': 0.001}, {'GPU': 1.0}]) within 1800 seconds.")
	if n := strings.Count(out, "Waiting for creating a placement group"); n != 8 {
		t.Errorf("%d waiting lines, want vLLM's 8 (10, 30, 70 ... 2550 s)", n)
	}
	if code := exitCode(t, eng, vllm, 10*time.Second); code == 0 {
		t.Error("vllm exited 0 after the placement group failed")
	}
}

func TestSeedFailure2RendezvousOnAnAddressTheWorkerCannotRoute(t *testing.T) {
	l, eng := upLab(t)
	a, b := l.Nodes[0], l.Nodes[1]
	head := dockerRun(t, l, eng, "node-a", "head", nil, "ray", "start", "--head", "--port=6379", "--block")
	waitLogs(t, eng, head, 10*time.Second, "Ray runtime started.")
	worker := dockerRun(t, l, eng, "node-b", "worker", nil, "ray", "start", "--address="+a.Fast.String()+":6379", "--node-ip-address="+b.Fast.String(), "--block")
	waitLogs(t, eng, worker, 10*time.Second, "Ray runtime started.")
	vllm := dockerRun(t, l, eng, "node-a", "vllm",
		[]string{"RAY_ADDRESS=" + a.Fast.String() + ":6379", "VLLM_HOST_IP=" + a.Ext.String(), "TPDEPLOY_SIM_STORE_TIMEOUT=4"},
		"vllm", "serve", "/models/m", "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray")
	out := waitLogs(t, eng, vllm, 30*time.Second,
		"distributed_init_method=tcp://"+a.Ext.String()+":",
		"(RayWorkerWrapper pid=",
		"The client socket has failed to connect to any network address of ("+a.Ext.String()+", ",
		"(errno: 101 - Network is unreachable)",
		"torch.distributed.DistStoreError: Timed out after")
	if !strings.Contains(out, "ip="+b.Fast.String()+")") {
		t.Errorf("the c10d failure is not attributed to node-b's worker:\n%s", out)
	}
	if code := exitCode(t, eng, vllm, 10*time.Second); code == 0 {
		t.Error("vllm exited 0 after the rendezvous failed")
	}
}

func TestSeedFixEverythingOnTheFastSubnetServes(t *testing.T) {
	l, eng := upLab(t)
	ctx := context.Background()
	a, b := l.Nodes[0], l.Nodes[1]
	ifA, err := l.Iface(ctx, "node-a", "fast")
	if err != nil {
		t.Fatal(err)
	}
	ifB, err := l.Iface(ctx, "node-b", "fast")
	if err != nil {
		t.Fatal(err)
	}
	envA := []string{"NCCL_SOCKET_IFNAME==" + ifA, "GLOO_SOCKET_IFNAME=" + ifA, "VLLM_HOST_IP=" + a.Fast.String(), "RAY_ADDRESS=" + a.Fast.String() + ":6379"}
	envB := []string{"NCCL_SOCKET_IFNAME==" + ifB, "GLOO_SOCKET_IFNAME=" + ifB, "VLLM_HOST_IP=" + b.Fast.String()}
	head := dockerRun(t, l, eng, "node-a", "head", envA, "ray", "start", "--head", "--node-ip-address="+a.Fast.String(), "--port=6379", "--block")
	waitLogs(t, eng, head, 10*time.Second, "Local node IP: "+a.Fast.String())
	worker := dockerRun(t, l, eng, "node-b", "worker", envB, "ray", "start", "--address="+a.Fast.String()+":6379", "--node-ip-address="+b.Fast.String(), "--block")
	waitLogs(t, eng, worker, 10*time.Second, "Ray runtime started.")
	vllm := dockerRun(t, l, eng, "node-a", "vllm", append(envA, "TPDEPLOY_SIM_SHARDS=4", "TPDEPLOY_SIM_SHARD_SECONDS=0.2"),
		"vllm", "serve", "/models/tiny", "--served-model-name", "tiny", "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray", "--host", "0.0.0.0", "--port", "8000")
	waitLogs(t, eng, vllm, 30*time.Second,
		"NCCL INFO Bootstrap : Using "+ifA+":"+a.Fast.String()+"<0>",
		"NCCL INFO Bootstrap : Using "+ifB+":"+b.Fast.String()+"<0>",
		"Loading safetensors checkpoint shards: 100% Completed | 4/4",
		"Application startup complete.")
	base := "http://" + a.Fast.String() + ":8000"
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
