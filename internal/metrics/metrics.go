// Package metrics names tpdeploy's own instruments and records them through the Temporal
// SDK's metrics handler, so they reach the same Prometheus endpoint as the SDK's own
// metrics (see Exporter) and are replay-safe when recorded from workflow code.
//
// From an activity: metrics.RecordStep(ctx, "ray-head", time.Since(start), err), or
// metrics.Activity(ctx).Shards(cluster, node, loaded, total). From a workflow:
// metrics.Workflow(ctx).Deploy(cluster, err) — the SDK drops records made while a workflow
// replays, so each is counted once. Outside an activity (a test calling an activity
// method directly) Activity records nothing.
//
// Prometheus shows counters with _total and durations with _seconds appended to the
// names below.
package metrics

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// Instrument names.
const (
	// Deploys counts finished deploys: labels cluster, outcome (served, failed,
	// canceled) and failure_type (the classified cause, e.g. PlacementMismatch; empty
	// when served). Prometheus: tpdeploy_deploys_total.
	Deploys = "tpdeploy_deploys"
	// StepDuration is how long each step took: labels step, outcome (ok, failed) and
	// failure_type. Prometheus: tpdeploy_step_duration_seconds (histogram).
	StepDuration = "tpdeploy_step_duration"
	// TimeToServing is the time from a deploy's start to a serving endpoint: label
	// cluster. Prometheus: tpdeploy_time_to_serving_seconds (histogram).
	TimeToServing = "tpdeploy_time_to_serving"
	// ShardsLoaded and ShardsExpected are vLLM's weight loading progress: labels cluster
	// and node. Prometheus: gauges of the same names.
	ShardsLoaded   = "tpdeploy_shards_loaded"
	ShardsExpected = "tpdeploy_shards_expected"
	// SupervisorHealthy is 1 while the cluster's supervisor last saw it serving, else 0:
	// label cluster. Prometheus: a gauge of the same name.
	SupervisorHealthy = "tpdeploy_supervisor_healthy"
	// Incidents counts what the supervisor acted on: labels cluster, node (empty for the
	// whole cluster) and cause (reboot, unhealthy, ...). Prometheus:
	// tpdeploy_supervisor_incidents_total.
	Incidents = "tpdeploy_supervisor_incidents"
	// ReachabilityPairs counts directed node pairs tested per subnet: labels subnet and
	// result (ok, failed). Prometheus: tpdeploy_reachability_pairs_total.
	ReachabilityPairs = "tpdeploy_reachability_pairs"
	// DataPlaneBusBW is the data-plane proof's measured NCCL all_reduce bus bandwidth in
	// GB/s: labels cluster and transport (IB, Socket, mixed). Prometheus: a gauge of the
	// same name; DataPlaneRDMA is 1 when every rank's NCCL used IB, else 0 (label cluster).
	DataPlaneBusBW = "tpdeploy_data_plane_busbw_gbs"
	DataPlaneRDMA  = "tpdeploy_data_plane_rdma"
	// DataPlaneLink is 1 when the proof saw NCCL use IB between the two nodes of a cable
	// of a switchless fabric (a triangle, a ring), else 0: labels cluster, link
	// ("node-a-node-b") and transport (IB, Socket, unseen). Prometheus: a gauge of the same
	// name; the per-hop bandwidth is DataPlaneBusBW (a ring all_reduce's bus bandwidth is
	// what each hop carries).
	DataPlaneLink = "tpdeploy_data_plane_link_rdma"
)

// Outcomes of a deploy and of a step.
const (
	OutcomeServed   = "served"
	OutcomeFailed   = "failed"
	OutcomeCanceled = "canceled"
	OutcomeOK       = "ok"
)

// Recorder records tpdeploy's instruments into one SDK metrics handler.
type Recorder struct {
	h client.MetricsHandler
}

// With records into h; nil records nothing.
func With(h client.MetricsHandler) Recorder {
	if h == nil {
		h = client.MetricsNopHandler
	}
	return Recorder{h: h}
}

// Activity records into the running activity's handler (the worker's, tagged with the
// activity type and task queue); outside an activity it records nothing.
func Activity(ctx context.Context) Recorder {
	if !activity.IsActivity(ctx) {
		return With(nil)
	}
	return With(activity.GetMetricsHandler(ctx))
}

// Workflow records into the workflow's handler, which skips records made during replay.
func Workflow(ctx workflow.Context) Recorder {
	return With(workflow.GetMetricsHandler(ctx))
}

// RecordStep records one step's duration and outcome from an activity.
func RecordStep(ctx context.Context, step string, d time.Duration, err error) {
	Activity(ctx).Step(step, d, err)
}

// Step records how long a step took and whether it failed.
func (r Recorder) Step(step string, d time.Duration, err error) {
	outcome := OutcomeOK
	if err != nil {
		outcome = OutcomeFailed
	}
	r.h.WithTags(map[string]string{"step": step, "outcome": outcome, "failure_type": FailureType(err)}).Timer(StepDuration).Record(d)
}

// Deploy counts a finished deploy: served when err is nil, canceled, or failed with its
// failure type.
func (r Recorder) Deploy(cluster string, err error) {
	outcome := OutcomeServed
	switch {
	case err == nil:
	case temporal.IsCanceledError(err) || errors.Is(err, context.Canceled):
		outcome = OutcomeCanceled
	default:
		outcome = OutcomeFailed
	}
	failure := FailureType(err)
	if outcome == OutcomeCanceled {
		failure = ""
	}
	r.h.WithTags(map[string]string{"cluster": cluster, "outcome": outcome, "failure_type": failure}).Counter(Deploys).Inc(1)
}

// TimeToServing records the time from a deploy's start to its serving endpoint.
func (r Recorder) TimeToServing(cluster string, d time.Duration) {
	r.h.WithTags(map[string]string{"cluster": cluster}).Timer(TimeToServing).Record(d)
}

// Shards records weight loading progress on a node.
func (r Recorder) Shards(cluster, node string, loaded, total int) {
	h := r.h.WithTags(map[string]string{"cluster": cluster, "node": node})
	h.Gauge(ShardsLoaded).Update(float64(loaded))
	h.Gauge(ShardsExpected).Update(float64(total))
}

// SupervisorState records whether the supervisor's last check saw the cluster serving.
func (r Recorder) SupervisorState(cluster string, healthy bool) {
	v := 0.0
	if healthy {
		v = 1
	}
	r.h.WithTags(map[string]string{"cluster": cluster}).Gauge(SupervisorHealthy).Update(v)
}

// DataPlane records the data-plane proof's outcome for a cluster.
func (r Recorder) DataPlane(cluster, transport string, busbwGBs float64) {
	if len(transport) > 5 && transport[:5] == "mixed" {
		transport = "mixed"
	}
	r.h.WithTags(map[string]string{"cluster": cluster, "transport": transport}).Gauge(DataPlaneBusBW).Update(busbwGBs)
	v := 0.0
	if transport == "IB" {
		v = 1
	}
	r.h.WithTags(map[string]string{"cluster": cluster}).Gauge(DataPlaneRDMA).Update(v)
}

// DataPlaneLink records the transport the proof saw on one cable of the data plane.
func (r Recorder) DataPlaneLink(cluster, link, transport string) {
	v := 0.0
	if transport == "IB" {
		v = 1
	}
	r.h.WithTags(map[string]string{"cluster": cluster, "link": link, "transport": transport}).Gauge(DataPlaneLink).Update(v)
}

// Incident counts one incident the supervisor acted on; node is empty for the cluster.
func (r Recorder) Incident(cluster, node, cause string) {
	r.h.WithTags(map[string]string{"cluster": cluster, "node": node, "cause": cause}).Counter(Incidents).Inc(1)
}

// Reachability counts the directed node pairs tested over a subnet.
func (r Recorder) Reachability(subnet string, ok, failed int) {
	if ok > 0 {
		r.h.WithTags(map[string]string{"subnet": subnet, "result": "ok"}).Counter(ReachabilityPairs).Inc(int64(ok))
	}
	if failed > 0 {
		r.h.WithTags(map[string]string{"subnet": subnet, "result": "failed"}).Counter(ReachabilityPairs).Inc(int64(failed))
	}
}

// FailureType is the label an error is counted under: an application error's type (the
// classified cause), Timeout, Canceled, Unknown for anything else, and "" for nil.
func FailureType(err error) string {
	var app *temporal.ApplicationError
	var timeout *temporal.TimeoutError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &app) && app.Type() != "":
		return app.Type()
	case errors.As(err, &timeout):
		return "Timeout"
	case temporal.IsCanceledError(err) || errors.Is(err, context.Canceled):
		return failure.Canceled
	}
	return "Unknown"
}
