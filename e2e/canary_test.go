//go:build integration

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// The canary's settings in the lab's tests: short, so that a test sees the incident in
// seconds (the defaults are 30s, 20s, 2).
var testCanary = spec.Canary{Every: spec.Duration(3 * time.Second), Timeout: spec.Duration(2 * time.Second), Failures: 2}

// processIn finds the process whose command line starts with title among the cluster's
// containers on node, as `docker top` shows it (host PIDs), and returns its PID and its
// container.
func processIn(t *testing.T, cluster, node, title string) (int, string) {
	t.Helper()
	pid, container, seen := findProcess(t, cluster, node, title)
	if pid == 0 {
		t.Fatalf("no process %q in %s's containers on %s; processes: %q", title, cluster, node, seen)
	}
	return pid, container
}

// findProcess is processIn that reports a missing process as PID 0 with what it saw.
func findProcess(t *testing.T, cluster, node, title string) (int, string, []string) {
	t.Helper()
	f := client.Filters{}
	f.Add("label", activities.LabelCluster+"="+cluster, activities.LabelNode+"="+node)
	list, err := eng.ContainerList(context.Background(), client.ContainerListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, c := range list.Items {
		top, err := eng.ContainerTop(context.Background(), c.ID, client.ContainerTopOptions{})
		if err != nil {
			continue
		}
		pidCol, cmdCol := -1, -1
		for i, h := range top.Titles {
			switch h {
			case "PID":
				pidCol = i
			case "CMD", "COMMAND":
				cmdCol = i
			}
		}
		if pidCol < 0 || cmdCol < 0 {
			continue
		}
		for _, p := range top.Processes {
			seen = append(seen, p[cmdCol])
			if strings.HasPrefix(p[cmdCol], title) {
				pid, err := strconv.Atoi(p[pidCol])
				if err != nil {
					t.Fatal(err)
				}
				return pid, strings.TrimPrefix(c.Names[0], "/"), seen
			}
		}
	}
	return 0, "", seen
}

// rankTitle is the process title of node-b's rank: a Ray actor's worker process, or a
// headless node's worker in vLLM's own multi-node mode.
func rankTitle(s spec.Cluster) string {
	if s.Executor == spec.ExecutorMP {
		return "VLLM::Worker_TP1"
	}
	return "ray::RayWorker"
}

// complete sends one completion and says whether it answered within d.
func complete(t *testing.T, s spec.Cluster, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"model": s.Model.ServedName, "prompt": "hello", "max_tokens": 1})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://%s:%d/v1/completions", theLab.Nodes[0].Fast, s.Ports.VLLM), bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("completion: %s", resp.Status)
	}
	return nil
}

// wedged freezes one process of a serving, supervised cluster and checks what the
// supervisor makes of it: /health and /v1/models still answer while completions hang; the
// supervisor reports EngineWedged, collects what the nodes printed, redeploys once, and
// the cluster serves again with its two containers and nothing left of the frozen one.
func wedged(t *testing.T, s spec.Cluster, node, title string) {
	deployServing(t, s)
	defer teardown(t, s.Name)
	eventually(t, 60*time.Second, "the canary answered once", func() bool {
		out, _ := runStarter(t, "status", s.Name)
		return strings.Contains(out, "canary: answered")
	})
	before, _ := supervision(t, s.Name)
	if err := complete(t, s, 10*time.Second); err != nil {
		t.Fatalf("before the fault: %v", err)
	}
	pid, container := processIn(t, s.Name, node, title)
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s (pid %d in %s): %v", title, pid, container, err)
	}
	// Whatever happens, the frozen process must not outlive the test's cluster.
	defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
	t.Logf("SIGSTOP %s: pid %d in %s", title, pid, container)
	if err := endpointServes(t, s); err != nil {
		t.Errorf("/health and /v1/models must still answer with %s frozen (vLLM's API server is its own process): %v", title, err)
	}
	if err := complete(t, s, 3*time.Second); err == nil {
		t.Errorf("a completion answered with %s frozen", title)
	}
	var inc workflows.Incident
	eventually(t, 4*time.Minute, "an EngineWedged incident, recovered", func() bool {
		sv, _ := supervision(t, s.Name)
		for _, i := range sv.Incidents {
			if i.At.After(t0) && i.Cause == workflows.CauseEngineWedged && i.Outcome == workflows.OutcomeServing {
				inc = i
				return true
			}
		}
		return false
	})
	bound := testCanary.Every.D() + 2*testCanary.Timeout.D()
	t.Logf("%s frozen on %s: EngineWedged reported %.1fs after the SIGSTOP (canary.every + 2×canary.timeout = %s), serving again %s later: %s -> %s",
		title, node, inc.At.Sub(t0).Seconds(), bound, inc.Took.Round(time.Millisecond), inc.Seen, inc.Action)
	for _, n := range s.Nodes {
		if strings.TrimSpace(inc.LastOutput[n.Name]) == "" || strings.HasPrefix(inc.LastOutput[n.Name], "not collected") {
			t.Errorf("no last output from %s in the incident: %q", n.Name, inc.LastOutput[n.Name])
		}
	}
	if err := endpointServes(t, s); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	if err := complete(t, s, 30*time.Second); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	if got := containersOf(t, s.Name); len(got) != 2 {
		t.Errorf("containers after recovery %v, want two", got)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("the frozen %s (pid %d) still exists after the recovery", title, pid)
	}
	// One deploy run since the fault (the recovery), never two.
	query := fmt.Sprintf("WorkflowId = '%s' AND StartTime > '%s'", contract.DeployWorkflowID(s.Name), t0.UTC().Format(time.RFC3339Nano))
	resp, err := tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Executions) != 1 {
		t.Errorf("%d deploy runs since the fault, want the one recovery", len(resp.Executions))
	}
	sv, _ := supervision(t, s.Name)
	if sv.Redeploys != before.Redeploys+1 {
		t.Errorf("redeploys %d -> %d, want one", before.Redeploys, sv.Redeploys)
	}
	out, code := runStarter(t, "status", s.Name)
	if code != 0 || !strings.Contains(out, contract.IncidentEngineWedged) || !strings.Contains(out, "last output on node-a") {
		t.Errorf("starter status (exit %d) does not show the EngineWedged incident and the nodes' last output:\n%s", code, out)
	}
}

// The EngineCore process (VLLM::EngineCore, beside the API server in the Ray head's
// container) frozen while serving.
func TestWedgedEngineCoreRecovers(t *testing.T) {
	s := labSpec(t, "e2e-wedge")
	s.Canary = testCanary
	wedged(t, s, "node-a", "VLLM::EngineCore")
}

// node-b's rank (its Ray actor's worker process) frozen while serving: the engine's
// collectives wait for it; Ray's node table, the containers and /health see nothing.
func TestHungRankOnNodeBRecovers(t *testing.T) {
	s := labSpec(t, "e2e-rank")
	s.Canary = testCanary
	wedged(t, s, "node-b", rankTitle(s))
}

// The same in vLLM's own multi-node mode: node-b's headless worker process.
func TestMPHungRankOnNodeBRecovers(t *testing.T) {
	s := labSpec(t, "e2e-mprank")
	s.Executor = spec.ExecutorMP
	s.Canary = testCanary
	wedged(t, s, "node-b", rankTitle(s))
}

// executeTimeout is the lab's VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (vLLM's default is 300):
// the same variable vLLM reads, set in the nodes' env, so the engine gives up in seconds.
const executeTimeout = 8 * time.Second

// A frozen rank under the mp executor with the canary off: vLLM's own execute timeout
// ends the engine (TimeoutError: RPC call to sample_tokens timed out.), the request
// waiting meanwhile gets 500 InternalServerError, the API server's watchdog ends `vllm
// serve` within 5 s, and the supervisor, seeing the endpoint gone, brings the cluster back.
func TestMPFrozenRankEndsTheEngineAndRecovers(t *testing.T) {
	s := labSpec(t, "e2e-mpdeath")
	s.Executor = spec.ExecutorMP
	frozenRankEndsTheEngine(t, s)
}

// The same under RayExecutorV2 (the lab's default image, vLLM 0.22.1 with Ray): it is a
// MultiprocExecutor (vllm/v1/executor/ray_executor_v2.py, `class
// RayExecutorV2(MultiprocExecutor)`, overriding neither execute_model nor collective_rpc),
// so the same execute timeout ends its engine and `vllm serve` on the head; node-b's rank
// is a Ray actor's worker process.
func TestRayV2FrozenRankEndsTheEngineAndRecovers(t *testing.T) {
	s := labSpec(t, "e2e-v2death")
	s.Executor = spec.ExecutorRay
	frozenRankEndsTheEngine(t, s)
}

// frozenRankEndsTheEngine freezes node-b's rank with the canary off and follows vLLM's own
// execute timeout to the engine's end and the supervisor's recovery.
func frozenRankEndsTheEngine(t *testing.T, s spec.Cluster) {
	s.Canary = spec.Canary{Off: true}
	for i := range s.Nodes {
		if s.Nodes[i].Env == nil {
			s.Nodes[i].Env = map[string]string{}
		}
		s.Nodes[i].Env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] = strconv.Itoa(int(executeTimeout.Seconds()))
	}
	deployServing(t, s)
	defer teardown(t, s.Name)
	if err := complete(t, s, 10*time.Second); err != nil {
		t.Fatalf("before the fault: %v", err)
	}
	before, _ := supervision(t, s.Name)
	pid, container := processIn(t, s.Name, "node-b", rankTitle(s))
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s (pid %d in %s): %v", rankTitle(s), pid, container, err)
	}
	defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
	// SIGSTOP is delivered asynchronously: wait until every thread of the rank stopped.
	eventually(t, 5*time.Second, "the rank stopped", func() bool { return processStopped(pid) })
	t0 = time.Now()
	t.Logf("SIGSTOP %s: pid %d in %s", rankTitle(s), pid, container)

	// The request waiting on the frozen rank: 500 once the timeout fired.
	body, _ := json.Marshal(map[string]any{"model": s.Model.ServedName, "prompt": "hello", "max_tokens": 1})
	endpoint := fmt.Sprintf("http://%s:%d", theLab.Nodes[0].Fast, s.Ports.VLLM)
	ctx, cancel := context.WithTimeout(context.Background(), executeTimeout+20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/v1/completions", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the completion waiting on the frozen rank: %v", err)
	}
	var answer struct {
		Error struct {
			Message, Type string
			Code          int
		}
	}
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	answered := time.Since(t0)
	if resp.StatusCode != http.StatusInternalServerError || answer.Error.Type != "InternalServerError" ||
		answer.Error.Message != "EngineCore encountered an issue. See stack trace (above) for the root cause." {
		t.Errorf("the completion answered %d %+v, want vLLM's 500 InternalServerError", resp.StatusCode, answer.Error)
	}
	if answered < executeTimeout || answered > executeTimeout+10*time.Second {
		out, _ := eng.ContainerLogs(context.Background(), container, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "30"})
		var b strings.Builder
		if out != nil {
			_, _ = io.Copy(&b, out)
			out.Close()
		}
		t.Fatalf("the completion answered %.1fs after the SIGSTOP, want just after the %s execute timeout; pid %d stopped %v; %s's last lines:\n%s",
			answered.Seconds(), executeTimeout, pid, processStopped(pid), container, b.String())
	}
	// Then `vllm serve` ends: its port refuses connections.
	var gone time.Duration
	eventually(t, 15*time.Second, "vLLM's API server gone after its engine died", func() bool {
		r, err := http.Get(endpoint + "/health")
		if err != nil {
			gone = time.Since(t0)
			return true
		}
		r.Body.Close()
		return false
	})
	var inc workflows.Incident
	eventually(t, 4*time.Minute, "an incident after the fault, recovered", func() bool {
		sv, _ := supervision(t, s.Name)
		for _, i := range sv.Incidents {
			if i.At.After(t0) && i.Outcome == workflows.OutcomeServing {
				inc = i
				return true
			}
		}
		return false
	})
	t.Logf("rank frozen: 500 after %.1fs (execute timeout %s), vLLM gone after %.1fs, incident %s after %.1fs (%s), serving again %s later",
		answered.Seconds(), executeTimeout, gone.Seconds(), inc.Cause, inc.At.Sub(t0).Seconds(), inc.Seen, inc.Took.Round(time.Millisecond))
	if inc.Cause != workflows.CauseUnhealthy {
		t.Errorf("incident cause %q, want %q (the endpoint went away; the canary was off)", inc.Cause, workflows.CauseUnhealthy)
	}
	for _, want := range []string{"TimeoutError: RPC call to sample_tokens timed out.", "EngineCore encountered a fatal error.", "Application shutdown complete."} {
		if !strings.Contains(inc.LastOutput["node-a"], want) {
			t.Errorf("node-a's last output lacks %q:\n%s", want, inc.LastOutput["node-a"])
		}
	}
	if err := complete(t, s, 30*time.Second); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	if got := containersOf(t, s.Name); len(got) != 2 {
		t.Errorf("containers after recovery %v, want two", got)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("the frozen rank (pid %d) still exists after the recovery", pid)
	}
	if sv, _ := supervision(t, s.Name); sv.Redeploys != before.Redeploys+1 {
		t.Errorf("redeploys %d -> %d, want one", before.Redeploys, sv.Redeploys)
	}
}

// processStopped says whether every thread of pid is stopped (state T in /proc/PID/task/*/stat).
func processStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// pid (comm) state ...: the state follows the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}
