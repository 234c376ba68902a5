//go:build integration

package control

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// After a teardown the status is the teardown's, not the record of the deploy before it
// (a result that served, containers, a healthy supervisor): a failed teardown says so, a
// completed one names its run, and a deploy after it is the status again.
func TestStatusAfterTeardownIsTheTeardown(t *testing.T) {
	s, f := cluster(t, "it-torn", "a", "b")
	ctl := Controller{Client: temporalClient}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	deploy := func() {
		t.Helper()
		run, err := ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: s, Trigger: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Get(ctx, nil); err != nil {
			t.Fatalf("deploy: %v", Reason(err))
		}
		st, err := ctl.Status(ctx, s.Name)
		if err != nil || st.Teardown != nil || st.Result == nil {
			t.Fatalf("status after the deploy: torn down %+v, result %v, %v", st.Teardown, st.Result, err)
		}
	}
	deploy()

	fakeagents.SetFailure(f, "RemoveContainers it-torn-b", temporal.NewNonRetryableApplicationError("it-torn-b: engine gone", contract.ErrDocker, nil))
	if _, err := ctl.Teardown(ctx, s.Name, nil); err == nil {
		t.Fatal("teardown with node b's engine gone succeeded")
	}
	st, err := ctl.Status(ctx, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	if td := st.Teardown; td == nil || td.Closed != "Failed" || td.Err == nil || td.Ended.IsZero() {
		t.Fatalf("status after a failed teardown: %+v, want the failure", td)
	}

	fakeagents.SetFailure(f, "RemoveContainers it-torn-b", nil)
	res, err := ctl.Teardown(ctx, s.Name, nil)
	if err != nil {
		t.Fatalf("teardown: %v", err)
	}
	st, err = ctl.Status(ctx, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	td := st.Teardown
	if td == nil || td.Running || td.Closed != "Completed" || td.Err != nil || td.WorkflowID != contract.TeardownWorkflowID(s.Name) || td.RunID == "" {
		t.Fatalf("status after the teardown: %+v, want the completed teardown", td)
	}
	removed := 0
	for _, r := range res.Removed {
		removed += len(r.Removed)
	}
	if td.Removed != removed || td.Ended.Before(td.Started) || !td.Started.After(st.Started) {
		t.Errorf("teardown %+v (removed %d) after the deploy started %s", td, removed, st.Started)
	}
	if st.Supervision != nil {
		t.Errorf("the supervisor's last state is shown after the teardown stopped it: %+v", st.Supervision)
	}

	deploy()
}
