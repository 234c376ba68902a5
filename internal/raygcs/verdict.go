package raygcs

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
)

// Verdict compares Ray's alive nodes with the plan. It returns nil when every
// planned node is alive under its planned address with enough GPUs; a non-retryable
// error when that can no longer happen by waiting (a node registered under another
// address, two nodes under one); and wait=true when nodes are still missing.
func Verdict(req contract.PlacementRequest, nodes []contract.RegisteredNode) (report contract.PlacementReport, wait bool, err error) {
	planned := map[netip.Addr]string{}
	for _, n := range req.Plan.Nodes {
		planned[n.Address] = n.Name
	}
	seen := map[netip.Addr]int{}
	var unexpected []contract.RegisteredNode
	for _, n := range nodes {
		if !n.Alive {
			continue
		}
		seen[n.IP]++
		if _, ok := planned[n.IP]; ok {
			report.Nodes = append(report.Nodes, n)
			report.GPUs += n.GPUs
		} else {
			unexpected = append(unexpected, n)
		}
	}
	for ip, count := range seen {
		if count > 1 {
			return report, false, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("%d Ray nodes registered under %s (vLLM refuses duplicate node IPs): give every node its own --node-ip-address", count, ip), contract.ErrDuplicateAddress, nil)
		}
	}
	var missing []string
	for _, n := range req.Plan.Nodes {
		if seen[n.Address] == 0 {
			missing = append(missing, n.Name)
		}
	}
	if len(unexpected) > 0 {
		var parts []string
		for _, u := range unexpected {
			who := "a Ray node"
			switch {
			case u.Head:
				who = req.Plan.Head
			case len(missing) == 1 && len(unexpected) == 1:
				who = missing[0]
			}
			want := "an address in the plan"
			if np, ok := req.Plan.Node(who); ok {
				want = np.Address.String()
			}
			parts = append(parts, fmt.Sprintf("%s registered with Ray as %s, planned %s", who, u.IP, want))
		}
		return report, false, temporal.NewNonRetryableApplicationError(
			strings.Join(parts, "; ")+" (vLLM would pin its placement group to node:<planned address> and wait ~42 minutes; the Ray container must honour --node-ip-address)",
			contract.ErrPlacementMismatch, nil)
	}
	if len(missing) > 0 {
		return report, true, fmt.Errorf("not registered with Ray yet: %s", strings.Join(missing, ", "))
	}
	if report.GPUs+1e-9 < float64(req.NeedGPUs) {
		return report, false, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("Ray offers %.0f GPUs on the planned nodes, tensor x pipeline needs %d", report.GPUs, req.NeedGPUs), contract.ErrInsufficientGPUs, nil)
	}
	sort.Slice(report.Nodes, func(i, j int) bool { return report.Nodes[i].IP.Less(report.Nodes[j].IP) })
	return report, false, nil
}

// DeadPlanned is a RayNodeDead error for planned nodes that Ray has marked dead and that
// have not come back alive under the same address, or nil.
func DeadPlanned(plan netplan.Plan, nodes []contract.RegisteredNode) error {
	alive := map[netip.Addr]bool{}
	for _, n := range nodes {
		if n.Alive {
			alive[n.IP] = true
		}
	}
	var parts []string
	for _, n := range nodes {
		if n.Alive || alive[n.IP] {
			continue
		}
		for _, np := range plan.Nodes {
			if np.Address == n.IP {
				msg := fmt.Sprintf("%s (%s) is DEAD in Ray", np.Name, n.IP)
				if n.DeathMessage != "" {
					msg += ": " + n.DeathMessage
				}
				if !slices.Contains(parts, msg) {
					parts = append(parts, msg)
				}
			}
		}
	}
	if len(parts) == 0 {
		return nil
	}
	return temporal.NewNonRetryableApplicationError(strings.Join(parts, "; ")+" (the node is down, its Ray container stopped, or the planned link is cut)", contract.ErrRayNodeDead, nil)
}
