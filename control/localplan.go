package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/netplan"
	"github.com/tpdeploy/tpdeploy/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// PlanLocal makes the plan PlanCluster makes, without Temporal: each node is a network
// namespace on this host (node name → `ip netns` name) and the node activities run in this
// process. It is for checks on one machine — a lab, or the real-NCCL check that takes the
// plan's environment for a namespace topology — not for real nodes, whose agents probe
// their own machines.
func PlanLocal(ctx context.Context, s spec.Cluster, netns map[string]string) (workflows.PlanReport, error) {
	var rep workflows.PlanReport
	agents := map[string]*activities.Node{}
	for _, n := range s.Nodes {
		ns, ok := netns[n.Name]
		if !ok {
			return rep, fmt.Errorf("node %s: no network namespace given for it", n.Name)
		}
		agents[n.Name] = &activities.Node{Name: n.Name, NetNS: ns}
	}
	for _, n := range s.Nodes {
		p, err := agents[n.Name].ProbeNode(ctx, contract.ProbeRequest{Node: n.Name, SpecGPUs: n.GPUs, DockerHost: n.DockerHost})
		if err != nil {
			return rep, fmt.Errorf("%s: probe: %w", n.Name, err)
		}
		rep.Probes = append(rep.Probes, p)
	}
	addrs := netplan.ListenAddrs(s, rep.Probes)
	listeners := map[string]contract.ListenResult{}
	defer func() {
		for node, l := range listeners {
			_ = agents[node].CloseProbeListeners(context.Background(), contract.CloseRequest{Node: node, Token: l.Token})
		}
	}()
	for _, n := range s.Nodes {
		l, err := agents[n.Name].OpenProbeListeners(ctx, contract.ListenRequest{Node: n.Name, Addrs: addrs[n.Name], TTL: time.Minute})
		if err != nil {
			return rep, fmt.Errorf("%s: open reachability listeners: %w", n.Name, err)
		}
		listeners[n.Name] = l
	}
	for _, n := range s.Nodes {
		var targets []netplan.Target
		for _, peer := range s.Nodes {
			if peer.Name != n.Name {
				targets = append(targets, listeners[peer.Name].Targets...)
			}
		}
		r, err := agents[n.Name].DialPeers(ctx, contract.DialRequest{Node: n.Name, Targets: targets, Timeout: 2 * time.Second})
		if err != nil {
			return rep, fmt.Errorf("%s: dial peers: %w", n.Name, err)
		}
		rep.Matrix = append(rep.Matrix, r...)
	}
	plan, err := netplan.Choose(s, rep.Probes, rep.Matrix)
	var pe *netplan.Error
	switch {
	case err == nil:
		rep.Plan = &plan
	case errors.As(err, &pe):
		rep.Error = pe.Error()
	default:
		return rep, err
	}
	return rep, nil
}
