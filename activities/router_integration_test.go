//go:build integration

package activities

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Two labs on one Docker engine (as the e2e shards run them), each with a node-a whose
// agent runs the fleet's router: each router has its own container, in its own node's
// network namespace, with its own routes, and neither agent adopts, replaces or refuses the
// other's. Each agent's containers, the router too, carry its network mode (ownContainer).
func TestTwoLabsRunTheirRoutersOnNodeAOfOneEngine(t *testing.T) {
	eng := engineForTest(t)
	ctx := context.Background()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	c := testCluster(t)
	c.Router = &spec.Router{Node: "node-a"}

	type lab struct {
		peer   string
		agent  *Agent
		router contract.ContainerRef
	}
	labs := make([]*lab, 2)
	for i := range labs {
		// The lab's node-a: a container whose network namespace the agent's containers join.
		peer := "tpdtest-lab" + string(rune('1'+i)) + "-" + suffix + "-node-a"
		created, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{Name: peer,
			Config:     &container.Config{Image: chatterImage},
			HostConfig: &container.HostConfig{NetworkMode: "none"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = eng.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
		})
		if _, err := eng.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig("node-a")
		cfg.Containers.Network, cfg.Containers.HostRoot = "container:"+peer, t.TempDir()
		labs[i] = &lab{peer: peer, agent: New(cfg)}
		t.Cleanup(func() {
			_, _ = eng.ContainerRemove(context.Background(), contract.RouterContainer("node-a", "container:"+peer), client.ContainerRemoveOptions{Force: true})
		})
	}
	// EnsureRouter heartbeats while the router starts: it runs as an activity.
	var suite testsuite.WorkflowTestSuite
	ensure := func(l *lab) contract.RouterRef {
		t.Helper()
		aenv := suite.NewTestActivityEnvironment()
		aenv.RegisterActivity(l.agent.Router.EnsureRouter)
		var ref contract.RouterRef
		v, err := aenv.ExecuteActivity(l.agent.Router.EnsureRouter, contract.EnsureRouterRequest{Node: "node-a", Address: netip.MustParseAddr("127.0.0.1"), Spec: c})
		if err == nil {
			err = v.Get(&ref)
		}
		if err != nil {
			t.Fatalf("%s: EnsureRouter: %v", l.peer, err)
		}
		return ref
	}
	for _, l := range labs {
		l.router = ensure(l).Container
	}
	if labs[0].router.Name == labs[1].router.Name || labs[0].router.ID == labs[1].router.ID {
		t.Fatalf("one router container for both labs: %+v %+v", labs[0].router, labs[1].router)
	}
	for _, l := range labs {
		info, err := eng.ContainerInspect(ctx, l.router.ID, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatalf("%s: the first lab's router is gone after the second started its own: %v", l.peer, err)
		}
		want := "container:" + l.peer
		if !info.Container.State.Running || info.Container.Config.Labels[LabelNetwork] != want {
			t.Errorf("%s: router %s running %v, network label %q, want %q", l.peer, l.router.Name, info.Container.State.Running, info.Container.Config.Labels[LabelNetwork], want)
		}
		// Started again, each agent keeps its own router.
		if again := ensure(l).Container; !again.Adopted || again.ID != l.router.ID {
			t.Errorf("%s: EnsureRouter again: %+v, want %s adopted", l.peer, again, l.router.ID)
		}
	}
	// Each router serves its own lab's routes (its own state directory and admin socket).
	for i, l := range labs {
		route := contract.RouteRequest{Node: "node-a", Spec: c, Endpoint: "http://10.0.0." + string(rune('1'+i)) + ":8000"}
		if _, err := l.agent.Router.SetRoute(ctx, route); err != nil {
			t.Fatalf("%s: SetRoute: %v", l.peer, err)
		}
	}
	for i, l := range labs {
		rs, err := l.agent.Router.routes(ctx)
		want := "http://10.0.0." + string(rune('1'+i)) + ":8000"
		if err != nil || len(rs.Models) != 1 || len(rs.Models[0].Replicas) != 1 || rs.Models[0].Replicas[0].URL != want {
			t.Errorf("%s: routes %+v %v, want model m at %s alone", l.peer, rs, err, want)
		}
	}
}
