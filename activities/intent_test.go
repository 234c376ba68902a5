//go:build integration

package activities

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/labtest"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// Signed intent: an agent whose policy sets trusted_keys refuses every acting request that
// is unsigned, signed by a key it does not trust, or whose spec (or what it derives from
// the spec: cluster, image, engine, model directory) is not the signed one; a workflow
// that is not tpdeploy's cannot make it act at all without an operator's signature.
func TestForeignWorkflowGetsPolicyDeniedWithoutTheSignedSpec(t *testing.T) {
	engineForTest(t) // the lab's images, for the preflight
	cache := t.TempDir()
	pub, operator, _ := intent.GenerateKey()
	_, stranger, _ := intent.GenerateKey()
	yaml := "allowed_images: [\"tpdeploy/*:*\"]\nallowed_mounts: [" + cache + "]\ntrusted_keys: [{id: ops, ed25519: \"" + intent.PublicKeyString(pub) + "\"}]\n"
	pol, err := policy.Parse([]byte(yaml), "/etc/tpdeploy/policy.yaml", policy.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	a := New(Config{Name: "node-a", Policy: &pol, Containers: ContainerOptions{Network: "none", StopTimeout: time.Second}})
	own := ownIPv4(t)
	c := spec.Cluster{Name: "tpdtest-signed", Image: labtest.SimImage, Model: spec.Model{Path: "Org/model", Sync: spec.SyncFromHead},
		Parallel: spec.Parallel{Tensor: 1}, Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead}}, HFCache: cache}.WithDefaults()
	// What an attacker would rather run: another image the policy allows, another cluster,
	// env of their choosing, the cache's parent.
	other := c
	other.Name, other.Image, other.HFCache = "tpdtest-theirs", chatterImage, filepath.Dir(cache)
	other.Nodes = []spec.Node{{Name: "node-a", Role: spec.RoleHead, DockerHost: spec.DefaultDockerHost, Env: map[string]string{"NCCL_DEBUG": "TRACE"}}}
	signed, forged := intent.Sign(operator, c), intent.Sign(stranger, c)
	np := netplan.NodePlan{Name: "node-a", Role: spec.RoleHead, Address: own.Addr()}
	plan := netplan.Plan{Head: "node-a", Subnet: own.Masked(), Nodes: []netplan.NodePlan{np}}
	snapshot := func(s spec.Cluster) string {
		return weights.HFSnapshotDir(s.HFCache, s.Model.Path, "0123456789abcdef0123456789abcdef01234567")
	}
	acting := []struct {
		name, activity string
		req            func(in *contract.Intent, s spec.Cluster) any
	}{
		{"preflight", contract.ActivityPreflightNode, func(in *contract.Intent, s spec.Cluster) any {
			return contract.PreflightRequest{Node: "node-a", DockerHost: spec.DefaultDockerHost, Image: s.Image, Spec: &s, Intent: in}
		}},
		{"ray head", contract.ActivityStartRayHead, func(in *contract.Intent, s spec.Cluster) any {
			return contract.StartRayRequest{Node: "node-a", Deployment: contract.Deployment{Cluster: s.Name, ID: "x", SpecHash: s.Hash()}, Spec: s, Plan: np, Intent: in}
		}},
		{"ray worker", contract.ActivityStartRayWorker, func(in *contract.Intent, s spec.Cluster) any {
			return contract.StartRayRequest{Node: "node-a", Deployment: contract.Deployment{Cluster: s.Name, ID: "x", SpecHash: s.Hash()}, Spec: s, Plan: np,
				RayAddress: netip.AddrPortFrom(own.Addr(), 6379).String(), Intent: in}
		}},
		{"vllm launch", contract.ActivityLaunchVLLM, func(in *contract.Intent, s spec.Cluster) any {
			return contract.LaunchRequest{Node: "node-a", Deployment: contract.Deployment{Cluster: s.Name, ID: "x", SpecHash: s.Hash()}, Spec: s, Plan: plan, Intent: in}
		}},
		{"master port", contract.ActivityPrepareMaster, func(in *contract.Intent, s spec.Cluster) any {
			return contract.RankRequest{Node: "node-a", Deployment: contract.Deployment{Cluster: s.Name, ID: "x", SpecHash: s.Hash()}, Spec: s, Plan: plan, Intent: in}
		}},
		{"vllm rank", contract.ActivityStartVLLMRank, func(in *contract.Intent, s spec.Cluster) any {
			return contract.RankRequest{Node: "node-a", Deployment: contract.Deployment{Cluster: s.Name, ID: "x", SpecHash: s.Hash()}, Spec: s, Plan: plan, Intent: in}
		}},
		{"serving watch", contract.ActivityWatchServing, func(in *contract.Intent, s spec.Cluster) any {
			return contract.WatchRequest{Node: "node-a", Spec: s, Endpoint: "http://" + netip.AddrPortFrom(own.Addr(), 8000).String(),
				Container: contract.ContainerRef{Name: contract.ContainerName(s.Name, "node-a", contract.RoleRayHead)}, Intent: in}
		}},
		{"container removal", contract.ActivityRemoveContainers, func(in *contract.Intent, s spec.Cluster) any {
			return contract.RemoveRequest{Node: "node-a", DockerHost: spec.DefaultDockerHost, Cluster: s.Name, Intent: in}
		}},
		{"model server", contract.ActivityOpenModelServer, func(in *contract.Intent, s spec.Cluster) any {
			return contract.OpenModelServerRequest{Node: "node-a", Addr: own.Addr(), Root: snapshot(s), Files: []string{"config.json"},
				Keys: []string{strings.Repeat("0", 64)}, Peers: []netip.Addr{own.Addr()}, Intent: in}
		}},
		{"model copy key", contract.ActivityPrepareModelCopy, func(in *contract.Intent, s spec.Cluster) any {
			return contract.PrepareModelCopyRequest{Node: "node-a", Root: snapshot(s), Intent: in}
		}},
		{"model copy", contract.ActivitySyncModel, func(in *contract.Intent, s spec.Cluster) any {
			return contract.SyncModelRequest{Node: "node-a", From: netip.AddrPortFrom(own.Addr(), 40000), Key: strings.Repeat("0", 64), Addr: own.Addr(), Root: snapshot(s), Layout: contract.ModelLayoutHF,
				Files: []weights.File{{Name: "config.json", Size: 2}}, Intent: in}
		}},
		{"partial file removal", contract.ActivityRemovePartialModel, func(in *contract.Intent, s spec.Cluster) any {
			return contract.RemovePartialModelRequest{Node: "node-a", Root: snapshot(s), Intent: in}
		}},
	}
	for _, act := range acting {
		for _, tc := range []struct {
			name string
			in   *contract.Intent
			s    spec.Cluster
			want string
		}{
			{"unsigned", nil, c, "the request is unsigned"},
			{"signed by another key", forged, c, "a key this node does not trust"},
			{"another spec than the signed one", signed, other, "signed intent: "},
		} {
			t.Run(act.name+"/"+tc.name, func(t *testing.T) {
				got := runForeign(t, a, act.activity, act.req(tc.in, tc.s))
				if !strings.HasPrefix(got, contract.ErrPolicyDenied+": ") || !strings.Contains(got, tc.want) {
					t.Fatalf("%s answered %q, want %s: ...%s", act.activity, got, contract.ErrPolicyDenied, tc.want)
				}
			})
		}
		// The operator's own request passes the signature check (and goes on to what it does
		// or fails at for other reasons in this test's setting).
		t.Run(act.name+"/signed", func(t *testing.T) {
			if act.activity == contract.ActivityStartRayHead || act.activity == contract.ActivityStartRayWorker ||
				act.activity == contract.ActivityStartVLLMRank || act.activity == contract.ActivityPrepareMaster {
				t.Skip("would start the cluster's containers; the lab's signed deploy (e2e) covers it")
			}
			got := runForeign(t, a, act.activity, act.req(signed, c))
			if act.activity == contract.ActivitySyncModel {
				// The signature passes; the copy's source is then checked against the signed
				// spec, and node-a, the one-node spec's head, has no node before it to copy from.
				if !strings.Contains(got, "node-a is to copy the model from node-a, which comes after it in the copy chain") {
					t.Fatalf("the signed copy to the head answered %q, not the chain's source check", got)
				}
				return
			}
			if strings.Contains(got, "signed intent") || strings.Contains(got, "unsigned") || strings.Contains(got, "not trust") {
				t.Fatalf("the signed request was refused for its signature: %q", got)
			}
			t.Logf("%s answered %q", act.activity, got)
		})
	}
}
