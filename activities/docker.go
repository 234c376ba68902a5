package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

// docker is the node's Docker engines as the agent may use them: only the engines the
// policy allows, and only the containers tpdeploy makes there (labelled, named, checked
// against the policy's images, env and mounts), with the node's container options and
// the RDMA devices the plan's HCAs need (rdma.go).
type docker struct {
	*nodeBase
	mounts  *mounts
	sys     sysfs
	opts    ContainerOptions
	engines engines
}

// ensureContainer creates and starts s, or adopts the container of the same name: one
// with the same spec hash is reused (and started if it is stopped — a crash between
// create and start leaves exactly that), one with another hash is replaced.
func (d *docker) ensureContainer(ctx context.Context, host string, s containerSpec, replace bool) (contract.ContainerRef, error) {
	if d.guard != nil {
		d.guard.active.Store(true) // the memory guard follows from now on (guard.go)
		d.guard.clear(s.Labels[LabelCluster])
	}
	if err := d.containerAllowed(s); err != nil {
		return contract.ContainerRef{}, err
	}
	eng, addr, err := d.engine(host)
	if err != nil {
		return contract.ContainerRef{}, err
	}
	ref := contract.ContainerRef{Node: d.name, Role: s.Labels[LabelRole], Name: s.Name}
	run := s.Image // a pinned image runs by the ID it resolves to (pinned.go)
	if _, pinned := policy.Digest(s.Image); pinned {
		if _, run, err = d.resolveImage(ctx, eng, addr, s.Image); err != nil {
			return ref, err
		}
	}
	want := s.hash()
	for attempt := 0; ; attempt++ {
		got, err := eng.ContainerInspect(ctx, s.Name, client.ContainerInspectOptions{})
		switch {
		case cerrdefs.IsNotFound(err):
			opts, err := s.createOptions()
			if err != nil {
				return ref, temporal.NewNonRetryableApplicationError(fmt.Sprintf("container %s: %v", s.Name, err), contract.ErrBadRequest, nil)
			}
			opts.Config.Image = run
			created, err := eng.ContainerCreate(ctx, opts)
			if cerrdefs.IsConflict(err) && attempt < 3 {
				continue // created meanwhile by an attempt we did not see finish
			}
			if cerrdefs.IsNotFound(err) {
				return ref, imageMissing(s.Image)
			}
			if err != nil {
				return ref, engineError(addr, "create "+s.Name, err)
			}
			ref.ID = created.ID
			if err := copySecretFiles(ctx, eng, created.ID, s.Files); err != nil {
				_, _ = eng.ContainerRemove(ctx, created.ID, client.ContainerRemoveOptions{Force: true})
				return ref, engineError(addr, "copy secret files into "+s.Name, err)
			}
			d.logger().Info("container created", zap.String("name", s.Name), zap.String("hash", want))
		case err != nil:
			return ref, engineError(addr, "inspect "+s.Name, err)
		case got.Container.Config == nil || got.Container.Config.Labels[LabelCluster] != s.Labels[LabelCluster]:
			// Never replace what another cluster, or not tpdeploy, owns.
			owner := "no tpdeploy cluster"
			if got.Container.Config != nil && got.Container.Config.Labels[LabelCluster] != "" {
				owner = "cluster " + got.Container.Config.Labels[LabelCluster]
			}
			return ref, temporal.NewNonRetryableApplicationError(fmt.Sprintf("a container named %s exists and belongs to %s: remove or rename it", s.Name, owner), contract.ErrBadRequest, nil)
		case !replace && got.Container.Config.Labels[LabelSpecHash] == want &&
			(s.Labels[LabelIntent] == "" || got.Container.Config.Labels[LabelIntent] != ""):
			// (With signed intent, a container started before it was required is replaced.)
			ref.ID, ref.Adopted = got.Container.ID, true
			if got.Container.State != nil && got.Container.State.Running {
				return ref, nil
			}
		default:
			if err := d.removeContainer(ctx, eng, addr, got.Container.ID, s.Options.StopTimeout); err != nil {
				return ref, err
			}
			d.logger().Info("container replaced", zap.String("name", s.Name), zap.Bool("forced", replace))
			replace = false
			continue
		}
		if _, err := eng.ContainerStart(ctx, ref.ID, client.ContainerStartOptions{}); err != nil {
			return ref, engineError(addr, "start "+s.Name, err)
		}
		return ref, nil
	}
}

// containerAllowed checks a container against the node's policy before anything is made:
// its image, its env names, and each host path it binds (by the policy's rules and as it
// resolves on the node, refusing links).
func (d *docker) containerAllowed(s containerSpec) error {
	err := d.allowed(func(p policy.Policy) error {
		errs := []error{p.CheckImage(s.Image), p.CheckEnv(envNames(s.Env)...)}
		for _, b := range s.Binds {
			src, _, _ := strings.Cut(b, ":")
			// The policy names the node's paths; a source the engine would resolve again
			// must be one no container can swap (policy.CheckBind).
			errs = append(errs, p.CheckBind(d.mounts.nodePath(src), strings.HasSuffix(b, ":ro")))
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return err
	}
	for _, b := range s.Binds {
		src, _, _ := strings.Cut(b, ":")
		if err := d.mounts.bindSource(d.mounts.nodePath(src)); err != nil {
			return err
		}
	}
	return nil
}

// removeContainer stops a container gracefully, then removes it; gone already is fine.
func (d *docker) removeContainer(ctx context.Context, eng containerEngine, addr, id string, timeout time.Duration) error {
	secs := int(timeout.Seconds())
	if _, err := eng.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &secs}); err != nil && !cerrdefs.IsNotFound(err) {
		return engineError(addr, "stop "+id[:min(12, len(id))], err)
	}
	if _, err := eng.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return engineError(addr, "remove "+id[:min(12, len(id))], err)
	}
	return nil
}

// ownContainer refuses a container that is not one of this node's tpdeploy containers of
// the given cluster ("" for any cluster, the name then being the cluster's own) and role:
// an exec, a read of vLLM's output or a stop acts only on what the agent itself started,
// whatever name a request gives.
func (d *docker) ownContainer(name string, cfg *container.Config, cluster string, roles ...string) error {
	var l map[string]string
	if cfg != nil {
		l = cfg.Labels
	}
	c := l[LabelCluster]
	switch {
	case c == "" || l[LabelNode] != d.name || !slices.Contains(roles, l[LabelRole]):
		return d.deny("container %s is not one of this node's tpdeploy containers (role %s)", name, strings.Join(roles, " or "))
	case cluster != "" && c != cluster:
		return d.deny("container %s belongs to cluster %s, not %s", name, c, cluster)
	case strings.TrimPrefix(name, "/") != contract.ContainerName(c, d.name, l[LabelRole]):
		return d.deny("container %s is not named as tpdeploy names cluster %s's %s", name, c, l[LabelRole])
	case d.enforced() && l[LabelIntent] == "":
		return d.deny("container %s was not started for a signed spec (it predates trusted_keys on this node): redeploy to replace it", name)
	}
	return nil
}

// engine is the node's engine at host, if the node's policy allows that address.
func (d *docker) engine(host string) (containerEngine, string, error) {
	host = cmp.Or(host, os.Getenv("DOCKER_HOST"), DefaultDockerHost)
	if err := d.allowed(func(p policy.Policy) error { return p.CheckDockerHost(host) }); err != nil {
		return nil, host, err
	}
	return d.engines.engine(host)
}

// clusterFilter selects the cluster's containers on this node by their labels.
func (d *docker) clusterFilter(cluster string) client.Filters {
	f := client.Filters{}
	f.Add("label", LabelCluster+"="+cluster, LabelNode+"="+d.name)
	return f
}

// rayStatusSummary is Ray's own account for an error message, or "" when it cannot be had.
func (d *docker) rayStatusSummary(ctx context.Context, req contract.PlacementRequest) string {
	if req.RayHead == "" {
		return ""
	}
	eng, _, err := d.engine(req.DockerHost)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := execRayStatus(ctx, eng, req.RayHead)
	if err != nil {
		return fmt.Sprintf(" (ray status: %v)", err)
	}
	return " (ray status: " + st.String() + ")"
}

// stopVLLM stops vLLM in the head's container (SIGTERM, then SIGKILL after the stop
// timeout) and reports whether one was running.
func (d *docker) stopVLLM(ctx context.Context, eng containerEngine, addr, head string) error {
	secs := max(int(d.opts.StopTimeout.Seconds()), 1)
	r, err := execIn(ctx, eng, head, shScript(vllmStopScript, strconv.Itoa(secs)), nil)
	if err != nil {
		return engineError(addr, "stop vllm in "+head, err)
	}
	if r.ExitCode != 0 {
		return temporal.NewApplicationError(fmt.Sprintf("stop vllm in %s: exit %d: %s", head, r.ExitCode, strings.TrimSpace(r.Stderr)), contract.ErrDocker)
	}
	return nil
}
