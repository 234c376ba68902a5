package activities

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/hostmem"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// admitMemory is the preflight's host-memory admission: this node's budget for the spec
// (hostmem.Decide) from the facts read now, the model's files as this node holds them and
// the plan's GPUs on it. A spec that cannot fit is refused HostMemoryInsufficient, before
// any container starts.
func (cs *Containers) admitMemory(ctx context.Context, c spec.Cluster, plan *netplan.Plan) (*hostmem.Budget, error) {
	facts := cs.docker.sys.memory(cs.policy)
	if facts.Error != "" {
		// No facts, no verdict: a node whose kernel hides meminfo is not refused for it.
		cs.logger().Warn("host memory unknown; admission skipped: " + facts.Error)
		return nil, nil
	}
	n, _ := c.Node(cs.name)
	if n.UnifiedMemory != nil {
		facts.Unified = *n.UnifiedMemory
	}
	util, err := hostmem.UtilizationFromArgs(c.Model.ExtraArgs)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError("model.extra_args: "+err.Error(), contract.ErrSpecInvalid, nil)
	}
	res := hostmem.DefaultReserve
	if cs.policy != nil {
		res = cs.policy.HostReserve
	}
	b := hostmem.Decide(hostmem.Input{
		Node: cs.name, Facts: facts, Ranks: netplan.RanksOn(c, plan, cs.name), WorldSize: c.WorldSize(),
		ModelBytes: cs.modelBytes(ctx, c), GPUMemoryUtilization: util, MultiNode: len(c.Nodes) > 1, Reserve: &res,
	})
	if !b.Fits && cs.clusterRunning(ctx, c) {
		// A staged redeploy: this node's memory is held by the deployment the swap stops,
		// which the facts cannot tell from the rest. Refusing would refuse every redeploy
		// of a node that serves near its limit, so it is said, not refused.
		b.Notes = append(b.Notes, "the cluster's serving containers hold part of this memory until the swap: not refused")
		return &b, nil
	}
	if !b.Fits {
		return &b, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: host memory: %s. Fix: %s", cs.name, b.Summary(), b.Fix()),
			contract.ErrHostMemory, nil, b)
	}
	return &b, nil
}

// clusterRunning says whether the cluster has a running container on this node.
func (cs *Containers) clusterRunning(ctx context.Context, c spec.Cluster) bool {
	n, _ := c.Node(cs.name)
	eng, _, err := cs.docker.engine(n.DockerHost)
	if err != nil {
		return false
	}
	list, err := eng.ContainerList(ctx, client.ContainerListOptions{Filters: cs.docker.clusterFilter(c.Name)})
	return err == nil && len(list.Items) > 0
}

// modelBytes is the size of the model's files on this node (0 when tpdeploy cannot see
// them: a path inside the image, or a model not here yet, which model.sync copies later).
func (cs *Containers) modelBytes(ctx context.Context, c spec.Cluster) int64 {
	m := c.Model
	if m.HostDir == "" && !m.IsHFName() {
		return 0
	}
	root, what := m.HostDir, "model.host_dir"
	if root == "" {
		root, what = c.HFCache, "hf_cache"
	}
	dir, rel, err := cs.docker.mounts.beneath(root, what)
	if err != nil {
		return 0
	}
	defer dir.Close()
	var mf weights.Manifest
	if m.HostDir != "" {
		mf, err = weights.ScanDir(ctx, dir, filepath.ToSlash(rel), m.HostDir, weights.Hashing{})
	} else {
		mf, err = weights.ScanHF(ctx, dir, filepath.ToSlash(rel), m.Path, m.Revision, weights.Hashing{})
	}
	if err != nil {
		return 0
	}
	return mf.Size()
}
