package workflows

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// A spec with a router: once the cluster serves, the router's node starts it at its planned
// address and routes the model to the cluster's endpoint; the result and the state name the
// router. A staged deploy drains the old engine's route before anything of it stops.
func TestRoutedDeployStartsTheRouterAndDrainsBeforeTheSwap(t *testing.T) {
	f := fakeagents.New()
	f.Serving = servingOther
	var mu sync.Mutex
	var order []string
	f.OnCall = func(key string) { mu.Lock(); order = append(order, key); mu.Unlock() }
	env := newEnv(t, f)
	s := fakeagents.SeedSpec()
	s.Router = &spec.Router{Node: "node-a"}
	executeDeploy(env, DeployRequest{Spec: s})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("deploy failed: %v", err)
	}
	var res DeployResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Router != "http://192.168.200.12:8080" {
		t.Errorf("router = %q (warnings %v)", res.Router, res.Warnings)
	}
	want := []string{"DrainRoute node-a " + s.Name + " " + servingOther.Endpoint, "EnsureRouter node-a 192.168.200.12", "SetRoute node-a " + s.Name + " " + res.Endpoint}
	if got := fakeagents.Calls(f, "DrainRoute", "EnsureRouter", "SetRoute"); !slices.Equal(got, want) {
		t.Errorf("router calls %q, want %q", got, want)
	}
	drain, head := slices.Index(order, "DrainRoute node-a"), slices.Index(order, "StartRayHead node-a")
	if drain < 0 || drain > head {
		t.Errorf("drain at %d, the first container start at %d: %q", drain, head, order)
	}
}

// A spec without a router asks for none (and its history takes no version marker).
func TestUnroutedDeployAsksNoRouter(t *testing.T) {
	f := fakeagents.New()
	f.Serving = servingOther
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if got := fakeagents.Calls(f, "DrainRoute", "EnsureRouter", "SetRoute"); len(got) != 0 {
		t.Errorf("router calls %q", got)
	}
}

// A teardown of a routed cluster takes its route out before it removes the containers.
func TestTeardownUnroutesFirst(t *testing.T) {
	f := fakeagents.New()
	var mu sync.Mutex
	var order []string
	f.OnCall = func(key string) { mu.Lock(); order = append(order, key); mu.Unlock() }
	env := newEnv(t, f)
	s := fakeagents.SeedSpec()
	s.Router = &spec.Router{Node: "node-b"}
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: contract.TeardownWorkflowID(s.Name)})
	env.ExecuteWorkflow(TeardownCluster, TeardownRequest{Spec: s})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	route, remove := slices.Index(order, "SetRoute node-b"), slices.IndexFunc(order, func(k string) bool { return strings.HasPrefix(k, "RemoveContainers") })
	if route < 0 || remove < route {
		t.Errorf("route removal at %d, the first container removal at %d: %q", route, remove, order)
	}
}

// A routed cluster's incident takes its replica out of the router's traffic before the
// recovery's redeploy, which routes the new engine once it serves; the incident says so.
func TestIncidentMarksTheReplicaDownUntilTheRedeployServes(t *testing.T) {
	f := fakeagents.New()
	var mu sync.Mutex
	var order []string
	f.OnCall = func(key string) { mu.Lock(); order = append(order, key); mu.Unlock() }
	w := &fakeWatch{answers: []string{"unhealthy", "healthy"}}
	env := watchEnv(t, f, w)
	s := fakeagents.SeedSpec()
	s.Router = &spec.Router{Node: "node-a"}
	serving := &contract.ServingDeployment{RunID: "r1", SpecHash: s.Hash(), Endpoint: "http://192.168.200.12:8000"}
	env.ExecuteWorkflow(SuperviseCluster, SuperviseRequest{Spec: s, Serving: serving, MaxLoops: 3})
	next := carried(t, env)
	if len(next.Incidents) != 1 || next.Incidents[0].Outcome != OutcomeServing {
		t.Fatalf("incidents = %+v", next.Incidents)
	}
	if note := next.Incidents[0].RouterNote; !strings.Contains(note, "marked down") {
		t.Errorf("router note %q", note)
	}
	got := fakeagents.Calls(f, "SetRoute")
	if len(got) != 2 || got[0] != "SetRoute node-a "+s.Name+" "+serving.Endpoint+" down" || strings.HasSuffix(got[1], " down") {
		t.Fatalf("routes %q: want the replica down, then routed again", got)
	}
	down, launch := slices.Index(order, "SetRoute node-a"), slices.Index(order, "LaunchVLLM node-a")
	if down < 0 || launch < 0 || down > launch {
		t.Errorf("marked down at %d, the redeploy's launch at %d: %q", down, launch, order)
	}
}
