package control

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/searchattr"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// ScheduleID is the ID of a cluster's redeploy schedule: one per cluster.
func ScheduleID(cluster string) string { return "tpdeploy-schedule-" + cluster }

const schedulePrefix = "tpdeploy-schedule-"

// When is how often a schedule fires: an interval or cron expressions.
type When struct {
	Every time.Duration
	Cron  string
}

func (w When) spec() (client.ScheduleSpec, error) {
	switch {
	case w.Every > 0 && w.Cron != "":
		return client.ScheduleSpec{}, errors.New("give --every or --cron, not both")
	case w.Every > 0:
		return client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: w.Every}}}, nil
	case w.Cron != "":
		return client.ScheduleSpec{CronExpressions: []string{w.Cron}}, nil
	}
	return client.ScheduleSpec{}, errors.New("give --every DURATION or --cron 'EXPRESSION'")
}

func (c Controller) redeployAction(s spec.Cluster) *client.ScheduleWorkflowAction {
	return &client.ScheduleWorkflowAction{
		ID:                    contract.RedeployWorkflowID(s.Name),
		Workflow:              workflows.RedeployCluster,
		Args:                  []any{workflows.RedeployRequest{Spec: s, Trigger: "schedule", Intent: c.sign(s)}},
		TaskQueue:             contract.WorkflowQueue,
		WorkflowRunTimeout:    s.Timeouts.Serving.D() + 15*time.Minute,
		TypedSearchAttributes: temporal.NewSearchAttributes(searchattr.ClusterName.ValueSet(s.Name)),
	}
}

// Schedule creates the cluster's redeploy schedule, or updates its timing and spec when
// it exists (created=false). Runs that would overlap a running one are skipped, and a
// failed redeploy pauses the schedule until someone looks.
func (c Controller) Schedule(ctx context.Context, s spec.Cluster, w When) (created bool, err error) {
	ss, err := w.spec()
	if err != nil {
		return false, err
	}
	sc := c.Client.ScheduleClient()
	_, err = sc.Create(ctx, client.ScheduleOptions{
		ID: ScheduleID(s.Name), Spec: ss, Action: c.redeployAction(s),
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, PauseOnFailure: true,
		Note: "created by starter schedule create",
	})
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return false, fmt.Errorf("create schedule %s: %w", ScheduleID(s.Name), err)
	}
	err = sc.GetHandle(ctx, ScheduleID(s.Name)).Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			sched := in.Description.Schedule
			sched.Spec = &ss
			sched.Action = c.redeployAction(s)
			return &client.ScheduleUpdate{Schedule: &sched}, nil
		},
	})
	if err != nil {
		return false, fmt.Errorf("update schedule %s: %w", ScheduleID(s.Name), err)
	}
	return false, nil
}

// ScheduleEntry is one cluster's schedule as `starter schedule list` shows it.
type ScheduleEntry struct {
	Cluster    string    `json:"cluster"`
	ID         string    `json:"id"`
	When       string    `json:"when"`
	Paused     bool      `json:"paused"`
	Note       string    `json:"note,omitempty"`
	NextRun    time.Time `json:"next_run,omitzero"`
	LastRun    time.Time `json:"last_run,omitzero"`
	LastWorkID string    `json:"last_workflow_id,omitempty"`
}

// Schedules lists tpdeploy's schedules.
func (c Controller) Schedules(ctx context.Context) ([]ScheduleEntry, error) {
	it, err := c.Client.ScheduleClient().List(ctx, client.ScheduleListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	var out []ScheduleEntry
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		cluster, ok := strings.CutPrefix(e.ID, schedulePrefix)
		if !ok {
			continue
		}
		entry := ScheduleEntry{Cluster: cluster, ID: e.ID, Paused: e.Paused, Note: e.Note, When: describeSpec(e.Spec)}
		next, recent := e.NextActionTimes, e.RecentActions
		// The list comes from visibility, which lags: a pause, an unpause or a delete just
		// made may not show yet. The schedule's own description is current.
		d, err := c.Client.ScheduleClient().GetHandle(ctx, e.ID).Describe(ctx)
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
			continue // deleted meanwhile
		case err == nil:
			if st := d.Schedule.State; st != nil {
				entry.Paused, entry.Note = st.Paused, st.Note
			}
			entry.When = describeSpec(d.Schedule.Spec)
			next, recent = d.Info.NextActionTimes, d.Info.RecentActions
		}
		if len(next) > 0 {
			entry.NextRun = next[0]
		}
		if n := len(recent); n > 0 {
			last := recent[n-1]
			entry.LastRun = last.ActualTime
			if last.StartWorkflowResult != nil {
				entry.LastWorkID = last.StartWorkflowResult.WorkflowID
			}
		}
		out = append(out, entry)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster < out[j].Cluster })
	return out, nil
}

func describeSpec(s *client.ScheduleSpec) string {
	if s == nil {
		return ""
	}
	var parts []string
	for _, i := range s.Intervals {
		parts = append(parts, "every "+i.Every.String())
	}
	for _, c := range s.CronExpressions {
		parts = append(parts, "cron "+c)
	}
	if len(parts) == 0 && len(s.Calendars) > 0 {
		parts = append(parts, fmt.Sprintf("%d calendar specs", len(s.Calendars)))
	}
	return strings.Join(parts, ", ")
}

// PauseSchedule stops a cluster's schedule from firing.
func (c Controller) PauseSchedule(ctx context.Context, cluster, note string) error {
	return c.scheduleOp(ctx, cluster, "pause", func(h client.ScheduleHandle) error {
		return h.Pause(ctx, client.SchedulePauseOptions{Note: note})
	})
}

// UnpauseSchedule lets a paused schedule fire again.
func (c Controller) UnpauseSchedule(ctx context.Context, cluster, note string) error {
	return c.scheduleOp(ctx, cluster, "unpause", func(h client.ScheduleHandle) error {
		return h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: note})
	})
}

// DeleteSchedule removes a cluster's schedule (its running trigger, if any, finishes).
func (c Controller) DeleteSchedule(ctx context.Context, cluster string) error {
	return c.scheduleOp(ctx, cluster, "delete", func(h client.ScheduleHandle) error { return h.Delete(ctx) })
}

func (c Controller) scheduleOp(ctx context.Context, cluster, op string, fn func(client.ScheduleHandle) error) error {
	h := c.Client.ScheduleClient().GetHandle(ctx, ScheduleID(cluster))
	if err := fn(h); err != nil {
		return fmt.Errorf("%s schedule of %s (%s): %w", op, cluster, ScheduleID(cluster), err)
	}
	return nil
}
