// Package control is the operator's side of tpdeploy: starting, watching, planning and
// tearing down deployments through Temporal. The starter CLI is a thin shell over it.
package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// AlreadyRunningError refuses a deploy while another deploy of the cluster runs.
type AlreadyRunningError struct {
	Cluster    string
	WorkflowID string
	RunID      string
}

func (e *AlreadyRunningError) Error() string {
	return fmt.Sprintf("cluster %s: a deploy is already running (workflow %s, run %s); watch it with `starter status --watch %s` or stop it with `starter teardown %s`",
		e.Cluster, e.WorkflowID, e.RunID, e.Cluster, e.Cluster)
}

// Controller starts and inspects deployments.
type Controller struct {
	Client client.Client
	// DataConverter decodes payloads read straight from history (a deploy's spec); it must
	// be the client's (with the codec when payloads are encrypted). Nil: the default.
	DataConverter converter.DataConverter
}

// StartDeploy starts the cluster's deploy under its one workflow ID; a running deploy of
// the same cluster is refused with *AlreadyRunningError.
func (c Controller) StartDeploy(ctx context.Context, req workflows.DeployRequest) (client.WorkflowRun, error) {
	id := workflows.DeployWorkflowID(req.Spec.Name)
	run, err := c.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                                       id,
		TaskQueue:                                activities.WorkflowQueue,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		StaticSummary:                            fmt.Sprintf("deploy %s: %s on %d nodes (tp=%d, pp=%d)", req.Spec.Name, req.Spec.Model.ServedName, len(req.Spec.Nodes), req.Spec.Parallel.Tensor, req.Spec.Parallel.Pipeline),
	}, workflows.DeployCluster, req)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return nil, &AlreadyRunningError{Cluster: req.Spec.Name, WorkflowID: id, RunID: started.RunId}
	}
	if err != nil {
		return nil, fmt.Errorf("start deploy of %s: %w", req.Spec.Name, err)
	}
	return run, nil
}

// Plan runs the dry-run plan workflow and waits for its report.
func (c Controller) Plan(ctx context.Context, s spec.Cluster) (workflows.PlanReport, error) {
	var rep workflows.PlanReport
	run, err := c.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       workflows.PlanWorkflowID(s.Name),
		TaskQueue:                activities.WorkflowQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowExecutionTimeout: 5 * time.Minute,
		StaticSummary:            "plan " + s.Name,
	}, workflows.PlanCluster, workflows.PlanRequest{Spec: s})
	if err != nil {
		return rep, fmt.Errorf("start plan of %s: %w", s.Name, err)
	}
	if err := run.Get(ctx, &rep); err != nil {
		return rep, Reason(err)
	}
	return rep, nil
}

// Status is what the cluster's latest deploy is doing or did.
type Status struct {
	WorkflowID string
	RunID      string
	Running    bool
	// Closed is Temporal's status for a finished deploy: Completed, Failed, Canceled, ...
	Closed string
	State  workflows.State
	Result *workflows.DeployResult
	Err    error
	Spec   *spec.Cluster
	// Supervision is the cluster supervisor's state (incidents), when one has run.
	Supervision *workflows.Supervision
}

// Status reports the latest deploy of cluster: its state (a query), result, spec, and the
// supervisor's incidents.
func (c Controller) Status(ctx context.Context, cluster string) (Status, error) {
	st, err := c.latest(ctx, cluster)
	if err != nil {
		return st, err
	}
	if q, err := c.Client.QueryWorkflow(ctx, st.WorkflowID, st.RunID, workflows.QueryState); err == nil {
		_ = q.Get(&st.State)
	}
	if q, err := c.Client.QueryWorkflow(ctx, workflows.SuperviseWorkflowID(cluster), "", workflows.QuerySupervision); err == nil {
		var sv workflows.Supervision
		if q.Get(&sv) == nil {
			st.Supervision = &sv
		}
	}
	return st, nil
}

// latest is the cheap part of Status, without queries (a query on a closed run replays
// its history on a worker): whether the latest deploy runs, its result and its spec. The
// supervisor's periodic check uses it.
func (c Controller) latest(ctx context.Context, cluster string) (Status, error) {
	id := workflows.DeployWorkflowID(cluster)
	desc, err := c.Client.DescribeWorkflowExecution(ctx, id, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return Status{}, fmt.Errorf("cluster %s has never been deployed (no workflow %s)", cluster, id)
	}
	if err != nil {
		return Status{}, fmt.Errorf("describe %s: %w", id, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	st := Status{WorkflowID: id, RunID: info.GetExecution().GetRunId()}
	st.Running = info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	if !st.Running {
		st.Closed = closedName(info.GetStatus())
		var res workflows.DeployResult
		if err := c.Client.GetWorkflow(ctx, id, st.RunID).Get(ctx, &res); err != nil {
			st.Err = Reason(err)
		} else {
			st.Result = &res
		}
	}
	if s, err := c.deploySpec(ctx, id, st.RunID); err == nil {
		st.Spec = &s
	}
	return st, nil
}

func closedName(s enumspb.WorkflowExecutionStatus) string {
	switch s {
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return "Completed"
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		return "Failed"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return "Canceled"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return "Terminated"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return "TimedOut"
	default:
		return s.String()
	}
}

// deploySpec reads the spec a deploy was started with from its first history event, so
// `teardown CLUSTER` needs no spec file.
func (c Controller) deploySpec(ctx context.Context, id, runID string) (spec.Cluster, error) {
	it := c.Client.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return spec.Cluster{}, fmt.Errorf("workflow %s has no history", id)
	}
	ev, err := it.Next()
	if err != nil {
		return spec.Cluster{}, fmt.Errorf("read history of %s: %w", id, err)
	}
	payloads := ev.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()
	if len(payloads) == 0 {
		return spec.Cluster{}, fmt.Errorf("workflow %s has no input", id)
	}
	dc := c.DataConverter
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	var req workflows.DeployRequest
	if err := dc.FromPayload(payloads[0], &req); err != nil {
		return spec.Cluster{}, fmt.Errorf("decode input of %s: %w", id, err)
	}
	return req.Spec.WithDefaults(), nil
}

// Teardown stops the cluster: a running deploy is cancelled (its compensations remove
// what it started) and then every container of the cluster is removed on every node.
// s may be nil, in which case the spec of the latest deploy is used.
func (c Controller) Teardown(ctx context.Context, cluster string, s *spec.Cluster) (workflows.TeardownResult, error) {
	var res workflows.TeardownResult
	id := workflows.DeployWorkflowID(cluster)
	if s == nil {
		got, err := c.deploySpec(ctx, id, "")
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			// Never deployed: nothing of it can be running, so there is nothing to do.
			return workflows.TeardownResult{NeverDeployed: true}, nil
		}
		if err != nil {
			return res, fmt.Errorf("cluster %s: no spec given and none found from a previous deploy (%v); pass -f spec.yaml", cluster, err)
		}
		s = &got
	}
	// The supervisor first, or it would redeploy what is being removed.
	for _, id := range []string{workflows.SuperviseWorkflowID(cluster), id} {
		if err := c.cancelRunning(ctx, id); err != nil {
			return res, err
		}
	}
	run, err := c.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       workflows.TeardownWorkflowID(cluster),
		TaskQueue:                activities.WorkflowQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		StaticSummary:            "teardown " + cluster,
	}, workflows.TeardownCluster, workflows.TeardownRequest{Spec: *s})
	if err != nil {
		return res, fmt.Errorf("start teardown of %s: %w", cluster, err)
	}
	if err := run.Get(ctx, &res); err != nil {
		return res, Reason(err)
	}
	return res, nil
}

// cancelRunning cancels a running workflow and waits for it to close (a deploy runs its
// compensations meanwhile); a workflow that is not running is fine.
func (c Controller) cancelRunning(ctx context.Context, id string) error {
	desc, err := c.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil
	}
	runID := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	if err := c.Client.CancelWorkflow(ctx, id, runID); err != nil {
		return fmt.Errorf("cancel %s: %w", id, err)
	}
	// The outcome is a cancel, not an error here.
	_ = c.Client.GetWorkflow(ctx, id, runID).Get(ctx, nil)
	return nil
}

// Reason reduces a workflow failure to its one-line cause, with the error type the
// workflow classified it as: "PlacementMismatch: node-a: check placement: ...".
func Reason(err error) error {
	var app interface {
		Type() string
		Message() string
	}
	var wee *temporal.WorkflowExecutionError
	if errors.As(err, &wee) {
		if errors.As(wee.Unwrap(), &app) {
			return &Failure{Type: app.Type(), Message: app.Message()}
		}
		if temporal.IsCanceledError(wee.Unwrap()) {
			return &Failure{Type: activities.ErrCanceled, Message: "canceled"}
		}
		return &Failure{Type: "Failed", Message: wee.Unwrap().Error()}
	}
	return err
}

// Failure is a deploy's classified failure.
type Failure struct {
	Type    string
	Message string
}

func (f *Failure) Error() string { return f.Type + ": " + f.Message }
