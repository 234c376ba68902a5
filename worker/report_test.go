package main

import (
	"context"
	"errors"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// recordingStarter is the agent's consumer-side client (starter): the only call its own
// code can make is the one the interface has, and this records it.
type recordingStarter struct {
	opts  []client.StartWorkflowOptions
	types []any
	reqs  []contract.NodeStartRequest
	fail  int
}

func (r *recordingStarter) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	r.opts, r.types = append(r.opts, o), append(r.types, wf)
	r.reqs = append(r.reqs, args[0].(contract.NodeStartRequest))
	if r.fail > 0 {
		r.fail--
		return nil, errors.New("unavailable")
	}
	return fakeRun{}, nil
}

type fakeRun struct{ client.WorkflowRun }

func (fakeRun) GetID() string    { return "id" }
func (fakeRun) GetRunID() string { return "run" }

// TestReportStartStartsOnlyItsNodeStartedRun: the agent's start-up report is one start of
// the node's own NodeStarted run on the workflow queue, replacing a run of an earlier
// start, carrying the boot ID and the clusters it holds containers of; a refused start is
// tried again. (The agent's client is the starter interface: it lists, signals, describes
// and reads nothing; TestAgentOnlyServesItsNodeQueue records its calls on the wire.)
func TestReportStartStartsOnlyItsNodeStartedRun(t *testing.T) {
	r := &recordingStarter{fail: 1}
	reportStart(context.Background(), r, "node-b",
		func(context.Context) (string, error) { return "boot-2", nil },
		func(context.Context) ([]string, error) { return []string{"a", "b"}, nil }, zap.NewNop())
	if len(r.opts) != 2 {
		t.Fatalf("%d starts, want 2 (one refused, then one)", len(r.opts))
	}
	o := r.opts[1]
	if o.ID != contract.NodeStartedWorkflowID("node-b") || o.TaskQueue != contract.WorkflowQueue ||
		o.WorkflowIDConflictPolicy != enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING {
		t.Errorf("start options %+v", o)
	}
	if r.types[1] != contract.NodeStartedWorkflow {
		t.Errorf("workflow type %v, want %s", r.types[1], contract.NodeStartedWorkflow)
	}
	if got := r.reqs[1]; got.Node != "node-b" || got.BootID != "boot-2" || len(got.Clusters) != 2 {
		t.Errorf("request %+v", got)
	}

	// An engine that does not answer: the boot is reported all the same, with no clusters.
	r = &recordingStarter{}
	reportStart(context.Background(), r, "node-b",
		func(context.Context) (string, error) { return "boot-3", nil },
		func(context.Context) ([]string, error) { return nil, errors.New("engine down") }, zap.NewNop())
	if len(r.reqs) != 1 || r.reqs[0].BootID != "boot-3" || len(r.reqs[0].Clusters) != 0 {
		t.Errorf("with the engine down: %+v", r.reqs)
	}
}
