package workflows

import (
	"context"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
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
