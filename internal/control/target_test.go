package control

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Issue #36, item 9: a keyed cluster's checks ran on its head's agent and read the
// deploy's runs with the agent's own Temporal client, so an agent's credentials had to
// allow reads of every cluster's deploys. The head now checks what the controller read
// (CheckTarget, WatchTarget) with no client at all: a Temporal call would panic here.
func TestHeadChecksOfATargetMakeNoTemporalCall(t *testing.T) {
	var down atomic.Bool
	var keyed atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case down.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
		case r.URL.Path == "/health":
		case r.URL.Path == "/v1/models" && r.Header.Get("Authorization") == "Bearer the-key":
			keyed.Add(1)
			fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
		default:
			w.WriteHeader(http.StatusUnauthorized)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	s := spec.Cluster{Name: "lab", Image: "vllm/vllm-openai:v0.22.1", Model: spec.Model{Path: "Org/m", ServedName: "m"}, Parallel: spec.Parallel{Tensor: 2},
		Secrets: spec.Secrets{APIKey: &spec.SecretRef{Env: "VLLM_API_KEY"}},
		Nodes:   []spec.Node{{Name: "node-a", Role: spec.RoleHead}, {Name: "node-b", Role: spec.RoleWorker}}}.WithDefaults()
	s.Ports.VLLM = port
	plan := netplan.Plan{Head: "node-a", Nodes: []netplan.NodePlan{{Name: "node-a", Address: netip.MustParseAddr("127.0.0.1")}, {Name: "node-b", Address: netip.MustParseAddr("127.0.0.2")}}}
	target := contract.CheckTarget{DeploymentCheck: contract.DeploymentCheck{Exists: true, RunID: "run-1", Closed: "Completed",
		Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), Plan: &plan}, Spec: &s}
	checks := &Checks{APIKey: func(c spec.Cluster, _ *contract.Intent, endpoint string) (string, error) {
		if endpoint != target.Endpoint {
			return "", fmt.Errorf("not the head's endpoint: %s", endpoint)
		}
		return "the-key", nil
	}}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(checks.WatchTarget)
	watch := func(req contract.WatchTargetRequest) (contract.ClusterHealth, error) {
		var h contract.ClusterHealth
		v, err := env.ExecuteActivity(checks.WatchTarget, req)
		if err == nil {
			err = v.Get(&h)
		}
		return h, err
	}
	ctx := context.Background()

	chk, err := checks.CheckTarget(ctx, target)
	if err != nil || !chk.Healthy || chk.RunID != "run-1" || keyed.Load() == 0 {
		t.Fatalf("CheckTarget of a serving run: %+v, %v (keyed answers %d)", chk, err, keyed.Load())
	}
	h, err := watch(contract.WatchTargetRequest{WatchClusterRequest: contract.WatchClusterRequest{Cluster: "lab", Every: time.Second, Unhealthy: 2, For: 1500 * time.Millisecond},
		Target: target})
	if err != nil || !h.Healthy || h.Checks < 2 {
		t.Fatalf("WatchTarget of a serving run: %+v, %v", h, err)
	}
	down.Store(true)
	h, err = watch(contract.WatchTargetRequest{WatchClusterRequest: contract.WatchClusterRequest{Cluster: "lab", Every: time.Second, Unhealthy: 2, For: time.Minute},
		Target: target})
	if err != nil || h.Healthy || !strings.Contains(h.Detail, "not serving for 2 checks") {
		t.Fatalf("WatchTarget of a run that stopped serving: %+v, %v", h, err)
	}
	chk, _ = checks.CheckTarget(ctx, target)
	if chk.Healthy || chk.Detail == "" {
		t.Errorf("CheckTarget of a run that stopped serving: %+v", chk)
	}
	if _, err := watch(contract.WatchTargetRequest{Target: contract.CheckTarget{DeploymentCheck: contract.DeploymentCheck{Detail: "never deployed"}}}); err == nil {
		t.Error("a watch of no deploy is an error (retried), not a verdict")
	}
}
