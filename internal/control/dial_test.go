package control

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// Issue #36, item 6: the canary followed redirects, sent vLLM's API key on to the redirect
// target, and recorded 4 KiB of whatever answered.
func TestCanaryFollowsNoRedirectAndRecordsABoundedReply(t *testing.T) {
	var leaked atomic.Bool
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			leaked.Store(true)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer elsewhere.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		http.Redirect(w, r, elsewhere.URL+"/v1/completions", http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	c := newCanary(contract.CanaryRequest{Every: time.Second, Timeout: 2 * time.Second, Failures: 1})
	r := c.probe(context.Background(), canaryTarget{endpoint: redirecting.URL, served: "m", key: "the-api-key"})
	if leaked.Load() {
		t.Error("the API key went to the redirect's target")
	}
	if r.ok {
		t.Errorf("a redirect counted as an answer: %+v", r)
	}
	chatty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(strings.Repeat("\x1b[31mnoise ", 2000)))
	}))
	defer chatty.Close()
	r = c.probe(context.Background(), canaryTarget{endpoint: chatty.URL, served: "m"})
	if len(r.detail) > maxReplyRecorded+64 || strings.ContainsRune(r.detail, '\x1b') {
		t.Errorf("recorded %d bytes (%q...); want at most %d, printable", len(r.detail), r.detail[:min(len(r.detail), 80)], maxReplyRecorded)
	}
}

// The checks dial the endpoint the deploy's spec and plan give (the head's planned
// address at ports.vllm, the spec's pin when it has one), never one a workflow result
// names: anyone who can start a workflow under the deploy's ID can forge its result.
func TestChecksDialTheSpecsHeadNotTheResultsEndpoint(t *testing.T) {
	c := spec.Cluster{Name: "lab", Image: "vllm/vllm-openai:v0.22.1", Model: spec.Model{Path: "Org/m"}, Parallel: spec.Parallel{Tensor: 2},
		Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead}, {Name: "node-b", Role: spec.RoleWorker}}}.WithDefaults()
	head := netip.MustParseAddr("10.0.0.11")
	plan := netplan.Plan{Head: "node-a", RayAddress: "10.0.0.11:6379", Nodes: []netplan.NodePlan{{Name: "node-a", Address: head}, {Name: "node-b", Address: netip.MustParseAddr("10.0.0.12")}}}
	status := func(c spec.Cluster, endpoint string, p netplan.Plan) Status {
		return Status{Spec: &c, Result: &workflows.DeployResult{Endpoint: endpoint, Plan: p}}
	}
	if ep, err := servingEndpoint(status(c, "http://10.0.0.11:8000", plan)); err != nil || ep != "http://10.0.0.11:8000" {
		t.Fatalf("the deploy's own: %q, %v", ep, err)
	}
	pinned := c
	pinned.Nodes = []spec.Node{{Name: "node-a", Role: spec.RoleHead, Address: "10.0.0.99"}, c.Nodes[1]}
	elsewhereRay := plan
	elsewhereRay.RayAddress = "169.254.169.254:80"
	for _, tc := range []struct {
		name string
		st   Status
		want string
	}{
		{"a result naming another host", status(c, "http://169.254.169.254:80", plan), "169.254.169.254"},
		{"a result naming a path", status(c, "http://10.0.0.11:8000/redirect?to=x", plan), "not http://10.0.0.11:8000"},
		{"a plan's head not the spec's pin", status(pinned, "http://10.0.0.11:8000", plan), "10.0.0.99"},
		{"a Ray address elsewhere", status(c, "http://10.0.0.11:8000", elsewhereRay), "169.254.169.254:80"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if ep, err := servingEndpoint(tc.st); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q, %v; want a refusal saying %q", ep, err, tc.want)
			}
		})
	}
}
