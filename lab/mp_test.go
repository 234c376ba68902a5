//go:build integration

package lab

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// vLLM's own multi-node mode, driven by hand as its docs do: a headless `vllm serve` on
// node-b, then node-a's with the API server; no Ray.

func mpArgs(rank int, master string, extra ...string) []string {
	args := []string{"vllm", "serve", "/models/tiny", "--served-model-name", "tiny", "--tensor-parallel-size", "2",
		"--nnodes", "2", "--node-rank", map[int]string{0: "0", 1: "1"}[rank], "--master-addr", master, "--master-port", "29501",
		"--host", "0.0.0.0", "--port", "8000"}
	if rank > 0 {
		args = append(args, "--headless")
	}
	return append(args, extra...)
}

// On the fast subnet, with each node's own interfaces, the two nodes serve; the headless
// node says where it joins.
func TestMPServesOnTheFastSubnet(t *testing.T) {
	l, eng := upLab(t)
	l = withImage(l, release(t, "vllm-0.22.1")) // a stock image: no Ray
	a, b := l.Nodes[0], l.Nodes[1]
	ifA, ifB := fastIfaces(t, l)
	envB := []string{"NCCL_SOCKET_IFNAME==" + ifB, "GLOO_SOCKET_IFNAME=" + ifB, "VLLM_HOST_IP=" + b.Fast.String()}
	worker := dockerRun(t, l, eng, "node-b", "mp-1", envB, mpArgs(1, a.Fast.String())...)
	// Its worker's torch retries the refused store silently (torch 2.6 logs refusals at
	// INFO, below its default level), until node 0's rank 0 opens it.
	waitLogs(t, eng, worker, 10*time.Second,
		"Launching vLLM (v"+l.Release.VLLM+") headless multiproc executor, with head node address "+a.Fast.String()+":29501 for torch.distributed process group.")
	envA := []string{"NCCL_SOCKET_IFNAME==" + ifA, "GLOO_SOCKET_IFNAME=" + ifA, "VLLM_HOST_IP=" + a.Fast.String(),
		"TPDEPLOY_SIM_SHARDS=4", "TPDEPLOY_SIM_SHARD_SECONDS=0.2"}
	head := dockerRun(t, l, eng, "node-a", "mp-0", envA, mpArgs(0, a.Fast.String())...)
	waitLogs(t, eng, head, 30*time.Second,
		"distributed_init_method=tcp://"+a.Fast.String()+":29501",
		": Using "+ifA+":"+a.Fast.String()+"<0>",
		"Loading safetensors checkpoint shards: 100% Completed | 4/4",
		"Application startup complete.")
	waitLogs(t, eng, worker, 5*time.Second, "(Worker_TP1 pid=", ": Using "+ifB+":"+b.Fast.String()+"<0>")
	assertServes(t, "http://"+a.Fast.String()+":8000")
	// Node 0 going away ends the headless node: its worker's NCCL connection breaks.
	if _, err := eng.ContainerKill(context.Background(), head, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	waitLogs(t, eng, worker, 15*time.Second, "Worker proc Worker_TP1 died unexpectedly, shutting down executor.")
	if code := containerExit(t, eng, worker, 10*time.Second); code == 0 {
		t.Error("the headless node exited 0 after its worker died")
	}
}

// The seed's failure 2 in this mode: --master-addr on the external subnet, which node-b
// cannot route to; node-b's worker fails with torch's text, and node 0 waits for it.
func TestMPSeedFailure2MasterOnAnAddressTheWorkerCannotRoute(t *testing.T) {
	l, eng := upLab(t)
	l = withImage(l, release(t, "vllm-0.22.1"))
	a := l.Nodes[0]
	envB := []string{"TPDEPLOY_SIM_STORE_TIMEOUT=4"}
	worker := dockerRun(t, l, eng, "node-b", "mp-1", envB, mpArgs(1, a.Ext.String())...)
	head := dockerRun(t, l, eng, "node-a", "mp-0", []string{"TPDEPLOY_SIM_STORE_TIMEOUT=6"}, mpArgs(0, a.Ext.String())...)
	out := waitLogs(t, eng, worker, 30*time.Second,
		"[c10d] The client socket has failed to connect to any network address of ("+a.Ext.String()+", 29501).",
		"(errno: 101 - Network is unreachable)",
		"torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of ("+a.Ext.String()+", 29501)",
		"Worker proc Worker_TP1 died unexpectedly, shutting down executor.")
	if !strings.Contains(out, "(Worker_TP1 pid=") {
		t.Errorf("the failure is not in the worker's words:\n%s", out)
	}
	waitLogs(t, eng, head, 30*time.Second, "torch.distributed.DistStoreError: Timed out after 7 seconds waiting for clients. 1/2 clients joined.")
}

// vLLM 0.11.0 has no multi-node mp (vLLM PR #23691 came in 0.11.1): argparse refuses the
// flags, the top-level parser reporting them, exit status 2.
func TestMPFlagsAreUnrecognizedBefore0111(t *testing.T) {
	l, eng := upLab(t)
	l = withImage(l, release(t, "vllm-0.11.0"))
	head := dockerRun(t, l, eng, "node-a", "mp-0", nil, mpArgs(0, l.Nodes[0].Fast.String())...)
	out := waitLogs(t, eng, head, 10*time.Second, "vllm: error: unrecognized arguments: --nnodes 2 --node-rank 0 --master-addr "+l.Nodes[0].Fast.String()+" --master-port 29501")
	if !strings.HasPrefix(out, "usage: vllm ") {
		t.Errorf("argparse prints the usage first:\n%s", out)
	}
	if code := containerExit(t, eng, head, 10*time.Second); code != 2 {
		t.Errorf("exit %d, argparse's is 2", code)
	}
}
