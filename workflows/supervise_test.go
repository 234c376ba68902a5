package workflows

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// fakeWatch stands in for WatchCluster: each call answers with the next of its answers
// (the last repeats); "block" waits until the supervisor cancels the watch (a signal
// arrived), as a healthy watch does.
type fakeWatch struct {
	mu      sync.Mutex
	answers []string // "block", "healthy", "unhealthy"
	calls   int
}

func (w *fakeWatch) next() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := w.answers[min(w.calls, len(w.answers)-1)]
	w.calls++
	return a
}

func watchEnv(t *testing.T, f *fakeagents.Agents, w *fakeWatch) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(DeployCluster)
	env.RegisterWorkflow(SuperviseCluster)
	env.RegisterActivity(f)
	env.RegisterActivityWithOptions(func(ctx context.Context, req contract.WatchClusterRequest) (contract.ClusterHealth, error) {
		switch w.next() {
		case "unhealthy":
			return contract.ClusterHealth{Detail: "not serving for 3 checks: GET http://192.168.200.12:8000/health: 503 Service Unavailable", Checks: 3}, nil
		case "wedged":
			if req.Canary.Every <= 0 || req.Canary.Failures != spec.DefaultCanaryFailures {
				return contract.ClusterHealth{}, errors.New("the watch was asked for no canary, or not the spec's")
			}
			return contract.ClusterHealth{Cause: contract.IncidentEngineWedged, Detail: "EngineWedged: 2 canary completions in a row failed (last: no answer within 30s)", Checks: 2}, nil
		case "healthy":
			return contract.ClusterHealth{Healthy: true, Detail: "serving at http://192.168.200.12:8000", Checks: 720}, nil
		}
		for {
			activity.RecordHeartbeat(ctx, nil)
			select {
			case <-ctx.Done():
				return contract.ClusterHealth{}, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}, activity.RegisterOptions{Name: contract.ActivityWatchCluster})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: contract.SuperviseWorkflowID("seed")})
	env.SetTestTimeout(time.Minute)
	return env
}

func supervision(t *testing.T, env *testsuite.TestWorkflowEnvironment) Supervision {
	t.Helper()
	v, err := env.QueryWorkflow(contract.QuerySupervision)
	if err != nil {
		t.Fatal(err)
	}
	var s Supervision
	if err := v.Get(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// handedOn is the request a run continued as new with.
func handedOn(t *testing.T, env *testsuite.TestWorkflowEnvironment) SuperviseRequest {
	t.Helper()
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("want the run to continue as new, got %v", err)
	}
	var next SuperviseRequest
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	return next
}

// carried is the state a run handed to its next one.
func carried(t *testing.T, env *testsuite.TestWorkflowEnvironment) Supervision {
	t.Helper()
	next := handedOn(t, env)
	if next.State == nil {
		t.Fatalf("the run handed on no state: %+v", next)
	}
	return *next.State
}

func TestSupervisorRedeploysAfterAReboot(t *testing.T) {
	f := fakeagents.New()
	w := &fakeWatch{answers: []string{"block", "block", "healthy"}}
	env := watchEnv(t, f, w)
	env.RegisterDelayedCallback(func() {
		// The agent restarted without a reboot: same boot ID, nothing to do; then a reboot.
		env.SignalWorkflow(contract.SignalNodeBooted, contract.NodeBoot{Node: "node-b", BootID: "boot-node-b"})
		env.SignalWorkflow(contract.SignalNodeBooted, contract.NodeBoot{Node: "node-b", BootID: "boot-2"})
	}, 0)
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: fakeagents.SeedSpec(), MaxLoops: 3})
	next := carried(t, env)
	if len(next.Incidents) != 1 {
		t.Fatalf("incidents = %+v, want one", next.Incidents)
	}
	inc := next.Incidents[0]
	if inc.Node != "node-b" || inc.Cause != CauseReboot || !strings.Contains(inc.Seen, "boot ID changed boot-nod -> boot-2") || inc.Outcome != OutcomeServing || inc.Attempts != 1 {
		t.Errorf("incident = %+v", inc)
	}
	if launches := fakeagents.Calls(f, "LaunchVLLM"); len(launches) != 1 || launches[0] != "LaunchVLLM node-a replace" {
		t.Errorf("launches = %q, want one recovery launch recreating the containers", launches)
	}
	if next.Redeploys != 1 || next.Degraded {
		t.Errorf("redeploys %d degraded %v", next.Redeploys, next.Degraded)
	}
}

// A canary that goes unanswered (the engine frozen, /health 200) is the incident
// EngineWedged: the nodes' last output is collected, then the cluster is redeployed.
func TestSupervisorRedeploysAWedgedEngine(t *testing.T) {
	f := fakeagents.New()
	w := &fakeWatch{answers: []string{"wedged", "healthy"}}
	env := watchEnv(t, f, w)
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: fakeagents.SeedSpec(), MaxLoops: 3})
	next := carried(t, env)
	if len(next.Incidents) != 1 || next.Incidents[0].Cause != CauseEngineWedged || next.Incidents[0].Outcome != OutcomeServing {
		t.Fatalf("incidents = %+v", next.Incidents)
	}
	inc := next.Incidents[0]
	for _, n := range fakeagents.SeedSpec().Nodes {
		if !strings.Contains(inc.LastOutput[n.Name], "last line on "+n.Name) {
			t.Errorf("last output of %s = %q", n.Name, inc.LastOutput[n.Name])
		}
	}
	if got := fakeagents.Calls(f, "LaunchVLLM"); len(got) != 1 || got[0] != "LaunchVLLM node-a replace" {
		t.Errorf("launches = %q, want one recovery launch recreating the containers", got)
	}
}

func TestSupervisorRedeploysWhenNotServing(t *testing.T) {
	f := fakeagents.New()
	w := &fakeWatch{answers: []string{"unhealthy", "healthy"}}
	env := watchEnv(t, f, w)
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: fakeagents.SeedSpec(), MaxLoops: 3})
	next := carried(t, env)
	if len(next.Incidents) != 1 || next.Incidents[0].Cause != CauseUnhealthy || !strings.Contains(next.Incidents[0].Seen, "not serving for 3 checks: GET http://192.168.200.12:8000/health: 503") ||
		next.Incidents[0].Outcome != OutcomeServing {
		t.Fatalf("incidents = %+v", next.Incidents)
	}
}

// Every recovery fails and the endpoint never serves: the redeploys are bounded — one
// incident's budget, then one try per cool-down, the cool-down doubling up to 4 h.
func TestSupervisorRedeploysABoundedNumberOfTimes(t *testing.T) {
	f := fakeagents.New()
	f.Failures["LaunchVLLM node-a"] = nonRetryable1(contract.ErrCUDAOutOfMemory, "CUDA out of memory")
	w := &fakeWatch{answers: []string{"unhealthy"}}
	env := watchEnv(t, f, w)
	env.SetTestTimeout(2 * time.Minute)
	var got Supervision
	env.RegisterDelayedCallback(func() {
		got = supervision(t, env)
		env.CancelWorkflow()
	}, 24*time.Hour)
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: fakeagents.SeedSpec(), MaxAttempts: 5, MaxLoops: 1000})
	launches := len(fakeagents.Calls(f, "LaunchVLLM"))
	// 5 for the incident, then one at 30 min, 1 h, 2 h and every 4 h after: 13 in a day.
	if got.Redeploys > 13 || launches != got.Redeploys || got.Redeploys < 6 {
		t.Fatalf("%d redeploys (%d launches) in a day of failures, want between 6 and 13", got.Redeploys, launches)
	}
	if !got.Degraded || !strings.Contains(got.LastCause, "CUDAOutOfMemory") {
		t.Errorf("degraded %v, last cause %q", got.Degraded, got.LastCause)
	}
	if w.calls != 1 {
		t.Errorf("the health was watched %d times: a degraded cluster is not watched into more redeploys", w.calls)
	}
	t.Logf("%d redeploys in 24 h of failures; degraded: %s", got.Redeploys, got.LastCause)
}

// A deploy of a changed spec that failed after touching the cluster: the supervisor puts
// the spec that served back.
func TestSupervisorRollsBackAFailedRedeploy(t *testing.T) {
	f := fakeagents.New()
	w := &fakeWatch{answers: []string{"block", "healthy"}}
	env := watchEnv(t, f, w)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(contract.SignalDeployFailed, DeployFailure{SpecHash: "another-spec", Type: contract.ErrCUDAOutOfMemory, RunID: "run-x"})
	}, 0)
	served := fakeagents.SeedSpec()
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: served, MaxLoops: 2})
	next := carried(t, env)
	if len(next.Incidents) != 1 || next.Incidents[0].Cause != CauseRollback || !strings.Contains(next.Incidents[0].Seen, "rollback: deploy run-x of spec another-spec failed (CUDAOutOfMemory)") ||
		next.Incidents[0].Outcome != OutcomeServing {
		t.Fatalf("incidents = %+v", next.Incidents)
	}
	if got := handedOn(t, env).Spec.Hash(); got != served.Hash() {
		t.Errorf("the supervisor's spec changed to %s", got)
	}
}

// A degraded cluster is re-armed by a change: a node's reboot gets a full recovery.
func TestSupervisorReArmsOnAReboot(t *testing.T) {
	f := fakeagents.New()
	w := &fakeWatch{answers: []string{"block"}}
	env := watchEnv(t, f, w)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(contract.SignalNodeBooted, contract.NodeBoot{Node: "node-b", BootID: "boot-2"})
	}, 0)
	req := SuperviseRequest{Spec: fakeagents.SeedSpec(), MaxLoops: 1, State: &Supervision{Degraded: true, LastCause: "redeploy failed: x",
		NextCooldown: spec.Duration(4 * time.Hour), BootIDs: map[string]string{"node-a": "boot-node-a", "node-b": "boot-node-b"}}}
	env.ExecuteWorkflow(SuperviseCluster, req)
	next := carried(t, env)
	if next.Degraded || len(next.Incidents) != 1 || next.Incidents[0].Outcome != OutcomeServing {
		t.Fatalf("after a reboot of a degraded cluster: degraded %v, incidents %+v", next.Degraded, next.Incidents)
	}
	if next.NextCooldown.D() != 30*time.Minute {
		t.Errorf("cool-down not reset: %s", next.NextCooldown.D())
	}
}

// A run hands everything it knows to its next one: incidents, boot IDs, its settings.
func TestSupervisorContinuesAsNewWithItsState(t *testing.T) {
	f := fakeagents.New()
	w := &fakeWatch{answers: []string{"block", "healthy"}}
	env := watchEnv(t, f, w)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(contract.SignalNodeBooted, contract.NodeBoot{Node: "node-b", BootID: "boot-2"})
	}, 10*time.Second)
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: fakeagents.SeedSpec(), MaxLoops: 20})
	next := handedOn(t, env)
	st := next.State
	if st == nil || len(st.Incidents) != 1 || st.Incidents[0].Node != "node-b" || st.BootIDs["node-a"] != "boot-node-a" || next.MaxLoops != 20 || next.Spec.Name != "seed" {
		t.Errorf("handed on %+v, state %+v", next, st)
	}
}

// The state is handed on whole: every field of Supervision, whatever it is, reaches the
// next run as it was (only NextTry moves, with the cool-down this run waited).
func TestSupervisorHandsOnEveryFieldOfItsState(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	state := Supervision{
		Cluster: "seed", BootIDs: map[string]string{"node-a": "boot-node-a", "node-b": "boot-node-b"},
		Healthy: true, LastCheck: at, Failures: 2, Detail: "serving at http://192.168.200.12:8000", Canary: "answered: 1 token",
		Incidents: []Incident{{At: at, Node: "node-b", Cause: CauseReboot, Seen: "boot ID changed", Action: "redeployed",
			Attempts: 2, Outcome: OutcomeFailed, Error: "x", Took: time.Minute, LastOutput: map[string]string{"node-a": "last line"}}},
		Degraded: true, LastCause: "redeploy failed: x", NextTry: at, NextCooldown: spec.Duration(2 * time.Hour), Redeploys: 7,
		Serving:     &contract.ServingDeployment{RunID: "run-1", SpecHash: "5pec", Endpoint: "http://192.168.200.12:8000"},
		OperatorKey: make([]byte, 32), Refused: "a deployed signal of spec x was not adopted: it is unsigned",
	}
	v := reflect.ValueOf(state)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("set Supervision.%s in this test: every field must be shown to be handed on", v.Type().Field(i).Name)
		}
	}
	f := fakeagents.New()
	env := watchEnv(t, f, &fakeWatch{answers: []string{"block"}})
	env.RegisterDelayedCallback(func() {
		// Known boot IDs: no incident, nothing changes; the one loop ends.
		env.SignalWorkflow(contract.SignalNodeBooted, contract.NodeBoot{Node: "node-b", BootID: "boot-node-b"})
	}, time.Minute)
	given := state
	given.BootIDs = maps.Clone(state.BootIDs)
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: fakeagents.SeedSpec(), MaxLoops: 1, State: &given})
	got := carried(t, env)
	if got.NextTry.IsZero() {
		t.Errorf("next try not set while degraded")
	}
	want := state
	want.NextTry = got.NextTry
	if !reflect.DeepEqual(got, want) {
		t.Errorf("handed on\n%+v\nwant\n%+v", got, want)
	}
}

// What operators read of an incident: the outcome with the error that ended the last
// redeploy; the cause only where the Seen text does not say it already.
func TestIncidentReadsAsBefore(t *testing.T) {
	for _, tt := range []struct {
		inc            Incident
		label, outcome string
	}{
		{Incident{Cause: CauseReboot, Seen: "boot ID changed a -> b: the node rebooted", Outcome: OutcomeServing}, "", "serving again"},
		{Incident{Cause: CauseUnhealthy, Seen: "not serving for 3 checks", Outcome: OutcomeFailed, Error: "CUDAOutOfMemory: x"}, "", "redeploy failed: CUDAOutOfMemory: x"},
		{Incident{Cause: CauseEngineWedged, Seen: "EngineWedged: 2 canary completions in a row failed", Outcome: OutcomeLeftToDeploy}, "", "left to the running deploy"},
		{Incident{Cause: "GPUFellOff", Seen: "a check failed", Outcome: OutcomeNotStarted, Error: "no"}, "GPUFellOff: ", "redeploy did not start: no"},
	} {
		if got := tt.inc.CauseLabel(); got != tt.label {
			t.Errorf("%s: label %q, want %q", tt.inc.Cause, got, tt.label)
		}
		if got := tt.inc.OutcomeText(); got != tt.outcome {
			t.Errorf("%s: outcome %q, want %q", tt.inc.Cause, got, tt.outcome)
		}
	}
}

// A node's memory guard stopped the engines of a cluster that served: the incident is
// HostMemoryPressure, naming the node and the guard's lowest; each redeploy is refused at
// preflight (HostMemoryInsufficient) while the memory is still taken, none starts a
// container, and the breaker bounds them: memory that comes back is served again within
// the incident's budget, memory that never does leaves the cluster degraded after it.
func TestSupervisorBoundsRedeploysAfterAMemoryGuardStop(t *testing.T) {
	const trip = "node-a: host memory fell to 88 MiB available (the lowest seen) of 1.0 GiB, below the guard's floor 100 MiB: the engine containers were stopped"
	for _, tt := range []struct {
		name    string
		refused int // preflights refused before the memory is back; -1: never back
	}{
		{"memory back after two refusals", 2},
		{"memory never back", -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := fakeagents.New()
			f.GuardTrips = map[string]string{"node-a": trip}
			f.Failures["PreflightNode node-a"] = nonRetryable1(contract.ErrHostMemory, "node-a needs 900 MiB of host memory for spec seed, and 200 MiB is available")
			preflights := 0
			f.OnCall = func(key string) {
				if key != "PreflightNode node-a" {
					return
				}
				if preflights++; preflights > tt.refused && tt.refused >= 0 {
					delete(f.Failures, key)
				}
			}
			w := &fakeWatch{answers: []string{"unhealthy", "healthy"}}
			env := watchEnv(t, f, w)
			// One loop: the incident and its recovery, then the state is handed on.
			env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: fakeagents.SeedSpec(), MaxAttempts: 5, MaxLoops: 1})
			got := carried(t, env)
			if len(got.Incidents) != 1 {
				t.Fatalf("incidents = %+v, want one", got.Incidents)
			}
			inc := got.Incidents[0]
			if inc.Cause != CauseHostMemoryPressure || inc.Node != "node-a" || !strings.HasPrefix(inc.Seen, trip) || inc.CauseLabel() != "HostMemoryPressure: " {
				t.Errorf("incident %+v", inc)
			}
			if got.Redeploys != inc.Attempts || got.Redeploys > 5 {
				t.Errorf("%d redeploys, %d attempts: want at most the breaker's 5", got.Redeploys, inc.Attempts)
			}
			launches := fakeagents.Calls(f, "LaunchVLLM")
			if tt.refused >= 0 {
				if inc.Outcome != OutcomeServing || inc.Attempts != tt.refused+1 || got.Degraded || len(launches) != 1 {
					t.Errorf("outcome %q after %d attempts, degraded %v, launches %q: want serving after %d", inc.OutcomeText(), inc.Attempts, got.Degraded, launches, tt.refused+1)
				}
				return
			}
			if inc.Outcome != OutcomeFailed || inc.Attempts != 5 || !got.Degraded || !strings.Contains(got.LastCause, contract.ErrHostMemory) || len(launches) != 0 {
				t.Errorf("outcome %q after %d attempts, degraded %v (%q), launches %q: want degraded after 5 refused", inc.OutcomeText(), inc.Attempts, got.Degraded, got.LastCause, launches)
			}
		})
	}
}

// A keyed cluster's watch: the controller reads which run to watch (DeployTarget, on the
// workflow queue) and the head's agent watches it (WatchTarget, on its node's queue), so the
// head makes no Temporal call; WatchCluster, which reads the deploy's runs itself, is never
// asked. An unhealthy run is an incident only while the controller still says it is the
// one to watch: one a deploy replaced meanwhile is not.
func TestKeyedSupervisorWatchesOnTheHeadWhatTheControllerRead(t *testing.T) {
	for _, tc := range []struct {
		name      string
		now       string // the run the controller names after the unhealthy watch
		running   bool
		incidents int
	}{
		{name: "still the watched run", now: "run-1", incidents: 1},
		{name: "replaced meanwhile", now: "run-2"},
		{name: "a deploy running", now: "run-3", running: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeagents.New()
			w := &fakeWatch{answers: []string{"healthy"}}
			env := watchEnv(t, f, w)
			s := fakeagents.SeedSpec()
			s.Secrets.APIKey = &spec.SecretRef{Env: "VLLM_API_KEY"}
			var mu sync.Mutex
			var calls []string
			record := func(ctx context.Context, call string) {
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, call+" on "+activity.GetInfo(ctx).TaskQueue)
			}
			watched := 0
			env.RegisterActivityWithOptions(func(ctx context.Context, req contract.TargetRequest) (contract.CheckTarget, error) {
				record(ctx, "DeployTarget")
				run, running := "run-1", false
				if req.WaitDeploy == 0 {
					run, running = tc.now, tc.running
				}
				return contract.CheckTarget{DeploymentCheck: contract.DeploymentCheck{Exists: true, RunID: run, Running: running, Closed: "Completed", Plan: &netplan.Plan{}},
					Spec: &s}, nil
			}, activity.RegisterOptions{Name: contract.ActivityDeployTarget})
			env.RegisterActivityWithOptions(func(ctx context.Context, req contract.WatchTargetRequest) (contract.ClusterHealth, error) {
				record(ctx, "WatchTarget "+req.Target.RunID)
				mu.Lock()
				watched++
				first := watched == 1
				mu.Unlock()
				if first {
					return contract.ClusterHealth{Detail: "not serving for 3 checks: GET http://192.168.200.12:8000/health: 503", Checks: 3}, nil
				}
				return contract.ClusterHealth{Healthy: true, Detail: "serving at http://192.168.200.12:8000", Checks: 720}, nil
			}, activity.RegisterOptions{Name: contract.ActivityWatchTarget})
			env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: s, MaxLoops: 3})
			next := carried(t, env)
			if len(next.Incidents) != tc.incidents {
				t.Fatalf("incidents = %+v, want %d", next.Incidents, tc.incidents)
			}
			if w.calls != 0 {
				t.Errorf("WatchCluster, which reads Temporal on the head, was asked %d times", w.calls)
			}
			head := contract.NodeQueue(s.Head().Name)
			want := []string{"DeployTarget on " + contract.WorkflowQueue, "WatchTarget run-1 on " + head, "DeployTarget on " + contract.WorkflowQueue}
			if len(calls) < len(want) || !slices.Equal(calls[:len(want)], want) {
				t.Errorf("calls %q, want them to begin %q", calls, want)
			}
			for _, c := range calls {
				if strings.HasPrefix(c, "DeployTarget") != strings.HasSuffix(c, " on "+contract.WorkflowQueue) {
					t.Errorf("%q: the controller reads, the head watches", c)
				}
			}
		})
	}
}
