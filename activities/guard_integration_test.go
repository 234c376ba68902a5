//go:build integration

package activities

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/labtest"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

// BenchmarkGuardReaction is the memory guard's reaction time on this machine's kernel and
// Docker engine: a node whose memory is a 384 MiB cgroup (a container standing for the
// node, its "engine" inside it) fills at 32 MiB/s; the guard (GuardMemory, floor 128 MiB,
// reading that cgroup as an agent reads its node's) stops it. The reaction is from the
// moment the cgroup's available memory fell below the floor (sampled every 10 ms here) to
// the container's exit as Docker records it. Reported: the median over b.N runs
// (`make bench`: 5), and the slowest. The "engine" is python as the container's PID 1,
// which has no SIGTERM handler, and the kernel ignores unhandled signals for a namespace's
// init: this is the guard's slow path, its SIGKILL after GuardGrace (vLLM handles SIGTERM
// and exits at once; the e2e TestGuardStopsALoadWhenNodeMemoryRunsLow measures that path).
func BenchmarkGuardReaction(b *testing.B) {
	eng, err := client.New(client.FromEnv)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	ctx := context.Background()
	if err := labtest.BuildImages(ctx, eng); err != nil {
		b.Fatalf("lab images: %v", err)
	}
	pol, err := policy.Parse(nil, "bench", policy.Overrides{MemoryFloor: "128MiB"})
	if err != nil {
		b.Fatal(err)
	}
	const limit, floor = 384 << 20, 128 << 20
	var reactions []time.Duration
	for i := 0; i < b.N; i++ {
		c := testConfig("bench-node")
		c.Policy = &pol
		a := New(c)
		created, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{
			Config: &container.Config{Image: labtest.SimImage, Labels: map[string]string{LabelNode: "bench-node", LabelCluster: "tpdbench-guard", LabelRole: "vllm"},
				Entrypoint: []string{"python3", "-c", "import time\nheld = []\nwhile True:\n    held.append(b'\\x01' * (4 << 20))\n    time.sleep(0.125)"}},
			HostConfig: &container.HostConfig{NetworkMode: "none", Resources: container.Resources{Memory: limit}}})
		if err != nil {
			b.Fatal(err)
		}
		cleanup := func() {
			_, _ = eng.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
		}
		if _, err := eng.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
			cleanup()
			b.Fatal(err)
		}
		// The agent reads the container's cgroup as its node's: <root>/memory is it.
		root := b.TempDir()
		cg := "/sys/fs/cgroup/memory/docker/" + created.ID
		if err := os.Symlink(cg, filepath.Join(root, "memory")); err != nil {
			cleanup()
			b.Fatal(err)
		}
		a.Containers.docker.sys.cgroupRoot = root
		gctx, stop := context.WithCancel(ctx)
		go a.GuardMemory(gctx, nil)
		var crossed time.Time
		deadline := time.Now().Add(time.Minute)
		for crossed.IsZero() && time.Now().Before(deadline) {
			f := a.Containers.docker.sys.memory(&pol)
			if f.Source == "cgroup1" && f.AvailableBytes < floor {
				crossed = time.Now()
			}
			time.Sleep(10 * time.Millisecond)
		}
		wait := eng.ContainerWait(ctx, created.ID, client.ContainerWaitOptions{})
		select {
		case <-wait.Result:
		case err := <-wait.Error:
			b.Error(err)
		case <-time.After(30 * time.Second):
			b.Error("the guard did not stop the container")
		}
		stop()
		info, err := eng.ContainerInspect(ctx, created.ID, client.ContainerInspectOptions{})
		cleanup()
		if err != nil || crossed.IsZero() {
			b.Fatalf("run %d: crossed %v, %v", i, crossed, err)
		}
		if info.Container.State.OOMKilled {
			b.Fatalf("run %d: the kernel killed the container before the guard stopped it", i)
		}
		finished, err := time.Parse(time.RFC3339Nano, info.Container.State.FinishedAt)
		if err != nil {
			b.Fatal(err)
		}
		reactions = append(reactions, finished.Sub(crossed))
		b.Logf("run %d: stopped %s after crossing the floor", i, finished.Sub(crossed).Round(time.Millisecond))
	}
	slices.Sort(reactions)
	b.ReportMetric(float64(reactions[len(reactions)/2].Milliseconds()), "ms-reaction-median")
	b.ReportMetric(float64(reactions[len(reactions)-1].Milliseconds()), "ms-reaction-max")
	b.ReportMetric(0, "ns/op")
}
