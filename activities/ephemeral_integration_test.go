//go:build integration

package activities

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// A firewall on node-b that drops Linux's ephemeral range (32768–60999, where vLLM's ZMQ
// sockets bind) but passes lower ports: the subnet is still chosen (the reachability
// listeners below the range connect), and the plan is refused EphemeralPortsBlocked naming
// node-a → node-b, the port and node-b's address, before anything starts. node-b → node-a
// passes. Needs nftables' nft (make deps installs it).
func TestFirewallDroppingEphemeralPortsIsRefusedAtPlan(t *testing.T) {
	topo, agents := seedLab(t, 2)
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Fatal("this test needs nftables' nft (make deps installs it)")
	}
	ns := topo.Nodes[1].NetNS
	// Stateful, as a host firewall is: the replies to node-b's own connections (to its
	// ephemeral source ports) pass; new connections to the range are dropped.
	rules := "add table inet tpdtest\nadd chain inet tpdtest input { type filter hook input priority 0; }\n" +
		"add rule inet tpdtest input ct state established,related accept\n" +
		"add rule inet tpdtest input tcp dport 32768-60999 drop\n"
	cmd := exec.Command("ip", "netns", "exec", ns, nft, "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v: %s", ns, err, out)
	}
	c := seedSpec(2)
	probes := probeAll(t, agents)
	all := reachWith(t, agents, netplan.ListenAddrs(c, probes), true)
	var matrix, ephemeral []netplan.PairResult
	for _, r := range all {
		if r.Ephemeral {
			ephemeral = append(ephemeral, r)
			if p := int(r.Addr.Port()); p < netplan.EphemeralLow || p > netplan.EphemeralHigh {
				t.Errorf("ephemeral listener on port %d, outside the namespace's default range", p)
			}
		} else {
			matrix = append(matrix, r)
			if p := int(r.Addr.Port()); p >= netplan.EphemeralLow {
				t.Errorf("reachability listener on port %d, in the ephemeral range", p)
			}
		}
	}
	for _, r := range matrix {
		if !r.OK {
			t.Fatalf("%s → %s on %s failed (%s): the firewall drops only the ephemeral range", r.From, r.To, r.Addr, r.Error)
		}
	}
	_, err = workflows.ChoosePlan(context.Background(), workflows.PlanInput{Spec: c, Probes: probes, Matrix: matrix, Ephemeral: ephemeral})
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != contract.ErrEphemeralBlocked {
		t.Fatalf("plan: %v, want %s", err, contract.ErrEphemeralBlocked)
	}
	msg := app.Error()
	if !strings.Contains(msg, "node-a → node-b: tcp port ") || !strings.Contains(msg, " on 192.168.77.13 blocked") {
		t.Errorf("message does not name the pair, port and address: %s", msg)
	}
	if strings.Contains(msg, "node-b → node-a") {
		t.Errorf("node-b → node-a passes the firewall, yet is named: %s", msg)
	}
	t.Log(msg)

	// Without the firewall the same test plans.
	if out, err := exec.Command("ip", "netns", "exec", ns, nft, "delete table inet tpdtest").CombinedOutput(); err != nil {
		t.Fatalf("nft delete: %v: %s", err, out)
	}
	all = reachWith(t, agents, netplan.ListenAddrs(c, probes), true)
	matrix, ephemeral = nil, nil
	for _, r := range all {
		if r.Ephemeral {
			ephemeral = append(ephemeral, r)
		} else {
			matrix = append(matrix, r)
		}
	}
	if _, err := workflows.ChoosePlan(context.Background(), workflows.PlanInput{Spec: c, Probes: probes, Matrix: matrix, Ephemeral: ephemeral}); err != nil {
		t.Fatalf("plan without the firewall: %v", err)
	}
}
