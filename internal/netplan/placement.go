package netplan

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/tpdeploy/tpdeploy/internal/failure"
	"github.com/tpdeploy/tpdeploy/internal/release"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Rank placement by executor. The fabric's Order is the rank order the cables need; who
// imposes it depends on the executor:
//   - mp: tpdeploy starts every node's `vllm serve` with --node-rank, so the deploy gives
//     each node its place in Order (Plan.NodeRank).
//   - vLLM's legacy Ray executor ranks its workers itself: the driver's node first, then by
//     the number of workers on the node, then by the node's IP address as a string
//     (vllm/v1/executor/ray_distributed_executor.py, sort_by_driver_then_worker_ip; the IP
//     is the worker's get_ip(), VLLM_HOST_IP, the planned address). The plan computes that
//     order and uses it when it carries the layout.
//   - RayExecutorV2 ranks bundles driver's node first, then by Ray node ID
//     (vllm/v1/executor/ray_utils.py, get_bundles_sorted_by_node, called from
//     ray_executor_v2.py's _init_executor): an ID Ray draws at random when a raylet starts,
//     so no order but "the head first" can be imposed; it serves only where every such
//     order carries the layout.
// Where the executor's order does not carry the layout the deploy is refused
// (DataPlaneUnreachable) unless data_plane is warn or skip, which leave the cables unused.

// NodeRank is the node's rank among the nodes (0 the head): its place in the fabric's
// order where the plan places ranks on the cables, the spec's order otherwise.
func (p Plan) NodeRank(c spec.Cluster, name string) int {
	if f := p.Fabric; f != nil && f.Used && len(f.Order) == len(c.Nodes) {
		if i := slices.Index(f.Order, name); i >= 0 {
			return i
		}
		return -1
	}
	return c.NodeRank(name)
}

// placeForExecutor fits the fabric's order to the executor that ranks the nodes, or says
// why it cannot. addrs are the nodes' planned addresses, gpus their GPU counts.
func placeForExecutor(c spec.Cluster, engine *release.Model, f *Fabric, addrs map[string]netip.Addr, gpus map[string]int) error {
	if !f.Used || len(f.Order) == 0 {
		return nil
	}
	linked := f.Graph.linker()
	tp, pp := c.Parallel.Tensor, max(c.Parallel.Pipeline, 1)
	countsOf := func(order []string) []int {
		out := make([]int, len(order))
		for i, n := range order {
			out[i] = max(gpus[n], 1)
		}
		return out
	}
	carries := func(order []string) (bool, []string) {
		edges, _, slots := slotEdges(tp, pp, countsOf(order))
		if _, ok, _ := place(order, nil, slots, edges, linked); ok {
			return true, nil
		}
		var missing []string
		for _, e := range edges {
			if a, b := order[e[0]], order[e[1]]; !linked(a, b) {
				missing = appendNew(missing, a+" and "+b+" share no link")
			}
		}
		return false, missing
	}
	switch {
	case c.Executor == spec.ExecutorMP:
		f.Placement = "executor mp: each node's vLLM is started with --node-rank, its place in this order"
		return nil
	case c.Executor != spec.ExecutorRay:
		// executor auto with no image read (a plan without the release's verdict): the
		// deploy decides the executor, and checks this again under it.
		f.Placement = "executor not decided (auto, no image read): mp would start each node with --node-rank in this order; vLLM's Ray executor would rank by its own order, checked when the image decides"
		return nil
	case engine != nil && engine.RayExecutor == release.RayV2:
		if anyOrderCarries(c, f, gpus) {
			f.Placement = "RayExecutorV2 ranks the driver's node first, then the others by Ray node ID (drawn at random per start): every such order carries the layout"
			return nil
		}
		return &Error{Type: failure.DataPlaneUnreachable, Msg: fmt.Sprintf(
			"tensor %d x pipeline %d needs the ranks in the order %s (the cables), but RayExecutorV2 ranks the nodes after the driver's by Ray node ID, "+
				"which Ray draws at random when a node starts (vllm/v1/executor/ray_utils.py, get_bundles_sorted_by_node), so the order cannot be imposed\n"+
				"ways out: executor: mp (tpdeploy starts each node with --node-rank in the cables' order); or VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0 in the head's env for the legacy Ray executor, which ranks by IP address; "+
				"or cable every pair; or set data_plane: skip to run NCCL over sockets on the bootstrap subnet (slow)",
			tp, pp, strings.Join(f.Order, ", "))}
	}
	// The legacy Ray executor (nil engine: the form every release before V2 runs).
	order := rayLegacyOrder(c, addrs, gpus)
	if ok, _ := carries(order); ok {
		if !slices.Equal(order, f.Order) {
			f.Order = order
			f.Pairs = pairsOf(tp, pp, order, countsOf(order))
			_, groups, slots := slotEdges(tp, pp, countsOf(order))
			f.judgeOrder(groups, slots, linked)
		}
		f.Placement = "vLLM's Ray executor ranks the driver's node first, then the others by IP address as a string (" + addrList(order[1:], addrs) + "): that order carries the layout"
		return nil
	}
	_, missing := carries(order)
	return &Error{Type: failure.DataPlaneUnreachable, Msg: fmt.Sprintf(
		"tensor %d x pipeline %d needs the ranks in the order %s (the cables), but vLLM's Ray executor ranks the driver's node first, then the others by IP address as a string "+
			"(vllm/v1/executor/ray_distributed_executor.py, sort_by_driver_then_worker_ip): %s (%s), in which %s\n"+
			"ways out: executor: mp (tpdeploy starts each node with --node-rank in the cables' order); or give the nodes bootstrap addresses whose string order follows the cables; "+
			"or set data_plane: skip to run NCCL over sockets on the bootstrap subnet (slow)",
		tp, pp, strings.Join(f.Order, ", "), strings.Join(order, ", "), addrList(order[1:], addrs), strings.Join(missing, "; "))}
}

// rayLegacyOrder is the legacy Ray executor's node order: the head (the driver's node),
// then by workers on the node (fewer first), then by the address as a string.
func rayLegacyOrder(c spec.Cluster, addrs map[string]netip.Addr, gpus map[string]int) []string {
	head := c.Head().Name
	var rest []string
	for _, n := range c.Nodes {
		if n.Name != head {
			rest = append(rest, n.Name)
		}
	}
	slices.SortStableFunc(rest, func(a, b string) int {
		return cmp.Or(cmp.Compare(max(gpus[a], 1), max(gpus[b], 1)), strings.Compare(addrs[a].String(), addrs[b].String()))
	})
	return append([]string{head}, rest...)
}

// anyOrderCarries reports whether every order with the head first carries the layout:
// each slot pair that must talk is linked whichever nodes fill it. With equal nodes that
// is: the head linked to every other node if a pair involves slot 0, and every two other
// nodes linked if a pair involves two other slots.
func anyOrderCarries(c spec.Cluster, f *Fabric, gpus map[string]int) bool {
	head := c.Head().Name
	counts := make([]int, len(c.Nodes))
	for i, n := range c.Nodes {
		counts[i] = max(gpus[n.Name], 1)
		if counts[i] != counts[0] {
			return false // the edges move with the order: no claim for every order
		}
	}
	edges, _, _ := slotEdges(c.Parallel.Tensor, max(c.Parallel.Pipeline, 1), counts)
	var withHead, others bool
	for _, e := range edges {
		if e[0] == 0 {
			withHead = true
		} else {
			others = true
		}
	}
	linked := f.Graph.linker()
	for _, a := range c.Nodes {
		for _, b := range c.Nodes {
			if a.Name >= b.Name {
				continue
			}
			touchesHead := a.Name == head || b.Name == head
			if ((touchesHead && withHead) || (!touchesHead && others)) && !linked(a.Name, b.Name) {
				return false
			}
		}
	}
	return true
}

func pairsOf(tp, pp int, order []string, counts []int) [][2]string {
	edges, _, _ := slotEdges(tp, pp, counts)
	var out [][2]string
	for _, e := range edges {
		out = append(out, [2]string{order[e[0]], order[e[1]]})
	}
	return out
}

func addrList(nodes []string, addrs map[string]netip.Addr) string {
	var out []string
	for _, n := range nodes {
		out = append(out, n+" "+addrs[n].String())
	}
	return strings.Join(out, " < ")
}
