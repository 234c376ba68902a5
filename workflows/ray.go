package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// raySteps are the steps after the preflight and the model check over Ray: the Ray head
// (the swap of a staged deploy, stage.go), the workers joining it, the placement proof
// from Ray's GCS, the data-plane proof (dataplane.go), then vLLM inside the head's
// container. mp.go holds vLLM's own multi-node mode.
func (d *deployment) raySteps() []func(workflow.Context) error {
	return []func(workflow.Context) error{
		d.startHead, d.joinWorkers, d.checkPlacement, d.proveDataPlane, d.launch, d.waitServing,
	}
}

func (d *deployment) rayOptions() stepOptions {
	return deployStep(d.spec.Timeouts.RayStart.D(), stepAttempts)
}

func (d *deployment) startHead(ctx workflow.Context) error {
	head, _ := d.state.Plan.Node(d.spec.Head().Name)
	return d.step(ctx, PhaseRayHead, fmt.Sprintf("starting ray head on %s at %s", head.Name, d.state.Plan.RayAddress), func() error {
		d.removeOnNode(head.Name, contract.RoleRayHead)
		var ref contract.ContainerRef
		err := workflow.ExecuteActivity(d.onNode(ctx, head.Name, "ray head on "+head.Name+" "+head.Address.String(), d.rayOptions()),
			contract.ActivityStartRayHead, d.startRayRequest(head)).Get(ctx, &ref)
		if err != nil {
			return classify("start ray head", head.Name, err)
		}
		d.state.Containers = append(d.state.Containers, ref)
		return nil
	})
}

func (d *deployment) startRayRequest(n netplan.NodePlan) contract.StartRayRequest {
	return contract.StartRayRequest{
		Node: n.Name, Deployment: d.deploymentRef(), Spec: d.spec, Plan: n, RayAddress: d.state.Plan.RayAddress, Replace: d.req.Replace,
		Intent: d.req.Intent,
	}
}

func (d *deployment) joinWorkers(ctx workflow.Context) error {
	var workers []string
	for _, n := range d.spec.Nodes {
		if n.Role == spec.RoleWorker {
			workers = append(workers, n.Name)
		}
	}
	if len(workers) == 0 {
		return nil
	}
	return d.step(ctx, PhaseRayWorkers, fmt.Sprintf("joining %d ray workers to %s", len(workers), d.state.Plan.RayAddress), func() error {
		return forEachNode(ctx, "join ray worker", workers, func(node string) workflow.Future {
			np, _ := d.state.Plan.Node(node)
			d.removeOnNode(node, contract.RoleRayWorker)
			return workflow.ExecuteActivity(d.onNode(ctx, node, "ray worker on "+node+" "+np.Address.String(), d.rayOptions()),
				contract.ActivityStartRayWorker, d.startRayRequest(np))
		}, func(_ string, ref contract.ContainerRef) { d.state.Containers = append(d.state.Containers, ref) })
	})
}

func (d *deployment) checkPlacement(ctx workflow.Context) error {
	head := d.spec.Head().Name
	return d.step(ctx, PhasePlacement, fmt.Sprintf("checking that all %d nodes registered with ray under their planned addresses", len(d.spec.Nodes)), func() error {
		o := deployStep(d.spec.Timeouts.Placement.D(), stepAttempts)
		o.heartbeat = 20 * time.Second
		var report contract.PlacementReport
		err := workflow.ExecuteActivity(d.onNode(ctx, head, "check placement on "+head, o), contract.ActivityCheckPlacement,
			contract.PlacementRequest{Node: head, DockerHost: d.spec.Head().DockerHost, RayHead: contract.ContainerName(d.spec.Name, head, contract.RoleRayHead),
				Plan: *d.state.Plan, NeedGPUs: d.spec.WorldSize(), RayToken: d.spec.Secrets.RayToken},
		).Get(ctx, &report)
		if err != nil {
			return classify("check placement", head, err)
		}
		return nil
	})
}

func (d *deployment) launch(ctx workflow.Context) error {
	head := d.spec.Head().Name
	return d.step(ctx, PhaseLaunch, fmt.Sprintf("launching vllm serve %s (tp=%d, pp=%d) on %s", d.spec.Model.Path, d.spec.Parallel.Tensor, d.spec.Parallel.Pipeline, head), func() error {
		d.removeOnNode(head, contract.RoleVLLM)
		o := deployStep(d.spec.Timeouts.Launch.D(), stepAttempts)
		var ref contract.ContainerRef
		err := workflow.ExecuteActivity(d.onNode(ctx, head, "vllm on "+head, o), contract.ActivityLaunchVLLM,
			contract.LaunchRequest{Node: head, Deployment: d.deploymentRef(), Spec: d.spec, Plan: *d.state.Plan, Replace: d.req.Replace, Intent: d.req.Intent},
		).Get(ctx, &ref)
		if err != nil {
			return classify("launch vllm", head, err)
		}
		d.state.Containers = append(d.state.Containers, ref)
		return nil
	})
}
