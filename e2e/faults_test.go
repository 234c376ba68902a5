//go:build integration

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"

	"github.com/tpdeploy/tpdeploy/internal/barrier"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/lab/faultproxy"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// The fault matrix: for each step of a deploy, and for steady state, each fault is
// injected while the step is held at a barrier (internal/barrier: the node's agent holds
// the step's activity before it runs until the fault is in), then the step goes on and
// the outcome is recorded. `make faults` runs every cell and writes the table into the
// docs/faults.md; `make test` runs faultSubset.

// faultStep is where a fault is injected: a deploy step held at its activity's barrier on
// one node, loading (the weights are loading, 15 s of it left), or steady state (serving,
// supervised).
type faultStep struct {
	Name     string
	Node     string // the node whose agent holds the activity
	Activity string
}

var faultSteps = []faultStep{
	{"probe", "node-b", contract.ActivityProbeNode},
	{"reachability", "node-b", contract.ActivityDialPeers},
	{"preflight", "node-b", contract.ActivityPreflightNode},
	{"ray head", "node-a", contract.ActivityStartRayHead},
	{"ray workers", "node-b", contract.ActivityStartRayWorker},
	{"placement", "node-a", contract.ActivityCheckPlacement},
	{"launch", "node-a", contract.ActivityLaunchVLLM},
	{"loading", "node-a", ""},
	{"steady", "node-a", ""},
}

// fault is one thing that goes wrong. inject returns "" when it applied, or why it does
// not apply at this step ("no vLLM yet").
type fault struct {
	Name   string
	inject func(t *testing.T, c *cell) string
	// MustServe: the deploy must end serving (a kill or restart of what Temporal makes
	// durable, a reboot a deploy starts over after).
	MustServe bool
}

var faults = []fault{
	{Name: "agents killed", MustServe: true, inject: func(t *testing.T, c *cell) string {
		for _, n := range theLab.Nodes {
			killWorker(t, n.Container)
		}
		return ""
	}},
	{Name: "node-b rebooted", MustServe: true, inject: func(t *testing.T, c *cell) string {
		restartNode(t, "node-b")
		return ""
	}},
	{Name: "node-b down", inject: func(t *testing.T, c *cell) string {
		if _, err := eng.ContainerStop(context.Background(), theLab.Nodes[1].Container, client.ContainerStopOptions{}); err != nil {
			t.Fatal(err)
		}
		c.nodeDown = true
		return ""
	}},
	{Name: "Ray killed", inject: func(t *testing.T, c *cell) string {
		// node-b's Ray worker, or the head before there is one, through the engine's API.
		for _, name := range []string{
			contract.ContainerName(c.spec.Name, "node-b", contract.RoleRayWorker),
			contract.ContainerName(c.spec.Name, "node-a", contract.RoleRayHead),
		} {
			if _, err := eng.ContainerKill(context.Background(), name, client.ContainerKillOptions{Signal: "KILL"}); err == nil {
				return ""
			}
		}
		return "no Ray container yet"
	}},
	{Name: "vLLM killed", inject: func(t *testing.T, c *cell) string {
		head := contract.ContainerName(c.spec.Name, "node-a", contract.RoleRayHead)
		out, err := execOut(head, "cat", "/tmp/tpdeploy/vllm/pid")
		if err != nil || len(strings.Fields(out)) == 0 {
			return "no vLLM yet"
		}
		pid := strings.Fields(out)[0]
		if _, err := strconv.Atoi(pid); err != nil {
			t.Fatalf("vLLM pid file holds %q", out)
		}
		if out, err := execOut(head, "sh", "-c", "kill -9 "+pid); err != nil {
			t.Fatalf("kill vLLM %s: %v %s", pid, err, out)
		}
		return ""
	}},
	{Name: "fast link cut 5 s", inject: func(t *testing.T, c *cell) string {
		if err := theLab.Cut(context.Background(), "node-b", "fast"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		if err := theLab.Restore(context.Background(), "node-b", "fast"); err != nil {
			t.Fatal(err)
		}
		return ""
	}},
	{Name: "Temporal restarted", MustServe: true, inject: func(t *testing.T, c *cell) string {
		if err := theLab.RestartTemporal(context.Background()); err != nil {
			t.Fatal(err)
		}
		return ""
	}},
	{Name: "engine fails 10 s", inject: func(t *testing.T, c *cell) string {
		// Every engine call of the step's node answers 500 for 10 s, as while dockerd
		// restarts.
		p := theLab.Proxy(c.step.Node)
		id := p.Add(faultproxy.Rule{Action: faultproxy.Fail{Message: "lab: injected engine failure"}})
		time.AfterFunc(10*time.Second, func() { p.Remove(id) })
		return ""
	}},
	{Name: "engine call hangs", inject: func(t *testing.T, c *cell) string {
		theLab.Proxy(c.step.Node).Add(faultproxy.Rule{Action: faultproxy.Hang{}, Times: 1})
		return ""
	}},
	{Name: "concurrent triggers", MustServe: true, inject: func(t *testing.T, c *cell) string {
		c.triggerAll(t)
		return ""
	}},
	{Name: "engine wedged", inject: func(t *testing.T, c *cell) string {
		// SIGSTOP of vLLM's EngineCore process in the head's container: the API server
		// lives on (/health 200), the engine answers nothing.
		return c.freeze(t, "node-a", "VLLM::EngineCore", "no EngineCore yet")
	}},
	{Name: "rank hung", inject: func(t *testing.T, c *cell) string {
		// SIGSTOP of node-b's rank (its Ray actor's worker process, or its headless
		// worker in mp mode): the engine's collectives wait for it; Ray, the containers and
		// /health see nothing.
		return c.freeze(t, "node-b", rankTitle(c.spec), "no rank on node-b yet")
	}},
}

// freeze stops a process of the cluster with SIGSTOP; it stays stopped until the cluster's
// containers are removed.
func (c *cell) freeze(t *testing.T, node, title, none string) string {
	pid, container, _ := findProcess(t, c.spec.Name, node, title)
	if pid == 0 {
		return none
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s (pid %d in %s): %v", title, pid, container, err)
	}
	return ""
}

// faultSubset is what `make test` runs: every fault once, at a step where it bites.
var faultSubset = map[[2]string]bool{
	{"ray workers", "agents killed"}:      true,
	{"loading", "node-b rebooted"}:        true,
	{"placement", "Temporal restarted"}:   true,
	{"ray head", "engine fails 10 s"}:     true,
	{"preflight", "concurrent triggers"}:  true,
	{"launch", "engine call hangs"}:       true,
	{"steady", "vLLM killed"}:             true,
	{"ray workers", "node-b down"}:        true,
	{"placement", "Ray killed"}:           true,
	{"reachability", "fast link cut 5 s"}: true,
	{"steady", "engine wedged"}:           true,
	{"steady", "rank hung"}:               true,
}

// cellResult is one cell of the matrix.
type cellResult struct {
	Step, Fault string
	Outcome     string // served / failed TYPE / recovered / kept serving / n/a: why
	Took        time.Duration
	Left        int  // the cluster's containers beyond what should exist once the node is back
	Deploys     int  // deploy runs started from the injection on
	Twice       bool // two deploy runs at once, or a container created where one existed
	Problems    []string
}

type cell struct {
	step      faultStep
	fault     fault
	spec      spec.Cluster
	run       tclient.WorkflowRun
	created   time.Time      // when the cell began
	start     time.Time      // when the fault was injected
	calls     map[string]int // proxy calls seen before the cell, per node
	nodeDown  bool
	redeploys int // the supervisor's count before the injection (steady state)
	cli       chan string
	res       cellResult
}

func TestFaultMatrix(t *testing.T) {
	for cell := range faultSubset {
		if !slices.ContainsFunc(faultSteps, func(s faultStep) bool { return s.Name == cell[0] }) ||
			!slices.ContainsFunc(faults, func(f fault) bool { return f.Name == cell[1] }) {
			t.Fatalf("faultSubset names %q × %q, which the matrix does not have", cell[0], cell[1])
		}
	}
	// TPDEPLOY_FAULTS: "all" runs every cell; a comma-separated list of faults runs their
	// columns at every step (`-run 'TestFaultMatrix/(loading|steady)/'` narrows the steps).
	all := os.Getenv("TPDEPLOY_FAULTS") == "all"
	columns := map[string]bool{}
	if v := os.Getenv("TPDEPLOY_FAULTS"); v != "" && !all {
		for _, name := range strings.Split(v, ",") {
			if !slices.ContainsFunc(faults, func(f fault) bool { return f.Name == strings.TrimSpace(name) }) {
				t.Fatalf("TPDEPLOY_FAULTS names %q, which the matrix does not have", name)
			}
			columns[strings.TrimSpace(name)] = true
		}
	}
	var results []cellResult
	for i, st := range faultSteps {
		for j, f := range faults {
			if !all && !columns[f.Name] && (len(columns) > 0 || !faultSubset[[2]string{st.Name, f.Name}]) {
				continue
			}
			name := fmt.Sprintf("%s/%s", st.Name, f.Name)
			var r cellResult
			t.Run(name, func(t *testing.T) {
				r = runCell(t, fmt.Sprintf("fm-%d-%d", i, j), st, f)
				t.Logf("%s × %s: %s in %.1fs; left %d, deploys %d, twice %v %v", st.Name, f.Name, r.Outcome, r.Took.Seconds(), r.Left, r.Deploys, r.Twice, r.Problems)
				for _, p := range r.Problems {
					t.Error(p)
				}
			})
			results = append(results, r)
		}
	}
	table := matrixTable(results, all)
	root, _ := images.ModuleRoot()
	_ = os.MkdirAll(filepath.Join(root, ".artifacts"), 0o755)
	if err := os.WriteFile(filepath.Join(root, ".artifacts", "fault-matrix.md"), []byte(table), 0o644); err != nil {
		t.Error(err)
	}
	t.Log("\n" + table)
	if all && os.Getenv("TPDEPLOY_FAULTS_WRITE") == "1" {
		if err := replaceBlock(filepath.Join(root, "docs", "faults.md"), "fault-matrix", table); err != nil {
			t.Error(err)
		}
	}
}

func runCell(t *testing.T, name string, st faultStep, f fault) (r cellResult) {
	c := &cell{step: st, fault: f, spec: labSpec(t, name), calls: map[string]int{}, created: time.Now()}
	c.res = cellResult{Step: st.Name, Fault: f.Name}
	defer func() { r = c.res }()
	for _, n := range theLab.Nodes {
		c.calls[n.Name] = len(theLab.Proxy(n.Name).Calls())
	}
	t.Cleanup(func() {
		for _, n := range theLab.Nodes {
			theLab.Proxy(n.Name).Clear()
		}
		ensureNodesUp(t)
	})
	if st.Name == "loading" {
		slowLoading(&c.spec)
		// A frozen load (engine wedged, rank hung) ends LoadStalled after this much
		// silence, not at timeouts.serving; the simulator prints a line at least every
		// shard (0.5 s) while it loads.
		c.spec.Timeouts.LoadStall = spec.Duration(30 * time.Second)
	}
	if st.Name == "steady" {
		// Short canary settings, so that a wedged engine is an incident within seconds (the
		// defaults are 30s, 20s, 2) and "kept serving" is judged by answers.
		c.spec.Canary = testCanary
		c.run = deployFor(t, c.spec)
		deployResult(t, c.run, 3*time.Minute)
		eventually(t, 30*time.Second, "the supervisor knows both boot IDs", func() bool {
			sv, ok := supervision(t, c.spec.Name)
			return ok && sv.BootIDs["node-a"] != "" && sv.BootIDs["node-b"] != ""
		})
		sv, _ := supervision(t, c.spec.Name)
		c.redeploys = sv.Redeploys
		c.inject(t)
	} else if st.Activity != "" {
		dir := theLab.BarrierDir(st.Node)
		if err := barrier.Hold(dir, st.Activity); err != nil {
			t.Fatal(err)
		}
		released := false
		release := func() {
			if !released {
				released = true
				if err := barrier.Release(dir, st.Activity); err != nil {
					t.Error(err)
				}
			}
		}
		defer release()
		c.run = deployFor(t, c.spec)
		eventually(t, 2*time.Minute, st.Activity+" held at its barrier on "+st.Node, func() bool {
			return barrier.Reached(dir, st.Activity)
		})
		c.inject(t)
		release()
	} else {
		c.run = deployFor(t, c.spec)
		waitPhase(t, c.run, "loading")
		c.inject(t)
	}
	if strings.HasPrefix(c.res.Outcome, "n/a") {
		if c.run != nil && st.Name != "steady" {
			deployResult(t, c.run, 4*time.Minute)
		}
		teardown(t, c.spec.Name)
		return
	}
	if st.Name == "steady" {
		c.steadyOutcome(t)
	} else {
		c.deployOutcome(t)
	}
	c.check(t)
	teardown(t, c.spec.Name)
	if left := containersOf(t, c.spec.Name); len(left) > 0 {
		c.problem("containers left after teardown: %v", left)
	}
	if left := strays(t, c.created); len(left) > 0 {
		c.res.Left += len(left)
		c.problem("containers of no cluster left after teardown: %v", left)
	}
	return
}

func (c *cell) problem(format string, args ...any) {
	c.res.Problems = append(c.res.Problems, fmt.Sprintf(format, args...))
}

func (c *cell) inject(t *testing.T) {
	c.start = time.Now()
	if why := c.fault.inject(t, c); why != "" {
		c.res.Outcome = "n/a: " + why
	}
}

// deployOutcome waits for the deploy, then for the down node to be back and its agent to
// have reconciled.
func (c *cell) deployOutcome(t *testing.T) {
	var res workflows.DeployResult
	err := result(c.run, 8*time.Minute, &res)
	c.res.Took = time.Since(c.start)
	var f *control.Failure
	switch {
	case err == nil:
		c.res.Outcome = "served"
		if len(res.Restarts) > 0 {
			c.res.Outcome = fmt.Sprintf("served after %d restart(s)", len(res.Restarts))
			t.Logf("%s × %s restarted: %s", c.step.Name, c.fault.Name, strings.Join(res.Restarts, " | "))
		}
		t.Logf("%s × %s planned on %s", c.step.Name, c.fault.Name, res.Plan.Subnet)
	case errors.As(err, &f):
		c.res.Outcome = "failed " + f.Type
		t.Logf("%s × %s failed: %s", c.step.Name, c.fault.Name, clip(f.Message, 1500))
	default:
		c.res.Outcome = "no outcome: " + err.Error()
	}
	if c.cli != nil {
		select {
		case out := <-c.cli:
			if strings.HasPrefix(c.res.Outcome, "served") && !strings.Contains(out, "serving: ") {
				c.problem("the concurrent `starter deploy` did not report the endpoint:\n%s", out)
			}
		case <-time.After(3 * time.Minute):
			c.problem("the concurrent `starter deploy` never ended")
		}
	}
	c.nodeBack(t)
	if err == nil {
		c.expectContainers(t, 2)
		if e := endpointServes(t, c.spec); e != nil {
			c.problem("served, but the endpoint does not answer: %v", e)
		}
	} else {
		c.expectContainers(t, 0)
	}
	if c.fault.MustServe && err != nil {
		c.problem("%s at %s must not fail a deploy: %s", c.fault.Name, c.step.Name, c.res.Outcome)
	}
}

// steadyOutcome: a fault while serving is kept serving through (after 30 s: no incident,
// no redeploy, healthy, the endpoint answers), or an incident the supervisor recovers from.
func (c *cell) steadyOutcome(t *testing.T) {
	if c.nodeDown {
		// The supervisor cannot serve without node-b: wait until it notices, then bring
		// node-b back and see it recover.
		eventually(t, 3*time.Minute, "the supervisor notices node-b down", func() bool {
			sv, _ := supervision(t, c.spec.Name)
			return !sv.Healthy || sv.Redeploys > c.redeploys
		})
		c.nodeBack(t)
	}
	inc, ok := c.waitRecovery(t, 8*time.Minute)
	c.res.Took = time.Since(c.start)
	if ok && inc.Outcome == workflows.OutcomeLeftToDeploy {
		// A deploy another trigger started is the recovery: it must end serving.
		eventually(t, 4*time.Minute, "the running deploy ends", func() bool {
			st, err := control.Controller{Client: tc, SignKey: theLab.SignKey}.Status(context.Background(), c.spec.Name)
			return err == nil && !st.Running
		})
		if endpointServes(t, c.spec) == nil {
			inc.Outcome = workflows.OutcomeServing
			inc.Took = time.Since(inc.At)
		}
	}
	switch {
	case ok && inc.Outcome == workflows.OutcomeServing:
		c.res.Outcome = "recovered"
		c.res.Took = inc.At.Add(inc.Took).Sub(c.start)
	case ok:
		c.res.Outcome = "degraded: " + inc.OutcomeText()
	default:
		if err := endpointServes(t, c.spec); err != nil {
			c.res.Outcome = "not serving, no incident: " + err.Error()
		} else {
			c.res.Outcome = "kept serving"
			c.res.Took = 0 // nothing to wait for: the cell watched 30 s
		}
	}
	if c.cli != nil {
		select {
		case <-c.cli:
		case <-time.After(3 * time.Minute):
			c.problem("the concurrent `starter deploy` never ended")
		}
	}
	// Let a redeploy the triggers started end before counting.
	eventually(t, 4*time.Minute, "no deploy running", func() bool {
		st, err := control.Controller{Client: tc, SignKey: theLab.SignKey}.Status(context.Background(), c.spec.Name)
		return err == nil && !st.Running
	})
	if strings.HasPrefix(c.res.Outcome, "degraded") || strings.HasPrefix(c.res.Outcome, "not serving") {
		c.problem("at steady state %s left the cluster %s", c.fault.Name, c.res.Outcome)
		return
	}
	c.expectContainers(t, 2)
	if err := endpointServes(t, c.spec); err != nil {
		c.problem("%s, but the endpoint does not answer: %v", c.res.Outcome, err)
	}
}

// waitRecovery waits for the supervisor's verdict on the fault: an incident that served
// again (or, at the deadline, the last incident), or none when 30 s after the injection
// there is no incident, no redeploy, and the endpoint serves.
func (c *cell) waitRecovery(t *testing.T, within time.Duration) (workflows.Incident, bool) {
	deadline := time.Now().Add(within)
	for {
		sv, _ := supervision(t, c.spec.Name)
		var last *workflows.Incident
		for i := range sv.Incidents {
			if inc := sv.Incidents[i]; !inc.At.Before(c.start) {
				if inc.Outcome == workflows.OutcomeServing || inc.Outcome == workflows.OutcomeLeftToDeploy {
					return inc, true
				}
				last = &sv.Incidents[i]
			}
		}
		if time.Now().After(deadline) {
			if last != nil {
				return *last, true
			}
			return workflows.Incident{}, false
		}
		if last == nil && sv.Redeploys == c.redeploys && time.Since(c.start) > 30*time.Second && endpointServes(t, c.spec) == nil && complete(t, c.spec, 10*time.Second) == nil {
			return workflows.Incident{}, false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// nodeBack starts a node the fault stopped, and waits for its agent.
func (c *cell) nodeBack(t *testing.T) {
	if !c.nodeDown {
		return
	}
	c.nodeDown = false
	if _, err := eng.ContainerStart(context.Background(), theLab.Nodes[1].Container, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
}

// expectContainers waits (for an agent's reconcile) until the cluster has want
// containers; more is a leak, and so is any container of no cluster that tpdeploy made
// since the cell began (strays: an image read the fault interrupted, say).
func (c *cell) expectContainers(t *testing.T, want int) {
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := containersOf(t, c.spec.Name)
		if len(got) == want {
			break
		}
		if time.Now().After(deadline) {
			c.res.Left = len(got) - want
			c.problem("%d containers once the nodes were back, want %d: %v", len(got), want, got)
			break
		}
		time.Sleep(time.Second)
	}
	if left := strays(t, c.created); len(left) > 0 {
		c.res.Left += len(left)
		c.problem("containers of no cluster once the nodes were back: %v", left)
	}
}

// check counts the cell's deploy runs, and whether anything was started twice: two
// deploy runs at once, or a create refused because the container existed.
func (c *cell) check(t *testing.T) {
	query := fmt.Sprintf("WorkflowId = '%s' AND StartTime > '%s'", contract.DeployWorkflowID(c.spec.Name), c.created.Add(-time.Second).UTC().Format(time.RFC3339Nano))
	resp, err := tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
	if err != nil {
		t.Fatal(err)
	}
	type span struct{ from, to time.Time }
	var spans []span
	for _, e := range resp.Executions {
		to := time.Now()
		if e.GetCloseTime() != nil {
			to = e.GetCloseTime().AsTime()
		}
		spans = append(spans, span{e.GetStartTime().AsTime(), to})
	}
	c.res.Deploys = len(spans)
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	for i := 1; i < len(spans); i++ {
		if spans[i].from.Before(spans[i-1].to) {
			c.res.Twice = true
			c.problem("two deploys of %s ran at once", c.spec.Name)
		}
	}
	for _, n := range theLab.Nodes {
		for _, call := range theLab.Proxy(n.Name).Calls()[c.calls[n.Name]:] {
			if call.Method == "POST" && strings.HasSuffix(call.Path, "/containers/create") && call.Status == 409 {
				c.res.Twice = true
				c.problem("%s: a create found its container existing (%s)", n.Name, call.Query)
			}
		}
	}
}

// triggerAll starts the cluster's deploy every way at once: its schedule fires, the UI's
// Start Workflow form, the supervisor's redeploy, and `starter deploy`.
func (c *cell) triggerAll(t *testing.T) {
	ctx := context.Background()
	ctl := control.Controller{Client: tc, SignKey: theLab.SignKey}
	if _, err := ctl.Schedule(ctx, c.spec, control.When{Every: time.Hour}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.DeleteSchedule(context.Background(), c.spec.Name) })
	path := writeSpec(t, c.spec)
	c.cli = make(chan string, 1)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		_ = tc.ScheduleClient().GetHandle(ctx, control.ScheduleID(c.spec.Name)).Trigger(ctx, tclient.ScheduleTriggerOptions{})
	}()
	go func() {
		defer wg.Done()
		_, _ = tc.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{ID: contract.DeployWorkflowID(c.spec.Name), TaskQueue: "tpdeploy"},
			workflows.DeployCluster, workflows.DeployRequest{Spec: c.spec, Trigger: "ui", Intent: theLab.Sign(c.spec)})
	}()
	go func() {
		defer wg.Done()
		_ = tc.SignalWorkflow(ctx, contract.SuperviseWorkflowID(c.spec.Name), "", contract.SignalRedeploy, "fault matrix")
	}()
	go func() {
		out, _ := runStarterNoFatal(path)
		c.cli <- out
	}()
	wg.Wait()
}

func runStarterNoFatal(path string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, starter, "deploy", "-f", path, "--watch")
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+theLab.Temporal)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ensureNodesUp starts a lab node a cell left stopped.
func ensureNodesUp(t *testing.T) {
	for _, n := range theLab.Nodes {
		info, err := eng.ContainerInspect(context.Background(), n.Container, client.ContainerInspectOptions{})
		if err == nil && !info.Container.State.Running {
			if _, err := eng.ContainerStart(context.Background(), n.Container, client.ContainerStartOptions{}); err != nil {
				t.Errorf("start %s: %v", n.Name, err)
			}
		}
	}
}

// execOut runs cmd in a container through the engine's API and returns its output.
func execOut(container string, cmd ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := eng.ExecCreate(ctx, container, client.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", err
	}
	att, err := eng.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return "", err
	}
	defer att.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, att.Reader); err != nil {
		return out.String(), err
	}
	in, err := eng.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err == nil && !in.Running && in.ExitCode != 0 {
		err = fmt.Errorf("exit %d", in.ExitCode)
	}
	return out.String(), err
}

// matrixTable is docs/faults.md's table: steps down, faults across, each cell the outcome and
// the time from the injection to it; problems listed below.
func matrixTable(results []cellResult, all bool) string {
	var b strings.Builder
	host, _ := os.Hostname()
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	ver, _ := eng.ServerVersion(context.Background(), client.ServerVersionOptions{})
	scope := "the subset `make test` runs"
	if all {
		scope = "every cell (`make faults`)"
	}
	fmt.Fprintf(&b, "Generated by `TestFaultMatrix` on %s, %s: %s, %d CPUs, kernel %s, Docker %s. Times are from the injection to the outcome.\n\n",
		time.Now().UTC().Format("2006-01-02"), scope, host, runtime.NumCPU(), strings.TrimSpace(string(kernel)), ver.Version)
	byCell := map[[2]string]cellResult{}
	for _, r := range results {
		byCell[[2]string{r.Step, r.Fault}] = r
	}
	b.WriteString("| step \\ fault |")
	for _, f := range faults {
		b.WriteString(" " + f.Name + " |")
	}
	b.WriteString("\n|---|")
	for range faults {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	var problems []string
	leaks, twice, deploys := 0, 0, 0
	for _, st := range faultSteps {
		b.WriteString("| " + st.Name + " |")
		for _, f := range faults {
			r, ok := byCell[[2]string{st.Name, f.Name}]
			switch {
			case !ok:
				b.WriteString(" |")
			case strings.HasPrefix(r.Outcome, "n/a"), r.Took == 0:
				b.WriteString(" " + r.Outcome + " |")
			default:
				fmt.Fprintf(&b, " %s %.0fs |", r.Outcome, r.Took.Seconds())
			}
			if ok {
				for _, p := range r.Problems {
					problems = append(problems, fmt.Sprintf("- %s × %s: %s", st.Name, f.Name, strings.ReplaceAll(p, "\n", " ")))
				}
				if r.Left > 0 {
					leaks++
				}
				if r.Twice {
					twice++
				}
				if r.Deploys > 1 {
					deploys++
				}
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\n%d cells: %d with containers left once the nodes were back, %d with something started twice, %d with more than one deploy run (a recovery or a trigger after the first ended; never two at once unless listed below).\n",
		len(results), leaks, twice, deploys)
	if len(problems) > 0 {
		b.WriteString("\nProblems found:\n\n" + strings.Join(problems, "\n") + "\n")
	}
	return b.String()
}

// replaceBlock replaces the text between <!-- NAME:begin --> and <!-- NAME:end --> in file.
func replaceBlock(file, name, text string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	begin, end := "<!-- "+name+":begin -->", "<!-- "+name+":end -->"
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %s ... %s block", file, begin, end)
	}
	return os.WriteFile(file, []byte(s[:i+len(begin)]+"\n"+text+s[j:]), 0o644)
}
