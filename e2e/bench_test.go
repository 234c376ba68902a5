//go:build integration

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	enumspb "go.temporal.io/api/enums/v1"
	tclient "go.temporal.io/sdk/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/lab"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// Benchmarks print figures measured in one run; they assert nothing about time. Run with
// `make bench` (-benchtime 1x: each benchmark does its own repetitions).

func benchPairs() int {
	if n, err := strconv.Atoi(os.Getenv("TPDEPLOY_BENCH_PAIRS")); err == nil && n > 0 {
		return n
	}
	return 5
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func benchSpec(b *testing.B, name string) spec.Cluster {
	root, _ := images.ModuleRoot()
	raw, err := os.ReadFile(filepath.Join(root, "examples", "lab.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	s, err := spec.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	s.Name = name
	return s
}

// deployOnce runs the deploy workflow to serving and returns the time from start to the
// workflow's result (it returns when vLLM answers /health and /v1/models).
func deployOnce(b *testing.B, s spec.Cluster) (time.Duration, string) {
	d, runID, _ := deployTimed(b, s)
	return d, runID
}

// deployTimed is deployOnce that also returns how long the first step, reading the image
// on every node, took.
func deployTimed(b *testing.B, s spec.Cluster) (time.Duration, string, time.Duration) {
	took, runID, steps := deploySteps(b, s)
	var images time.Duration
	for _, st := range steps {
		if st.Step == workflows.PhaseImages {
			images = st.Duration
		}
	}
	return took, runID, images
}

// deploySteps is deployOnce that also returns the workflow's step timings.
func deploySteps(b *testing.B, s spec.Cluster) (time.Duration, string, []workflows.StepTiming) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	run, err := control.Controller{Client: tc, SignKey: theLab.SignKey}.StartDeploy(ctx, workflows.DeployRequest{Spec: s, Trigger: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	var res workflows.DeployResult
	if err := run.Get(ctx, &res); err != nil {
		b.Fatalf("deploy: %v", control.Reason(err))
	}
	return time.Since(start), run.GetRunID(), res.Steps
}

// scriptOnce runs a hand-written launch script of lab/bench (seed-final.sh for Ray,
// mp-final.sh for vLLM's own multi-node mode), which knows the right addresses already.
func scriptOnce(b *testing.B, script, image, name string, ifA, ifB string, roles ...string) time.Duration {
	root, _ := images.ModuleRoot()
	a, bn := theLab.Nodes[0], theLab.Nodes[1]
	cmd := exec.Command("bash", filepath.Join(root, "lab", "bench", script))
	cmd.Env = append(os.Environ(), "NAME="+name, "IMAGE="+image, "NODE_A="+a.Container, "NODE_B="+bn.Container,
		"IP_A="+a.Fast.String(), "IP_B="+bn.Fast.String(), "IF_A="+ifA, "IF_B="+ifB,
		"EXTRA_A=-e TPDEPLOY_SIM_SHARDS=12 -e TPDEPLOY_SIM_SHARD_SECONDS=0.5")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	for _, role := range roles {
		_, _ = eng.ContainerRemove(context.Background(), name+"-"+role, client.ContainerRemoveOptions{Force: true})
	}
	if err != nil {
		b.Fatalf("script: %v\n%s", err, out)
	}
	return took
}

// BenchmarkDeployVsScript interleaves the deploy workflow and the matching hand-written
// script on the same lab (A B A B ...) at the lab's default shard pacing (12 shards x
// 0.5 s), for each executor (Ray on the lab's default release; vLLM's own multi-node mode
// on the newest release's stock image, where it is what a user meets by default), and
// reports their median time to serving, the ratio and the workflow's median time per step.
// It also reports the history events of a two-node deploy. TPDEPLOY_BENCH_EXECUTORS (e.g.
// "mp") runs only the executors it names.
func BenchmarkDeployVsScript(b *testing.B) {
	ctx := context.Background()
	ifA, err := theLab.Iface(ctx, "node-a", "fast")
	if err != nil {
		b.Fatal(err)
	}
	ifB, err := theLab.Iface(ctx, "node-b", "fast")
	if err != nil {
		b.Fatal(err)
	}
	newest, ok := lab.ReleaseNamed("vllm-0.32.0")
	if !ok {
		b.Fatal("no modelled vllm-0.32.0")
	}
	only := os.Getenv("TPDEPLOY_BENCH_EXECUTORS")
	for _, ex := range []struct {
		executor, script, image string
		roles                   []string
	}{
		{spec.ExecutorRay, "seed-final.sh", lab.SimImage, []string{"worker", "head"}},
		{spec.ExecutorMP, "mp-final.sh", newest.Image(), []string{"rank1", "rank0"}},
	} {
		if only != "" && !slices.Contains(strings.Split(only, ","), ex.executor) {
			continue
		}
		s := benchSpec(b, "bench-"+ex.executor)
		s.Executor = ex.executor
		s.Image = ex.image
		ctl := control.Controller{Client: tc, SignKey: theLab.SignKey}
		var wf, script, reads []time.Duration
		var lastRun string
		perStep := map[string][]time.Duration{}
		var order []string
		for i := 0; i < benchPairs(); i++ {
			d, runID, steps := deploySteps(b, s)
			var read time.Duration
			for _, st := range steps {
				if _, seen := perStep[st.Step]; !seen {
					order = append(order, st.Step)
				}
				perStep[st.Step] = append(perStep[st.Step], st.Duration)
				if st.Step == workflows.PhaseImages {
					read = st.Duration
				}
			}
			wf, lastRun, reads = append(wf, d), runID, append(reads, read)
			if _, err := ctl.Teardown(ctx, s.Name, nil); err != nil {
				b.Fatal(err)
			}
			script = append(script, scriptOnce(b, ex.script, ex.image, "tpd-bench-"+ex.executor, ifA, ifB, ex.roles...))
		}
		var parts []string
		for _, st := range order {
			parts = append(parts, fmt.Sprintf("%s %.2fs", st, median(perStep[st]).Seconds()))
		}
		fmt.Printf("executor %s on %s: the workflow's median step times: %s\n", ex.executor, ex.image, strings.Join(parts, ", "))
		events := historyEvents(b, contract.DeployWorkflowID(s.Name), lastRun)
		mw, ms := median(wf), median(script)
		b.ReportMetric(mw.Seconds(), "s-workflow-"+ex.executor)
		b.ReportMetric(ms.Seconds(), "s-script-"+ex.executor)
		b.ReportMetric(mw.Seconds()/ms.Seconds(), "ratio-"+ex.executor)
		b.ReportMetric(float64(events), "history-events-"+ex.executor)
		fmt.Printf("executor %s: deploy vs %s, %d interleaved pairs: workflow median %.2fs %v, script median %.2fs %v, ratio %.2f (#34: mp within 1.05); %d history events per 2-node deploy\n",
			ex.executor, ex.script, len(wf), mw.Seconds(), rounded(wf), ms.Seconds(), rounded(script), mw.Seconds()/ms.Seconds(), events)
		// The agents cache an image's read by its ID: the first deploy of a run reads, the
		// others answer from the cache (the image read step includes the workflow's own
		// round trips and the release decision).
		if len(reads) > 1 {
			b.ReportMetric(reads[0].Seconds(), "s-image-step-first-"+ex.executor)
			b.ReportMetric(median(reads[1:]).Seconds(), "s-image-step-cached-"+ex.executor)
			fmt.Printf("executor %s: the image-reading step took %.3fs on the first deploy, median %.3fs %v after (cached by image ID)\n",
				ex.executor, reads[0].Seconds(), median(reads[1:]).Seconds(), rounded(reads[1:]))
		}
	}
}

func rounded(d []time.Duration) []string {
	out := make([]string, len(d))
	for i, x := range d {
		out[i] = fmt.Sprintf("%.2f", x.Seconds())
	}
	return out
}

func historyEvents(b *testing.B, id, runID string) int {
	it := tc.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n := 0
	for it.HasNext() {
		if _, err := it.Next(); err != nil {
			b.Fatal(err)
		}
		n++
	}
	return n
}

// BenchmarkSeedFailure1 times the seed's failure 1 (Ray registers the head under its
// default route's address) from the start of the deploy to the classified failure; vLLM
// alone would wait about 42 minutes.
func BenchmarkSeedFailure1(b *testing.B) {
	s := benchSpec(b, "bench-f1")
	s.Nodes[0].Env = map[string]string{"TPDEPLOY_SIM_IGNORE_NODE_IP": "1"}
	var took []time.Duration
	for i := 0; i < benchPairs(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		start := time.Now()
		run, err := control.Controller{Client: tc, SignKey: theLab.SignKey}.StartDeploy(ctx, workflows.DeployRequest{Spec: s, Trigger: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		err = run.Get(ctx, nil)
		took = append(took, time.Since(start))
		cancel()
		var f *control.Failure
		if err == nil || !errors.As(control.Reason(err), &f) || f.Type != "PlacementMismatch" {
			b.Fatalf("want PlacementMismatch, got %v", err)
		}
	}
	m := median(took)
	b.ReportMetric(m.Seconds(), "s-to-failure")
	fmt.Printf("seed failure 1, %d runs: start to classified PlacementMismatch (compensations done) median %.2fs %v (target < 10s)\n", len(took), m.Seconds(), rounded(took))
}

// BenchmarkSupervisorHealthyEvents counts the history events the supervisor adds while the
// cluster stays healthy. Its watch is one long-lived activity that returns only on a change
// or after WatchFor (1 h by default), so a healthy hour is one watch cycle: the benchmark
// runs a supervisor with a 30 s cycle, counts the events of several cycles, and reports the
// events per cycle, i.e. per healthy hour with the default.
func BenchmarkSupervisorHealthyEvents(b *testing.B) {
	s := benchSpec(b, "bench-quiet")
	deployOnce(b, s)
	defer func() {
		_, _ = (control.Controller{Client: tc, SignKey: theLab.SignKey}).Teardown(context.Background(), s.Name, nil)
	}()
	ctx := context.Background()
	id := contract.SuperviseWorkflowID(s.Name)
	// The deploy's supervisor (1 h cycle) gives way to one with a 30 s cycle.
	if err := tc.CancelWorkflow(ctx, id, ""); err != nil {
		b.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	_ = tc.GetWorkflow(waitCtx, id, "").Get(waitCtx, nil)
	cancel()
	cycle := 30 * time.Second
	run, err := tc.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{ID: id, TaskQueue: "tpdeploy"},
		workflows.SuperviseCluster, workflows.SuperviseRequest{Spec: s, Intent: theLab.Sign(s), WatchFor: spec.Duration(cycle)})
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(10 * time.Second) // past the first check and the boot-ID round
	cycles := 6
	if v, err := strconv.Atoi(os.Getenv("TPDEPLOY_BENCH_CYCLES")); err == nil && v > 0 {
		cycles = v
	}
	before := historyEvents(b, id, run.GetRunID())
	time.Sleep(time.Duration(cycles) * cycle)
	after := historyEvents(b, id, run.GetRunID())
	perCycle := float64(after-before) / float64(cycles)
	b.ReportMetric(perCycle, "events/healthy-hour")
	fmt.Printf("supervisor while healthy (checks every 5 s): %d history events in %d watch cycles of %s = %.1f per cycle, i.e. per healthy hour with the default 1 h cycle (%d checks)\n",
		after-before, cycles, cycle, perCycle, 3600/5)
}

// BenchmarkModelSync copies a 1 GB model (8 shards) from the head's agent to node-b's over
// the lab's fast network with model.sync: from-head, and reports the copy's throughput.
func BenchmarkModelSync(b *testing.B) {
	s := benchSpec(b, "bench-sync")
	s.Model.Path, s.Model.HostDir, s.Model.Sync = "/models/bench-sync", "/models/bench-sync", spec.SyncFromHead
	const shards, size = 8, 128 << 20
	headDir := filepath.Join(theLab.NodeRoot("node-a"), s.Model.HostDir)
	nodeDir := filepath.Join(theLab.NodeRoot("node-b"), s.Model.HostDir)
	defer os.RemoveAll(headDir)
	defer os.RemoveAll(nodeDir)
	if err := lab.MakeModel(headDir, shards, size, 11); err != nil {
		b.Fatal(err)
	}
	var mbps []float64
	for i := 0; i < 3; i++ {
		_ = os.RemoveAll(nodeDir)
		if err := lab.MakeModel(nodeDir, shards, size, 11, 1, 2, 3, 4, 5, 6, 7, 8); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		run, err := control.Controller{Client: tc, SignKey: theLab.SignKey}.StartDeploy(ctx, workflows.DeployRequest{Spec: s, Trigger: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		var res workflows.DeployResult
		err = run.Get(ctx, &res)
		cancel()
		if err != nil {
			b.Fatalf("deploy: %v", control.Reason(err))
		}
		if len(res.ModelCopies) != 1 {
			b.Fatalf("copies %+v", res.ModelCopies)
		}
		mbps = append(mbps, res.ModelCopies[0].MBps)
		_, _ = (control.Controller{Client: tc, SignKey: theLab.SignKey}).Teardown(context.Background(), s.Name, nil)
	}
	slices.Sort(mbps)
	b.ReportMetric(mbps[1], "MB/s")
	fmt.Printf("model sync from the head, 1.07 GB (8 shards) to node-b, 3 runs: median %.0f MB/s %v (agent to agent over the lab's fast network, one host)\n", mbps[1], mbps)
}
