//go:build integration

package activities

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/labtest"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// otherAddrs are n addresses of the prefix's subnet other than its own address.
func otherAddrs(own netip.Prefix, n int) []netip.Addr {
	var out []netip.Addr
	for a := own.Masked().Addr().Next(); len(out) < n && own.Contains(a); a = a.Next() {
		if a != own.Addr() {
			out = append(out, a)
		}
	}
	return out
}

// A spec that pins its addresses (nodes[].address, network.subnet) binds, once signed, the
// plan's addresses that a compromised node would otherwise choose: node-b's agent refuses
// to join a Ray head, a rendezvous, a proof or a model server at any address but the
// signed head's, to register, serve or copy under any address but its own pinned one, to
// serve the model to an address no other node pins, and to take env
// the signed spec does not give it, each PolicyDenied naming the field; the operator's own
// plan passes.
func TestPinnedAddressesBindThePlan(t *testing.T) {
	eng := engineForTest(t) // the positive case starts a Ray worker of the lab's image
	own := ownIPv4(t)
	others := otherAddrs(own, 2)
	if len(others) < 2 {
		t.Fatalf("the subnet of %s has no two other addresses for the test", own)
	}
	head, attacker := others[0], others[1]
	cache := t.TempDir()
	pub, operator, _ := intent.GenerateKey()
	pol, err := policy.Parse([]byte("allowed_images: [\"tpdeploy/*:*\"]\nallowed_mounts: ["+cache+"]\ntrusted_keys: [{id: ops, ed25519: \""+intent.PublicKeyString(pub)+"\"}]\n"),
		"/etc/tpdeploy/policy.yaml", policy.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	b := New(Config{Name: "node-b", Policy: &pol, Containers: ContainerOptions{Network: "none", StopTimeout: time.Second}})
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	c := spec.Cluster{Name: "tpdtest-pins-" + hex.EncodeToString(suffix), Image: labtest.SimImage, Model: spec.Model{Path: "Org/model", Sync: spec.SyncFromHead},
		Parallel: spec.Parallel{Tensor: 2},
		Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead, GPUs: 1, Address: head.String()},
			{Name: "node-b", Role: spec.RoleWorker, GPUs: 1, Address: own.Addr().String(), Env: map[string]string{"NCCL_DEBUG": "WARN"}}},
		Network: spec.Network{Subnet: own.Masked().String()}, HFCache: cache}.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCluster(t, c.Name) })
	in := intent.Sign(operator, c)
	d := contract.Deployment{Cluster: c.Name, ID: "x", SpecHash: c.Hash()}
	planFor := func(addr netip.Addr, env map[string]string) netplan.NodePlan {
		e := map[string]string{"VLLM_HOST_IP": addr.String(), "NCCL_SOCKET_IFNAME": "=eth0", "NCCL_DEBUG": "WARN"}
		for k, v := range env {
			e[k] = v
		}
		return netplan.NodePlan{Name: "node-b", Role: spec.RoleWorker, Address: addr, Interface: "eth0", Env: e}
	}
	worker := func(np netplan.NodePlan, join string) contract.StartRayRequest {
		return contract.StartRayRequest{Node: "node-b", Deployment: d, Spec: c, Plan: np, RayAddress: join, Intent: in}
	}
	ownPlan := planFor(own.Addr(), nil)
	headAt := func(addr netip.Addr) netplan.Plan {
		return netplan.Plan{Head: "node-a", Subnet: own.Masked(), Nodes: []netplan.NodePlan{{Name: "node-a", Role: spec.RoleHead, Address: addr}, ownPlan}}
	}
	rank := func(headAddr netip.Addr) contract.RankRequest {
		return contract.RankRequest{Node: "node-b", Deployment: d, Spec: c, Plan: headAt(headAddr), Rank: 1, Intent: in}
	}
	snapshot := weights.HFSnapshotDir(c.HFCache, c.Model.Path, "0123456789abcdef0123456789abcdef01234567")
	at := func(a netip.Addr, port int) string { return netip.AddrPortFrom(a, uint16(port)).String() }
	outside := netip.MustParseAddr("198.51.100.7") // TEST-NET-2: in no subnet of this host
	for _, tc := range []struct {
		name, activity string
		req            any
		want           string
	}{
		{"ray worker joins the attacker's head", contract.ActivityStartRayWorker, worker(ownPlan, at(attacker, 6379)),
			"the address to join " + at(attacker, 6379) + " (the head node-a's) is " + attacker.String() + ", not the signed spec's nodes[0].address " + head.String()},
		{"ray worker joins the head's address at another port", contract.ActivityStartRayWorker, worker(ownPlan, at(head, 16379)),
			"the address to join " + at(head, 16379) + " is not at the signed spec's port 6379"},
		{"RAY_ADDRESS in the env is the attacker's", contract.ActivityStartRayWorker, worker(planFor(own.Addr(), map[string]string{"RAY_ADDRESS": at(attacker, 6379)}), at(head, 6379)),
			"RAY_ADDRESS " + at(attacker, 6379) + " (the head node-a's) is " + attacker.String() + ", not the signed spec's nodes[0].address"},
		{"env the signed spec does not give", contract.ActivityStartRayWorker, worker(planFor(own.Addr(), map[string]string{"NCCL_COMM_ID": at(attacker, 9999)}), at(head, 6379)),
			"the plan sets NCCL_COMM_ID for node-b, which is neither in the signed spec's nodes[1].env nor a variable the plan owns"},
		{"env the signed spec gives otherwise", contract.ActivityStartRayWorker, worker(planFor(own.Addr(), map[string]string{"NCCL_DEBUG": "TRACE"}), at(head, 6379)),
			`the plan sets NCCL_DEBUG="TRACE" for node-b, the signed spec's nodes[1].env says "WARN"`},
		{"VLLM_HOST_IP another than the planned address", contract.ActivityStartRayWorker, worker(planFor(own.Addr(), map[string]string{"VLLM_HOST_IP": attacker.String()}), at(head, 6379)),
			"the plan's VLLM_HOST_IP " + attacker.String() + " for node-b is not its planned address " + own.Addr().String()},
		{"rank's rendezvous at the attacker's", contract.ActivityStartVLLMRank, rank(attacker),
			"the address to join " + at(attacker, 29501) + " (the head node-a's) is " + attacker.String() + ", not the signed spec's nodes[0].address " + head.String()},
		{"master port check at the attacker's", contract.ActivityPrepareMaster, rank(attacker),
			"not the signed spec's nodes[0].address " + head.String()},
		{"proof's master at the attacker's", contract.ActivityProveDataPlane, func() contract.ProofRequest {
			r := rank(head)
			return contract.ProofRequest{Node: "node-b", DockerHost: spec.DefaultDockerHost, Plan: ownPlan, Rank: 1, World: 2, Master: at(attacker, 29501), Timeout: time.Second, Fresh: &r}
		}(), "the proof's master " + at(attacker, 29501) + " (the head node-a's) is " + attacker.String()},
		{"proof's master at the attacker's, in the Ray container", contract.ActivityProveDataPlane,
			contract.ProofRequest{Node: "node-b", DockerHost: spec.DefaultDockerHost, Container: contract.ContainerName(c.Name, "node-b", contract.RoleRayWorker),
				Plan: ownPlan, Rank: 1, World: 2, Master: at(attacker, 29501), Timeout: time.Second, Intent: in},
			"the proof's master " + at(attacker, 29501) + " (the head node-a's) is " + attacker.String()},
		{"model copy from the attacker's server", contract.ActivitySyncModel, contract.SyncModelRequest{Node: "node-b", From: netip.AddrPortFrom(attacker, 40000), Key: strings.Repeat("0", 64), Addr: own.Addr(),
			Root: snapshot, Layout: contract.ModelLayoutHF, Files: []weights.File{{Name: "config.json", Size: 2}}, Intent: in},
			"the model server " + at(attacker, 40000) + " (the head node-a's) is " + attacker.String() + ", not the signed spec's nodes[0].address " + head.String()},
		{"model copy dialing from another address", contract.ActivitySyncModel, contract.SyncModelRequest{Node: "node-b", From: netip.AddrPortFrom(head, 40000), Key: strings.Repeat("0", 64), Addr: attacker,
			Root: snapshot, Layout: contract.ModelLayoutHF, Files: []weights.File{{Name: "config.json", Size: 2}}, Intent: in},
			"this node's planned address is " + attacker.String() + ", not the signed spec's nodes[1].address " + own.Addr().String()},
		{"model server on another address", contract.ActivityOpenModelServer, contract.OpenModelServerRequest{Node: "node-b", Addr: attacker, Root: snapshot, Files: []string{"config.json"},
			Keys: []string{strings.Repeat("0", 64)}, Peers: []netip.Addr{head}, Intent: in},
			"this node's planned address is " + attacker.String() + ", not the signed spec's nodes[1].address " + own.Addr().String()},
		{"model server serving the attacker", contract.ActivityOpenModelServer, contract.OpenModelServerRequest{Node: "node-b", Addr: own.Addr(), Root: snapshot, Files: []string{"config.json"},
			Keys: []string{strings.Repeat("0", 64)}, Peers: []netip.Addr{attacker}, Intent: in},
			"the model server's peer " + attacker.String() + " is none of the other nodes' addresses the signed spec pins (nodes[].address)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runForeign(t, b, tc.activity, tc.req)
			if !strings.HasPrefix(got, contract.ErrPolicyDenied+": node-b: signed intent: ") || !strings.Contains(got, tc.want) {
				t.Fatalf("%s answered %q, want PolicyDenied: ...%s", tc.activity, got, tc.want)
			}
		})
	}

	// Only network.subnet pinned: an address outside it is refused, naming the field.
	subnetOnly := c
	subnetOnly.Nodes = []spec.Node{{Name: "node-a", Role: spec.RoleHead, GPUs: 1}, {Name: "node-b", Role: spec.RoleWorker, GPUs: 1, Env: map[string]string{"NCCL_DEBUG": "WARN"}}}
	inSub := intent.Sign(operator, subnetOnly)
	got := runForeign(t, b, contract.ActivityStartRayWorker, contract.StartRayRequest{Node: "node-b", Deployment: contract.Deployment{Cluster: c.Name, ID: "x", SpecHash: subnetOnly.Hash()},
		Spec: subnetOnly, Plan: ownPlan, RayAddress: at(outside, 6379), Intent: inSub})
	if want := "the address to join " + at(outside, 6379) + " (the head node-a's) is " + outside.String() + ", outside the signed spec's network.subnet " + own.Masked().String(); !strings.Contains(got, want) {
		t.Errorf("a join outside network.subnet: %q, want ...%s", got, want)
	}
	// This node's own planned address must be its pinned one.
	pinnedElsewhere := c
	pinnedElsewhere.Nodes = []spec.Node{c.Nodes[0], {Name: "node-b", Role: spec.RoleWorker, GPUs: 1, Address: attacker.String(), Env: map[string]string{"NCCL_DEBUG": "WARN"}}}
	got = runForeign(t, b, contract.ActivityStartRayWorker, contract.StartRayRequest{Node: "node-b", Deployment: contract.Deployment{Cluster: c.Name, ID: "x", SpecHash: pinnedElsewhere.Hash()},
		Spec: pinnedElsewhere, Plan: ownPlan, RayAddress: at(head, 6379), Intent: intent.Sign(operator, pinnedElsewhere)})
	if want := "this node's planned address is " + own.Addr().String() + ", not the signed spec's nodes[1].address " + attacker.String(); !strings.Contains(got, want) {
		t.Errorf("a planned address other than the pinned one: %q, want ...%s", got, want)
	}

	// The operator's plan, as the pins say, passes: the worker starts (and joins nothing
	// here, no head runs at the pinned address), past the gate as the worker runs it.
	var suite testsuite.WorkflowTestSuite
	aenv := suite.NewTestActivityEnvironment()
	registerAgent(aenv, b)
	var ref contract.ContainerRef
	v, err := aenv.ExecuteActivity(contract.ActivityStartRayWorker, worker(ownPlan, at(head, 6379)))
	if err == nil {
		err = v.Get(&ref)
	}
	if err != nil {
		t.Fatalf("the plan the pins allow: %v", err)
	}
	if _, err := eng.ContainerInspect(t.Context(), ref.ID, client.ContainerInspectOptions{}); err != nil {
		t.Errorf("the worker of the allowed plan: %v", err)
	}
}
