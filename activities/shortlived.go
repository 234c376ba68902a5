package activities

import (
	"context"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// The short-lived containers tpdeploy makes — an image read (image.go), the data-plane
// proof's one-shot rank (dataplane.go) — live no longer than the activity that made them:
// it removes them on every way out, on a context of its own, since a cancelled or expired
// activity context is how one gets left. An agent killed mid-activity cannot do even that,
// so the agent sweeps its node's leftovers when it starts (SweepShortLived). Both carry
// LabelNode: where several agents share one engine (the lab), each sweeps only its own.

// removeShortLivedTimeout bounds one removal after the activity's own context is done.
const removeShortLivedTimeout = 30 * time.Second

// shortLived says whether labels mark one of node's short-lived containers, made by an
// agent in network mode network (ownContainer: another lab's node of the same name on the
// same engine has its own).
func shortLived(labels map[string]string, node, network string) bool {
	if labels[LabelNode] != node || !ownContainer(labels, network) {
		return false
	}
	_, read := labels[LabelImageRead]
	return read || labels[LabelRole] == contract.RoleProof
}

// remover is what removing a container needs of an engine.
type remover interface {
	ContainerRemove(ctx context.Context, id string, o client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
}

// removeNow force-removes a container by ID or name, whatever became of ctx; one already
// gone is fine.
func removeNow(ctx context.Context, eng remover, ref string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeShortLivedTimeout)
	defer cancel()
	if _, err := eng.ContainerRemove(rctx, ref, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// SweepShortLived removes this node's short-lived containers left by an agent that died
// while it ran them. The agent runs it when it starts, before it serves its node's queue,
// so none of them can belong to an activity in flight (another lab's agent of the same node
// name sharing the engine has its own network mode: ownContainer). It is a function, not a method, so
// the agent does not serve it as an activity.
func SweepShortLived(ctx context.Context, cs *Containers, host string) ([]string, error) {
	eng, addr, err := cs.docker.engine(host)
	if err != nil {
		return nil, err
	}
	list, err := eng.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelNode+"="+cs.name)})
	if err != nil {
		return nil, engineError(addr, "list containers", err)
	}
	var removed []string
	for _, c := range list.Items {
		if !shortLived(c.Labels, cs.name, cs.docker.opts.Network) {
			continue
		}
		name := c.ID[:min(12, len(c.ID))]
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		if err := removeNow(ctx, eng, c.ID); err != nil {
			return removed, engineError(addr, "remove "+name, err)
		}
		cs.logger().Info("removed a short-lived container its activity left", zap.String("name", name), zap.String("state", string(c.State)))
		removed = append(removed, name)
	}
	return removed, nil
}
