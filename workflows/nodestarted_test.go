package workflows

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// TestNodeStartedTellsThenReconcilesEachCluster: a node's start-up run tells the running
// workflows of its boot (on the controller's queue), then reconciles each cluster it
// holds as the controller reads it: unknown and busy clusters are left alone without
// asking the node, one whose state cannot be read is left alone, and the node's refusal
// (PolicyDenied: an unsigned run) leaves that cluster alone too, with the reason.
func TestNodeStartedTellsThenReconcilesEachCluster(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(NodeStarted)
	var asked []string
	env.RegisterActivityWithOptions(func(_ context.Context, b contract.NodeBoot) ([]string, error) {
		if b.Node != "node-b" || b.BootID != "boot-2" {
			t.Errorf("told %+v", b)
		}
		return []string{contract.SuperviseWorkflowID("x")}, nil
	}, activity.RegisterOptions{Name: contract.ActivityReportNodeBoot})
	env.RegisterActivityWithOptions(func(_ context.Context, r contract.WantedRequest) (contract.Wanted, error) {
		switch r.Cluster {
		case "gone":
			return contract.Wanted{}, nil
		case "busy":
			return contract.Wanted{Known: true, Running: true, Run: "r1"}, nil
		case "unreadable":
			return contract.Wanted{}, temporal.NewNonRetryableApplicationError("no history", "X", nil)
		}
		return contract.Wanted{Known: true, Keep: []string{"c1"}, Intent: &contract.Intent{KeyID: "k"}, Run: "r2"}, nil
	}, activity.RegisterOptions{Name: contract.ActivityNodeWanted})
	env.RegisterActivityWithOptions(func(_ context.Context, r contract.ReconcileRequest) ([]string, error) {
		asked = append(asked, r.Cluster)
		if r.Intent == nil || r.Intent.KeyID != "k" || !reflect.DeepEqual(r.Keep, []string{"c1"}) {
			t.Errorf("reconcile request %+v", r)
		}
		if r.Cluster == "unsigned" {
			return nil, temporal.NewNonRetryableApplicationError("not signed", contract.ErrPolicyDenied, nil)
		}
		return []string{"tpd_" + r.Cluster + "_old"}, nil
	}, activity.RegisterOptions{Name: contract.ActivityReconcileCluster})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: contract.NodeStartedWorkflowID("node-b")})
	env.ExecuteWorkflow(NodeStarted, contract.NodeStartRequest{Node: "node-b", BootID: "boot-2",
		Clusters: []string{"busy", "gone", "serving", "unreadable", "unsigned"}})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res contract.NodeStartResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(asked, []string{"serving", "unsigned"}) {
		t.Errorf("the node was asked to reconcile %v, want serving and unsigned", asked)
	}
	if !reflect.DeepEqual(res.Reconciled, []string{"serving"}) || !reflect.DeepEqual(res.Removed, []string{"tpd_serving_old"}) ||
		len(res.Told) != 1 {
		t.Errorf("result %+v", res)
	}
	for c, want := range map[string]string{"busy": "an operation acts on it", "gone": "no deploy", "unreadable": "state unknown", "unsigned": "not signed"} {
		if !strings.Contains(res.LeftAlone[c], want) {
			t.Errorf("left alone %s: %q, want %q in it", c, res.LeftAlone[c], want)
		}
	}
}

// TestNodeStartedRefusesAnotherNodesID: the run speaks for the node its ID names only (an
// authorizer holds a node's credentials to its own ID).
func TestNodeStartedRefusesAnotherNodesID(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(NodeStarted)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: contract.NodeStartedWorkflowID("node-a")})
	env.ExecuteWorkflow(NodeStarted, contract.NodeStartRequest{Node: "node-b", BootID: "boot-2"})
	var appErr *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != contract.ErrWrongWorkflowID {
		t.Fatalf("err %v, want %s", err, contract.ErrWrongWorkflowID)
	}
}
