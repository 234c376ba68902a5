package activities

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/moby/moby/client"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// Wanted says which of a cluster's containers should exist: known=false when nobody can
// tell (no record of the cluster), running=true while an operation owns them, else the IDs
// of the containers the serving deployment holds (none when it is torn down or failed).
type Wanted func(ctx context.Context, cluster string) (keep map[string]bool, running, known bool, err error)

// Reconcile removes this node's containers that no current deployment holds: those a
// deploy left while this node was down (its compensations could not reach the agent), or
// those of a cluster torn down meanwhile. The agent runs it when it starts. Clusters it
// cannot account for, or that a deploy or teardown is acting on, are left alone. It is a
// function, not a method, so the agent does not serve it as an activity: the agent's
// start-up reconciles one cluster at a time through ReconcileCluster, on what the
// controller read of the cluster's runs (workflows.NodeStarted).
func Reconcile(ctx context.Context, cs *Containers, host string, wanted Wanted) ([]string, error) {
	eng, addr, err := cs.docker.engine(host)
	if err != nil {
		return nil, err
	}
	byCluster, names, err := cs.ownByCluster(ctx, host)
	if err != nil {
		return nil, err
	}
	clusters := make([]string, 0, len(byCluster))
	for c := range byCluster {
		clusters = append(clusters, c)
	}
	sort.Strings(clusters)
	var removed []string
	for _, cluster := range clusters {
		keep, running, known, err := wanted(ctx, cluster)
		if err != nil {
			cs.logger().Warn("reconcile: cluster state unknown; left alone", zap.String("cluster", cluster), zap.Error(err))
			continue
		}
		if !known || running {
			continue
		}
		var stale []string
		for _, id := range byCluster[cluster] {
			if !keep[id] {
				stale = append(stale, id)
			}
		}
		if len(stale) == 0 {
			continue
		}
		if len(stale) == len(byCluster[cluster]) {
			res, err := cs.removeCluster(ctx, contract.RemoveRequest{Node: cs.name, DockerHost: host, Cluster: cluster})
			if err != nil {
				return removed, fmt.Errorf("reconcile %s: %w", cluster, err)
			}
			removed = append(removed, res.Removed...)
			continue
		}
		for _, id := range stale {
			if err := cs.docker.removeContainer(ctx, eng, addr, id, cs.docker.opts.StopTimeout); err != nil {
				return removed, fmt.Errorf("reconcile %s: %w", cluster, err)
			}
			removed = append(removed, names[id])
		}
	}
	for _, r := range removed {
		cs.logger().Info("reconcile: removed a container no deployment holds", zap.String("name", r))
	}
	return removed, nil
}

// ReconcileCluster removes this node's containers of req.Cluster but those in req.Keep:
// what the cluster's deployment no longer holds, as the controller read it from the
// cluster's runs for the node's start-up (workflows.NodeStarted). The agent's gate checks
// it as a removal of that cluster (contract.ReconcileRequest.Signature): with
// trusted_keys, only on the operator's signature of the teardown or deploy run the answer
// was read from, so a run anyone could start under those IDs removes nothing.
func (cs *Containers) ReconcileCluster(ctx context.Context, req contract.ReconcileRequest) ([]string, error) {
	if err := cs.checkNode(req.Node); err != nil {
		return nil, err
	}
	keep := map[string]bool{}
	for _, id := range req.Keep {
		keep[id] = true
	}
	removed, err := Reconcile(ctx, cs, "", func(_ context.Context, cluster string) (map[string]bool, bool, bool, error) {
		if cluster != req.Cluster {
			return nil, false, false, nil // not asked about: left alone
		}
		return keep, false, true, nil
	})
	if removed == nil {
		removed = []string{}
	}
	if err == nil {
		cs.logger().Info("reconciled the cluster's containers", zap.String("cluster", req.Cluster), zap.String("run", req.Run), zap.Strings("removed", removed))
	}
	return removed, err
}

// NodeClusters are the clusters this node holds containers of (by their labels), sorted:
// what the agent's start-up asks the controller about (contract.NodeStartRequest).
func NodeClusters(ctx context.Context, cs *Containers, host string) ([]string, error) {
	byCluster, _, err := cs.ownByCluster(ctx, host)
	if err != nil {
		return nil, err
	}
	clusters := make([]string, 0, len(byCluster))
	for c := range byCluster {
		clusters = append(clusters, c)
	}
	sort.Strings(clusters)
	return clusters, nil
}

// ownByCluster lists this node's own containers (its label, this agent's network mode) by
// cluster, with their names.
func (cs *Containers) ownByCluster(ctx context.Context, host string) (map[string][]string, map[string]string, error) {
	eng, addr, err := cs.docker.engine(host)
	if err != nil {
		return nil, nil, err
	}
	f := client.Filters{}
	f.Add("label", LabelNode+"="+cs.name)
	list, err := eng.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, nil, engineError(addr, "list containers", err)
	}
	byCluster := map[string][]string{}
	names := map[string]string{}
	for _, c := range list.Items {
		cluster := c.Labels[LabelCluster]
		if cluster == "" || !ownContainer(c.Labels, cs.docker.opts.Network) {
			continue // another lab's node of the same name on this engine has its own mode
		}
		byCluster[cluster] = append(byCluster[cluster], c.ID)
		names[c.ID] = strings.TrimPrefix(c.Names[0], "/")
	}
	return byCluster, names, nil
}
