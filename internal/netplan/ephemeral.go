package netplan

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// Linux's default ip_local_port_range (net.ipv4.ip_local_port_range, 32768 60999): where a
// socket bound to port 0 lands.
const (
	EphemeralLow  = 32768
	EphemeralHigh = 60999
)

// CheckEphemeral refuses a plan whose nodes cannot reach each other's ephemeral-range
// ports on their planned (bootstrap) addresses. vLLM binds its control plane between nodes
// to random ports: mp's ZMQ queues at each node's VLLM_HOST_IP, V2's at the Ray node IPs,
// a cross-node TP group's MessageQueue broadcasters too; `wait_until_ready()` has no
// timeout, so a firewall that passes only fixed ports hangs start-up silently (upstream
// §8, docs/network.md). results are the reachability test's ephemeral dials; a pair with
// none measured (an agent older than the test) is not judged.
func CheckEphemeral(plan Plan, results []PairResult) error {
	addr := map[string]netip.Addr{}
	for _, n := range plan.Nodes {
		addr[n.Name] = n.Address
	}
	var blocked []string
	for _, r := range results {
		to, ok := addr[r.To]
		if !r.Ephemeral || !ok || r.Addr.Addr() != to || r.OK {
			continue
		}
		if _, ok := addr[r.From]; !ok {
			continue
		}
		why := ""
		if r.Error != "" {
			why = " (" + r.Error + ")"
		}
		blocked = append(blocked, fmt.Sprintf("%s → %s: tcp port %d on %s blocked%s", r.From, r.To, r.Addr.Port(), to, why))
	}
	if len(blocked) == 0 {
		return nil
	}
	slices.Sort(blocked)
	blocked = slices.Compact(blocked)
	return &Error{Type: failure.EphemeralPortsBlocked, Msg: fmt.Sprintf(
		"ephemeral ports blocked on %s, though the reachability test's port below the range passes: %s; "+
			"vLLM's ZMQ queues and message-queue broadcasters bind random ports in the kernel's ephemeral range (Linux's default %d–%d) "+
			"and wait for them without a timeout, so start-up would hang: open that range between the nodes' planned addresses",
		plan.Subnet, strings.Join(blocked, "; "), EphemeralLow, EphemeralHigh)}
}
