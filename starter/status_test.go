package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// servedLab is the status of a deploy that served, as Temporal keeps it after a teardown:
// the deploy's record still names its containers, the supervisor's last check was healthy.
func servedLab() control.Status {
	return control.Status{
		WorkflowID: contract.DeployWorkflowID("lab"), RunID: "deploy-run", Closed: "Completed",
		State: workflows.State{Phase: workflows.PhaseServed, Containers: []contract.ContainerRef{
			{Node: "node-a", Role: contract.RoleRayHead, Name: "tpdeploy-lab-node-a-ray-head"},
		}},
		Result:      &workflows.DeployResult{Endpoint: "http://10.0.0.1:8000"},
		Supervision: &workflows.Supervision{Cluster: "lab", Healthy: true, LastCheck: time.Now()},
	}
}

func TestStatusAfterATeardownSaysTornDown(t *testing.T) {
	ended := time.Date(2026, 12, 1, 19, 40, 2, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		td      control.TeardownStatus
		want    []string
		wantErr string
	}{
		{"completed", control.TeardownStatus{Closed: "Completed", Ended: ended, Removed: 3},
			[]string{"torn down at " + clockOrDash(ended), "3 containers removed"}, "was torn down at " + clockOrDash(ended)},
		{"running", control.TeardownStatus{Running: true, Started: ended},
			[]string{"being torn down", "started " + clockOrDash(ended)}, "is being torn down"},
		{"failed", control.TeardownStatus{Closed: "Failed", Ended: ended, Err: &control.Failure{Type: contract.ErrDocker, Message: "node-b: remove: engine gone"}},
			[]string{"did not complete", "engine gone", "starter teardown lab` again"}, "teardown failed: DockerError"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := servedLab()
			td := tt.td
			td.WorkflowID, td.RunID = contract.TeardownWorkflowID("lab"), "teardown-run"
			st.Teardown = &td
			var out bytes.Buffer
			err := printStatus(&out, "lab", st)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one with %q (the exit status is not 0)", err, tt.wantErr)
			}
			got := out.String()
			for _, w := range append(tt.want, "teardown workflow "+td.WorkflowID+" run teardown-run", "deploy-run (completed)") {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
			for _, stale := range []string{"tpdeploy-lab-node-a-ray-head", "supervisor", "serving", "phase"} {
				if strings.Contains(got, stale) {
					t.Errorf("output says %q, which the deploy recorded before the teardown:\n%s", stale, got)
				}
			}
		})
	}
}

func TestStatusLabelsTheDeploysContainersAsItsRecord(t *testing.T) {
	var out bytes.Buffer
	if err := printStatus(&out, "lab", servedLab()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "containers the deploy run started:\n    tpdeploy-lab-node-a-ray-head on node-a (ray-head)\n") {
		t.Errorf("containers not shown as the deploy's record:\n%s", out.String())
	}
}

// While a deploy loads, status shows the watching node's host memory: the lowest seen
// during the load and now, with the guard's floor.
func TestStatusShowsHostMemoryDuringTheLoad(t *testing.T) {
	st := control.Status{WorkflowID: contract.DeployWorkflowID("lab"), RunID: "r", Running: true,
		State: workflows.State{Phase: workflows.PhaseWaitingUntilServing, Progress: contract.ServingProgress{Phase: "loading",
			Memory: &contract.HostMemorySample{Node: "node-a", AvailableBytes: 700 << 20, LowestBytes: 300 << 20, FloorBytes: 128 << 20, TotalBytes: 1 << 30}}}}
	var out bytes.Buffer
	if err := printStatus(&out, "lab", st); err != nil {
		t.Fatal(err)
	}
	if want := "host memory on node-a: lowest 300 MiB available during the load, 700 MiB now (guard floor 128 MiB, of 1.0 GiB)"; !strings.Contains(out.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, out.String())
	}
}

// A deploy routed through the fleet's router says the router's endpoint on a line of its
// own, after the cluster's.
func TestStatusShowsTheRouter(t *testing.T) {
	st := servedLab()
	st.Result.Router = "http://10.0.0.1:8080"
	var out bytes.Buffer
	if err := printStatus(&out, "lab", st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "serving: http://10.0.0.1:8000\n") || !strings.Contains(out.String(), "\nrouter: http://10.0.0.1:8080\n") {
		t.Errorf("no router line:\n%s", out.String())
	}
}

// While a model moves, status has one line per receiving node: the bytes in place of the
// total and the node (or the hub) it comes from; copies done say where they came from.
func TestStatusShowsModelCopyProgressPerNode(t *testing.T) {
	st := control.Status{WorkflowID: contract.DeployWorkflowID("lab"), RunID: "r", Running: true,
		State: workflows.State{Phase: workflows.PhaseModelCopy, ModelCopies: []workflows.ModelCopy{
			{Node: "node-a", From: "hub", Files: 4, Bytes: 2e9, Seconds: 20, MBps: 100}}},
		Copies: []contract.SyncProgress{
			{Node: "node-b", Done: 1_200_000_000, Total: 4_900_000_000, MBps: 1200},
			{Node: "node-c", From: "node-b", Done: 600_000_000, Total: 4_900_000_000, MBps: 1190},
		}}
	var out bytes.Buffer
	if err := printStatus(&out, "lab", st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"copying the model to node-b: 1.2 GB of 4.9 GB (24%) at 1200 MB/s",
		"copying the model to node-c from node-b: 600.0 MB of 4.9 GB (12%) at 1190 MB/s",
		"model downloaded to node-a from the hub: 4 files, 2.0 GB in 20.0s (100 MB/s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	if got := copyLine(contract.SyncProgress{Node: "node-a", From: "hub", Done: 1, Total: 4}); !strings.HasPrefix(got, "downloading the model to node-a from the hub: ") {
		t.Errorf("a download's line: %q", got)
	}
}
