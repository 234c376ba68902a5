package activities

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

// VLLM launches vLLM — in the Ray head's container (LaunchVLLM), or as the node's rank in
// vLLM's own multi-node mode (PrepareMaster, StartVLLMRank, mprank.go) — and follows it to
// serving (WatchServing, serving.go). It alone resolves the spec's secrets (secrets.go):
// they go into vLLM's exec environment and its readiness checks (the preflight asks it
// only whether they resolve, and drops the values: Containers.plannedAllowed).
type VLLM struct {
	*nodeBase
	net    *hostNet
	docker *docker
	// reach opens the mp master port's listener (PrepareMaster).
	reach *Reachability
}

// LaunchVLLM starts `vllm serve` inside the Ray head's container (vllmproc.go), or adopts
// the vLLM already running there: a retried launch never starts a second one.
func (v *VLLM) LaunchVLLM(ctx context.Context, req contract.LaunchRequest) (contract.ContainerRef, error) {
	if err := v.checkNode(req.Node); err != nil {
		return contract.ContainerRef{}, err
	}
	if err := v.checkSpec(req.Spec); err != nil {
		return contract.ContainerRef{}, err
	}
	secrets, err := v.secretEnv(req.Spec.Secrets, true)
	if err != nil {
		return contract.ContainerRef{}, err
	}
	n, _ := req.Spec.Node(req.Node)
	if err := v.allowed(func(p policy.Policy) error { return p.CheckPorts(req.Spec.Ports.VLLM) }); err != nil {
		return contract.ContainerRef{}, err
	}
	argv, err := launchArgs(req)
	if err != nil {
		return contract.ContainerRef{}, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrBadRequest, nil)
	}
	eng, addr, err := v.docker.engine(n.DockerHost)
	if err != nil {
		return contract.ContainerRef{}, err
	}
	head := contract.ContainerName(req.Spec.Name, req.Node, contract.RoleRayHead)
	info, err := eng.ContainerInspect(ctx, head, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return contract.ContainerRef{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("the ray head container %s is not there: vllm runs inside it, so ray must be started first", head), contract.ErrContainerExited, nil)
	}
	if err != nil {
		return contract.ContainerRef{}, engineError(addr, "inspect "+head, err)
	}
	if err := v.docker.ownContainer(head, info.Container.Config, req.Spec.Name, contract.RoleRayHead); err != nil {
		return contract.ContainerRef{}, err
	}
	if st := info.Container.State; st == nil || !st.Running {
		return contract.ContainerRef{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("the ray head container %s is not running: vllm runs inside it", head), contract.ErrContainerExited, nil)
	}
	env := secretList(secrets)
	noCarry := req.Plan.NCCL.NoCarryOver
	if len(noCarry) > 0 {
		env = append(env, "VLLM_CONFIG_ROOT="+vllmConfigRoot)
	}
	ref := contract.ContainerRef{Node: v.name, Role: contract.RoleVLLM, Name: head, ID: info.Container.ID}
	ref.PID, ref.Adopted, err = v.launchVLLM(ctx, eng, addr, head, argv, env, noCarry, req.Replace)
	return ref, err
}

// launchArgs is the head's `vllm serve` for a launch over Ray, listening at the head's
// planned address.
func launchArgs(req contract.LaunchRequest) ([]string, error) {
	np, ok := req.Plan.Node(req.Node)
	if !ok || !np.Address.IsValid() {
		return nil, fmt.Errorf("the plan has no address for %s, where vllm would listen", req.Node)
	}
	return vllmArgs(req.Spec, np.Address), nil
}

// secretList is the resolved secrets as an exec's KEY=VALUE environment, sorted.
func secretList(secrets map[string]string) []string {
	env := make([]string, 0, len(secrets))
	for k, v := range secrets {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// launchVLLM starts argv (`vllm serve ...`) in container through the wrapper
// (vllmproc.go), by an exec whose environment is env (the secrets, which are thus in no
// container's configuration), or adopts the vLLM running there with the same launch hash
// (never when replace): a retried launch never starts a second vLLM. It returns vLLM's pid
// (0 when it ended at once: the watch reads why).
func (v *VLLM) launchVLLM(ctx context.Context, eng containerEngine, addr, container string, argv, env, noCarry []string, replace bool) (int, bool, error) {
	mu := launchLock(container)
	mu.Lock()
	defer mu.Unlock()
	hash := launchHash(argv, env, noCarry)
	st, err := vllmProcStatus(ctx, eng, container)
	if err != nil {
		return 0, false, engineError(addr, "vllm status in "+container, err)
	}
	if st.State == "running" {
		if !replace && st.Hash == hash {
			return st.PID, true, nil
		}
		// Another launch (a changed spec), or a forced replacement.
		if err := v.docker.stopVLLM(ctx, eng, addr, container); err != nil {
			return 0, false, err
		}
		v.logger().Info("vllm replaced", zap.String("container", container), zap.Bool("forced", replace))
	}
	if len(noCarry) > 0 {
		tarball, err := nonCarryOverArchive(noCarry)
		if err != nil {
			return 0, false, err
		}
		if _, err := eng.CopyToContainer(ctx, container, client.CopyToContainerOptions{DestinationPath: "/", Content: bytes.NewReader(tarball)}); err != nil {
			return 0, false, engineError(addr, "write ray_non_carry_over_env_vars.json in "+container, err)
		}
	}
	if err := execDetached(ctx, eng, container, shScript(vllmLaunchScript, append([]string{hash}, argv...)...), env); err != nil {
		return 0, false, engineError(addr, "launch vllm in "+container, err)
	}
	// The wrapper records vLLM's pid at once; wait for it so the result names the process.
	for i := 0; i < 50; i++ {
		st, err := vllmProcStatus(ctx, eng, container)
		if err != nil {
			return 0, false, engineError(addr, "vllm status in "+container, err)
		}
		switch st.State {
		case "running":
			v.logger().Info("vllm launched", zap.String("container", container), zap.Int("pid", st.PID))
			return st.PID, false, nil
		case "exited":
			// Ended at once; the watch reads why.
			return 0, false, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, false, fmt.Errorf("vllm in %s: no process recorded 5 s after the launch", container)
}
