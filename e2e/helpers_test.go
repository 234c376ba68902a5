//go:build integration

package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// The helpers every e2e test uses to start a deploy and wait for what it does.

// deployFor starts the deploy of s, signed with the lab's key, reporting progress every
// second.
func deployFor(t *testing.T, s spec.Cluster) tclient.WorkflowRun {
	t.Helper()
	run, err := control.Controller{Client: tc, SignKey: theLab.SignKey}.StartDeploy(context.Background(), workflows.DeployRequest{Spec: s, Trigger: "test", ReportEvery: spec.Duration(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// result waits up to within for run's result, into v (nil: none), and returns the
// workflow's error as control.Reason reduces it: nil when it succeeded, a *control.Failure
// when it failed or was canceled. An error that is not the workflow's own (the server
// unavailable while Temporal restarts) is retried until within is spent.
func result(run tclient.WorkflowRun, within time.Duration, v any) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := tc.GetWorkflow(ctx, run.GetID(), run.GetRunID()).Get(ctx, v)
		cancel()
		var app *temporal.ApplicationError
		var canceled *temporal.CanceledError
		var term *temporal.TerminatedError
		var timeout *temporal.TimeoutError
		if err == nil || errors.As(err, &app) || errors.As(err, &canceled) || errors.As(err, &term) || errors.As(err, &timeout) || time.Now().After(deadline) {
			return control.Reason(err)
		}
		time.Sleep(time.Second)
	}
}

// deployResult waits up to within for run to serve; anything else fails the test.
func deployResult(t *testing.T, run tclient.WorkflowRun, within time.Duration) workflows.DeployResult {
	t.Helper()
	var res workflows.DeployResult
	if err := result(run, within, &res); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	return res
}

// failure waits up to 3 minutes for run to fail with a classified failure, and how long
// that took; a deploy that serves or fails unclassified fails the test.
func failure(t *testing.T, run tclient.WorkflowRun) (*control.Failure, time.Duration) {
	t.Helper()
	start := time.Now()
	err := result(run, 3*time.Minute, nil)
	if err == nil {
		t.Fatal("deploy succeeded")
	}
	var f *control.Failure
	if !errors.As(err, &f) {
		t.Fatalf("deploy error %v is not a classified failure", err)
	}
	return f, time.Since(start)
}

// deployServing deploys s and waits until it serves.
func deployServing(t *testing.T, s spec.Cluster) {
	t.Helper()
	deployResult(t, deployFor(t, s), 3*time.Minute)
}

// waitPhase waits up to 2 minutes for run's progress to report phase with a shard loaded;
// a deploy that ends first fails the test at once, with its reason.
func waitPhase(t *testing.T, run tclient.WorkflowRun, phase string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last contract.ServingProgress
	for time.Now().Before(deadline) {
		v, err := tc.QueryWorkflow(context.Background(), run.GetID(), run.GetRunID(), contract.QueryProgress)
		if err == nil {
			var p contract.ServingProgress
			if v.Get(&p) == nil {
				if p.Phase == phase && p.ShardsLoaded > 0 {
					return
				}
				last = p
			}
		}
		// A deploy that ended (served before it was seen loading, or failed) says so now,
		// with its reason, rather than after the whole wait.
		//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
		if d, err := tc.DescribeWorkflowExecution(context.Background(), run.GetID(), run.GetRunID()); err == nil &&
			d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Fatalf("deploy never reached %s: it ended %s (%v); last progress %+v", phase, d.GetWorkflowExecutionInfo().GetStatus(), result(run, time.Minute, nil), last)
		}
		time.Sleep(300 * time.Millisecond)
	}
	st, _ := control.Controller{Client: tc, SignKey: theLab.SignKey}.Status(context.Background(), strings.TrimPrefix(run.GetID(), contract.DeployWorkflowID("")))
	t.Fatalf("deploy never reached %s within 2 min: last progress %+v; state %s: %s", phase, last, st.State.Phase, st.State.Details)
}

// slowLoading makes the head's simulated vLLM load 30 shards of half a second each: long
// enough for a test to act while the deploy is loading.
func slowLoading(s *spec.Cluster) {
	s.Nodes[0].Env = map[string]string{"TPDEPLOY_SIM_SHARDS": "30", "TPDEPLOY_SIM_SHARD_SECONDS": "0.5"}
}

// eventually waits up to within for cond, failing the test with what it waited for.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
