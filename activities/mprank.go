package activities

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// vLLM's own multi-node mode (executor mp): every node runs `vllm serve` in a container of
// its own (role vllm), node rank 0 on the head with the API server, --headless elsewhere;
// all of them join torch.distributed at the head's planned address and the master port.
// The container's main process only waits: vLLM is started in it by an exec, through the
// same wrapper that keeps vLLM in the Ray head's container (pid with start time, lock,
// exit code, output file read by offset), so the watch reads every node's vLLM the same
// way and the secrets (HF_TOKEN, and VLLM_API_KEY on rank 0) are in the exec's environment
// only, never in the container's configuration (`docker inspect`), as over Ray. The
// container's command is vLLM's argument vector, which the main process does not run: it
// is there so that the container's hash, and what `docker inspect` shows, follow the
// launch. After vLLM ends the container stays up, so its output and exit code can still be
// read; a stop ends vLLM first.
const vllmRankEntrypoint = vllmPrelude + `trap 'if alive; then kill -TERM "$pid" 2>/dev/null; while alive; do sleep 1; done; fi; exit 0' TERM INT
while :; do sleep 1 & wait $!; done
`

// mpArgs is one node's `vllm serve` in vLLM's own multi-node mode (vllm/engine/arg_utils.py:
// --nnodes, --node-rank, --master-addr, --master-port; --headless in cli_args.py).
// Each node's vLLM listens at its planned address (vllmArgs says why); only rank 0 serves
// the API, and a headless rank takes the option all the same.
func mpArgs(c spec.Cluster, masterAddr, host netip.Addr, rank int) []string {
	cmd := []string{"vllm", "serve", c.Model.Path,
		"--tensor-parallel-size", strconv.Itoa(c.Parallel.Tensor),
		"--pipeline-parallel-size", strconv.Itoa(max(c.Parallel.Pipeline, 1)),
		"--distributed-executor-backend", "mp",
		"--nnodes", strconv.Itoa(len(c.Nodes)), "--node-rank", strconv.Itoa(rank),
		"--master-addr", masterAddr.String(), "--master-port", strconv.Itoa(c.Ports.MasterPort())}
	if rank > 0 {
		cmd = append(cmd, "--headless")
	}
	if c.Model.Revision != "" {
		cmd = append(cmd, "--revision", c.Model.Revision)
	}
	cmd = append(cmd, "--host", host.String(), "--port", strconv.Itoa(c.Ports.VLLM), "--served-model-name", c.Model.ServedName)
	return append(cmd, c.Model.ExtraArgs...)
}

// rankSpec is the container of one node's vLLM in mp mode, and vLLM's argument vector,
// which an exec starts in it.
func rankSpec(req contract.RankRequest, o ContainerOptions) (containerSpec, []string, error) {
	n, _ := req.Spec.Node(req.Node)
	np, ok := req.Plan.Node(req.Node)
	head, hok := req.Plan.Node(req.Spec.Head().Name)
	if !ok || !hok {
		return containerSpec{}, nil, fmt.Errorf("the plan has no address for %s or the head", req.Node)
	}
	argv := mpArgs(req.Spec, head.Address, np.Address, req.Rank)
	s := roleSpec(req.Spec, req.Deployment, req.Node, contract.RoleVLLM, o)
	s.Entrypoint = []string{"/bin/sh", "-c", vllmRankEntrypoint, "sh"}
	s.Cmd, s.Env = argv, containerEnv(np, n, nil)
	return withCompileCache(s, req.Spec, o), argv, nil
}

// StartVLLMRank creates (or adopts) the node's vLLM container for its rank and starts vLLM
// in it (or adopts the vLLM running there with the same launch): a vLLM of the same launch
// that has ended is started again, since it would never join again.
func (v *VLLM) StartVLLMRank(ctx context.Context, req contract.RankRequest) (contract.ContainerRef, error) {
	if err := v.checkNode(req.Node); err != nil {
		return contract.ContainerRef{}, err
	}
	if err := v.checkSpec(req.Spec); err != nil {
		return contract.ContainerRef{}, err
	}
	// The plan's rank: the spec's order, or the cables' where the fabric places ranks.
	if want := req.Plan.NodeRank(req.Spec, req.Node); want != req.Rank {
		return contract.ContainerRef{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s is node rank %d in the plan, not %d", req.Node, want, req.Rank), contract.ErrBadRequest, nil)
	}
	c, err := v.signedSpec(ctx)
	if err == nil {
		err = v.net.signedRank(c, req)
	}
	if err != nil {
		return contract.ContainerRef{}, err
	}
	secrets, err := v.secretEnv(req.Spec.Secrets, req.Rank == 0)
	if err != nil {
		return contract.ContainerRef{}, err
	}
	n, _ := req.Spec.Node(req.Node)
	if req.Rank == 0 {
		if err := v.allowed(func(p policy.Policy) error { return p.CheckPorts(req.Spec.Ports.VLLM, req.Spec.Ports.MasterPort()) }); err != nil {
			return contract.ContainerRef{}, err
		}
	}
	s, argv, err := rankSpec(req, v.docker.opts)
	if err != nil {
		return contract.ContainerRef{}, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrBadRequest, nil)
	}
	np, _ := req.Plan.Node(req.Node)
	s = v.docker.withRDMA(s, np)
	ref, err := v.docker.ensureContainer(ctx, n.DockerHost, labelled(s, c), req.Replace)
	if err != nil {
		return ref, err
	}
	eng, addr, err := v.docker.engine(n.DockerHost)
	if err != nil {
		return ref, err
	}
	pid, adopted, err := v.launchVLLM(ctx, eng, addr, ref.Name, argv, secretList(secrets), nil, false)
	if err != nil {
		return ref, err
	}
	ref.PID, ref.Adopted = pid, ref.Adopted && adopted
	return ref, nil
}

// PrepareMaster readies the head for vLLM's rendezvous: when the head's rank 0 already
// runs this very launch it is adopted (the master port is its); otherwise the cluster's
// old rank 0, if any, is removed (it holds the port, and it is replaced anyway) and a
// listener opens on the master address and port, for the other nodes to dial before
// any rank starts — proving the path and the port, firewall included.
func (v *VLLM) PrepareMaster(ctx context.Context, req contract.RankRequest) (contract.MasterCheck, error) {
	if err := v.checkNode(req.Node); err != nil {
		return contract.MasterCheck{}, err
	}
	if err := v.checkSpec(req.Spec); err != nil {
		return contract.MasterCheck{}, err
	}
	if err := v.allowed(func(p policy.Policy) error { return p.CheckPorts(req.Spec.Ports.MasterPort()) }); err != nil {
		return contract.MasterCheck{}, err
	}
	if c, err := v.signedSpec(ctx); err != nil {
		return contract.MasterCheck{}, err
	} else if err := v.net.signedRank(c, req); err != nil {
		return contract.MasterCheck{}, err
	}
	n, _ := req.Spec.Node(req.Node)
	secrets, err := v.secretEnv(req.Spec.Secrets, req.Rank == 0)
	if err != nil {
		return contract.MasterCheck{}, err
	}
	s, argv, err := rankSpec(req, v.docker.opts)
	if err != nil {
		return contract.MasterCheck{}, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrBadRequest, nil)
	}
	eng, addr, err := v.docker.engine(n.DockerHost)
	if err != nil {
		return contract.MasterCheck{}, err
	}
	info, err := eng.ContainerInspect(ctx, s.Name, client.ContainerInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(err):
	case err != nil:
		return contract.MasterCheck{}, engineError(addr, "inspect "+s.Name, err)
	default:
		if info.Container.Config == nil || info.Container.Config.Labels[LabelCluster] != req.Spec.Name {
			return contract.MasterCheck{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("a container named %s exists and does not belong to cluster %s: remove or rename it", s.Name, req.Spec.Name), contract.ErrBadRequest, nil)
		}
		running := info.Container.State != nil && info.Container.State.Running
		if !req.Replace && running && info.Container.Config.Labels[LabelSpecHash] == s.hash() {
			if st, err := vllmProcStatus(ctx, eng, s.Name); err == nil && st.State == "running" && st.Hash == launchHash(argv, secretList(secrets), nil) {
				return contract.MasterCheck{Adopted: true}, nil
			}
		}
		if err := v.docker.removeContainer(ctx, eng, addr, info.Container.ID, v.docker.opts.StopTimeout); err != nil {
			return contract.MasterCheck{}, err
		}
		v.logger().Info("old rank 0 removed before the master port check", zap.String("container", s.Name))
	}
	np, _ := req.Plan.Node(req.Node)
	prefix := netip.PrefixFrom(np.Address, req.Plan.Subnet.Bits())
	res, err := v.reach.OpenProbeListeners(ctx, contract.ListenRequest{Node: req.Node, Addrs: []netip.Prefix{prefix}, Port: req.Spec.Ports.MasterPort()})
	if err != nil {
		return contract.MasterCheck{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("the master port %d on %s cannot be opened (something else holds it?): %v",
			req.Spec.Ports.MasterPort(), np.Address, err), contract.ErrBadRequest, nil)
	}
	return contract.MasterCheck{Listen: res}, nil
}
