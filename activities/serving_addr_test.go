package activities

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// vLLM's API server listens only on the node's planned address (#36 item 8): with
// `--host 0.0.0.0` it answered on every interface of the head — the management and
// external networks too — and its API key covers only /v1 and three other prefixes.
func TestVLLMListensOnlyOnThePlannedAddress(t *testing.T) {
	c := spec.Cluster{Name: "tpdtest-host", Image: "vllm/vllm-openai:v0.17.0", Model: spec.Model{Path: "/models/m", ServedName: "m"},
		Parallel: spec.Parallel{Tensor: 2},
		Nodes:    []spec.Node{{Name: "node-a", Role: spec.RoleHead, GPUs: 1}, {Name: "node-b", Role: spec.RoleWorker, GPUs: 1}},
	}.WithDefaults()
	plan := netplan.Plan{Head: "node-a", RayAddress: "10.9.0.1:6379", Nodes: []netplan.NodePlan{
		{Name: "node-a", Role: spec.RoleHead, Address: netip.MustParseAddr("10.9.0.1")},
		{Name: "node-b", Role: spec.RoleWorker, Address: netip.MustParseAddr("10.9.0.2")},
	}}
	d := contract.Deployment{Cluster: c.Name, ID: "run-1"}
	host := func(t *testing.T, argv []string, want string) {
		t.Helper()
		i := slices.Index(argv, "--host")
		if i < 0 || i+1 >= len(argv) || argv[i+1] != want {
			t.Errorf("vllm serve listens at --host %v, want %s: %q", func() string {
				if i < 0 || i+1 >= len(argv) {
					return "(none)"
				}
				return argv[i+1]
			}(), want, argv)
		}
	}
	t.Run("ray", func(t *testing.T) {
		argv, err := launchArgs(contract.LaunchRequest{Node: "node-a", Deployment: d, Spec: c, Plan: plan})
		if err != nil {
			t.Fatal(err)
		}
		host(t, argv, "10.9.0.1")
	})
	t.Run("mp", func(t *testing.T) {
		c := c
		c.Executor = spec.ExecutorMP
		for rank, node := range []string{"node-a", "node-b"} {
			_, argv, err := rankSpec(contract.RankRequest{Node: node, Deployment: d, Spec: c, Plan: plan, Rank: rank}, ContainerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			host(t, argv, plan.Nodes[rank].Address.String())
		}
	})
}
