//go:build integration

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	enumspb "go.temporal.io/api/enums/v1"
	tclient "go.temporal.io/sdk/client"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/hostmem"
	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/lab"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// TestSpecTooLargeForANodeIsRefusedAtPreflight: on a lab whose node containers are
// limited to 512 MiB (a memory cgroup, so the agents' facts are the kernel's), `starter
// plan` shows each node's budget as not fitting, and a deploy is refused
// HostMemoryInsufficient at preflight, naming the node, what it needs and what it has,
// in seconds, with no container left.
func TestSpecTooLargeForANodeIsRefusedAtPreflight(t *testing.T) {
	ctx := context.Background()
	root, _ := images.ModuleRoot()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	prefix := "tpd-e2e-mem-" + hex.EncodeToString(b)
	l, err := labUp(ctx, filepath.Join(root, "bin", "temporal"), lab.Config{Prefix: prefix, NodeMemory: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		if err := lab.Down(context.Background(), eng, prefix); err != nil {
			t.Logf("lab down: %v", err)
		}
	})
	starterAt := func(args ...string) (string, int) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, starter, args...)
		cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+l.Temporal, "TPDEPLOY_SIGN_KEY_FILE="+l.SignKeyFile)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("starter %v: %v\n%s", args, err, out)
		}
		return string(out), 0
	}
	file := writeSpec(t, labSpec(t, "e2e-mem"))

	out, _ := starterAt("plan", "-f", file)
	t.Logf("plan:\n%s", out)
	for _, want := range []string{"Host memory", "node-a: discrete GPU memory, cgroup", "of 512 MiB; DOES NOT FIT"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q", want)
		}
	}

	start := time.Now()
	out, code := starterAt("deploy", "-f", file, "--watch")
	took := time.Since(start)
	t.Logf("deploy refused after %s (exit %d):\n%s", took.Round(100*time.Millisecond), code, out)
	if code == 0 {
		t.Fatal("a spec too large for 512 MiB nodes deployed")
	}
	for _, want := range []string{"HostMemoryInsufficient", "host memory: needs", "available of 512 MiB", "host reserve 256 MiB", "Fix: "} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal lacks %q", want)
		}
	}
	if !strings.Contains(out, "node-a") && !strings.Contains(out, "node-b") {
		t.Error("refusal names no node")
	}
	if took > 2*time.Minute {
		t.Errorf("refused after %s, not at preflight", took)
	}
	if left := containersOf(t, "e2e-mem"); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}
}

// TestGuardStopsALoadWhenNodeMemoryRunsLow: on a lab whose node-a is a 1 GiB container
// that computes in host memory (a GB10's unified memory: nodes[].unified_memory, and the
// simulator's TPDEPLOY_SIM_UNIFIED_MEMORY), a spec that fits at preflight loads; during the
// load another tenant of the node takes memory, and the engine's own KV-cache allocation
// (--gpu-memory-utilization × the node's memory, touched pages in the node's cgroup)
// takes the node below the guard's floor. The kernel's accounting, read from the node's
// cgroup by the test as the agent reads it, says when; the engine container is stopped
// within 5 s of that (asserted loosely), the agent survives, the deploy fails
// HostMemoryPressure naming the lowest MemAvailable, nothing runs on, and no redeploy
// loops: one while the tenant still holds the memory is refused at preflight.
func TestGuardStopsALoadWhenNodeMemoryRunsLow(t *testing.T) {
	ctx := context.Background()
	root, _ := images.ModuleRoot()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	prefix := "tpd-e2e-guard-" + hex.EncodeToString(b)
	const nodeMemory, floor = 1 << 30, 128 << 20
	util := 0.1
	l, err := labUp(ctx, filepath.Join(root, "bin", "temporal"), lab.Config{Prefix: prefix, NodeMemory: nodeMemory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		if err := lab.Down(context.Background(), eng, prefix); err != nil {
			t.Logf("lab down: %v", err)
		}
	})
	mc, err := tclient.Dial(tclient.Options{HostPort: l.Temporal})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	s := labSpec(t, "e2e-guard")
	yes := true
	s.Nodes[0].UnifiedMemory = &yes
	s.Nodes[0].Env = map[string]string{"TPDEPLOY_SIM_SHARDS": "20", "TPDEPLOY_SIM_SHARD_SECONDS": "0.5", "TPDEPLOY_SIM_UNIFIED_MEMORY": "1"}
	s.Model.ExtraArgs = append(s.Model.ExtraArgs, "--gpu-memory-utilization", fmt.Sprint(util))
	ctl := control.Controller{Client: mc, SignKey: l.SignKey}

	info, err := eng.ContainerInspect(ctx, l.Nodes[0].Container, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeID := info.Container.ID
	// available is node-a's memory as its agent reads it (hostmem.Combine): its cgroup's
	// limit less its use, reclaimable page cache counted back.
	available := func() int64 {
		dir := "/sys/fs/cgroup/memory/docker/" + nodeID
		read := func(name string) string { b, _ := os.ReadFile(filepath.Join(dir, name)); return string(b) }
		cg, err := hostmem.ParseCgroup1(read("memory.limit_in_bytes"), read("memory.usage_in_bytes"), read("memory.stat"))
		if err != nil {
			t.Fatalf("node-a's memory cgroup (cgroup v1, the cgroupfs driver): %v", err)
		}
		return cg.Limit - cg.Usage + cg.InactiveFile
	}

	start := time.Now()
	run, err := ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: s, Trigger: "test", ReportEvery: spec.Duration(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(300 * time.Millisecond) {
		var p contract.ServingProgress
		if v, err := mc.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), contract.QueryProgress); err == nil && v.Get(&p) == nil && p.Phase == "loading" && p.ShardsLoaded > 0 {
			break
		}
		//lint:ignore SA1019 as waitPhase does: a nil-safe read of the run's status
		if d, err := mc.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID()); err == nil &&
			d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Fatalf("the deploy ended before it loaded: %v", control.Reason(run.Get(ctx, nil)))
		}
		if time.Now().After(deadline) {
			t.Fatal("the deploy never reached loading")
		}
	}
	// The tenant takes what the engine's KV cache will not, less half the floor: the
	// KV-cache allocation, at the load's end, is what crosses the floor.
	kv := int64(util * float64(nodeMemory))
	tenantBytes := available() - kv - floor/2
	t.Logf("loading after %s: node-a has %s available; the tenant takes %s, the KV cache will take %s",
		time.Since(start).Round(100*time.Millisecond), hostmem.Human(available()), hostmem.Human(tenantBytes), hostmem.Human(kv))
	tenant := prefix + "-tenant"
	created, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{Name: tenant,
		Config: &container.Config{Image: l.Image, Labels: map[string]string{lab.LabelLab: prefix},
			Entrypoint: []string{"python3", "-c", "import sys, time\nb = b'\\x01' * int(sys.argv[1])\ntime.sleep(3600)", fmt.Sprint(tenantBytes)}},
		HostConfig: &container.HostConfig{NetworkMode: "none", Resources: container.Resources{CgroupParent: "/docker/" + nodeID}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = eng.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := eng.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}

	// Sample node-a's memory and its engine every 100 ms: when it crossed the floor, the
	// lowest, and when the engine stopped.
	var crossed, stopped time.Time
	lowest := int64(nodeMemory)
	flt := client.Filters{}
	flt.Add("label", activities.LabelCluster+"="+s.Name)
	flt.Add("label", activities.LabelNode+"=node-a")
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			a := available()
			lowest = min(lowest, a)
			if a < floor && crossed.IsZero() {
				crossed = time.Now()
				t.Logf("node-a below the floor at %s: %s available", time.Since(start).Round(100*time.Millisecond), hostmem.Human(a))
			}
			if !crossed.IsZero() && stopped.IsZero() {
				list, err := eng.ContainerList(ctx, client.ContainerListOptions{Filters: flt})
				if err == nil && len(list.Items) == 0 {
					stopped = time.Now()
					t.Logf("node-a's engine stopped at %s", time.Since(start).Round(100*time.Millisecond))
				}
			}
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	err = control.Reason(run.Get(wctx, nil))
	close(done)
	<-sampled
	t.Logf("deploy ended after %s: %v", time.Since(start).Round(100*time.Millisecond), err)
	var f *control.Failure
	if !errors.As(err, &f) || f.Type != contract.ErrHostMemoryPressure {
		t.Fatalf("deploy ended %v, not HostMemoryPressure", err)
	}
	for _, want := range []string{"node-a", "(the lowest seen)", "below the guard's floor 128 MiB"} {
		if !strings.Contains(f.Error(), want) {
			t.Errorf("failure lacks %q", want)
		}
	}
	switch {
	case crossed.IsZero():
		t.Errorf("node-a never went below the floor (lowest %s)", hostmem.Human(lowest))
	case stopped.IsZero():
		t.Error("the engine was not seen stopped")
	default:
		took := stopped.Sub(crossed)
		t.Logf("guard reaction: engine stopped %s after node-a crossed the floor (lowest %s)", took.Round(10*time.Millisecond), hostmem.Human(lowest))
		if took > 8*time.Second {
			t.Errorf("the engine stopped %s after the crossing, not within ~5 s", took.Round(10*time.Millisecond))
		}
	}
	ni, err := eng.ContainerInspect(ctx, l.Nodes[0].Container, client.ContainerInspectOptions{})
	if err != nil || !ni.Container.State.Running || ni.Container.State.OOMKilled || ni.Container.RestartCount > 0 {
		t.Errorf("node-a's agent did not survive: %+v %v", ni.Container.State, err)
	}
	if _, err := mc.DescribeWorkflowExecution(ctx, contract.SuperviseWorkflowID(s.Name), ""); err == nil {
		t.Error("a supervisor runs for a deploy that never served")
	}

	// While the tenant holds the memory, a redeploy is refused at preflight: no loop of
	// loads into a full node.
	again := time.Now()
	run, err = ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: s, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	err = control.Reason(run.Get(ctx, nil))
	t.Logf("redeploy with the tenant still there ended after %s: %v", time.Since(again).Round(100*time.Millisecond), err)
	if !errors.As(err, &f) || f.Type != contract.ErrHostMemory {
		t.Errorf("redeploy ended %v, not HostMemoryInsufficient", err)
	}
	if _, err := eng.ContainerRemove(ctx, created.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Error(err)
	}
	supervisedGuardStop(t, l, mc, s, tenantOf(t, l, nodeID), available, floor, func() string { return cgroupStat(nodeID) })
}

// cgroupStat is the part of node-a's memory.stat (cgroup v1) that says where its use
// lies: anonymous memory, and page cache active, inactive and mapped.
func cgroupStat(nodeID string) string {
	b, _ := os.ReadFile("/sys/fs/cgroup/memory/docker/" + nodeID + "/memory.stat")
	var parts []string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "total_rss", "total_cache", "total_active_file", "total_inactive_file", "total_mapped_file", "total_shmem":
			var n int64
			fmt.Sscan(v, &n)
			parts = append(parts, strings.TrimPrefix(k, "total_")+" "+hostmem.Human(n))
		}
	}
	return strings.Join(parts, ", ")
}

// tenantOf returns a function that starts a container in node-a's memory cgroup that
// takes n bytes and keeps them, and a function that removes it.
func tenantOf(t *testing.T, l *lab.Lab, nodeID string) func(name string, n int64) (remove func()) {
	return func(name string, n int64) func() {
		ctx := context.Background()
		created, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{Name: l.Prefix + "-" + name,
			Config: &container.Config{Image: l.Image, Labels: map[string]string{lab.LabelLab: l.Prefix},
				Entrypoint: []string{"python3", "-c", "import sys, time\nb = b'\\x01' * int(sys.argv[1])\ntime.sleep(3600)", fmt.Sprint(n)}},
			HostConfig: &container.HostConfig{NetworkMode: "none", Resources: container.Resources{CgroupParent: "/docker/" + nodeID}}})
		if err != nil {
			t.Fatal(err)
		}
		remove := func() {
			_, _ = eng.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
		}
		t.Cleanup(remove)
		if _, err := eng.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatal(err)
		}
		return remove
	}
}

// supervisedGuardStop is the guard's case with a supervisor: the spec, with the memory
// back, deploys and serves; a tenant then takes the node's memory while it serves, and the
// guard stops the engine. The supervisor's incident is HostMemoryPressure (it asks the
// node's guard, not "unhealthy"), its redeploys are refused at preflight while the memory
// is held (HostMemoryInsufficient: no load into a full node, no restart loop), and once the
// tenant leaves its next redeploy serves, within the attempts its breaker allows.
func supervisedGuardStop(t *testing.T, l *lab.Lab, mc tclient.Client, s spec.Cluster, tenant func(string, int64) func(), available func() int64, floor int64, stat func() string) {
	ctx := context.Background()
	ctl := control.Controller{Client: mc, SignKey: l.SignKey}
	t.Logf("before the supervised deploy: node-a has %s available (%s)", hostmem.Human(available()), stat())
	start := time.Now()
	run, err := ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: s, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	if err := run.Get(wctx, nil); err != nil {
		t.Fatalf("with the memory back, the deploy did not serve: %v (node-a now: %s available; %s)", control.Reason(err), hostmem.Human(available()), stat())
	}
	t.Logf("serving after %s; node-a has %s available", time.Since(start).Round(100*time.Millisecond), hostmem.Human(available()))
	defer func() {
		if _, err := ctl.Teardown(context.Background(), s.Name, nil); err != nil {
			t.Errorf("teardown: %v", err)
		}
	}()
	query := func() (workflows.Supervision, bool) {
		v, err := mc.QueryWorkflow(ctx, contract.SuperviseWorkflowID(s.Name), "", contract.QuerySupervision)
		var sv workflows.Supervision
		return sv, err == nil && v.Get(&sv) == nil
	}
	eventually(t, time.Minute, "a supervisor watching the cluster", func() bool { _, ok := query(); return ok })

	took := available() - floor/2
	t.Logf("a tenant takes %s while the cluster serves", hostmem.Human(took))
	remove := tenant("tenant-serving", took)
	tripped := time.Now()

	// Wait for a redeploy the preflight refused, then give the memory back.
	var refused *control.Failure
	for deadline := time.Now().Add(3 * time.Minute); refused == nil; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			sv, _ := query()
			t.Fatalf("no redeploy refused at preflight within 3 min of the trip; supervision: %+v", sv)
		}
		//lint:ignore SA1019 as waitPhase does: a nil-safe read of the run's status
		d, err := mc.DescribeWorkflowExecution(ctx, contract.DeployWorkflowID(s.Name), "")
		if err != nil || d.GetWorkflowExecutionInfo().GetExecution().GetRunId() == run.GetRunID() ||
			d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED {
			continue
		}
		err = control.Reason(mc.GetWorkflow(ctx, contract.DeployWorkflowID(s.Name), d.GetWorkflowExecutionInfo().GetExecution().GetRunId()).Get(ctx, nil))
		var f *control.Failure
		if !errors.As(err, &f) || f.Type != contract.ErrHostMemory {
			t.Fatalf("a redeploy while the tenant holds the memory ended %v, not HostMemoryInsufficient", err)
		}
		refused = f
	}
	t.Logf("a redeploy was refused %s after the tenant started: %v", time.Since(tripped).Round(100*time.Millisecond), refused)
	remove()

	var inc workflows.Incident
	eventually(t, 4*time.Minute, "the incident recovered once the memory is back", func() bool {
		sv, _ := query()
		for _, i := range sv.Incidents {
			if i.Outcome == workflows.OutcomeServing {
				inc = i
				return true
			}
		}
		return false
	})
	sv, _ := query()
	t.Logf("incident: %s; %s after %d attempt(s), %s", inc.Seen, inc.OutcomeText(), inc.Attempts, inc.Took.Round(100*time.Millisecond))
	if inc.Cause != workflows.CauseHostMemoryPressure || inc.Node != "node-a" {
		t.Errorf("incident cause %q on %q, want HostMemoryPressure on node-a", inc.Cause, inc.Node)
	}
	if inc.Attempts < 2 || len(sv.Incidents) != 1 || sv.Redeploys != inc.Attempts {
		t.Errorf("%d incidents, %d redeploys, %d attempts: want one incident whose refused redeploy came before the one that served", len(sv.Incidents), sv.Redeploys, inc.Attempts)
	}
}
