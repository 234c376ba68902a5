package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/raygcs"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// TeardownRunning says whether the cluster's teardown runs (a deploy refuses to start
// then). It asks for the workflow by its one ID, which Temporal answers consistently.
func (c *Checks) TeardownRunning(ctx context.Context, req contract.ClusterRequest) (contract.ClusterBusy, error) {
	id := contract.TeardownWorkflowID(req.Cluster)
	//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
	desc, err := c.Controller.Client.DescribeWorkflowExecution(ctx, id, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return contract.ClusterBusy{}, nil
	}
	if err != nil {
		return contract.ClusterBusy{}, fmt.Errorf("describe %s: %w", id, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	return contract.ClusterBusy{Running: info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		WorkflowID: id, RunID: info.GetExecution().GetRunId()}, nil
}

// PauseSchedule pauses the cluster's redeploy schedule so its next run does not deploy
// what is being torn down; a cluster without a schedule is fine.
func (c *Checks) PauseSchedule(ctx context.Context, req contract.PauseRequest) (string, error) {
	h := c.Controller.Client.ScheduleClient().GetHandle(ctx, ScheduleID(req.Cluster))
	err := h.Pause(ctx, client.SchedulePauseOptions{Note: req.Note})
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) || (err != nil && strings.Contains(err.Error(), "not found")) {
		return "no schedule", nil
	}
	if err != nil {
		return "", fmt.Errorf("pause schedule %s: %w", ScheduleID(req.Cluster), err)
	}
	return "schedule " + ScheduleID(req.Cluster) + " paused", nil
}

// WaitClosed waits, heartbeating, until the latest run of a workflow ID is closed (a
// cancelled deploy has run its compensations). A workflow that does not exist is closed.
func (c *Checks) WaitClosed(ctx context.Context, req contract.WaitRequest) (string, error) {
	for {
		//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
		desc, err := c.Controller.Client.DescribeWorkflowExecution(ctx, req.WorkflowID, "")
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			return "not found", nil
		}
		if err != nil {
			return "", fmt.Errorf("describe %s: %w", req.WorkflowID, err)
		}
		if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return closedName(st), nil
		}
		activity.RecordHeartbeat(ctx, "running")
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// WatchCluster checks the cluster every Every — the endpoint serves the model, and every
// planned node is alive in Ray under its address (read from the GCS) — and, with a canary,
// sends one tiny completion every Canary.Every (control/canary.go); it returns only when
// Unhealthy checks in a row failed, Canary.Failures canaries in a row did (EngineWedged),
// or after For of health, heartbeating meanwhile. The supervisor thus writes a few history
// events per For, not per check. A check that cannot be made (Temporal or Ray's GCS not
// answering) counts as neither.
func (c *Checks) WatchCluster(ctx context.Context, req contract.WatchClusterRequest) (contract.ClusterHealth, error) {
	var cache watchCache
	return c.watch(ctx, req, func(ctx context.Context) (Status, string, error) {
		return c.watched(ctx, req.Cluster, &cache)
	})
}

// WatchTarget is WatchCluster of one run the controller read (DeployTarget): on the head's
// agent of a keyed cluster, with no Temporal call. That a deploy began meanwhile is the
// supervisor's to learn from the controller when this returns.
func (c *Checks) WatchTarget(ctx context.Context, req contract.WatchTargetRequest) (contract.ClusterHealth, error) {
	if !req.Target.Exists {
		return contract.ClusterHealth{}, fmt.Errorf("cluster %s: no deploy to watch: %s", req.Cluster, req.Target.Detail)
	}
	st := targetStatus(req.Target)
	return c.watch(ctx, req.WatchClusterRequest, func(context.Context) (Status, string, error) {
		return st, req.Target.Beside, nil
	})
}

// watch is WatchCluster's loop over the run next says is watched at each check.
func (c *Checks) watch(ctx context.Context, req contract.WatchClusterRequest, next func(context.Context) (Status, string, error)) (contract.ClusterHealth, error) {
	every := max(req.Every, time.Second)
	end := time.Now().Add(req.For)
	var h contract.ClusterHealth
	failures := 0
	cn := newCanary(req.Canary)
	var results <-chan canaryResult
	if cn != nil {
		cctx, stop := context.WithCancel(ctx)
		defer stop()
		go cn.run(cctx)
		results = cn.results
	}
	canaryFails, unanswered := 0, false
	for {
		h.Checks++
		h.LastCheck = time.Now()
		st, beside, err := next(ctx)
		switch {
		case err != nil:
			h.Detail = "check not made: " + err.Error()
		case st.Running:
			failures, h.Healthy, h.Deploying, h.Detail = 0, true, true, "a deploy is running"
			cn.aim(nil)
			canaryFails, unanswered = 0, false
		default:
			h.Deploying = false
			if ep, err := servingEndpoint(st); err == nil {
				cn.aim(&canaryTarget{endpoint: ep, served: st.Spec.Model.ServedName, key: c.endpointKey(st, ep)})
			} else {
				cn.aim(nil)
			}
			if detail, ok := c.serves(ctx, st); ok {
				failures, h.Healthy, h.Detail = 0, true, detail+beside
			} else {
				failures++
				h.Healthy, h.Detail = false, detail+beside
			}
		}
		activity.RecordHeartbeat(ctx, h)
		if failures >= max(req.Unhealthy, 1) {
			h.Detail = fmt.Sprintf("not serving for %d checks: %s", failures, h.Detail)
			return h, nil
		}
		if !time.Now().Before(end) {
			return h, nil
		}
		tick := time.After(every)
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return h, ctx.Err()
			case <-tick:
				waiting = false
			case r := <-results:
				if h.Deploying {
					continue // aimed before the deploy began
				}
				if r.ok {
					canaryFails, unanswered = 0, false
					h.Canary = "answered: " + r.detail
				} else {
					canaryFails++
					unanswered = unanswered || r.timedOut
					h.Canary = fmt.Sprintf("%d of %d in a row failed: %s", canaryFails, cn.req.Failures, r.detail)
				}
				activity.RecordHeartbeat(ctx, h)
				if canaryFails >= cn.req.Failures {
					h.Healthy = false
					if unanswered {
						h.Cause = contract.IncidentEngineWedged
						h.Detail = fmt.Sprintf("%s: %d canary completions in a row failed (last: %s) while the endpoint answers /health and /v1/models (%s)",
							contract.IncidentEngineWedged, canaryFails, r.detail, h.Detail)
					} else {
						h.Detail = fmt.Sprintf("%d canary completions in a row failed: %s", canaryFails, r.detail)
					}
					return h, nil
				}
			}
		}
	}
}

// ServingDeployment says which deploy run serves the cluster now: the one its supervisor
// (which runs once a deploy served, until a teardown) last saw reach serving, if its
// endpoint answers the readiness check. A deploy of another spec stages beside it
// (workflows/stage.go). The supervisor is asked by query, which a running workflow answers
// consistently; visibility, which lags, is not used.
func (c *Checks) ServingDeployment(ctx context.Context, req contract.ServingRequest) (contract.ServingDeployment, error) {
	sid := contract.SuperviseWorkflowID(req.Cluster)
	//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
	desc, err := c.Controller.Client.DescribeWorkflowExecution(ctx, sid, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return contract.ServingDeployment{Detail: "no supervisor: the cluster never served"}, nil
	}
	if err != nil {
		return contract.ServingDeployment{}, fmt.Errorf("describe %s: %w", sid, err)
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return contract.ServingDeployment{Detail: "the supervisor ended (torn down)"}, nil
	}
	q, err := c.Controller.Client.QueryWorkflow(ctx, sid, "", contract.QuerySupervision)
	if err != nil {
		return contract.ServingDeployment{}, fmt.Errorf("query %s: %w", sid, err)
	}
	var sv workflows.Supervision
	if err := q.Get(&sv); err != nil {
		return contract.ServingDeployment{}, fmt.Errorf("decode the supervision of %s: %w", req.Cluster, err)
	}
	if sv.Serving == nil || !sv.Serving.Serves() {
		return contract.ServingDeployment{Detail: "the supervisor knows of no serving deploy", Supervised: true}, nil
	}
	st, err := c.Controller.run(ctx, req.Cluster, sv.Serving.RunID)
	if err != nil {
		return contract.ServingDeployment{Detail: err.Error(), Supervised: true}, nil
	}
	if st.Result == nil {
		return contract.ServingDeployment{Detail: "deploy run " + sv.Serving.RunID + " ended " + st.Closed, Supervised: true}, nil
	}
	srv := *sv.Serving
	if req.Unchecked {
		t := checkTarget(st, "")
		srv.Target = &t
	} else {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := c.ready(rctx, st, st.Result.Endpoint); err != nil {
			return contract.NotServing(sv.Serving.RunID, err.Error()), nil
		}
	}
	srv.Executor = spec.ExecutorMP
	if st.Result.Plan.RayAddress != "" {
		srv.Executor = spec.ExecutorRay
	}
	if st.Spec != nil {
		for _, n := range st.Spec.Nodes {
			srv.Nodes = append(srv.Nodes, contract.ServingNode{Name: n.Name, Role: n.Role, DockerHost: n.DockerHost})
		}
	}
	return srv, nil
}

// stagedBeside is the serving run's status while the running deploy st is staged beside
// it and has not swapped yet (its state query says so); cached, by run ID, in cached.
func (c *Checks) stagedBeside(ctx context.Context, cluster string, st Status, cached *Status) (Status, bool) {
	q, err := c.Controller.Client.QueryWorkflow(ctx, st.WorkflowID, st.RunID, contract.QueryState)
	if err != nil {
		return Status{}, false
	}
	var state workflows.State
	if q.Get(&state) != nil || state.Staged == nil || !state.Staged.SwappedAt.IsZero() {
		return Status{}, false
	}
	run := state.Staged.Serving.RunID
	if cached.RunID != run {
		srv, err := c.Controller.run(ctx, cluster, run)
		if err != nil || srv.Result == nil {
			return Status{}, false
		}
		*cached = srv
	}
	return *cached, true
}

// serves checks a completed deploy's endpoint and its Ray nodes.
func (c *Checks) serves(ctx context.Context, st Status) (string, bool) {
	if st.Result == nil {
		return "latest deploy ended " + st.Closed, false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	endpoint, err := servingEndpoint(st)
	if err != nil {
		return err.Error(), false
	}
	if err := c.ready(ctx, st, endpoint); err != nil {
		return err.Error(), false
	}
	plan := st.Result.Plan
	if plan.RayAddress == "" {
		return "serving at " + st.Result.Endpoint, true
	}
	nodes, err := raygcs.NodesAt(ctx, plan.RayAddress)
	if err != nil {
		// Ray's GCS not answering from here says nothing the endpoint did not.
		return "serving at " + st.Result.Endpoint + "; ray not checked: " + err.Error(), true
	}
	need := 0
	if st.Spec != nil {
		need = st.Spec.WorldSize()
	}
	if err := raygcs.Health(plan, need, nodes); err != nil {
		return "ray: " + err.Error(), false
	}
	return fmt.Sprintf("serving at %s; ray: %d nodes alive", st.Result.Endpoint, len(plan.Nodes)), true
}

// runIntent reads the operator's signature that the run of workflow id (a deploy, or with
// teardown a teardown) was started with (nil: unsigned), and, when VerifyRemoval is set,
// checks it is of a spec of cluster.
func (c Controller) runIntent(ctx context.Context, cluster, id, runID string, teardown bool) (*contract.Intent, error) {
	var in *contract.Intent
	if teardown {
		var req workflows.TeardownRequest
		if err := c.firstInput(ctx, id, runID, &req); err != nil {
			return nil, err
		}
		in = req.Intent
	} else {
		req, err := c.deployRequest(ctx, id, runID)
		if err != nil {
			return nil, err
		}
		in = req.Intent
	}
	if c.VerifyRemoval != nil {
		if err := c.VerifyRemoval(in, cluster); err != nil {
			return nil, fmt.Errorf("%s run %s is not an operator's for %s, so its containers are left alone: %w", id, runID, cluster, err)
		}
	}
	return in, nil
}

// Wanted is what a node agent reconciles against (activities.Reconcile): which of a
// cluster's containers its serving deployment holds, or that an operation owns them now,
// or that nothing is known of the cluster.
func (c Controller) Wanted(ctx context.Context, cluster string) (keep map[string]bool, running, known bool, err error) {
	w, err := c.wanted(ctx, cluster)
	if err != nil {
		return nil, false, false, err
	}
	if !w.Known || w.Running {
		return nil, w.Running, w.Known, nil
	}
	keep = map[string]bool{}
	for _, id := range w.Keep {
		keep[id] = true
	}
	return keep, false, true, nil
}

// NodeWanted is Wanted as the controller answers it for a node's start-up reconcile
// (workflows.NodeStarted): with the signature of the run it read, which the node checks
// against its own trusted_keys before it removes anything (contract.ReconcileRequest).
func (c *Checks) NodeWanted(ctx context.Context, req contract.WantedRequest) (contract.Wanted, error) {
	return c.Controller.wanted(ctx, req.Cluster)
}

func (c Controller) wanted(ctx context.Context, cluster string) (contract.Wanted, error) {
	did := contract.DeployWorkflowID(cluster)
	//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
	desc, err := c.Client.DescribeWorkflowExecution(ctx, did, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return contract.Wanted{}, nil
	}
	if err != nil {
		return contract.Wanted{}, fmt.Errorf("describe %s: %w", did, err)
	}
	deploy := desc.GetWorkflowExecutionInfo()
	if deploy.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return contract.Wanted{Known: true, Running: true, Run: deploy.GetExecution().GetRunId()}, nil
	}
	//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
	if td, err := c.Client.DescribeWorkflowExecution(ctx, contract.TeardownWorkflowID(cluster), ""); err == nil {
		info := td.GetWorkflowExecutionInfo()
		if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return contract.Wanted{Known: true, Running: true, Run: info.GetExecution().GetRunId()}, nil
		}
		if info.GetStartTime().AsTime().After(deploy.GetCloseTime().AsTime()) {
			// Torn down after the latest deploy — by an operator, when the node requires it.
			in, err := c.runIntent(ctx, cluster, contract.TeardownWorkflowID(cluster), info.GetExecution().GetRunId(), true)
			if err != nil {
				return contract.Wanted{}, err
			}
			return contract.Wanted{Known: true, Intent: in, Run: info.GetExecution().GetRunId()}, nil
		}
	}
	serving := deploy.GetExecution().GetRunId()
	// What the latest deploy says stays (or that nothing does, when it failed) is acted on
	// only for a deploy an operator signed, when the node requires it. Its result is not
	// signed: docs/security.md ("what one compromised party can still do") says what that leaves.
	in, err := c.runIntent(ctx, cluster, did, serving, false)
	if err != nil {
		return contract.Wanted{}, err
	}
	w := contract.Wanted{Known: true, Intent: in, Run: serving}
	if deploy.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		// The latest deploy failed: none of its containers is current — unless it was
		// staged and refused before the swap, when the deployment it ran beside still
		// serves, with its containers.
		refused := c.refusalOf(ctx, cluster, serving)
		if refused == nil {
			return w, nil
		}
		serving = refused.Serving.RunID
	}
	var res workflows.DeployResult
	if err := c.Client.GetWorkflow(ctx, did, serving).Get(ctx, &res); err != nil {
		return contract.Wanted{}, fmt.Errorf("result of %s run %s: %w", did, serving, err)
	}
	w.Keep = []string{}
	for _, ref := range res.Containers {
		w.Keep = append(w.Keep, ref.ID)
	}
	return w, nil
}

// ReportNodeBoot tells every running supervisor and deploy a node's boot ID (the signal
// SignalNodeBooted): one that knew another ID learns the node rebooted (a supervisor
// redeploys, a deploy starts over); those of clusters without the node ignore it. It runs
// on the controller for the agent's start-up (workflows.NodeStarted), so the agent itself
// neither lists nor signals workflows. It returns the workflow IDs it told.
func (c *Checks) ReportNodeBoot(ctx context.Context, boot contract.NodeBoot) ([]string, error) {
	query := "WorkflowType IN ('SuperviseCluster', 'DeployCluster') AND ExecutionStatus = 'Running'"
	told := []string{}
	var token []byte
	for {
		resp, err := c.Controller.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return told, fmt.Errorf("list running supervisors and deploys: %w", err)
		}
		for _, e := range resp.Executions {
			id := e.GetExecution().GetWorkflowId()
			err := c.Controller.Client.SignalWorkflow(ctx, id, "", contract.SignalNodeBooted, boot)
			var notFound *serviceerror.NotFound
			switch {
			case errors.As(err, &notFound):
				// Ended since the list: nothing to tell.
			case err != nil:
				return told, fmt.Errorf("signal %s of %s's boot: %w", id, boot.Node, err)
			default:
				told = append(told, id)
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return told, nil
		}
	}
}
