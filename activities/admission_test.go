package activities

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/hostmem"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// A node whose memory cannot hold the spec is refused HostMemoryInsufficient naming the
// node, what it needs and what it has; one that can is admitted with its budget.
func TestPreflightAdmitsHostMemory(t *testing.T) {
	proc := t.TempDir()
	meminfo := "MemTotal:       125829120 kB\nMemFree:         1000000 kB\nMemAvailable:   115343360 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n"
	if err := os.WriteFile(filepath.Join(proc, "meminfo"), []byte(meminfo), 0o644); err != nil {
		t.Fatal(err)
	}
	pol := policy.Default()
	base := &nodeBase{name: "spark-1", log: zap.NewNop(), policy: &pol}
	// clusterRunning asks the local engine, which runs no container of cluster c (or none).
	cs := &Containers{nodeBase: base, docker: &docker{nodeBase: base, sys: sysfs{procRoot: proc, cgroupRoot: t.TempDir()}, mounts: &mounts{nodeBase: base}}}
	yes := true
	c := spec.Cluster{Name: "c", Image: "vllm/vllm-openai:v0.22.1", Model: spec.Model{Path: "/models/m"}, Parallel: spec.Parallel{Tensor: 2},
		Nodes: []spec.Node{{Name: "spark-1", Role: "head", UnifiedMemory: &yes}, {Name: "spark-2", Role: "worker", UnifiedMemory: &yes}}}
	plan := &netplan.Plan{Nodes: []netplan.NodePlan{{Name: "spark-1", GPUs: 1}, {Name: "spark-2", GPUs: 1}}}

	_, err := cs.admitMemory(context.Background(), c, plan)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != contract.ErrHostMemory || !ae.NonRetryable() {
		t.Fatalf("vLLM's default utilization on a 120 GiB unified node: %v", err)
	}
	for _, want := range []string{"spark-1", "needs ", "110.0 GiB available of 120.0 GiB", "--gpu-memory-utilization 0.9", "Fix: lower --gpu-memory-utilization"} {
		if !strings.Contains(ae.Error(), want) {
			t.Errorf("refusal lacks %q: %s", want, ae.Error())
		}
	}
	var b hostmem.Budget
	if ae.Details(&b) != nil || b.Fits || b.Ranks != 1 {
		t.Errorf("the refusal's budget: %+v", b)
	}

	c.Model.ExtraArgs = []string{"--gpu-memory-utilization", "0.7"}
	got, err := cs.admitMemory(context.Background(), c, plan)
	if err != nil || got == nil || !got.Fits || !got.Unified {
		t.Fatalf("0.7: %+v, %v", got, err)
	}
	c.Model.ExtraArgs = []string{"--gpu-memory-utilization=lots"}
	if _, err := cs.admitMemory(context.Background(), c, plan); !errors.As(err, &ae) || ae.Type() != contract.ErrSpecInvalid {
		t.Fatalf("a bad utilization: %v", err)
	}
}
