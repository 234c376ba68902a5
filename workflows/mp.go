package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// mpSteps are the steps after the preflight and the model check in vLLM's own multi-node
// mode: no Ray. The master port is proven before any rank starts: ranks already waiting
// for the store would dial the test listener and take it for the store. Preparing it
// removes an earlier rank 0 (the swap of a staged deploy, stage.go).
func (d *deployment) mpSteps() []func(workflow.Context) error {
	var adopted bool
	return []func(workflow.Context) error{
		func(ctx workflow.Context) error { var err error; adopted, err = d.proveMaster(ctx); return err },
		func(ctx workflow.Context) error {
			if adopted {
				return nil // rank 0 already runs this launch: its data plane serves
			}
			return d.proveDataPlane(ctx)
		},
		func(ctx workflow.Context) error {
			if workflow.GetVersion(ctx, mpRanksAtOnceVersion, workflow.DefaultVersion, 1) == 1 {
				return d.startAllRanks(ctx, adopted)
			}
			if err := d.startRanks(ctx, adopted); err != nil {
				return err
			}
			return d.launchRank0(ctx, adopted)
		},
		d.waitServing,
	}
}

// mpRanksAtOnceVersion marks the deploys that start rank 0 with the headless ranks, in one
// step, instead of after them (runs begun before it replay the two steps).
const mpRanksAtOnceVersion = "mp-ranks-at-once"

func (d *deployment) workers() []string {
	var out []string
	for _, n := range d.spec.Nodes {
		if n.Role != spec.RoleHead {
			out = append(out, n.Name)
		}
	}
	return out
}

func (d *deployment) rankRequest(node string, replace bool) contract.RankRequest {
	return contract.RankRequest{Node: node, Deployment: d.deploymentRef(), Spec: d.spec, Plan: *d.state.Plan,
		Rank: d.state.Plan.NodeRank(d.spec, node), Replace: replace, Intent: d.req.Intent}
}

// proveMaster has the head listen on the master address and port and every other node
// dial it, before any rank starts: the rendezvous path, and the port through any
// firewall, proven in seconds rather than after torch's 10-minute store timeout. When the
// head's rank 0 already runs this very launch (a redeploy of a serving spec) it is adopted
// and there is nothing to prove.
func (d *deployment) proveMaster(ctx workflow.Context) (adopted bool, err error) {
	head := d.spec.Head().Name
	hp, _ := d.state.Plan.Node(head)
	master := fmt.Sprintf("%s:%d", hp.Address, d.spec.Ports.MasterPort())
	err = d.step(ctx, PhaseMaster, fmt.Sprintf("checking that every node reaches the master address %s", master), func() error {
		o := deployStep(30*time.Second, stepAttempts)
		var chk contract.MasterCheck
		if err := workflow.ExecuteActivity(d.onNode(ctx, head, "master port on "+head, o), contract.ActivityPrepareMaster,
			d.rankRequest(head, d.req.Replace)).Get(ctx, &chk); err != nil {
			return classify("prepare the master port", head, err)
		}
		if chk.Adopted {
			adopted = true
			return nil
		}
		defer d.closeListeners(ctx, map[string]contract.ListenResult{head: chk.Listen})
		results := map[string][]netplan.PairResult{}
		err := forEachNode(ctx, "dial the master address", d.workers(), func(node string) workflow.Future {
			return workflow.ExecuteActivity(d.onNode(ctx, node, "dial "+master+" from "+node, o), contract.ActivityDialPeers,
				contract.DialRequest{Node: node, Targets: chk.Listen.Targets, Timeout: 3 * time.Second})
		}, func(node string, r []netplan.PairResult) { results[node] = r })
		if err != nil {
			return err
		}
		for _, node := range d.workers() {
			for _, r := range results[node] {
				if !r.OK {
					return &stepError{Step: "check the master address", Node: node, Type: contract.ErrC10dUnreachable,
						Msg: fmt.Sprintf("%s cannot reach the master address %s (%s): torch's rendezvous would fail there. Fix: open port %d on %s between the nodes, or set ports.master to a port that is open",
							node, master, r.Error, d.spec.Ports.MasterPort(), d.state.Plan.Subnet)}
				}
			}
		}
		return nil
	})
	return adopted, err
}

// startRanks starts the headless ranks (every node but the head), before rank 0, as
// vLLM's docs order them. After a new rank 0 was prepared, every rank is replaced: one left
// from an earlier rank 0 would never join the new one.
func (d *deployment) startRanks(ctx workflow.Context, adopted bool) error {
	workers := d.workers()
	if len(workers) == 0 {
		return nil
	}
	head, _ := d.state.Plan.Node(d.spec.Head().Name)
	return d.step(ctx, PhaseRanks, fmt.Sprintf("starting %d headless ranks joining %s:%d", len(workers), head.Address, d.spec.Ports.MasterPort()), func() error {
		return d.startRanksOn(ctx, "start headless rank", workers, adopted)
	})
}

// startRanksOn starts each node's rank at once (StartVLLMRank), the removal of each
// registered first, and records their containers.
func (d *deployment) startRanksOn(ctx workflow.Context, what string, nodes []string, adopted bool) error {
	o := deployStep(d.spec.Timeouts.Launch.D(), stepAttempts)
	return forEachNode(ctx, what, nodes, func(node string) workflow.Future {
		d.removeOnNode(node, contract.RoleVLLM)
		return workflow.ExecuteActivity(d.onNode(ctx, node, fmt.Sprintf("vllm rank %d on %s", d.state.Plan.NodeRank(d.spec, node), node), o),
			contract.ActivityStartVLLMRank, d.rankRequest(node, d.req.Replace || !adopted))
	}, func(_ string, ref contract.ContainerRef) { d.state.Containers = append(d.state.Containers, ref) })
}

// startAllRanks starts every node's rank at once: rank 0 on the head (the store, the
// engine and the API server) and the headless ranks on the others. The order does not
// matter to vLLM: a headless rank's workers dial the store on the master address until
// their timeout (torch's TCPStore client retries), and rank 0 waits for them there, so
// starting rank 0 last only delayed the load by one container start (make bench: 0.46 s
// of an 11.9 s deploy). After a new rank 0 was prepared, every rank is replaced.
func (d *deployment) startAllRanks(ctx workflow.Context, adopted bool) error {
	head := d.spec.Head().Name
	hp, _ := d.state.Plan.Node(head)
	nodes := append([]string{head}, d.workers()...)
	return d.step(ctx, PhaseAllRanks, fmt.Sprintf("starting rank 0 on %s and %d headless ranks joining %s:%d, at once (vllm serve %s, tp=%d, pp=%d)",
		head, len(nodes)-1, hp.Address, d.spec.Ports.MasterPort(), d.spec.Model.Path, d.spec.Parallel.Tensor, d.spec.Parallel.Pipeline), func() error {
		return d.startRanksOn(ctx, "start vllm rank", nodes, adopted)
	})
}

// launchRank0 starts node rank 0 on the head: the store, the engine and the API server.
func (d *deployment) launchRank0(ctx workflow.Context, adopted bool) error {
	head := d.spec.Head().Name
	return d.step(ctx, PhaseLaunchMP, fmt.Sprintf("launching vllm serve %s rank 0 on %s (tp=%d, pp=%d, %d nodes)", d.spec.Model.Path, head, d.spec.Parallel.Tensor, d.spec.Parallel.Pipeline, len(d.spec.Nodes)), func() error {
		d.removeOnNode(head, contract.RoleVLLM)
		o := deployStep(d.spec.Timeouts.Launch.D(), stepAttempts)
		var ref contract.ContainerRef
		err := workflow.ExecuteActivity(d.onNode(ctx, head, "vllm rank 0 on "+head, o), contract.ActivityStartVLLMRank,
			d.rankRequest(head, d.req.Replace || !adopted)).Get(ctx, &ref)
		if err != nil {
			return classify("launch vllm rank 0", head, err)
		}
		d.state.Containers = append(d.state.Containers, ref)
		return nil
	})
}
