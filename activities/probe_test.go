package activities

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRDMAAndGPUsFromSysfs reads a sysfs/procfs tree shaped like a DGX Spark's: two RoCE
// ports mapped to their netdevs (as ibdev2netdev shows them), one of them down.
func TestRDMAAndGPUsFromSysfs(t *testing.T) {
	sys, proc := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(sys, "class/infiniband/mlx5_0/ports/1/state"), "4: ACTIVE\n")
	writeFile(t, filepath.Join(sys, "class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0"), "enp1s0f0np0\n")
	writeFile(t, filepath.Join(sys, "class/infiniband/mlx5_1/ports/1/state"), "1: DOWN\n")
	writeFile(t, filepath.Join(sys, "class/infiniband/mlx5_1/ports/1/gid_attrs/ndevs/0"), "enp1s0f1np1\n")
	writeFile(t, filepath.Join(sys, "class/infiniband/mlx5_0/ports/1/rate"), "100 Gb/sec (4X EDR)\n")
	writeFile(t, filepath.Join(sys, "class/infiniband/mlx5_0/ports/1/link_layer"), "Ethernet\n")
	writeFile(t, filepath.Join(sys, "class/infiniband/mlx5_0/device/infiniband_verbs/uverbs0/ibdev"), "mlx5_0\n")
	writeFile(t, filepath.Join(sys, "class/net/enp1s0f0np0/speed"), "200000\n")
	writeFile(t, filepath.Join(sys, "class/net/veth0/speed"), "-1\n")
	writeFile(t, filepath.Join(proc, "driver/nvidia/gpus/0000:01:00.0/information"), "Model: GB10\n")
	a := sysfs{sysRoot: sys, procRoot: proc}

	devs := a.rdmaDevices()
	if len(devs) != 2 || devs[0].Name != "mlx5_0" || devs[0].Netdev != "enp1s0f0np0" || devs[0].State != "ACTIVE" || devs[0].Port != 1 {
		t.Fatalf("rdma = %+v", devs)
	}
	if devs[0].RateMbps != 100000 || devs[0].LinkLayer != "Ethernet" || devs[0].UVerbs != "uverbs0" {
		t.Errorf("mlx5_0's rate, link layer, verbs device = %+v", devs[0])
	}
	if devs[1].State != "DOWN" || devs[1].Netdev != "enp1s0f1np1" {
		t.Errorf("mlx5_1 = %+v", devs[1])
	}
	if got := a.linkSpeed("enp1s0f0np0"); got != 200000 {
		t.Errorf("speed = %d", got)
	}
	if got := a.linkSpeed("veth0"); got != 0 {
		t.Errorf("virtual link speed = %d, want 0 (unknown)", got)
	}
	if n, src := a.gpus(4); n != 1 || src != "detected" {
		t.Errorf("gpus = %d (%s), want 1 detected", n, src)
	}
	empty := sysfs{sysRoot: t.TempDir(), procRoot: t.TempDir()}
	if n, src := empty.gpus(2); n != 2 || src != "spec" {
		t.Errorf("gpus without a driver = %d (%s), want the spec's 2", n, src)
	}
	if devs := empty.rdmaDevices(); devs != nil {
		t.Errorf("rdma without infiniband = %+v", devs)
	}
}

func TestBootIDFileOverridesKernel(t *testing.T) {
	f := filepath.Join(t.TempDir(), "boot_id")
	writeFile(t, f, "lab-boot-7\n")
	a := sysfs{bootIDFile: f}
	if id, err := a.bootID(); err != nil || id != "lab-boot-7" {
		t.Errorf("boot id = %q, %v", id, err)
	}
	a.bootIDFile = filepath.Join(t.TempDir(), "missing")
	if _, err := a.bootID(); err == nil || !strings.Contains(err.Error(), "boot id") {
		t.Errorf("missing boot id file: %v", err)
	}
}

func TestTaskForAnotherNodeIsRefused(t *testing.T) {
	a := New(Config{Name: "node-a"})
	_, err := a.Probe.ProbeNode(context.Background(), contract.ProbeRequest{Node: "node-b"})
	if err == nil || !strings.Contains(err.Error(), `task for node "node-b" reached the agent of node "node-a"`) {
		t.Errorf("err = %v", err)
	}
}

func TestDialErrorIsShort(t *testing.T) {
	_, err := net.DialTimeout("tcp", "127.0.0.1:1", time.Second)
	if got := dialError(err); got != "connection refused" {
		t.Errorf("dialError = %q", got)
	}
}
