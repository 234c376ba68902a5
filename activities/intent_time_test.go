package activities

import (
	"crypto/ed25519"
	"net/netip"
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

// signedAgent is node-a's agent trusting one operator key, with policy lines extra added,
// and a one-node spec of a cluster whose HF cache is an allowed mount.
func signedAgent(t *testing.T, extra string) (*Agent, ed25519.PrivateKey, spec.Cluster) {
	t.Helper()
	cache := t.TempDir()
	pub, operator, _ := intent.GenerateKey()
	yaml := "allowed_images: [\"tpdeploy/*:*\"]\nallowed_mounts: [" + cache + "]\ntrusted_keys: [{id: ops, ed25519: \"" + intent.PublicKeyString(pub) + "\"}]\n" + extra
	pol, err := policy.Parse([]byte(yaml), "/etc/tpdeploy/policy.yaml", policy.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	a := New(Config{Name: "node-a", Policy: &pol, Containers: ContainerOptions{Network: "none", StopTimeout: time.Second}})
	c := spec.Cluster{Name: "tpdtest-times", Image: labtest.SimImage, Model: spec.Model{Path: "Org/model", Sync: spec.SyncFromHead},
		Parallel: spec.Parallel{Tensor: 1}, Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead}}, HFCache: cache}.WithDefaults()
	return a, operator, c
}

// timedRequests are requests of every kind the agent checks a signature on, for the spec
// c signed as in, node-a planned at own.
func timedRequests(c spec.Cluster, in *contract.Intent, own netip.Prefix) map[string]struct {
	activity string
	req      any
} {
	d := contract.Deployment{Cluster: c.Name, ID: "x", SpecHash: c.Hash()}
	np := netplan.NodePlan{Name: "node-a", Role: spec.RoleHead, Address: own.Addr()}
	plan := netplan.Plan{Head: "node-a", Subnet: own.Masked(), Nodes: []netplan.NodePlan{np}}
	snapshot := weights.HFSnapshotDir(c.HFCache, c.Model.Path, "0123456789abcdef0123456789abcdef01234567")
	rank := contract.RankRequest{Node: "node-a", Deployment: d, Spec: c, Plan: plan, Intent: in}
	type r = struct {
		activity string
		req      any
	}
	return map[string]r{
		"preflight":   {contract.ActivityPreflightNode, contract.PreflightRequest{Node: "node-a", DockerHost: spec.DefaultDockerHost, Image: c.Image, Spec: &c, Intent: in}},
		"ray head":    {contract.ActivityStartRayHead, contract.StartRayRequest{Node: "node-a", Deployment: d, Spec: c, Plan: np, Intent: in}},
		"ray worker":  {contract.ActivityStartRayWorker, contract.StartRayRequest{Node: "node-a", Deployment: d, Spec: c, Plan: np, RayAddress: netip.AddrPortFrom(own.Addr(), 6379).String(), Intent: in}},
		"vllm launch": {contract.ActivityLaunchVLLM, contract.LaunchRequest{Node: "node-a", Deployment: d, Spec: c, Plan: plan, Intent: in}},
		"master port": {contract.ActivityPrepareMaster, rank},
		"vllm rank":   {contract.ActivityStartVLLMRank, rank},
		"proof in its own container": {contract.ActivityProveDataPlane, contract.ProofRequest{Node: "node-a", DockerHost: spec.DefaultDockerHost, Plan: np, World: 1,
			Master: netip.AddrPortFrom(own.Addr(), 29501).String(), Timeout: time.Second, Fresh: &rank}},
		"serving watch": {contract.ActivityWatchServing, contract.WatchRequest{Node: "node-a", Spec: c, Endpoint: "http://" + netip.AddrPortFrom(own.Addr(), 8000).String(),
			Container: contract.ContainerRef{Name: contract.ContainerName(c.Name, "node-a", contract.RoleRayHead)}, Intent: in}},
		"model server": {contract.ActivityOpenModelServer, contract.OpenModelServerRequest{Node: "node-a", Addr: own.Addr(), Root: snapshot, Files: []string{"config.json"},
			Keys: []string{strings.Repeat("0", 64)}, Peers: []netip.Addr{own.Addr()}, Intent: in}},
		"model copy key": {contract.ActivityPrepareModelCopy, contract.PrepareModelCopyRequest{Node: "node-a", Root: snapshot, Intent: in}},
		"model copy": {contract.ActivitySyncModel, contract.SyncModelRequest{Node: "node-a", From: netip.AddrPortFrom(own.Addr(), 40000), Key: strings.Repeat("0", 64), Addr: own.Addr(),
			Root: snapshot, Layout: contract.ModelLayoutHF, Files: []weights.File{{Name: "config.json", Size: 2}}, Intent: in}},
		"hub download": {contract.ActivityDownloadHubModel, contract.DownloadHubModelRequest{Node: "node-a", Root: snapshot, Repo: c.Model.Path,
			Commit: "0123456789abcdef0123456789abcdef01234567", Files: []weights.File{{Name: "config.json", Size: 2, Blob: strings.Repeat("0", 40)}}, Intent: in}},
		"router":      {contract.ActivityEnsureRouter, contract.EnsureRouterRequest{Node: "node-a", Spec: c, Intent: in}},
		"route":       {contract.ActivitySetRoute, contract.RouteRequest{Node: "node-a", Spec: c, Endpoint: "http://" + netip.AddrPortFrom(own.Addr(), 8000).String(), Intent: in}},
		"route drain": {contract.ActivityDrainRoute, contract.RouteRequest{Node: "node-a", Spec: c, Endpoint: "http://" + netip.AddrPortFrom(own.Addr(), 8000).String(), Intent: in}},
		// What starts nothing: an expired or revoked signature still does it.
		"route removal":        {contract.ActivitySetRoute, contract.RouteRequest{Node: "node-a", Spec: c, Remove: true, Intent: in}},
		"container removal":    {contract.ActivityRemoveContainers, contract.RemoveRequest{Node: "node-a", DockerHost: spec.DefaultDockerHost, Cluster: c.Name, Intent: in}},
		"partial file removal": {contract.ActivityRemovePartialModel, contract.RemovePartialModelRequest{Node: "node-a", Root: snapshot, Intent: in}},
		"start-up reconcile":   {contract.ActivityReconcileCluster, contract.ReconcileRequest{Node: "node-a", Cluster: c.Name, Intent: in}},
	}
}

// startsNothing says whether package contract makes req a removal, which an expired or
// revoked signature still makes the agent do.
func startsNothing(req any) bool {
	s, ok := req.(contract.Signed)
	return ok && s.Signature().Removal
}

// timedRequests holds a request of every activity package contract makes Signed.
func TestTimedRequestsCoverEveryActingActivity(t *testing.T) {
	covered := map[string]bool{}
	for _, r := range timedRequests(spec.Cluster{}, nil, netip.Prefix{}) {
		covered[r.activity] = true
	}
	acting := actingActivities(New(Config{Name: "node-a"}))
	if len(acting) == 0 {
		t.Fatal("no acting activity")
	}
	for _, name := range acting {
		if !covered[name] {
			t.Errorf("timedRequests has no request of %s, which contract makes Signed", name)
		}
	}
}

// A signature past its not_after, or signed before the node's intents_not_before, makes the
// agent start nothing: every acting request is PolicyDenied naming the expiry (or the
// setting), while removals and the supervisor's checks of what serves still go through.
func TestExpiredOrRevokedIntentStartsNothing(t *testing.T) {
	own := ownIPv4(t)
	t.Run("expired", func(t *testing.T) {
		a, operator, c := signedAgent(t, "")
		in := intent.SignWith(operator, c, intent.Options{Now: time.Now().Add(-2 * time.Hour), ValidFor: time.Hour})
		for name, r := range timedRequests(c, in, own) {
			t.Run(name, func(t *testing.T) {
				got := runForeign(t, a, r.activity, r.req)
				refused := strings.HasPrefix(got, contract.ErrPolicyDenied+": node-a: signed intent: the signature expired at "+in.NotAfter.Format(time.RFC3339))
				if refused == startsNothing(r.req) {
					t.Fatalf("%s answered %q (refused for the expiry: %v, want %v)", r.activity, got, refused, !startsNothing(r.req))
				}
				if refused && !strings.Contains(got, "--sign-valid-for") {
					t.Errorf("the refusal %q does not say how to sign again", got)
				}
			})
		}
		key, err := EndpointKey(a.VLLM)(c, in, "http://"+netip.AddrPortFrom(own.Addr(), 8000).String())
		if err != nil || key != "" {
			t.Errorf("the supervisor's check of a cluster whose signature expired: key %q, %v", key, err)
		}
	})
	t.Run("revoked", func(t *testing.T) {
		a, operator, c := signedAgent(t, "intents_not_before: "+time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)+"\n")
		old := intent.SignWith(operator, c, intent.Options{Now: time.Now().Add(-2 * time.Hour)})
		for name, r := range timedRequests(c, old, own) {
			t.Run(name, func(t *testing.T) {
				got := runForeign(t, a, r.activity, r.req)
				refused := strings.HasPrefix(got, contract.ErrPolicyDenied+": node-a: signed intent: the spec was signed at "+old.SignedAt.Format(time.RFC3339)) &&
					strings.Contains(got, "intents_not_before is "+a.Containers.policy.NotBefore.Format(time.RFC3339)+" (/etc/tpdeploy/policy.yaml, --intents-not-before)")
				if refused == startsNothing(r.req) {
					t.Fatalf("%s answered %q (refused for intents_not_before: %v, want %v)", r.activity, got, refused, !startsNothing(r.req))
				}
			})
		}
		// A spec signed since acts: the revocation breaks nothing signed after it.
		fresh := intent.Sign(operator, c)
		for name, r := range timedRequests(c, fresh, own) {
			if name != "preflight" && name != "model server" {
				continue // the others would start containers, or fail for want of a model
			}
			if got := runForeign(t, a, r.activity, r.req); strings.Contains(got, "signed intent") {
				t.Errorf("%s of a spec signed after intents_not_before: %q", name, got)
			}
		}
	})
}
