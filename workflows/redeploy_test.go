package workflows

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

func TestRedeployDecides(t *testing.T) {
	s := fakeagents.SeedSpec().WithDefaults()
	for _, tc := range []struct {
		name       string
		check      contract.DeploymentCheck
		wantAction string
		wantReason string
		deploys    bool
	}{
		{"never deployed", contract.DeploymentCheck{}, RedeployDeployed, "never deployed", true},
		{"unchanged and serving", contract.DeploymentCheck{Exists: true, Closed: "Completed", RunID: "r1", SpecHash: s.Hash(), Healthy: true, Endpoint: "http://x"},
			RedeployNoop, "deploy r1 serves spec " + s.Hash(), false},
		{"spec changed", contract.DeploymentCheck{Exists: true, Closed: "Completed", RunID: "r1", SpecHash: "0ld", Healthy: true},
			RedeployDeployed, "spec changed (0ld -> " + s.Hash() + ")", true},
		{"unchanged but not serving", contract.DeploymentCheck{Exists: true, Closed: "Completed", RunID: "r1", SpecHash: s.Hash(), Detail: "GET /health: 503"},
			RedeployDeployed, "not serving: GET /health: 503", true},
		{"last deploy failed", contract.DeploymentCheck{Exists: true, Closed: "Failed", RunID: "r1", SpecHash: s.Hash()},
			RedeployDeployed, "latest deploy ended Failed", true},
		{"a deploy is running", contract.DeploymentCheck{Exists: true, Running: true, RunID: "r2"},
			RedeploySkipped, "deploy r2 is running", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeagents.New()
			env := newEnv(t, f)
			env.RegisterWorkflow(RedeployCluster)
			check := tc.check
			env.RegisterActivityWithOptions(func(ctx context.Context, req contract.CheckDeploymentRequest) (contract.DeploymentCheck, error) {
				return check, nil
			}, activity.RegisterOptions{Name: contract.ActivityCheckDeployment})
			env.ExecuteWorkflow(RedeployCluster, RedeployRequest{Spec: s, Trigger: "schedule"})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatalf("redeploy: %v", err)
			}
			var res RedeployResult
			if err := env.GetWorkflowResult(&res); err != nil {
				t.Fatal(err)
			}
			if res.Action != tc.wantAction || !strings.HasPrefix(res.Reason, tc.wantReason) {
				t.Errorf("got %s %q, want %s %q", res.Action, res.Reason, tc.wantAction, tc.wantReason)
			}
			deployed := len(fakeagents.Calls(f, "LaunchVLLM")) > 0
			if deployed != tc.deploys {
				t.Errorf("deploy ran = %v, want %v", deployed, tc.deploys)
			}
		})
	}
}

// A keyed spec's trigger reads the latest deploy on the controller (DeployTarget) and has
// the head's agent check it (CheckTarget): CheckDeployment, which reads Temporal on the
// head, is not asked; a running deploy needs no check.
func TestKeyedRedeployChecksOnTheHeadWhatTheControllerRead(t *testing.T) {
	s := fakeagents.SeedSpec()
	s.Secrets.APIKey = &spec.SecretRef{Env: "VLLM_API_KEY"}
	for _, tc := range []struct {
		name       string
		target     contract.CheckTarget
		wantAction string
		wantCheck  []string
	}{
		{"unchanged and serving", contract.CheckTarget{DeploymentCheck: contract.DeploymentCheck{Exists: true, Closed: "Completed", RunID: "r1", SpecHash: s.Hash(), Endpoint: "http://x", Plan: &netplan.Plan{}}},
			RedeployNoop, []string{"CheckTarget r1 on " + contract.NodeQueue(s.Head().Name)}},
		{"a deploy is running", contract.CheckTarget{DeploymentCheck: contract.DeploymentCheck{Exists: true, Running: true, RunID: "r2"}},
			RedeploySkipped, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeagents.New()
			env := newEnv(t, f)
			env.RegisterWorkflow(RedeployCluster)
			read := ""
			env.RegisterActivityWithOptions(func(ctx context.Context, req contract.TargetRequest) (contract.CheckTarget, error) {
				read = activity.GetInfo(ctx).TaskQueue
				return tc.target, nil
			}, activity.RegisterOptions{Name: contract.ActivityDeployTarget})
			env.RegisterActivityWithOptions(func(ctx context.Context, req contract.CheckDeploymentRequest) (contract.DeploymentCheck, error) {
				return contract.DeploymentCheck{}, errors.New("CheckDeployment reads Temporal on the head")
			}, activity.RegisterOptions{Name: contract.ActivityCheckDeployment})
			env.ExecuteWorkflow(RedeployCluster, RedeployRequest{Spec: s, Trigger: "schedule"})
			var res RedeployResult
			if err := env.GetWorkflowResult(&res); err != nil {
				t.Fatal(err)
			}
			if res.Action != tc.wantAction {
				t.Errorf("action %s (%s), want %s", res.Action, res.Reason, tc.wantAction)
			}
			if read != contract.WorkflowQueue {
				t.Errorf("the latest deploy was read on %q, want the controller's %s", read, contract.WorkflowQueue)
			}
			if got := fakeagents.Calls(f, "CheckTarget"); !slices.Equal(got, tc.wantCheck) {
				t.Errorf("head checks %q, want %q", got, tc.wantCheck)
			}
		})
	}
}
