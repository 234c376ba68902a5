package activities

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Clusters placed on the same nodes are a fleet: each container says on its labels what of
// its node its cluster holds, and a preflight refuses a deploy that would collide with
// another cluster's running containers there (checkFleet). The labels are not in the
// container's hash: they follow from the spec that is.
const (
	// LabelGPUs is how many of the node's GPUs the container's cluster takes there: the
	// spec's nodes[].gpus, or "all" when it gives none (the engine then gets every GPU).
	LabelGPUs = "tpdeploy.gpus"
	// LabelGPUIndices are the GPUs the container's cluster takes there by index
	// (nodes[].gpus: [0, 1]), comma-separated; absent when the spec gives a count or none.
	LabelGPUIndices = "tpdeploy.gpu_indices"
	// LabelPorts are the fixed ports the cluster binds on the node (fixedPorts), as
	// FIELD=PORT, comma-separated; absent on a node that binds none.
	LabelPorts = "tpdeploy.ports"
	// LabelNetwork is the network mode the agent gave the container: "host" on a real node,
	// container:NODE where the node is itself a container. Only containers in the agent's
	// own mode share its node's GPUs and ports: labs whose nodes share one Docker engine
	// reuse node names, and one lab's node-a is not another's.
	LabelNetwork = "tpdeploy.network"
)

// ownContainer says whether a container whose labels carry this agent's node name is this
// agent's: its LabelNetwork is the agent's own network mode. One without the label predates
// it and counts only where the agent's mode is "host" (a real node: one agent per engine);
// a lab's agent counts only labelled ones. The fleet check, the memory guard, Reconcile
// and the start-up sweep all list by node name and keep only these.
func ownContainer(labels map[string]string, network string) bool {
	got, ok := labels[LabelNetwork]
	if !ok {
		return network == "host"
	}
	return got == network
}

// gpusAll is LabelGPUs of a cluster that takes every GPU of its node.
const gpusAll = "all"

// fleetLabels adds to l what cluster c holds on node.
func fleetLabels(c spec.Cluster, node, network string, l map[string]string) map[string]string {
	n, _ := c.Node(node)
	l[LabelGPUs] = gpusAll
	if n.GPUs > 0 {
		l[LabelGPUs] = strconv.Itoa(n.GPUs)
	}
	if len(n.GPUIndices) > 0 {
		ids := make([]string, len(n.GPUIndices))
		for i, g := range n.GPUIndices {
			ids[i] = strconv.Itoa(g)
		}
		l[LabelGPUIndices] = strings.Join(ids, ",")
	}
	var ps []string
	for _, p := range fixedPorts(c, node) {
		if p.Port > 0 {
			ps = append(ps, p.Field+"="+strconv.Itoa(p.Port))
		}
	}
	if len(ps) > 0 {
		l[LabelPorts] = strings.Join(ps, ",")
	}
	l[LabelNetwork] = network
	return l
}

// holding is what one other cluster's running containers hold on this node.
type holding struct {
	cluster    string
	container  string
	gpus       string
	gpuIndices string
	ports      map[int]string
}

// indices are the GPUs, by index, a holder of count (a number or gpusAll) or of the listed
// indices takes on a node of total GPUs: the listed ones, or what Docker's NVIDIA driver
// gives a count (moby daemon/nvidia_linux.go, countToDevices: 0, 1, ... count-1), or every
// GPU.
func indices(count, listed string, total int) []int {
	if listed != "" {
		var out []int
		for _, v := range strings.Split(listed, ",") {
			if g, err := strconv.Atoi(v); err == nil {
				out = append(out, g)
			}
		}
		return out
	}
	n := total
	if count != gpusAll {
		n, _ = strconv.Atoi(count)
	}
	out := make([]int, 0, max(n, 0))
	for g := range max(n, 0) {
		out = append(out, g)
	}
	return out
}

func indexList(ids []int) string {
	s := make([]string, len(ids))
	for i, g := range ids {
		s[i] = strconv.Itoa(g)
	}
	return strings.Join(s, ", ")
}

// checkFleet refuses a deploy that needs GPUs or fixed ports of this node that another
// cluster's running containers hold: GPUsInUse or PortInUse, naming that cluster, its
// container and the resource. GPUs are compared by index (indices). Containers started
// before these labels (none of them) are not counted.
func (cs *Containers) checkFleet(ctx context.Context, eng containerEngine, addr string, s spec.Cluster) error {
	n, ok := s.Node(cs.name)
	if !ok {
		return nil
	}
	f := client.Filters{}
	f.Add("label", LabelNode+"="+cs.name)
	list, err := eng.ContainerList(ctx, client.ContainerListOptions{Filters: f})
	if err != nil {
		return engineError(addr, "list containers", err)
	}
	byCluster := map[string]*holding{}
	var clusters []string
	for _, c := range list.Items {
		cl := c.Labels[LabelCluster]
		if cl == "" || cl == s.Name || c.Labels[LabelGPUs] == "" || !ownContainer(c.Labels, cs.docker.opts.Network) {
			continue
		}
		h := byCluster[cl]
		if h == nil {
			h = &holding{cluster: cl, ports: map[int]string{}}
			if len(c.Names) > 0 {
				h.container = strings.TrimPrefix(c.Names[0], "/")
			}
			byCluster[cl] = h
			clusters = append(clusters, cl)
		}
		h.gpus, h.gpuIndices = c.Labels[LabelGPUs], c.Labels[LabelGPUIndices]
		for _, kv := range strings.Split(c.Labels[LabelPorts], ",") {
			field, v, _ := strings.Cut(kv, "=")
			if p, err := strconv.Atoi(v); err == nil {
				h.ports[p] = field
			}
		}
	}
	if len(clusters) == 0 {
		return nil
	}
	slices.Sort(clusters)
	total, _ := cs.docker.sys.gpus(n.GPUs)
	mineLabels := fleetLabels(s, cs.name, cs.docker.opts.Network, map[string]string{})
	want := indices(mineLabels[LabelGPUs], mineLabels[LabelGPUIndices], total)
	for _, cl := range clusters {
		h := byCluster[cl]
		var both []int
		for _, g := range indices(h.gpus, h.gpuIndices, total) {
			if slices.Contains(want, g) {
				both = append(both, g)
			}
		}
		if len(both) > 0 {
			fix := "place it on other nodes"
			if g := free(total, byCluster, clusters); g < total {
				fix += fmt.Sprintf(", or give each cluster its own GPUs by index (nodes[].gpus: [%d] is free)", g)
			}
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s has %s, and cluster %s holds GPU %s (%s), which cluster %s needs (GPUs %s): %s",
				cs.name, plural(total, "GPU"), cl, indexList(both), h.container, s.Name, indexList(want), fix), contract.ErrGPUsInUse, nil)
		}
	}
	for _, p := range fixedPorts(s, cs.name) {
		for _, cl := range clusters {
			if other, ok := byCluster[cl].ports[p.Port]; ok && p.Port > 0 {
				return temporal.NewNonRetryableApplicationError(fmt.Sprintf("port %d (%s) on %s is cluster %s's %s (%s): choose another %s for cluster %s",
					p.Port, p.Field, cs.name, cl, other, byCluster[cl].container, p.Field, s.Name), contract.ErrPortInUse, nil)
			}
		}
	}
	return nil
}

// free is the lowest GPU index no other cluster holds (total when none is free), for the
// refusal's example.
func free(total int, byCluster map[string]*holding, clusters []string) int {
	held := map[int]bool{}
	for _, cl := range clusters {
		for _, g := range indices(byCluster[cl].gpus, byCluster[cl].gpuIndices, total) {
			held[g] = true
		}
	}
	g := 0
	for held[g] {
		g++
	}
	return g
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
