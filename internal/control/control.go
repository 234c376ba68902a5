// Package control is the operator's side of tpdeploy: starting, watching, planning and
// tearing down deployments through Temporal. The starter CLI is a thin shell over it.
package control

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// AlreadyRunningError refuses a deploy while another deploy of the cluster runs.
type AlreadyRunningError struct {
	Cluster    string
	WorkflowID string
	RunID      string
	// OtherSpec, when set, says that the running deploy is of another spec.
	OtherSpec string
}

func (e *AlreadyRunningError) Error() string {
	other := ""
	if e.OtherSpec != "" {
		other = " (" + e.OtherSpec + ")"
	}
	return fmt.Sprintf("cluster %s: a deploy is already running (workflow %s, run %s)%s; watch it with `starter status --watch %s` or stop it with `starter teardown %s`",
		e.Cluster, e.WorkflowID, e.RunID, other, e.Cluster, e.Cluster)
}

// Controller starts and inspects deployments.
type Controller struct {
	Client client.Client
	// DataConverter decodes payloads read straight from history (a deploy's spec); it must
	// be the client's (with the codec when payloads are encrypted). Nil: the default.
	DataConverter converter.DataConverter
	// SignKey, when set, is the operator's key: deploys, schedules and teardowns carry the
	// spec signed with it (package intent), which agents with trusted_keys require.
	SignKey ed25519.PrivateKey
	// SignValidFor, when positive, makes those signatures expire that long after they are
	// made (the intent's not_after); zero: they do not expire.
	SignValidFor time.Duration
	// VerifyRemoval, when set (a node agent with trusted_keys: activities.Agent.VerifyRemoval),
	// must accept the operator's signature, for the cluster, of the run Wanted reads before
	// it says that a cluster's containers may go: anyone who can start a workflow could
	// start one under the teardown's or the deploy's ID.
	VerifyRemoval func(in *contract.Intent, cluster string) error
}

// sign is s signed with the operator's key, or nil without one.
func (c Controller) sign(s spec.Cluster) *contract.Intent {
	if c.SignKey == nil {
		return nil
	}
	return intent.SignWith(c.SignKey, s, intent.Options{ValidFor: c.SignValidFor})
}

// StartDeploy starts the cluster's deploy under its one workflow ID; a running deploy of
// the same cluster is refused with *AlreadyRunningError.
func (c Controller) StartDeploy(ctx context.Context, req workflows.DeployRequest) (client.WorkflowRun, error) {
	id := contract.DeployWorkflowID(req.Spec.Name)
	if req.Spec.Replicas > 1 {
		return nil, fmt.Errorf("spec %s has replicas: %d: its replicas are clusters of their own (%s, ...), deployed one at a time (Roll)",
			req.Spec.Name, req.Spec.Replicas, spec.MemberName(req.Spec.Name, 0))
	}
	if req.Intent == nil {
		req.Intent = c.sign(req.Spec)
	}
	run, err := c.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                                       id,
		TaskQueue:                                contract.WorkflowQueue,
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

// DeployOrJoin starts the cluster's deploy; when one runs already with the same spec it
// joins that one (joined=true), so `starter deploy` run twice, or by two people, makes one
// deploy. A running deploy of another spec is refused with *AlreadyRunningError naming it:
// which spec should win is a person's decision.
func (c Controller) DeployOrJoin(ctx context.Context, req workflows.DeployRequest) (run client.WorkflowRun, joined bool, err error) {
	run, err = c.StartDeploy(ctx, req)
	var running *AlreadyRunningError
	if !errors.As(err, &running) {
		return run, false, err
	}
	s, serr := c.deploySpec(ctx, running.WorkflowID, running.RunID)
	if serr != nil {
		return nil, false, err
	}
	if s.Hash() != req.Spec.Hash() {
		running.OtherSpec = fmt.Sprintf("it deploys spec %s, this is spec %s", s.Hash(), req.Spec.Hash())
		return nil, false, running
	}
	return c.Client.GetWorkflow(ctx, running.WorkflowID, running.RunID), true, nil
}

// Plan runs the dry-run plan workflow and waits for its report.
func (c Controller) Plan(ctx context.Context, s spec.Cluster) (workflows.PlanReport, error) {
	var rep workflows.PlanReport
	run, err := c.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		// One plan per spec: a plan running for another spec is never joined.
		ID:                       contract.PlanWorkflowID(s.Name) + "-" + s.Hash(),
		TaskQueue:                contract.WorkflowQueue,
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
	// Started is when the deploy run began (the Temporal server's clock).
	Started time.Time
	// Closed is Temporal's status for a finished deploy: Completed, Failed, Canceled, ...
	Closed string
	State  workflows.State
	Result *workflows.DeployResult
	Err    error
	Spec   *spec.Cluster
	// Intent is the operator's signature the deploy carried, if any.
	Intent *contract.Intent
	// Supervision is the cluster supervisor's state (incidents), when one has run.
	Supervision *workflows.Supervision
	// Copies are the model copies in flight (model.sync), from their heartbeats.
	Copies []contract.SyncProgress
	// Refused is the latest deploy when it was staged beside this one, which still
	// serves, and failed before it stopped anything.
	Refused *Status
	// Teardown is the cluster's teardown when one began after the latest deploy: the
	// deploy's record (its result, its containers) and the supervisor's last state then
	// describe what was there before it, not what is there now.
	Teardown *TeardownStatus
}

// TeardownStatus is a teardown run of the cluster, as Temporal records it.
type TeardownStatus struct {
	WorkflowID string
	RunID      string
	Running    bool
	// Closed is Temporal's status for a finished teardown: Completed, Failed, ...
	Closed string
	// Started and Ended are when it began and closed (zero while it runs).
	Started, Ended time.Time
	// Removed counts the containers it removed, when it completed.
	Removed int
	// Err is why it did not complete.
	Err error
}

// Status reports the latest deploy of cluster: its state (a query), result, spec, and the
// supervisor's incidents; or, when a teardown began since that deploy, the teardown
// (Teardown), without the supervisor's state, which the teardown stopped.
func (c Controller) Status(ctx context.Context, cluster string) (Status, error) {
	st, err := c.latest(ctx, cluster)
	if err != nil {
		return st, err
	}
	if q, err := c.Client.QueryWorkflow(ctx, st.WorkflowID, st.RunID, contract.QueryState); err == nil {
		_ = q.Get(&st.State)
	}
	since := st.Started
	if st.Refused != nil {
		since = st.Refused.Started
	}
	if st.Teardown, err = c.teardownSince(ctx, cluster, since); err != nil || st.Teardown != nil {
		return st, err
	}
	if q, err := c.Client.QueryWorkflow(ctx, contract.SuperviseWorkflowID(cluster), "", contract.QuerySupervision); err == nil {
		var sv workflows.Supervision
		if q.Get(&sv) == nil {
			c.freshHealth(ctx, &sv)
			st.Supervision = &sv
		}
	}
	return st, nil
}

// teardownSince is the cluster's latest teardown when it began after since (the latest
// deploy's start), or nil. A teardown cancels a running deploy before it removes
// anything, and a deploy cannot start while one runs, so one that began later than the
// latest deploy is the last word on the cluster.
func (c Controller) teardownSince(ctx context.Context, cluster string, since time.Time) (*TeardownStatus, error) {
	id := contract.TeardownWorkflowID(cluster)
	//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
	desc, err := c.Client.DescribeWorkflowExecution(ctx, id, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", id, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	td := &TeardownStatus{WorkflowID: id, RunID: info.GetExecution().GetRunId(), Started: info.GetStartTime().AsTime(),
		Running: info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}
	if !td.Started.After(since) {
		return nil, nil
	}
	if td.Running {
		return td, nil
	}
	td.Closed, td.Ended = closedName(info.GetStatus()), info.GetCloseTime().AsTime()
	var res workflows.TeardownResult
	if err := c.Client.GetWorkflow(ctx, id, td.RunID).Get(ctx, &res); err != nil {
		td.Err = Reason(err)
		return td, nil
	}
	for _, r := range res.Removed {
		td.Removed += len(r.Removed)
	}
	return td, nil
}

// freshHealth fills the supervisor's health from its running watch's latest heartbeat:
// the watch reports to the workflow only on an incident or after an hour of health (so a
// healthy hour costs a few history events), but it heartbeats every check.
func (c Controller) freshHealth(ctx context.Context, sv *workflows.Supervision) {
	//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
	desc, err := c.Client.DescribeWorkflowExecution(ctx, contract.SuperviseWorkflowID(sv.Cluster), "")
	if err != nil {
		return
	}
	dc := c.DataConverter
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	for _, pa := range desc.GetPendingActivities() {
		if name := pa.GetActivityType().GetName(); name != contract.ActivityWatchCluster && name != contract.ActivityWatchTarget || pa.GetHeartbeatDetails() == nil {
			continue
		}
		var h contract.ClusterHealth
		if dc.FromPayloads(pa.GetHeartbeatDetails(), &h) == nil && h.LastCheck.After(sv.LastCheck) {
			sv.LastCheck, sv.Healthy, sv.Detail = h.LastCheck, h.Healthy, h.Detail
			if h.Canary != "" {
				sv.Canary = h.Canary
			}
		}
	}
}

// latest is the cheap part of Status, without queries (a query on a closed run replays
// its history on a worker): whether the latest deploy runs, its result and its spec. The
// supervisor's periodic check uses it.
//
// A latest deploy that was staged beside a serving deployment and refused before it
// stopped anything (contract.StagedRefusal) is not what serves: the status is then the
// serving deploy's, with the refused one in Refused.
func (c Controller) latest(ctx context.Context, cluster string) (Status, error) {
	st, err := c.run(ctx, cluster, "")
	if err != nil {
		return st, err
	}
	refused := stagedRefusal(st.Err)
	if refused == nil {
		return st, nil
	}
	serving, err := c.run(ctx, cluster, refused.Serving.RunID)
	if err != nil {
		return st, nil // the serving run is gone from Temporal (retention): say what is known
	}
	serving.Refused = &st
	return serving, nil
}

// servingRunID is the run whose containers run: the latest deploy run (""), or, when that
// was a staged deploy refused before the swap, the run it was staged beside.
func (c Controller) servingRunID(ctx context.Context, cluster string) string {
	id := contract.DeployWorkflowID(cluster)
	//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
	desc, err := c.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return ""
	}
	info := desc.GetWorkflowExecutionInfo()
	switch info.GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return ""
	}
	if refused := c.refusalOf(ctx, cluster, info.GetExecution().GetRunId()); refused != nil {
		return refused.Serving.RunID
	}
	return ""
}

// refusalOf is the StagedRefusal a closed deploy run failed with, or nil.
func (c Controller) refusalOf(ctx context.Context, cluster, runID string) *contract.StagedRefusal {
	return stagedRefusal(Reason(c.Client.GetWorkflow(ctx, contract.DeployWorkflowID(cluster), runID).Get(ctx, nil)))
}

// stagedRefusal is a deploy failure's StagedRefusal, or nil.
func stagedRefusal(err error) *contract.StagedRefusal {
	var f *Failure
	if errors.As(err, &f) {
		return f.Staged
	}
	return nil
}

// run is one deploy run's status (runID "" is the latest run).
func (c Controller) run(ctx context.Context, cluster, runID string) (Status, error) {
	id := contract.DeployWorkflowID(cluster)
	//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
	desc, err := c.Client.DescribeWorkflowExecution(ctx, id, runID)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		if runID != "" {
			return Status{}, fmt.Errorf("cluster %s: no deploy run %s", cluster, runID)
		}
		return Status{}, fmt.Errorf("cluster %s has never been deployed (no workflow %s)", cluster, id)
	}
	if err != nil {
		return Status{}, fmt.Errorf("describe %s: %w", id, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	st := Status{WorkflowID: id, RunID: info.GetExecution().GetRunId(), Started: info.GetStartTime().AsTime()}
	st.Running = info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	dc := c.DataConverter
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	for _, pa := range desc.GetPendingActivities() {
		if name := pa.GetActivityType().GetName(); name != contract.ActivitySyncModel && name != contract.ActivityDownloadHubModel || pa.GetHeartbeatDetails() == nil {
			continue
		}
		var p contract.SyncProgress
		if dc.FromPayloads(pa.GetHeartbeatDetails(), &p) == nil && p.Node != "" {
			st.Copies = append(st.Copies, p)
		}
	}
	if !st.Running {
		st.Closed = closedName(info.GetStatus())
		var res workflows.DeployResult
		if err := c.Client.GetWorkflow(ctx, id, st.RunID).Get(ctx, &res); err != nil {
			st.Err = Reason(err)
		} else {
			st.Result = &res
		}
	}
	if req, err := c.deployRequest(ctx, id, st.RunID); err == nil {
		s := req.Spec.WithDefaults()
		st.Spec, st.Intent = &s, req.Intent
	}
	return st, nil
}

// latestCached is latest, reusing the result and spec read for the same run (the watch
// asks every few seconds; a closed run's result and spec do not change).
func (c Controller) latestCached(ctx context.Context, cluster string, runID *string, cached *Status) (Status, error) {
	id := contract.DeployWorkflowID(cluster)
	//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
	desc, err := c.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return Status{}, fmt.Errorf("describe %s: %w", id, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return Status{WorkflowID: id, RunID: info.GetExecution().GetRunId(), Running: true}, nil
	}
	rid := info.GetExecution().GetRunId()
	if rid == *runID {
		return *cached, nil
	}
	st, err := c.latest(ctx, cluster)
	if err != nil {
		return st, err
	}
	*runID, *cached = rid, st
	return st, nil
}

// closedName is how a closed run's status is shown: Temporal's own name for it
// ("Completed", "Failed", "Canceled", "Terminated", "TimedOut", "ContinuedAsNew").
func closedName(s enumspb.WorkflowExecutionStatus) string {
	return s.String()
}

// deploySpec reads the spec a deploy was started with from its first history event, so
// `teardown CLUSTER` needs no spec file.
func (c Controller) deploySpec(ctx context.Context, id, runID string) (spec.Cluster, error) {
	req, err := c.deployRequest(ctx, id, runID)
	return req.Spec.WithDefaults(), err
}

// deployRequest reads a deploy's input: its spec and the operator's signature.
func (c Controller) deployRequest(ctx context.Context, id, runID string) (workflows.DeployRequest, error) {
	var req workflows.DeployRequest
	err := c.firstInput(ctx, id, runID, &req)
	return req, err
}

// firstInput decodes the input a workflow was started with (its first history event),
// with the client's data converter (payloads may be encrypted).
func (c Controller) firstInput(ctx context.Context, id, runID string, v any) error {
	it := c.Client.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return fmt.Errorf("workflow %s has no history", id)
	}
	ev, err := it.Next()
	if err != nil {
		return fmt.Errorf("read history of %s: %w", id, err)
	}
	payloads := ev.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()
	if len(payloads) == 0 {
		return fmt.Errorf("workflow %s has no input", id)
	}
	dc := c.DataConverter
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	if err := dc.FromPayload(payloads[0], v); err != nil {
		return fmt.Errorf("decode input of %s: %w", id, err)
	}
	return nil
}

// Teardown stops the cluster: TeardownCluster stops the supervisor, pauses the schedule,
// cancels a running deploy (its compensations remove what it started) and then removes
// every container of the cluster on every node. s may be nil, in which case the spec of the
// latest deploy is used, with the signature it carried (SignKey, when set, signs the spec
// torn down). A teardown already running with the same spec is joined; one with another
// spec is waited for, then this one runs (never a stale result).
func (c Controller) Teardown(ctx context.Context, cluster string, s *spec.Cluster) (workflows.TeardownResult, error) {
	var res workflows.TeardownResult
	id := contract.DeployWorkflowID(cluster)
	var in *contract.Intent
	if s != nil {
		in = c.sign(*s)
	} else {
		req, err := c.deployRequest(ctx, id, c.servingRunID(ctx, cluster))
		got := req.Spec.WithDefaults()
		in = req.Intent
		if c.SignKey != nil {
			in = c.sign(got)
		}
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
	tid := contract.TeardownWorkflowID(cluster)
	for {
		run, err := c.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID:                                       tid,
			TaskQueue:                                contract.WorkflowQueue,
			WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
			WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
			WorkflowExecutionErrorWhenAlreadyStarted: true,
			StaticSummary:                            "teardown " + cluster,
		}, workflows.TeardownCluster, workflows.TeardownRequest{Spec: *s, Intent: in})
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			running, rerr := c.teardownSpec(ctx, tid, started.RunId)
			join := c.Client.GetWorkflow(ctx, tid, started.RunId)
			if rerr == nil && running.Hash() == s.Hash() {
				if err := join.Get(ctx, &res); err != nil {
					return res, Reason(err)
				}
				return res, nil
			}
			_ = join.Get(ctx, nil) // another spec's teardown: wait for it, then run ours
			continue
		}
		if err != nil {
			return res, fmt.Errorf("start teardown of %s: %w", cluster, err)
		}
		if err := run.Get(ctx, &res); err != nil {
			return res, Reason(err)
		}
		return res, nil
	}
}

// teardownSpec reads the spec a teardown was started with.
func (c Controller) teardownSpec(ctx context.Context, id, runID string) (spec.Cluster, error) {
	var req workflows.TeardownRequest
	if err := c.firstInput(ctx, id, runID, &req); err != nil {
		return spec.Cluster{}, err
	}
	return req.Spec.WithDefaults(), nil
}

// Redeploy asks the cluster's supervisor for a redeploy now; it also re-arms a supervisor
// that gave up (degraded).
func (c Controller) Redeploy(ctx context.Context, cluster, reason string) error {
	err := c.Client.SignalWorkflow(ctx, contract.SuperviseWorkflowID(cluster), "", contract.SignalRedeploy, reason)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return fmt.Errorf("cluster %s has no running supervisor (it runs once a deploy served): deploy it with `starter deploy`", cluster)
	}
	if err != nil {
		return fmt.Errorf("signal the supervisor of %s: %w", cluster, err)
	}
	return nil
}

// Reason reduces a workflow failure to its one-line cause, with the error type the
// workflow classified it as: "PlacementMismatch: node-a: check placement: ...".
func Reason(err error) error {
	var app *temporal.ApplicationError
	var wee *temporal.WorkflowExecutionError
	if errors.As(err, &wee) {
		if errors.As(wee.Unwrap(), &app) {
			f := &Failure{Type: app.Type(), Message: app.Message()}
			var refused contract.StagedRefusal
			if app.HasDetails() && app.Details(&refused) == nil && refused.Serving.Serves() {
				f.Staged = &refused
			}
			return f
		}
		if temporal.IsCanceledError(wee.Unwrap()) {
			return &Failure{Type: contract.ErrCanceled, Message: "canceled"}
		}
		return &Failure{Type: contract.ErrWorkflowFailed, Message: wee.Unwrap().Error()}
	}
	return err
}

// Failure is a deploy's classified failure.
type Failure struct {
	Type    string
	Message string
	// Staged is set when the deploy was staged beside a serving deployment and failed
	// before it stopped anything: that deployment still serves.
	Staged *contract.StagedRefusal
}

func (f *Failure) Error() string { return f.Type + ": " + f.Message }
