//go:build integration

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// historyHolds says whether any event of the latest run of a workflow holds s in its
// bytes: the lab's payloads are unencrypted JSON, so a secret in an input, a result, an
// activity's arguments or a failure would be there as it is.
func historyHolds(t *testing.T, id, s string) bool {
	t.Helper()
	it := tc.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	events := 0
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		events++
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	if events == 0 {
		t.Fatalf("%s has no history", id)
	}
	return false
}

// scheduledActivities lists the activities the latest run of id scheduled, as "TYPE on QUEUE".
func scheduledActivities(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	it := tc.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			out = append(out, a.GetActivityType().GetName()+" on "+a.GetTaskQueue().GetName())
		}
	}
	return out
}

// A spec with secrets.api_key: vLLM gets the key on the head (from the head agent's
// VLLM_API_KEY), requires it on /v1/*, tpdeploy's own checks (the serving watch, the smoke
// test, the supervisor's watch on the head's agent) send it, and it is in no history.
func TestDeployServesWithAnAPIKey(t *testing.T) {
	s := labSpec(t, "e2e-apikey")
	s.Secrets.APIKey = &spec.SecretRef{Env: "VLLM_API_KEY"}
	s.SmokeTest = true
	out, code := runStarter(t, "deploy", "-f", writeSpec(t, s), "--watch")
	defer teardown(t, s.Name)
	if code != 0 {
		t.Fatalf("deploy exit %d:\n%s", code, out)
	}
	endpoint := fmt.Sprintf("http://%s:%d", theLab.Nodes[0].Fast, s.WithDefaults().Ports.VLLM)
	for _, tc := range []struct {
		key  string
		want int
	}{{"", http.StatusUnauthorized}, {"sk-not-the-key", http.StatusUnauthorized}, {theLab.APIKey, http.StatusOK}} {
		r, _ := http.NewRequest(http.MethodGet, endpoint+"/v1/models", nil)
		if tc.key != "" {
			r.Header.Set("Authorization", "Bearer "+tc.key)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("/v1/models with key %q: %d, want %d", strings.Replace(tc.key, theLab.APIKey, "the lab's", 1), resp.StatusCode, tc.want)
		}
	}
	if err := control.CheckEndpoint(context.Background(), endpoint, s.Model.ServedName, theLab.APIKey); err != nil {
		t.Errorf("readiness with the key: %v", err)
	}
	if err := control.CheckEndpoint(context.Background(), endpoint, s.Model.ServedName, ""); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("readiness without the key: %v, want a 401", err)
	}
	// The supervisor's watch runs on the head's agent, which sends the key.
	ctl := control.Controller{Client: tc, SignKey: theLab.SignKey}
	eventually(t, 30*time.Second, "the supervisor's check of the endpoint with the key", func() bool {
		st, err := ctl.Status(context.Background(), s.Name)
		return err == nil && st.Supervision != nil && st.Supervision.Healthy && strings.HasPrefix(st.Supervision.Detail, "serving at")
	})
	// The head checks what the controller read: the controller says which run to watch
	// (DeployTarget, on the workflow queue), the head's agent watches it (WatchTarget),
	// and nothing the head runs reads Temporal (WatchCluster is never scheduled).
	scheduled := scheduledActivities(t, contract.SuperviseWorkflowID(s.Name))
	head := contract.NodeQueue(s.Head().Name)
	for _, want := range []string{contract.ActivityDeployTarget + " on " + contract.WorkflowQueue, contract.ActivityWatchTarget + " on " + head} {
		if !slices.Contains(scheduled, want) {
			t.Errorf("the supervisor scheduled %q, none of them %s", scheduled, want)
		}
	}
	if slices.ContainsFunc(scheduled, func(a string) bool { return strings.HasPrefix(a, contract.ActivityWatchCluster+" ") }) {
		t.Errorf("the supervisor scheduled %q: WatchCluster reads Temporal on the head", scheduled)
	}
	for _, id := range []string{contract.DeployWorkflowID(s.Name), contract.SuperviseWorkflowID(s.Name)} {
		if historyHolds(t, id, theLab.APIKey) {
			t.Errorf("the history of %s holds the API key", id)
		}
	}
}

// The lab's agents trust only the lab operator's key: a deploy without a signature (a UI
// start, a script, a foreign client) is refused at preflight, naming trusted_keys, and
// nothing starts; so is one signed by another key.
func TestUnsignedDeployIsRefusedByTheLabsAgents(t *testing.T) {
	s := labSpec(t, "e2e-unsigned")
	_, stranger, _ := intent.GenerateKey()
	for _, c := range []struct {
		name string
		in   *contract.Intent
		want string
	}{{"unsigned", nil, "the request is unsigned"}, {"another key", intent.Sign(stranger, s), "a key this node does not trust"}} {
		t.Run(c.name, func(t *testing.T) {
			run, err := control.Controller{Client: tc}.StartDeploy(context.Background(), workflows.DeployRequest{Spec: s, Trigger: "test", Intent: c.in})
			if err != nil {
				t.Fatal(err)
			}
			err = result(run, 3*time.Minute, nil)
			var f *control.Failure
			if !errors.As(err, &f) || f.Type != contract.ErrPolicyDenied || !strings.Contains(f.Message, c.want) || !strings.Contains(f.Message, "trusted_keys") {
				t.Fatalf("deploy: %v, want PolicyDenied: ...%s", err, c.want)
			}
			if got := containersOf(t, s.Name); len(got) != 0 {
				t.Errorf("containers %v started for an unsigned spec", got)
			}
		})
	}
}

// Issue #36, item 9: a node's agent, through the gate, can make only an agent's calls; a
// node that could reach Temporal's frontend directly would go around it. The lab's
// frontend is on its control network, which no node joins: every node reaches the gate
// and not the frontend, as a fleet with the frontend's port firewalled to the gate.
func TestNodesReachTemporalOnlyThroughTheGate(t *testing.T) {
	ctx := context.Background()
	for _, n := range theLab.Nodes {
		if err := theLab.DialFrom(ctx, n.Container, theLab.Gate, 5*time.Second); err != nil {
			t.Errorf("%s cannot reach the gate %s: %v", n.Name, theLab.Gate, err)
		}
		if err := theLab.DialFrom(ctx, n.Container, theLab.Temporal, 2*time.Second); err == nil {
			t.Errorf("%s reaches Temporal's frontend %s directly, around the gate", n.Name, theLab.Temporal)
		} else {
			t.Logf("%s → frontend %s: %v", n.Name, theLab.Temporal, err)
		}
	}
}
