//go:build integration

package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/labtest"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Executor mp: the rank's secrets (HF_TOKEN everywhere, VLLM_API_KEY on rank 0) reach vLLM
// through the environment of the exec that starts it, never the container's configuration;
// with the API key, the watch's readiness checks send it and vLLM refuses /v1/* without it.
func TestMPRankSecretsOnlyInTheExec(t *testing.T) {
	eng := engineForTest(t)
	ctx := context.Background()
	c := testCluster(t)
	c.Image, c.Executor = labtest.ReleaseImage("vllm-0.22.1"), spec.ExecutorMP
	c.Parallel.Tensor = 1
	c.Nodes = c.Nodes[:1]
	c.Ports.VLLM, c.Ports.Master = freePort(t), freePort(t)
	c.Secrets = spec.Secrets{HFToken: &spec.SecretRef{Env: "HF_TOKEN"}, APIKey: &spec.SecretRef{Env: "VLLM_API_KEY"}}
	hf, key := "hf_secret-"+c.Name, "sk-secret-"+c.Name
	t.Setenv("HF_TOKEN", hf)
	t.Setenv("VLLM_API_KEY", key)
	a := onHostNetwork("node-a")
	plan := netplan.Plan{Head: "node-a", Nodes: []netplan.NodePlan{{Name: "node-a", Role: spec.RoleHead, Address: netip.MustParseAddr("127.0.0.1"),
		Env: map[string]string{"TPDEPLOY_SIM_SHARDS": "2", "TPDEPLOY_SIM_SHARD_SECONDS": "0.2"}}}}
	req := contract.RankRequest{Node: "node-a", Deployment: contract.Deployment{Cluster: c.Name, ID: "run-1"}, Spec: c, Plan: plan, Rank: 0}
	ref, err := a.VLLM.StartVLLMRank(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if ref.PID == 0 || ref.Adopted {
		t.Fatalf("rank 0 = %+v, want a new vllm process", ref)
	}
	info, err := eng.ContainerInspect(ctx, ref.Name, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inspected, _ := json.Marshal(info.Container)
	for _, secret := range []string{hf, key} {
		if strings.Contains(string(inspected), secret) {
			t.Errorf("docker inspect %s shows a secret", ref.Name)
		}
	}
	for _, kv := range info.Container.Config.Env {
		if k, _, _ := strings.Cut(kv, "="); k == "HF_TOKEN" || k == "VLLM_API_KEY" {
			t.Errorf("the container's configuration has %s", k)
		}
	}
	r, err := execIn(ctx, eng, ref.Name, []string{"/bin/sh", "-c", "tr '\\000' '\\n' </proc/" + fmt.Sprint(ref.PID) + "/environ"}, nil)
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("read vllm's environment: %+v %v", r, err)
	}
	for _, want := range []string{"HF_TOKEN=" + hf, "VLLM_API_KEY=" + key} {
		if !strings.Contains(r.Stdout, want+"\n") {
			t.Errorf("vllm's environment lacks %s", strings.SplitN(want, "=", 2)[0])
		}
	}

	endpoint := fmt.Sprintf("http://127.0.0.1:%d", c.Ports.VLLM)
	watch := contract.WatchRequest{Node: "node-a", Container: ref, Spec: c, Endpoint: endpoint, ReportWithin: 500 * time.Millisecond}
	var suite testsuite.WorkflowTestSuite
	aenv := suite.NewTestActivityEnvironment()
	registerAgent(aenv, a)
	var p contract.ServingProgress
	for calls := 1; !p.Serving; calls++ {
		if calls > 60 {
			t.Fatalf("not serving after %d calls: %+v", calls, p)
		}
		watch.Cursor = p
		v, err := aenv.ExecuteActivity(a.VLLM.WatchServing, watch)
		if err == nil {
			err = v.Get(&p)
		}
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
	}
	for _, tc := range []struct {
		auth string
		want int
	}{{"", http.StatusUnauthorized}, {"Bearer wrong", http.StatusUnauthorized}, {"Bearer " + key, http.StatusOK}} {
		r, _ := http.NewRequest(http.MethodGet, endpoint+"/v1/models", nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("/v1/models with %q: %d, want %d", strings.Replace(tc.auth, key, "KEY", 1), resp.StatusCode, tc.want)
		}
	}
	if resp, err := http.Get(endpoint + "/health"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/health without a key: %v %v, want 200", resp, err)
	}

	again, err := a.VLLM.StartVLLMRank(ctx, req)
	if err != nil || !again.Adopted || again.PID != ref.PID {
		t.Fatalf("second start = %+v, %v; want pid %d adopted", again, err, ref.PID)
	}
	// A rotated key is another launch: vLLM starts again in the same container.
	t.Setenv("VLLM_API_KEY", key+"-rotated")
	rotated, err := a.VLLM.StartVLLMRank(ctx, req)
	if err != nil || rotated.Adopted || rotated.PID == ref.PID || rotated.ID != ref.ID {
		t.Fatalf("start with a rotated key = %+v, %v; want a new vllm in container %s", rotated, err, ref.ID)
	}
}
