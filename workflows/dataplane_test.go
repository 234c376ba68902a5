package workflows

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/dataplane"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// The seed's nodes with their RoCE HCA: the plan puts NCCL on RDMA, so the deploy proves
// the data plane between placement and vLLM's launch.
func rdmaAgents() *fakeagents.Agents {
	f := fakeagents.New()
	for n, p := range f.Probes {
		f.Probes[n] = fakeagents.SeedRDMA(p)
	}
	return f
}

func TestDataPlaneProvenBeforeLaunch(t *testing.T) {
	f := rdmaAgents()
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	var res DeployResult
	if err := env.GetWorkflowError(); err != nil || env.GetWorkflowResult(&res) != nil {
		t.Fatalf("deploy failed: %v", err)
	}
	var steps []string
	for _, s := range res.Steps {
		steps = append(steps, s.Step)
	}
	i, j := slices.Index(steps, PhaseDataPlane), slices.Index(steps, PhaseLaunch)
	if i < 0 || j < 0 || i > j || steps[i-1] != PhasePlacement {
		t.Fatalf("steps %q: the proof must come after placement and before the launch", steps)
	}
	if got := fakeagents.Calls(f, "ProveDataPlane"); len(got) != 2 {
		t.Errorf("proof ran on %q, want both nodes", got)
	}
	if res.DataPlane == nil || res.DataPlane.Transport != "IB" || res.DataPlane.Rails != 1 || !strings.HasPrefix(res.DataPlane.Summary, "IB on 1 rail") {
		t.Errorf("data plane %+v", res.DataPlane)
	}
}

// A rank on sockets where the plan has RDMA fails the deploy as DataPlaneDegraded naming
// the node, and the containers started so far are removed; vLLM never starts. With
// data_plane: warn the same cluster serves and says so.
func TestDataPlaneDegradedCompensatesOrWarns(t *testing.T) {
	for _, mode := range []string{spec.DataPlaneRequire, spec.DataPlaneWarn} {
		t.Run(mode, func(t *testing.T) {
			f := rdmaAgents()
			f.Proofs["node-b"] = dataplane.Rank{Rank: 1, World: 2, Transport: "Socket", IBNoDevice: true, IBFailed: true, Finished: true, SumOK: true, BusBW: 2.9, Memlock: "unlimited"}
			env := newEnv(t, f)
			s := fakeagents.SeedSpec()
			s.DataPlane = mode
			executeDeploy(env, DeployRequest{Spec: s})
			err := env.GetWorkflowError()
			if mode == spec.DataPlaneWarn {
				var res DeployResult
				if err != nil || env.GetWorkflowResult(&res) != nil {
					t.Fatalf("warn: %v", err)
				}
				if res.DataPlane == nil || !strings.Contains(res.DataPlane.Summary, "Socket") || len(res.Warnings) == 0 {
					t.Errorf("warn: %+v, warnings %q", res.DataPlane, res.Warnings)
				}
				return
			}
			var app *temporal.ApplicationError
			if !errors.As(err, &app) || app.Type() != contract.ErrDataPlaneDegraded || !strings.Contains(app.Message(), "node-b") {
				t.Fatalf("want DataPlaneDegraded naming node-b, got %v", err)
			}
			if got := fakeagents.Calls(f, "LaunchVLLM"); len(got) != 0 {
				t.Errorf("vLLM launched on a degraded data plane: %q", got)
			}
			if got := fakeagents.Calls(f, "RemoveContainers"); len(got) < 2 {
				t.Errorf("compensations %q: the Ray containers of both nodes must be removed", got)
			}
		})
	}
}

// In vLLM's own multi-node mode nothing runs on a node before its rank, so the proof asks
// for a one-shot container made as the rank's, after the master port is proven and before
// any rank starts.
func TestDataPlaneProvenBeforeTheRanksInMPMode(t *testing.T) {
	f := rdmaAgents()
	var fresh []bool
	f.OnCall = func(key string) {
		if strings.HasPrefix(key, "StartVLLMRank") && len(fakeagents.Calls(f, "ProveDataPlane")) != 2 {
			t.Errorf("%s before the proof ran on both nodes", key)
		}
	}
	env := newEnv(t, f)
	s := fakeagents.SeedSpec()
	s.Executor = spec.ExecutorMP
	executeDeploy(env, DeployRequest{Spec: s})
	var res DeployResult
	if err := env.GetWorkflowError(); err != nil || env.GetWorkflowResult(&res) != nil {
		t.Fatalf("deploy failed: %v", err)
	}
	for _, r := range f.ProofRequests {
		fresh = append(fresh, r.Fresh != nil && r.Container == "" && r.Fresh.Node == r.Node)
	}
	if len(fresh) != 2 || !fresh[0] || !fresh[1] {
		t.Errorf("proof requests %+v: want a fresh rank container on each node", f.ProofRequests)
	}
	if res.DataPlane == nil || res.DataPlane.Transport != "IB" {
		t.Errorf("data plane %+v", res.DataPlane)
	}
}
