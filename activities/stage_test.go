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

// The preflight refuses, before anything starts, what the node's policy would refuse only
// when its container starts: an env variable of the node's that is not on its allow-list
// reaches only its Ray worker (or its rank), after the head has been replaced. With the
// plan, the preflight builds the very containers and finds it; the start refuses the same.
func TestPreflightChecksEveryContainerTheNodeWillStart(t *testing.T) {
	ctx := context.Background()
	cache := t.TempDir()
	pol, err := policy.Parse([]byte("allowed_images: [\"tpdeploy/*:*\"]\nallowed_mounts: ["+cache+"]\n"), "/etc/tpdeploy/policy.yaml", policy.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	b := New(Config{Name: "node-b", Policy: &pol, Containers: ContainerOptions{Network: "none", StopTimeout: time.Second}})
	c := spec.Cluster{Name: "tpdtest-stage", Image: labtest.SimImage, Model: spec.Model{Path: "/models/m", ServedName: "m"},
		Parallel: spec.Parallel{Tensor: 2}, HFCache: cache,
		Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead, GPUs: 1}, {Name: "node-b", Role: spec.RoleWorker, GPUs: 1, Env: map[string]string{"MY_TUNING": "1"}}},
	}.WithDefaults()
	plan := netplan.Plan{Subnet: netip.MustParsePrefix("10.9.0.0/24"), RayAddress: "10.9.0.1:6379", Nodes: []netplan.NodePlan{
		{Name: "node-a", Role: spec.RoleHead, Address: netip.MustParseAddr("10.9.0.1"), Interface: "eth1"},
		{Name: "node-b", Role: spec.RoleWorker, Address: netip.MustParseAddr("10.9.0.2"), Interface: "eth1"},
	}}
	d := contract.Deployment{Cluster: c.Name, ID: "run-2"}
	refused := func(t *testing.T, err error) {
		t.Helper()
		app := appError(t, err)
		if app.Type() != contract.ErrPolicyDenied {
			t.Fatalf("type %s: %s", app.Type(), app.Message())
		}
		for _, w := range []string{"node-b", "MY_TUNING", "allowed_env"} {
			if !strings.Contains(app.Message(), w) {
				t.Errorf("refusal lacks %q: %s", w, app.Message())
			}
		}
	}
	for _, executor := range []string{spec.ExecutorRay, spec.ExecutorMP} {
		t.Run(executor, func(t *testing.T) {
			c := c
			c.Executor = executor
			_, err := b.Containers.PreflightNode(ctx, contract.PreflightRequest{Node: "node-b", Image: c.Image, Spec: &c, Plan: &plan, Deployment: d})
			refused(t, err)
			if executor == spec.ExecutorRay {
				np, _ := plan.Node("node-b")
				_, err = b.Ray.StartRayWorker(ctx, contract.StartRayRequest{Node: "node-b", Deployment: d, Spec: c, Plan: np, RayAddress: plan.RayAddress})
			} else {
				_, err = b.VLLM.StartVLLMRank(ctx, contract.RankRequest{Node: "node-b", Deployment: d, Spec: c, Plan: plan, Rank: 1})
			}
			refused(t, err)
		})
	}
	// Without the plan (an older workflow's request), only the spec-wide settings are
	// checked: the variable passes the preflight.
	_, err = b.Containers.PreflightNode(ctx, contract.PreflightRequest{Node: "node-b", Image: c.Image, Spec: &c})
	if err != nil && strings.Contains(err.Error(), "MY_TUNING") {
		t.Errorf("without the plan the preflight cannot build the containers, yet: %v", err)
	}
}
