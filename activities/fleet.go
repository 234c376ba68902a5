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
	cluster   string
	container string
	gpus      string
	ports     map[int]string
}

// checkFleet refuses a deploy that needs GPUs or fixed ports of this node that another
// cluster's running containers hold: GPUsInUse or PortInUse, naming that cluster, its
// container and the resource. Containers started before these labels (none of them) are
// not counted.
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
		h.gpus = c.Labels[LabelGPUs]
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
	want := n.GPUs
	if want <= 0 {
		want = total
	}
	used := 0
	var holders []string
	for _, cl := range clusters {
		h := byCluster[cl]
		g := total
		if h.gpus != gpusAll {
			g, _ = strconv.Atoi(h.gpus)
		}
		if g > 0 {
			used += g
			holders = append(holders, fmt.Sprintf("cluster %s holds %s (%s)", cl, plural(g, "GPU"), h.container))
		}
	}
	if want > 0 && used > 0 && used+want > total {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s has %s, and %s: cluster %s needs %d more; place it on other nodes, or give each cluster its share (nodes[].gpus)",
			cs.name, plural(total, "GPU"), strings.Join(holders, ", "), s.Name, want), contract.ErrGPUsInUse, nil)
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

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
