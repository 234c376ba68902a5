//go:build integration

package liveness_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/devserver"
	"github.com/tpdeploy/tpdeploy/internal/liveness"
)

var tc client.Client

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tpd-liveness-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := devserver.Start(context.Background(), dir)
	if err != nil {
		// No skip: `make test` builds the Temporal CLI; its absence is a failure.
		fmt.Fprintln(os.Stderr, "FAIL: liveness tests need the Temporal dev server:", err)
		return 1
	}
	defer srv.Stop()
	if tc, err = client.Dial(client.Options{HostPort: srv.Address}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer tc.Close()
	return m.Run()
}

// quietStep works for 3 s without heartbeating, like a container start.
func quietStep(ctx context.Context) (string, error) {
	time.Sleep(3 * time.Second)
	return "done", nil
}

// chattyStep heartbeats with details of its own, and reports the details it finds on retry.
func chattyStep(ctx context.Context) (string, error) {
	if activity.HasHeartbeatDetails(ctx) {
		var d string
		_ = activity.GetHeartbeatDetails(ctx, &d)
		return "resumed from " + d, nil
	}
	activity.RecordHeartbeat(ctx, "offset 42")
	// Then it hangs without heartbeating: its own liveness must still be judged.
	time.Sleep(4 * time.Second)
	return "never", nil
}

func stepWorkflow(ctx workflow.Context, name string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute, HeartbeatTimeout: time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 2, InitialInterval: 100 * time.Millisecond},
	})
	var out string
	err := workflow.ExecuteActivity(ctx, name).Get(ctx, &out)
	return out, err
}

func runStep(t *testing.T, queue string, interceptors bool, step string) (string, error) {
	t.Helper()
	opts := worker.Options{}
	if interceptors {
		opts.Interceptors = append(opts.Interceptors, &liveness.Interceptor{})
	}
	w := worker.New(tc, queue, opts)
	w.RegisterWorkflow(stepWorkflow)
	w.RegisterActivityWithOptions(quietStep, activity.RegisterOptions{Name: "quietStep"})
	w.RegisterActivityWithOptions(chattyStep, activity.RegisterOptions{Name: "chattyStep"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue}, stepWorkflow, step)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	err = run.Get(ctx, &out)
	return out, err
}

func isHeartbeatTimeout(err error) bool {
	var te *temporal.TimeoutError
	return errors.As(err, &te) && te.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT
}

// A step that does not heartbeat outlives a 1 s heartbeat timeout with the interceptor,
// and times out without it (so the test can fail).
func TestQuietStepIsKeptAlive(t *testing.T) {
	if out, err := runStep(t, "liveness-on", true, "quietStep"); err != nil || out != "done" {
		t.Fatalf("with the interceptor: %q %v", out, err)
	}
	if _, err := runStep(t, "liveness-off", false, "quietStep"); !isHeartbeatTimeout(err) {
		t.Fatalf("without the interceptor: %v, want a heartbeat timeout", err)
	}
}

// A step that heartbeats itself keeps its details and its own liveness: when it stops
// heartbeating it times out, and its retry finds the details it recorded.
func TestSelfHeartbeatingStepIsLeftAlone(t *testing.T) {
	out, err := runStep(t, "liveness-self", true, "chattyStep")
	if err != nil || out != "resumed from offset 42" {
		t.Fatalf("got %q %v, want the retry to resume from its own details", out, err)
	}
}
