package control

import (
	"context"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// runs is a Temporal client that knows one closed run per workflow ID: its status, times
// and input. Only what Wanted calls is answered.
type runs struct {
	client.Client
	info  map[string]*workflowpb.WorkflowExecutionInfo
	input map[string]any
}

func (r *runs) add(id string, status enumspb.WorkflowExecutionStatus, start time.Time, input any) {
	r.info[id] = &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: id + "-run"},
		Status: status, StartTime: timestamppb.New(start), CloseTime: timestamppb.New(start.Add(time.Minute))}
	r.input[id] = input
}

func (r *runs) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	info, ok := r.info[id]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: info}, nil
}

func (r *runs) GetWorkflowHistory(_ context.Context, id, _ string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	p, err := converter.GetDefaultDataConverter().ToPayloads(r.input[id])
	return &firstEvent{ev: &historypb.HistoryEvent{Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{
		WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{Input: p}}}, err: err}
}

type firstEvent struct {
	ev   *historypb.HistoryEvent
	err  error
	done bool
}

func (f *firstEvent) HasNext() bool { return !f.done }
func (f *firstEvent) Next() (*historypb.HistoryEvent, error) {
	f.done = true
	return f.ev, f.err
}

// An agent with trusted_keys removes a cluster's containers at start-up only on a teardown
// an operator signed for that cluster (#36 item 9b): a teardown run anyone can start under
// the cluster's teardown ID, unsigned or signed for another cluster, leaves them alone.
func TestReconcileRemovesOnlyOnASignedTeardown(t *testing.T) {
	pub, priv, _ := intent.GenerateKey()
	s := fakeagents.SeedSpec()
	other := s
	other.Name = "other"
	verify := func(in *contract.Intent, cluster string) error {
		c, err := intent.Verify(in, ed25519.PublicKey(pub))
		if err != nil {
			return err
		}
		if c.Name != cluster {
			return errors.New("signed for cluster " + c.Name)
		}
		return nil
	}
	at := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		in     *contract.Intent
		remove bool
	}{
		{"unsigned", nil, false},
		{"signed for another cluster", intent.Sign(priv, other), false},
		{"signed", intent.Sign(priv, s), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &runs{info: map[string]*workflowpb.WorkflowExecutionInfo{}, input: map[string]any{}}
			r.add(contract.DeployWorkflowID(s.Name), enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, at, workflows.DeployRequest{Spec: s, Intent: intent.Sign(priv, s)})
			r.add(contract.TeardownWorkflowID(s.Name), enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, at.Add(time.Hour), workflows.TeardownRequest{Spec: s, Intent: tc.in})
			keep, running, known, err := Controller{Client: r, VerifyRemoval: verify}.Wanted(context.Background(), s.Name)
			removes := err == nil && known && !running && len(keep) == 0
			if removes != tc.remove {
				t.Errorf("removes %v, want %v (keep %v running %v known %v err %v)", removes, tc.remove, keep, running, known, err)
			}
		})
	}
	// Nor on a failed deploy anyone started under the cluster's deploy ID ("none of its
	// containers is current").
	r := &runs{info: map[string]*workflowpb.WorkflowExecutionInfo{}, input: map[string]any{}}
	r.add(contract.DeployWorkflowID(s.Name), enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, at, workflows.DeployRequest{Spec: s})
	if keep, running, known, err := (Controller{Client: r, VerifyRemoval: verify}).Wanted(context.Background(), s.Name); err == nil && known && !running {
		t.Errorf("an unsigned failed deploy made the containers go (keep %v)", keep)
	}
}

// GetWorkflow's run failed, not as a staged deploy's refusal.
func (r *runs) GetWorkflow(context.Context, string, string) client.WorkflowRun { return failedRun{} }

type failedRun struct{ client.WorkflowRun }

func (failedRun) Get(context.Context, any) error { return errors.New("the deploy failed") }
