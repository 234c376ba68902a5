//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/lab"
	"github.com/tpdeploy/tpdeploy/workflows"
)

func teardown(t *testing.T, cluster string) {
	t.Helper()
	if _, err := (control.Controller{Client: tc, SignKey: theLab.SignKey}).Teardown(context.Background(), cluster, nil); err != nil {
		t.Errorf("teardown: %v", err)
	}
}

func supervision(t *testing.T, cluster string) (workflows.Supervision, bool) {
	v, err := tc.QueryWorkflow(context.Background(), contract.SuperviseWorkflowID(cluster), "", contract.QuerySupervision)
	if err != nil {
		return workflows.Supervision{}, false
	}
	var sv workflows.Supervision
	return sv, v.Get(&sv) == nil
}

func endpointServes(t *testing.T, s spec.Cluster) error {
	return control.CheckEndpoint(context.Background(), fmt.Sprintf("http://%s:%d", theLab.Nodes[0].Fast, s.Ports.VLLM), s.Model.ServedName, "")
}

// `docker restart node-b` while serving: the supervisor notices (node-b's agent reports a
// new boot ID), redeploys, and the cluster serves again; the incident is recorded.
func TestRebootedNodeRecovers(t *testing.T) {
	s := labSpec(t, "e2e-reboot")
	deployServing(t, s)
	defer teardown(t, s.Name)
	eventually(t, 30*time.Second, "supervisor knows both boot IDs", func() bool {
		sv, ok := supervision(t, s.Name)
		return ok && sv.BootIDs["node-a"] != "" && sv.BootIDs["node-b"] != ""
	})
	before, _ := supervision(t, s.Name)
	restarted := time.Now()
	if _, err := eng.ContainerRestart(context.Background(), theLab.Nodes[1].Container, client.ContainerRestartOptions{}); err != nil {
		t.Fatal(err)
	}
	var inc workflows.Incident
	eventually(t, 3*time.Minute, "an incident on node-b, recovered", func() bool {
		sv, _ := supervision(t, s.Name)
		for _, i := range sv.Incidents {
			if i.Node == "node-b" && i.Outcome == workflows.OutcomeServing {
				inc = i
				return true
			}
		}
		return false
	})
	t.Logf("incident: noticed %.1fs after the restart began, serving again after %s: %s -> %s",
		inc.At.Sub(restarted).Seconds(), inc.Took.Round(time.Millisecond), inc.Seen, inc.Action)
	if !strings.Contains(inc.Seen, "boot ID changed "+before.BootIDs["node-b"][:8]) {
		t.Errorf("incident %q does not name node-b's old boot ID %s", inc.Seen, before.BootIDs["node-b"])
	}
	if noticed := inc.At.Sub(restarted); noticed > 15*time.Second {
		t.Errorf("noticed after %s; the supervisor must notice a reboot within 15 s", noticed)
	}
	if err := endpointServes(t, s); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	out, code := runStarter(t, "status", s.Name)
	if code != 0 || !strings.Contains(out, "incident ") || !strings.Contains(out, "node-b: boot ID changed") {
		t.Errorf("starter status (exit %d) does not show the incident:\n%s", code, out)
	}
}

// recentTriggers returns the results of the schedule's runs, oldest first.
func recentTriggers(t *testing.T, cluster string) []workflows.RedeployResult {
	d, err := tc.ScheduleClient().GetHandle(context.Background(), control.ScheduleID(cluster)).Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []workflows.RedeployResult
	for _, a := range d.Info.RecentActions {
		if a.StartWorkflowResult == nil {
			continue
		}
		var r workflows.RedeployResult
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := tc.GetWorkflow(ctx, a.StartWorkflowResult.WorkflowID, a.StartWorkflowResult.FirstExecutionRunID).Get(ctx, &r)
		cancel()
		if err != nil {
			t.Fatalf("trigger %s: %v", a.StartWorkflowResult.WorkflowID, control.Reason(err))
		}
		out = append(out, r)
	}
	return out
}

// A schedule fires on a healthy unchanged deployment (a recorded no-op), then, after the
// spec changed, redeploys it.
func TestScheduleNoopThenRedeploy(t *testing.T) {
	s := labSpec(t, "e2e-sched")
	deployServing(t, s)
	defer teardown(t, s.Name)
	ctl := control.Controller{Client: tc, SignKey: theLab.SignKey}
	if created, err := ctl.Schedule(context.Background(), s, control.When{Every: 4 * time.Second}); err != nil || !created {
		t.Fatalf("schedule: created %v, %v", created, err)
	}
	defer func() { _ = ctl.DeleteSchedule(context.Background(), s.Name) }()
	eventually(t, time.Minute, "a first scheduled run", func() bool { return len(recentTriggers(t, s.Name)) > 0 })
	first := recentTriggers(t, s.Name)[0]
	if first.Action != workflows.RedeployNoop {
		t.Fatalf("first scheduled run = %+v, want a no-op on the unchanged serving deployment", first)
	}

	changed := s
	changed.Model.ExtraArgs = []string{"--max-model-len", "2048"}
	if created, err := ctl.Schedule(context.Background(), changed, control.When{Every: 4 * time.Second}); err != nil || created {
		t.Fatalf("schedule update: created %v, %v", created, err)
	}
	var redeployed workflows.RedeployResult
	eventually(t, 2*time.Minute, "a scheduled redeploy of the changed spec", func() bool {
		for _, r := range recentTriggers(t, s.Name) {
			if r.Action == workflows.RedeployDeployed {
				redeployed = r
				return true
			}
		}
		return false
	})
	if !strings.HasPrefix(redeployed.Reason, "spec changed") {
		t.Errorf("redeploy reason %q", redeployed.Reason)
	}
	if err := endpointServes(t, changed); err != nil {
		t.Fatal(err)
	}
	if got := maxModelLen(t, changed); got != 2048 {
		t.Errorf("max_model_len %d: the running vllm was adopted although its command changed", got)
	}
	if got := containersOf(t, s.Name); len(got) != 2 {
		t.Errorf("containers %v, want the ray head and worker", got)
	}

	// The operator's side of it, through the real starter.
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"schedule", "list"}, s.Name + "  every 4s  active"},
		{[]string{"schedule", "pause", s.Name, "--note", "maintenance"}, "schedule of " + s.Name + ": paused"},
		{[]string{"schedule", "list"}, "paused (maintenance)"},
		{[]string{"schedule", "unpause", s.Name}, "unpaused"},
		{[]string{"schedule", "list"}, "every 4s  active"},
		{[]string{"schedule", "delete", s.Name}, "deleted"},
	} {
		out, code := runStarter(t, step.args...)
		if code != 0 || !strings.Contains(out, step.want) {
			t.Errorf("starter %v (exit %d):\n%s\nwant %q", step.args, code, out, step.want)
		}
	}
	if out, _ := runStarter(t, "schedule", "list"); strings.Contains(out, s.Name) {
		t.Errorf("deleted schedule still listed:\n%s", out)
	}
}

// maxModelLen is what the serving vLLM reports for the served model in /v1/models.
func maxModelLen(t *testing.T, s spec.Cluster) int {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s:%d/v1/models", theLab.Nodes[0].Fast, s.Ports.VLLM))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var models struct {
		Data []struct {
			ID     string `json:"id"`
			MaxLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil || len(models.Data) != 1 {
		t.Fatalf("/v1/models: %+v %v", models, err)
	}
	return models.Data[0].MaxLen
}

// A schedule, a UI-style start and a recovery firing together make exactly one deploy.
func TestConcurrentTriggersMakeOneDeploy(t *testing.T) {
	s := labSpec(t, "e2e-race")
	deployServing(t, s)
	defer teardown(t, s.Name)
	eventually(t, 30*time.Second, "the supervisor runs", func() bool { _, ok := supervision(t, s.Name); return ok })
	changed := s
	changed.Model.ExtraArgs = []string{"--max-model-len", "1024"}
	ctl := control.Controller{Client: tc, SignKey: theLab.SignKey}
	if _, err := ctl.Schedule(context.Background(), changed, control.When{Every: time.Hour}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ctl.DeleteSchedule(context.Background(), s.Name) }()
	time.Sleep(time.Second) // visibility: the start time below must follow the first deploy's
	t0 := time.Now().UTC()

	ctx := context.Background()
	errs := make(chan error, 3)
	go func() {
		errs <- tc.ScheduleClient().GetHandle(ctx, control.ScheduleID(s.Name)).Trigger(ctx, tclient.ScheduleTriggerOptions{})
	}()
	go func() {
		// What the UI's Start Workflow form does: DeployCluster under the cluster's ID.
		_, err := tc.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{ID: contract.DeployWorkflowID(s.Name), TaskQueue: "tpdeploy"},
			workflows.DeployCluster, workflows.DeployRequest{Spec: changed, Trigger: "ui", Intent: theLab.Sign(changed)})
		errs <- err
	}()
	go func() {
		errs <- tc.SignalWorkflow(ctx, contract.SuperviseWorkflowID(s.Name), "", contract.SignalRedeploy, "test")
	}()
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Logf("trigger refused: %v", err) // the UI start may find a deploy running: that is the point
		}
	}
	// Let every trigger settle: the schedule's run ends, the supervisor records its incident.
	eventually(t, 2*time.Minute, "the supervisor recorded the requested redeploy", func() bool {
		sv, _ := supervision(t, s.Name)
		return len(sv.Incidents) > 0
	})
	eventually(t, 2*time.Minute, "the scheduled run ended", func() bool { return len(recentTriggers(t, s.Name)) > 0 })
	query := fmt.Sprintf("WorkflowId = '%s' AND StartTime > '%s'", contract.DeployWorkflowID(s.Name), t0.Format(time.RFC3339Nano))
	var runs []string
	eventually(t, 30*time.Second, "visibility shows the deploy", func() bool {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil {
			t.Fatal(err)
		}
		runs = runs[:0]
		for _, e := range resp.Executions {
			runs = append(runs, e.GetExecution().GetRunId())
		}
		return len(runs) > 0
	})
	time.Sleep(2 * time.Second)
	resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Executions) != 1 {
		t.Fatalf("%d deploys started by the three triggers, want exactly one", len(resp.Executions))
	}
	sv, _ := supervision(t, s.Name)
	t.Logf("one deploy; schedule: %+v; supervisor: %+v", recentTriggers(t, s.Name), sv.Incidents)
}

// Every lab agent, and the lab's controller, serves /healthz and Prometheus metrics; after a
// deploy, the controller, which ran its workflow tasks, and the agents, which ran its steps,
// export tpdeploy's own instruments for it.
func TestAgentsExportDeployMetrics(t *testing.T) {
	s := labSpec(t, "e2e-metrics")
	deployServing(t, s)
	defer teardown(t, s.Name)
	// The supervisor's health is current in `starter status` from its watch's heartbeat,
	// long before the watch reports to the workflow.
	eventually(t, 45*time.Second, "starter status shows the supervisor's last check", func() bool {
		out, code := runStarter(t, "status", s.Name)
		return code == 0 && strings.Contains(out, "supervisor: serving at last check")
	})
	var all strings.Builder
	scraped := append(slices.Clone(theLab.Nodes), lab.Node{Name: "controller", Mgmt: theLab.ControllerMgmt})
	for _, n := range scraped {
		base := fmt.Sprintf("http://%s:%d", n.Mgmt, lab.MetricsPort)
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s /healthz: %d", n.Name, resp.StatusCode)
		}
		resp, err = http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		all.Write(b)
	}
	for _, want := range []string{
		`tpdeploy_deploys_total{`, `tpdeploy_time_to_serving_seconds_count{`, `cluster="e2e-metrics"`,
		`tpdeploy_step_duration_seconds_count{`, `step="probing"`, `tpdeploy_reachability_pairs_total{`,
		"temporal_", // the SDK's own
	} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("the agents' and the controller's metrics lack %q", want)
		}
	}
}
