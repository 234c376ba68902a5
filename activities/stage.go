package activities

import (
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// plannedAllowed builds every container this node will be asked to start for the plan —
// the very specs StartRayHead, StartRayWorker and StartVLLMRank build — and checks each
// against the node's policy, with the secrets its processes will be given and the ports
// they will hold. Run at preflight, a refusal stops nothing: found only when node-b's
// worker starts, the same refusal would come after the head had been replaced (on a
// serving cluster, after the old deployment stopped; workflows/stage.go).
func (cs *Containers) plannedAllowed(c spec.Cluster, plan netplan.Plan, d contract.Deployment, signed *spec.Cluster) error {
	n, ok := c.Node(cs.name)
	np, planned := plan.Node(cs.name)
	if !ok || !planned {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("preflight: the plan has no address for %s", cs.name), contract.ErrBadRequest, nil)
	}
	head := n.Role == spec.RoleHead
	var specs []containerSpec
	var ports []int
	switch c.Executor {
	case spec.ExecutorMP:
		rank := plan.NodeRank(c, cs.name)
		s, _, err := rankSpec(contract.RankRequest{Node: cs.name, Deployment: d, Spec: c, Plan: plan, Rank: rank}, cs.docker.opts)
		if err != nil {
			return temporal.NewNonRetryableApplicationError("preflight: "+err.Error(), contract.ErrBadRequest, nil)
		}
		specs = append(specs, s)
		if _, err := cs.vllm.secretEnv(c.Secrets, rank == 0); err != nil {
			return err
		}
		if head {
			ports = []int{c.Ports.MasterPort(), c.Ports.VLLM}
		}
	default:
		req := contract.StartRayRequest{Node: cs.name, Deployment: d, Spec: c, Plan: np, RayAddress: plan.RayAddress}
		if head {
			specs = append(specs, rayHeadSpec(req, cs.docker.opts))
			// vLLM runs in the head's container, with the secrets.
			if _, err := cs.vllm.secretEnv(c.Secrets, true); err != nil {
				return err
			}
			ports = []int{c.Ports.Ray, c.Ports.Dashboard, c.Ports.VLLM}
		} else {
			specs = append(specs, rayWorkerSpec(req, cs.docker.opts))
		}
	}
	if err := cs.allowed(func(p policy.Policy) error { return p.CheckPorts(ports...) }); err != nil {
		return err
	}
	for _, s := range specs {
		if err := cs.docker.containerAllowed(labelled(cs.docker.withRDMA(s, np), signed)); err != nil {
			return err
		}
	}
	return nil
}
