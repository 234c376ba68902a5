package activities

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/labtest"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// #36 finding 2: the agent validates the spec it is asked to act on, whoever sent it: a
// request straight onto the node's queue with a managed flag spelt vLLM's other way, a
// code-running variable, or a code-loading vLLM option is refused before anything starts
// (a container, vLLM, a rank, the master's listener, a fresh proof's container),
// PolicyDenied naming the field — not only when the starter or the workflow checked it.
func TestAgentRevalidatesTheSpec(t *testing.T) {
	ctx := context.Background()
	cache := t.TempDir()
	pol, err := policy.Parse([]byte("allowed_images: [\"tpdeploy/*:*\"]\nallowed_mounts: ["+cache+"]\n"), "/etc/tpdeploy/policy.yaml", policy.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	a := New(Config{Name: "node-a", Policy: &pol, Containers: ContainerOptions{Network: "none", StopTimeout: time.Second}})
	good := spec.Cluster{Name: "envpolicy-revalidate", Image: labtest.SimImage, Model: spec.Model{Path: "/models/m", ServedName: "m"},
		Parallel: spec.Parallel{Tensor: 2}, HFCache: cache,
		Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead, GPUs: 1}, {Name: "node-b", Role: spec.RoleWorker, GPUs: 1}},
	}.WithDefaults()
	plan := netplan.Plan{Subnet: netip.MustParsePrefix("10.9.0.0/24"), RayAddress: "10.9.0.1:6379", Nodes: []netplan.NodePlan{
		{Name: "node-a", Role: spec.RoleHead, Address: netip.MustParseAddr("10.9.0.1"), Interface: "eth1"},
		{Name: "node-b", Role: spec.RoleWorker, Address: netip.MustParseAddr("10.9.0.2"), Interface: "eth1"},
	}}
	d := contract.Deployment{Cluster: good.Name, ID: "run-1"}
	for _, tc := range []struct {
		name  string
		edit  func(*spec.Cluster)
		wants []string
	}{
		{"managed flag with underscores", func(c *spec.Cluster) { c.Model.ExtraArgs = []string{"--master_addr", "10.0.0.66"} },
			[]string{"model.extra_args[0]", "--master-addr is set by tpdeploy"}},
		{"code-running env", func(c *spec.Cluster) { c.Nodes[0].Env = map[string]string{"LD_PRELOAD": "/models/x.so"} },
			[]string{"nodes[0].env.LD_PRELOAD"}},
		{"code-loading vLLM option", func(c *spec.Cluster) { c.Model.ExtraArgs = []string{"--trust_remote_code"} },
			[]string{"model.extra_args[0] --trust-remote-code", "allowed_extra_args", "--allow-extra-arg"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			c.Nodes = append([]spec.Node(nil), good.Nodes...)
			tc.edit(&c)
			np, _ := plan.Node("node-a")
			mp := c
			mp.Executor = spec.ExecutorMP
			calls := map[string]func() error{
				"PreflightNode": func() error {
					_, err := a.Containers.PreflightNode(ctx, contract.PreflightRequest{Node: "node-a", Image: c.Image, Spec: &c, Plan: &plan, Deployment: d})
					return err
				},
				"StartRayHead": func() error {
					_, err := a.Ray.StartRayHead(ctx, contract.StartRayRequest{Node: "node-a", Deployment: d, Spec: c, Plan: np})
					return err
				},
				"LaunchVLLM": func() error {
					_, err := a.VLLM.LaunchVLLM(ctx, contract.LaunchRequest{Node: "node-a", Deployment: d, Spec: c, Plan: plan})
					return err
				},
				"StartVLLMRank": func() error {
					_, err := a.VLLM.StartVLLMRank(ctx, contract.RankRequest{Node: "node-a", Deployment: d, Spec: mp, Plan: plan})
					return err
				},
				"ProveDataPlane (fresh)": func() error {
					_, err := a.DataPlane.ProveDataPlane(ctx, contract.ProofRequest{Node: "node-a", Plan: np, World: 2, Master: "10.9.0.1:29501", Timeout: time.Second,
						Fresh: &contract.RankRequest{Node: "node-a", Deployment: d, Spec: mp, Plan: plan}})
					return err
				},
				"PrepareMaster": func() error {
					_, err := a.VLLM.PrepareMaster(ctx, contract.RankRequest{Node: "node-a", Deployment: d, Spec: mp, Plan: plan})
					return err
				},
			}
			for name, call := range calls {
				err := call()
				if err == nil {
					t.Errorf("%s acted on the spec", name)
					continue
				}
				app := appError(t, err)
				if app.Type() != contract.ErrPolicyDenied {
					t.Errorf("%s: type %s: %s", name, app.Type(), app.Message())
					continue
				}
				for _, w := range append([]string{"node-a"}, tc.wants...) {
					if !strings.Contains(app.Message(), w) {
						t.Errorf("%s: refusal lacks %q: %s", name, w, app.Message())
					}
				}
			}
		})
	}
}
