//go:build integration

package activities

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
)

// The exec primitives (vLLM's launch, the output read, ray status) act only on this node's
// tpdeploy containers of the cluster named, found by their labels, whatever the request
// names.
func TestForeignWorkflowCannotExecInOtherContainers(t *testing.T) {
	eng := engineForTest(t)
	ctx := context.Background()
	cache := t.TempDir()
	a := guardedNode(t, cache)
	own := ownIPv4(t)
	c := testCluster(t)
	c.HFCache = cache
	// Containers that are not tpdeploy's: one of any name, one with the name tpdeploy would
	// give the cluster's Ray head.
	victim := "tpdtest-victim-" + c.Name[len("tpdtest-"):]
	for _, name := range []string{victim, contract.ContainerName(c.Name, "node-a", contract.RoleRayHead)} {
		created, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name,
			Config: &container.Config{Image: chatterImage, Labels: map[string]string{"other": "team"}}, HostConfig: &container.HostConfig{NetworkMode: "none"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = eng.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
		})
		if _, err := eng.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, activity string
		req            any
	}{
		{"vllm's output read in another container", contract.ActivityWatchServing,
			contract.WatchRequest{Node: "node-a", Spec: c, Headless: true, Container: contract.ContainerRef{Name: victim}}},
		{"a launch in a container named like the head", contract.ActivityLaunchVLLM,
			contract.LaunchRequest{Node: "node-a", Spec: c, Deployment: contract.Deployment{Cluster: c.Name},
				Plan: netplan.Plan{Nodes: []netplan.NodePlan{{Name: "node-a", Address: own.Addr()}}}}},
		{"ray status in another container", contract.ActivityCheckPlacement,
			contract.PlacementRequest{Node: "node-a", RayHead: victim, Plan: netplan.Plan{RayAddress: netip.AddrPortFrom(own.Addr(), 6379).String()}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			registerAgent(env, a)
			env.RegisterWorkflowWithOptions(foreignWorkflow, workflow.RegisterOptions{Name: "NotTpdeploys"})
			env.ExecuteWorkflow("NotTpdeploys", tc.activity, tc.req)
			var got string
			if err := env.GetWorkflowResult(&got); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got, contract.ErrPolicyDenied+": ") || !strings.Contains(got, "not one of this node's tpdeploy containers") {
				t.Fatalf("%s answered %q, want %s naming the container", tc.activity, got, contract.ErrPolicyDenied)
			}
		})
	}
}
