//go:build integration

package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/images"
)

// TestComposeLabUpDown brings the README's `docker-compose --profile lab` lab up, checks
// what it made, and takes it down: nothing with the lab's label may remain.
func TestComposeLabUpDown(t *testing.T) {
	root, err := images.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	temporal := filepath.Join(root, "bin", "temporal")
	if _, err := os.Stat(temporal); err != nil {
		t.Fatalf("the compose lab needs the pinned Temporal CLI at bin/temporal (make bin/temporal): %v", err)
	}
	compose, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Fatalf("docker-compose (Debian's package) is required: %v", err)
	}
	eng, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx := context.Background()
	if err := BuildImages(ctx, eng, temporal); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(compose, append([]string{"--profile", "lab"}, args...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("docker-compose %v: %v\n%s", args, err, out)
		}
	}
	const prefix = "tpd-lab"
	t.Cleanup(func() {
		_ = Down(context.Background(), eng, prefix)
	})
	run("up", "-d")
	down := false
	defer func() {
		if !down {
			run("down")
		}
	}()
	if err := waitTCP(ctx, "10.231.0.254:7233", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tpd-lab-temporal", "tpd-lab-controller", "tpd-lab-node-a", "tpd-lab-node-b"} {
		info, err := eng.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
		if err != nil || !info.Container.State.Running {
			t.Fatalf("%s: %v (running %v)", name, err, err == nil && info.Container.State.Running)
		}
	}
	fast, err := eng.NetworkInspect(ctx, "tpd-lab-fast", client.NetworkInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fast.Network.Options["com.docker.network.driver.mtu"] != "9000" || !fast.Network.Internal {
		t.Errorf("fast network: options %v internal %v", fast.Network.Options, fast.Network.Internal)
	}
	run("down")
	down = true
	assertNoLeftovers(t, eng, prefix)
}
