package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/raygcs"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Ray starts the Ray head and workers in the node's containers, and proves placement from
// Ray's own node table (CheckPlacement, RayNodesAlive).
type Ray struct {
	*nodeBase
	net    *hostNet
	docker *docker
	// vllm resolves the spec's secrets.ray_token on this node.
	vllm *VLLM
}

// StartRayHead starts (or adopts) the Ray head container.
func (r *Ray) StartRayHead(ctx context.Context, req contract.StartRayRequest) (contract.ContainerRef, error) {
	if err := r.checkNode(req.Node); err != nil {
		return contract.ContainerRef{}, err
	}
	if err := r.checkSpec(req.Spec); err != nil {
		return contract.ContainerRef{}, err
	}
	c, err := r.signedRay(ctx, req)
	if err != nil {
		return contract.ContainerRef{}, err
	}
	n, _ := req.Spec.Node(req.Node)
	if err := r.allowed(func(p policy.Policy) error { return p.CheckPorts(req.Spec.Ports.Ray, req.Spec.Ports.Dashboard) }); err != nil {
		return contract.ContainerRef{}, err
	}
	s, err := r.withRayToken(rayHeadSpec(req, r.docker.opts), req.Spec)
	if err != nil {
		return contract.ContainerRef{}, err
	}
	return r.docker.ensureContainer(ctx, n.DockerHost, labelled(r.docker.withRDMA(s, req.Plan), c), req.Replace)
}

// StartRayWorker starts (or adopts) a Ray worker container joined to the head.
func (r *Ray) StartRayWorker(ctx context.Context, req contract.StartRayRequest) (contract.ContainerRef, error) {
	if err := r.checkNode(req.Node); err != nil {
		return contract.ContainerRef{}, err
	}
	if err := r.checkSpec(req.Spec); err != nil {
		return contract.ContainerRef{}, err
	}
	c, err := r.signedRay(ctx, req)
	if err != nil {
		return contract.ContainerRef{}, err
	}
	if c != nil {
		if err := r.net.checkDialString(req.RayAddress); err != nil {
			return contract.ContainerRef{}, err
		}
	}
	n, _ := req.Spec.Node(req.Node)
	s, err := r.withRayToken(rayWorkerSpec(req, r.docker.opts), req.Spec)
	if err != nil {
		return contract.ContainerRef{}, err
	}
	return r.docker.ensureContainer(ctx, n.DockerHost, labelled(r.docker.withRDMA(s, req.Plan), c), req.Replace)
}

// withRayToken gives a Ray container the spec's secrets.ray_token, resolved on this node,
// as a file the agent copies into it before it starts (rayTokenFile; RAY_AUTH_TOKEN_PATH
// names it): the value is in no container configuration `docker inspect` shows.
func (r *Ray) withRayToken(s containerSpec, c spec.Cluster) (containerSpec, error) {
	token, err := r.vllm.rayToken(c.Secrets.RayToken)
	if err != nil || token == "" {
		return s, err
	}
	s.Files = map[string]string{rayTokenFile: token}
	return s, nil
}

// placementToken is the request's Ray token resolved on this node ("" for none), for a GCS
// on this node's own addresses only.
func (r *Ray) placementToken(req contract.PlacementRequest) (string, error) {
	if req.RayToken == nil {
		return "", nil
	}
	if err := r.net.checkOwnGCS(req.Plan.RayAddress); err != nil {
		return "", err
	}
	return r.vllm.rayToken(req.RayToken)
}

// rayAuthError is a GCS refusal of the token as RayAuthRequired, nil for any other error.
func rayAuthError(err error) error {
	var ae *raygcs.AuthError
	if !errors.As(err, &ae) {
		return nil
	}
	return temporal.NewNonRetryableApplicationError(ae.Error(), contract.ErrRayAuthRequired, nil)
}

// signedRay checks a Ray start against the verified spec: the planned address the node's
// own and as pinned, the head to join as pinned.
func (r *Ray) signedRay(ctx context.Context, req contract.StartRayRequest) (*spec.Cluster, error) {
	c, err := r.signedSpec(ctx)
	if c == nil || err != nil {
		return c, err
	}
	return c, r.net.signedNodePlan(c, req.Plan, req.RayAddress, c.WithDefaults().Ports.Ray)
}

// CheckPlacement proves, before vLLM starts, that every planned node is alive in Ray under
// its planned address with enough GPUs, reading Ray's node table from the GCS (package raygcs).
// A node registered under another address (the seed's failure 1) fails at once instead of
// after vLLM's 42-minute wait.
func (r *Ray) CheckPlacement(ctx context.Context, req contract.PlacementRequest) (contract.PlacementReport, error) {
	if err := r.checkNode(req.Node); err != nil {
		return contract.PlacementReport{}, err
	}
	// Give up a little before the step's own timeout, so the operator gets the reason (and
	// Ray's own view) rather than a bare timeout.
	deadline := time.Now().Add(time.Minute)
	if d := activity.GetInfo(ctx).Deadline; !d.IsZero() {
		deadline = d.Add(-3 * time.Second)
	}
	if err := r.net.checkDialString(req.Plan.RayAddress); err != nil {
		return contract.PlacementReport{}, err
	}
	if err := r.checkRayHead(ctx, req); err != nil {
		return contract.PlacementReport{}, err
	}
	// A head that died at start (its GCS port taken) leaves the address to whatever else
	// answers there: judge nothing from a node table that is not this head's.
	if gone := r.headGone(ctx, req); gone != nil {
		return contract.PlacementReport{}, gone
	}
	token, err := r.placementToken(req)
	if err != nil {
		return contract.PlacementReport{}, err
	}
	var last error
	for {
		activity.RecordHeartbeat(ctx, fmt.Sprint(last))
		nodes, err := r.net.registeredNodes(ctx, req.Plan.RayAddress, token)
		if auth := rayAuthError(err); auth != nil {
			return contract.PlacementReport{}, auth // no retry brings a token: say so now
		}
		if err == nil {
			report, wait, verr := raygcs.Verdict(req, nodes)
			if !wait {
				return report, verr
			}
			err = verr
		} else if gone := r.headGone(ctx, req); gone != nil {
			return contract.PlacementReport{}, gone // Ray's GCS will not come back: say so now
		}
		last = err
		if time.Now().After(deadline) {
			return contract.PlacementReport{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("placement not proven: %v%s", last, r.docker.rayStatusSummary(ctx, req)), contract.ErrNodeNotRegistered, nil)
		}
		select {
		case <-ctx.Done():
			return contract.PlacementReport{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkRayHead refuses a RayHead that is not one of this node's Ray head containers
// (`ray status` is run in it).
func (r *Ray) checkRayHead(ctx context.Context, req contract.PlacementRequest) error {
	if req.RayHead == "" {
		return nil
	}
	eng, addr, err := r.docker.engine(req.DockerHost)
	if err != nil {
		return err
	}
	info, err := eng.ContainerInspect(ctx, req.RayHead, client.ContainerInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(err):
		return nil // headGone says so
	case err != nil:
		return engineError(addr, "inspect "+req.RayHead, err)
	}
	return r.docker.ownContainer(req.RayHead, info.Container.Config, "", contract.RoleRayHead)
}

// headGone is a ContainerExited error when the head's Ray container is not running (the
// GCS died with it), nil when it runs or cannot be asked.
func (r *Ray) headGone(ctx context.Context, req contract.PlacementRequest) error {
	if req.RayHead == "" {
		return nil
	}
	eng, _, err := r.docker.engine(req.DockerHost)
	if err != nil {
		return nil
	}
	info, err := eng.ContainerInspect(ctx, req.RayHead, client.ContainerInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(err):
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("the ray head container %s is gone: Ray's GCS went with it", req.RayHead), contract.ErrContainerExited, nil)
	case err != nil || info.Container.State == nil || info.Container.State.Running:
		return nil
	}
	st := info.Container.State
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("the ray head container %s exited with code %d%s: Ray's GCS went with it",
		req.RayHead, st.ExitCode, map[bool]string{true: " (OOM-killed)"}[st.OOMKilled]), contract.ErrContainerExited, nil)
}

// RayNodesAlive checks once that every planned node is alive in Ray under its planned
// address (the supervisor's Ray check): a node that died or came back under another
// address is an error naming it. A GCS that does not answer is a retryable error, never
// by itself a verdict on the cluster.
func (r *Ray) RayNodesAlive(ctx context.Context, req contract.PlacementRequest) (contract.PlacementReport, error) {
	if err := r.checkNode(req.Node); err != nil {
		return contract.PlacementReport{}, err
	}
	if err := r.net.checkDialString(req.Plan.RayAddress); err != nil {
		return contract.PlacementReport{}, err
	}
	token, err := r.placementToken(req)
	if err != nil {
		return contract.PlacementReport{}, err
	}
	nodes, err := r.net.registeredNodes(ctx, req.Plan.RayAddress, token)
	if auth := rayAuthError(err); auth != nil {
		return contract.PlacementReport{}, auth
	}
	if err != nil {
		return contract.PlacementReport{}, temporal.NewApplicationError(err.Error(), contract.ErrRayUnreachable)
	}
	if dead := raygcs.DeadPlanned(req.Plan, nodes); dead != nil {
		return contract.PlacementReport{}, dead
	}
	report, wait, err := raygcs.Verdict(req, nodes)
	if wait {
		return report, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrNodeNotRegistered, nil)
	}
	return report, err
}
