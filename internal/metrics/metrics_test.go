package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/metrics"
)

// serve starts the agent's endpoint on a free loopback port.
func serve(t *testing.T) (*metrics.Exporter, *metrics.Liveness, string) {
	t.Helper()
	e, err := metrics.NewExporter()
	if err != nil {
		t.Fatal(err)
	}
	live := &metrics.Liveness{}
	srv, err := metrics.Serve("127.0.0.1:0", e, live)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		_ = e.Shutdown(ctx)
	})
	return e, live, "http://" + srv.Addr()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func wantLines(t *testing.T, body string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(body, l) {
			t.Errorf("scrape lacks %q", l)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", tpdeployLines(body))
	}
}

func tpdeployLines(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, "tpdeploy_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestScrapeShowsRecordedInstruments(t *testing.T) {
	e, _, base := serve(t)
	r := metrics.With(e.Handler)
	r.Step("ray-head", 1500*time.Millisecond, nil)
	r.Step("placement", 2*time.Second, temporal.NewNonRetryableApplicationError("node-a registered as ...", "PlacementMismatch", nil))
	r.Deploy("lab", nil)
	r.Deploy("lab", temporal.NewNonRetryableApplicationError("x", "NoViableSubnet", nil))
	r.Deploy("lab", temporal.NewCanceledError())
	r.TimeToServing("lab", 7470*time.Millisecond)
	r.Shards("lab", "node-a", 8, 39)
	r.SupervisorState("lab", true)
	r.SupervisorState("other", false)
	r.Incident("lab", "node-b", "reboot")
	r.Reachability("192.168.200.0/24", 2, 0)
	r.Reachability("10.230.1.0/24", 0, 2)

	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	wantLines(t, body,
		`tpdeploy_step_duration_seconds_bucket{failure_type="",outcome="ok",step="ray-head",le="2.5"} 1`,
		`tpdeploy_step_duration_seconds_bucket{failure_type="",outcome="ok",step="ray-head",le="1"} 0`,
		`tpdeploy_step_duration_seconds_count{failure_type="PlacementMismatch",outcome="failed",step="placement"} 1`,
		`tpdeploy_deploys_total{cluster="lab",failure_type="",outcome="served"} 1`,
		`tpdeploy_deploys_total{cluster="lab",failure_type="NoViableSubnet",outcome="failed"} 1`,
		`tpdeploy_deploys_total{cluster="lab",failure_type="",outcome="canceled"} 1`,
		`tpdeploy_time_to_serving_seconds_sum{cluster="lab"} 7.47`,
		`tpdeploy_shards_loaded{cluster="lab",node="node-a"} 8`,
		`tpdeploy_shards_expected{cluster="lab",node="node-a"} 39`,
		`tpdeploy_supervisor_healthy{cluster="lab"} 1`,
		`tpdeploy_supervisor_healthy{cluster="other"} 0`,
		`tpdeploy_supervisor_incidents_total{cause="reboot",cluster="lab",node="node-b"} 1`,
		`tpdeploy_reachability_pairs_total{result="ok",subnet="192.168.200.0/24"} 2`,
		`tpdeploy_reachability_pairs_total{result="failed",subnet="10.230.1.0/24"} 2`,
		`# TYPE tpdeploy_step_duration_seconds histogram`,
		`# TYPE tpdeploy_deploys_total counter`,
		`go_goroutines `,
	)
}

func TestHealthz(t *testing.T) {
	_, live, base := serve(t)
	if code, body := get(t, base+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not live") {
		t.Errorf("before the worker starts: %d %q", code, body)
	}
	live.Set(true, "polling tpdeploy, tpdeploy.node.node-a")
	if code, body := get(t, base+"/healthz"); code != http.StatusOK || !strings.Contains(body, "tpdeploy.node.node-a") {
		t.Errorf("while polling: %d %q", code, body)
	}
	live.Set(false, "worker stopped: namespace not found")
	if code, body := get(t, base+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "namespace not found") {
		t.Errorf("after a fatal worker error: %d %q", code, body)
	}
}

func TestFailureType(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{temporal.NewNonRetryableApplicationError("m", "ImageMissing", nil), "ImageMissing"},
		{temporal.NewCanceledError(), "Canceled"},
		{context.Canceled, "Canceled"},
		{errors.New("plain"), "Unknown"},
	}
	for _, tt := range tests {
		if got := metrics.FailureType(tt.err); got != tt.want {
			t.Errorf("FailureType(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestFromActivityAndWorkflow records through the SDK's handlers, as activities and
// workflows will, and scrapes the result.
func TestFromActivityAndWorkflow(t *testing.T) {
	e, _, base := serve(t)
	var suite testsuite.WorkflowTestSuite
	suite.SetMetricsHandler(e.Handler)

	step := func(ctx context.Context) error {
		metrics.RecordStep(ctx, "preflight", 300*time.Millisecond, nil)
		metrics.Activity(ctx).Shards("lab", "node-b", 39, 39)
		return nil
	}
	deploy := func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		err := workflow.ExecuteActivity(ctx, step).Get(ctx, nil)
		metrics.Workflow(ctx).Deploy("lab", err)
		return err
	}
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivityWithOptions(step, activity.RegisterOptions{Name: "Step"})
	env.RegisterWorkflow(deploy)
	env.ExecuteWorkflow(deploy)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	_, body := get(t, base+"/metrics")
	wantLines(t, body,
		`step="preflight"`,
		`tpdeploy_shards_loaded{`,
		`node="node-b"`,
		`tpdeploy_deploys_total{`,
		`outcome="served"`,
	)

	// Outside an activity (a test or benchmark calling an activity method directly)
	// nothing is recorded and nothing panics.
	metrics.RecordStep(context.Background(), "outside", time.Second, nil)
	if _, body := get(t, base+"/metrics"); strings.Contains(body, `step="outside"`) {
		t.Error("a record outside an activity reached the exporter")
	}
}

// TestDashboardUsesExportedNames checks every tpdeploy metric the Grafana dashboard
// queries is one the exporter really produces.
func TestDashboardUsesExportedNames(t *testing.T) {
	data, err := os.ReadFile("../../deploy/grafana/tpdeploy.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}

	e, _, base := serve(t)
	r := metrics.With(e.Handler)
	r.Step("s", time.Second, errors.New("x"))
	r.Deploy("c", nil)
	r.TimeToServing("c", time.Second)
	r.Shards("c", "n", 1, 2)
	r.SupervisorState("c", true)
	r.Incident("c", "n", "reboot")
	r.Reachability("10.0.0.0/24", 1, 1)
	_, body := get(t, base+"/metrics")
	exported := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if name, _, ok := strings.Cut(line, "{"); ok && !strings.HasPrefix(line, "#") {
			exported[name] = true
		}
	}

	names := regexp.MustCompile(`tpdeploy_[a-z_]+`)
	used := 0
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			for _, name := range names.FindAllString(target.Expr, -1) {
				used++
				if !exported[name] {
					t.Errorf("panel %q queries %s, which the exporter does not produce", p.Title, name)
				}
			}
		}
	}
	if used < 8 {
		t.Errorf("the dashboard queries only %d tpdeploy metrics", used)
	}
}

// An idle agent's /metrics has tpdeploy series before any deploy: its build and whether
// its worker polls.
func TestIdleAgentShowsBuildInfoAndUp(t *testing.T) {
	e, live, base := serve(t)
	if err := e.RegisterAgent("node-a", live); err != nil {
		t.Fatal(err)
	}
	_, body := get(t, base+"/metrics")
	wantLines(t, body, `tpdeploy_agent_up{node="node-a"} 0`, `# TYPE tpdeploy_build_info gauge`)
	if !strings.Contains(body, `tpdeploy_build_info{goversion="go`) || !strings.Contains(body, `} 1`) {
		t.Errorf("no tpdeploy_build_info:\n%s", body)
	}
	live.Set(true, "polling")
	_, body = get(t, base+"/metrics")
	wantLines(t, body, `tpdeploy_agent_up{node="node-a"} 1`)
}
