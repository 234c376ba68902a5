//go:build integration

package lab

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	imageread "github.com/tpdeploy/tpdeploy/internal/release"
)

// The torch base is Debian's python3-torch with Gloo, built once and kept while its inputs
// stay; every release image is FROM it (one copy of its layers), and the image read still
// reports the MODELLED release (Debian's torch is an egg-info under /usr/lib/python3, after
// /usr/local on the read's path).
func TestTorchBaseIsRealTorchSharedByEveryReleaseImage(t *testing.T) {
	eng, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx := context.Background()
	start := time.Now()
	b, err := EnsureTorch(ctx, eng)
	if err != nil {
		t.Fatal(err)
	}
	if b.Built {
		t.Logf("built %s: root (debootstrap + apt-get) %s, %d MB; docker import %s", TorchImage, b.Rootfs.Round(time.Second), b.RootfsBytes>>20, b.Import.Round(time.Second))
	} else {
		t.Logf("%s %s (%s)", TorchImage, b.Skipped, time.Since(start).Round(time.Millisecond))
	}
	if again, err := EnsureTorch(ctx, eng); err != nil || again.Built {
		t.Fatalf("a second EnsureTorch rebuilt (%v, %v)", again.Built, err)
	}
	out, code := runImage(t, eng, TorchImage, "python3", "-c", "import torch, torch.distributed as d; print(torch.__version__, d.is_gloo_available())")
	if code != 0 || !strings.HasPrefix(out, "2.") || !strings.HasSuffix(strings.TrimSpace(out), " True") {
		t.Fatalf("torch in %s: exit %d %q", TorchImage, code, out)
	}
	if v := strings.Fields(out)[0]; v < "2.6" {
		t.Errorf("torch %s, want 2.6 or later", v)
	}
	if err := BuildImages(ctx, eng, ""); err != nil {
		t.Fatal(err)
	}
	base, err := eng.ImageInspect(ctx, TorchImage)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append(slices.Clone(Releases), NCCL230Release, NCCL230RayRelease) {
		img, err := eng.ImageInspect(ctx, r.Image())
		if err != nil {
			t.Fatal(err)
		}
		// FROM the base: the base's layers are the image's first ones.
		if len(img.RootFS.Layers) <= len(base.RootFS.Layers) || img.RootFS.Layers[0] != base.RootFS.Layers[0] {
			t.Errorf("%s is not built on %s", r.Image(), TorchImage)
		}
		out, code := runImage(t, eng, r.Image(), "/bin/sh", "-c", imageread.ReadScript)
		if code != 0 {
			t.Fatalf("%s: image read exit %d: %s", r.Name, code, out)
		}
		got, err := imageread.ParseRead(out)
		if err != nil {
			t.Fatalf("%s: %v\n%s", r.Name, err, out)
		}
		if got.VLLM != r.VLLM || got.Torch != r.Torch || got.NCCL != r.LoadedNCCL() || got.Ray != r.Ray || got.Python != "3.12" ||
			got.NCCLLib != SitePackages+"/nvidia/nccl/lib/libnccl.so.2" {
			t.Errorf("%s: the image read reports %+v, want the modelled vllm %s torch %s nccl %s (its library's) ray %q python 3.12\n%s", r.Name, got, r.VLLM, r.Torch, r.LoadedNCCL(), r.Ray, out)
		}
	}
}

// runImage runs cmd in a fresh container of image (no network) and returns its output.
func runImage(t *testing.T, eng *client.Client, image string, cmd ...string) (string, int) {
	t.Helper()
	ctx := context.Background()
	created, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: image, Entrypoint: cmd[:1], Cmd: cmd[1:]},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = eng.ContainerRemove(ctx, created.ID, client.ContainerRemoveOptions{Force: true}) }()
	if _, err := eng.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	code := containerExit(t, eng, created.ID, 60*time.Second)
	return logsOf(t, eng, created.ID), code
}

// A Gloo list fails with torch's own text on a node that lacks one of its names: Gloo
// creates a device for every listed name (upstream.md §6, measured with torch 2.11). The
// lab's nodes share some names (eth0, eth1), and a list of shared names works in torch 2.6
// (measured here), so the list holds node-a's fast interface and a name only node-a has.
func TestGlooListFailsWithTorchsOwnText(t *testing.T) {
	l, eng := upLab(t)
	a, b := l.Nodes[0], l.Nodes[1]
	ifA, ifB := fastIfaces(t, l)
	ctx := context.Background()
	namesB := map[string]bool{}
	for _, n := range []string{"mgmt", "fast"} {
		name, err := l.Iface(ctx, "node-b", n)
		if err != nil {
			t.Fatal(err)
		}
		namesB[name] = true
	}
	only := ""
	for _, n := range []string{"mgmt", "ext", "fast"} {
		if name, err := l.Iface(ctx, "node-a", n); err == nil && !namesB[name] {
			only = name
		}
	}
	if only == "" {
		t.Fatal("node-a has no interface name node-b lacks")
	}
	list := "GLOO_SOCKET_IFNAME=" + ifA + "," + only
	envA := []string{"NCCL_SOCKET_IFNAME==" + ifA, list, "VLLM_HOST_IP=" + a.Fast.String(), "RAY_ADDRESS=" + a.Fast.String() + ":6379"}
	envB := []string{"NCCL_SOCKET_IFNAME==" + ifB, list, "VLLM_HOST_IP=" + b.Fast.String()}
	head := seedFixRay(t, l, eng, envA, envB)
	vllm := dockerExec(t, eng, head, []string{"TPDEPLOY_SIM_STORE_TIMEOUT=10"}, serveArgs...)
	out := waitOut(t, vllm, 60*time.Second,
		// Under RayExecutorV2 the rank's line carries vLLM's WorkerProc prefix inside Ray's
		// (lab/README.md: the (Worker pid=N) prefix).
		"ip="+b.Fast.String()+")\x1b[0m (Worker",
		"RuntimeError: [enforce fail at ",
		"ifa != nullptr. Unable to find address for: "+only)
	if code := vllm.exitCode(t, 30*time.Second); code == 0 {
		t.Error("vllm exited 0 with a Gloo list naming an interface node-b lacks")
	}
	if strings.Contains(out, "Application startup complete.") || strings.Contains(out, "NCCL INFO Bootstrap") {
		t.Errorf("the engine went on past Gloo:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "Unable to find address for") {
			t.Log(l)
		}
	}
}
