//go:build integration

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// The same lab spec with executor: mp serves through vLLM's own multi-node mode: one vLLM
// container per node, no Ray.
func TestMPDeployServes(t *testing.T) {
	s := labSpec(t, "e2e-mp")
	s.Executor = spec.ExecutorMP
	res := deployResult(t, deployFor(t, s), 3*time.Minute)
	defer teardown(t, s.Name)
	if res.Plan.RayAddress != "" {
		t.Errorf("plan has a Ray address %s in mp mode", res.Plan.RayAddress)
	}
	got := containersOf(t, s.Name)
	if len(got) != 2 {
		t.Fatalf("containers %v, want one vllm per node", got)
	}
	for _, c := range got {
		if !strings.HasSuffix(c, "_"+contract.RoleVLLM) {
			t.Errorf("container %s is not a vllm container", c)
		}
	}
	if err := endpointServes(t, s); err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, st := range res.Steps {
		steps = append(steps, st.Step)
	}
	t.Logf("steps: %q", steps)
}

// Planning refuses a spec that leaves only the external subnet, as with Ray.
func TestMPExternalOnlySubnetRefusedAtPlanning(t *testing.T) {
	s := labSpec(t, "e2e-mp-external")
	s.Executor = spec.ExecutorMP
	s.Network.ExcludeCIDRs = []string{theLab.Fast.String(), theLab.Mgmt.String()}
	f, _ := failure(t, deployFor(t, s))
	if f.Type != "NoViableSubnet" || !strings.Contains(f.Message, theLab.Ext.String()+" rejected: node-b has no address in it") {
		t.Fatalf("failure %s: %s", f.Type, f.Message)
	}
}

// The head's agent killed during loading: the deploy goes on and serves, one vllm per node.
func TestMPAgentKillDuringLoading(t *testing.T) {
	s := labSpec(t, "e2e-mp-agent")
	s.Executor = spec.ExecutorMP
	slowLoading(&s)
	run := deployFor(t, s)
	defer teardown(t, s.Name)
	waitPhase(t, run, "loading")
	killWorker(t, theLab.Nodes[0].Container)
	deployResult(t, run, 3*time.Minute)
	if got := containersOf(t, s.Name); len(got) != 2 {
		t.Errorf("containers %v, want one vllm per node", got)
	}
}

// node-b's vLLM dies during loading: rank 0 would wait for it forever (vLLM's executor
// watches only its own node); the watch on node-b's own node ends the deploy naming it.
func TestMPRankDeathDuringLoadingCaughtOnItsNode(t *testing.T) {
	s := labSpec(t, "e2e-mp-rank")
	s.Executor = spec.ExecutorMP
	slowLoading(&s)
	run := deployFor(t, s)
	waitPhase(t, run, "loading")
	rank := contract.ContainerName(s.Name, "node-b", contract.RoleVLLM)
	out, err := execOut(rank, "cat", "/tmp/tpdeploy/vllm/pid")
	if err != nil || len(strings.Fields(out)) == 0 {
		t.Fatalf("node-b's vllm pid: %q %v", out, err)
	}
	killed := time.Now()
	if out, err := execOut(rank, "sh", "-c", "kill -9 "+strings.Fields(out)[0]); err != nil {
		t.Fatalf("kill: %v %s", err, out)
	}
	f, _ := failure(t, run)
	if !strings.Contains(f.Message, "node-b") || (f.Type != contract.ErrVLLMExited && f.Type != contract.ErrContainerExited) {
		t.Fatalf("failure %s: %s; want node-b's vllm exit", f.Type, f.Message)
	}
	t.Logf("%s %.1fs after the kill: %s", f.Type, time.Since(killed).Seconds(), f.Message)
	if left := containersOf(t, s.Name); len(left) != 0 {
		t.Errorf("containers left: %v", left)
	}
	_ = workflows.PhaseWaitingUntilServing
}
