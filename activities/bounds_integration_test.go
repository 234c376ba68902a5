//go:build integration

package activities

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// sleeper is a running container of the chatter image (busybox, a shell).
func sleeper(t *testing.T) (*client.Client, string) {
	eng := engineForTest(t)
	ctx := context.Background()
	created, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: chatterImage}, HostConfig: &container.HostConfig{NetworkMode: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = eng.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := eng.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	return eng, created.ID
}

// A process in the container prints a 64 MiB line where the agent expects a status: the
// agent keeps at most maxExecOutput of it and fails the exec.
func TestExecOutputIsBounded(t *testing.T) {
	eng, id := sleeper(t)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := execIn(context.Background(), eng, id, []string{"/bin/sh", "-c", "head -c " + strconv.Itoa(64<<20) + " /dev/zero | tr '\\0' x"}, nil)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errExecOutput) {
		t.Fatalf("a 64 MiB line: %v, want %v", err, errExecOutput)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("reading it allocated %d MiB", grew>>20)
	}
	// At the bound exactly, the output is kept whole.
	r, err := execIn(context.Background(), eng, id, []string{"/bin/sh", "-c", "head -c " + strconv.Itoa(maxExecOutput) + " /dev/zero | tr '\\0' x"}, nil)
	if err != nil || len(r.Stdout) != maxExecOutput {
		t.Errorf("output of exactly %d bytes: %d bytes, %v", maxExecOutput, len(r.Stdout), err)
	}
}

// An exec whose output never ends (a hung engine, a process that holds its stdout open)
// is abandoned when the step's context ends, not when the process does.
func TestHungExecReadEndsWithItsContext(t *testing.T) {
	eng, id := sleeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := execIn(ctx, eng, id, []string{"/bin/sleep", "45"}, nil)
	if err == nil {
		t.Fatal("a hung exec returned no error")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the read ended %s after its context (1 s)", d)
	}
}
