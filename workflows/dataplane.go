package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/dataplane"
	"github.com/tpdeploy/tpdeploy/internal/metrics"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// dataPlaneTimeout is the proof program's own deadline: torch's import, NCCL's init and a
// few collectives take seconds; a rank that never joins must not hold the deploy longer.
const dataPlaneTimeout = 90 * time.Second

// proveDataPlane runs the data-plane proof (package dataplane) in every node's Ray
// container at once, after placement and before vLLM: one NCCL all_reduce with NCCL's INFO
// lines on, read for the transport NCCL chose, its sum checked, bus bandwidth measured.
// With RDMA planned and a rank on sockets, data_plane require fails the deploy as
// DataPlaneDegraded naming the node and the likely cause; warn serves and says so.
func (d *deployment) proveDataPlane(ctx workflow.Context) error {
	plan := d.state.Plan
	if plan.DataPlane == spec.DataPlaneSkip || plan.DataPlane == "" || len(d.spec.Nodes) < 2 {
		return nil
	}
	head, _ := plan.Node(d.spec.Head().Name)
	master := fmt.Sprintf("%s:%d", head.Address, d.spec.Ports.MasterPort())
	rails := len(plan.UsedRails())
	what := "sockets (no RDMA planned)"
	if rails > 0 {
		what = fmt.Sprintf("RDMA on %d rail(s)", rails)
	}
	// On a graph of cables (a triangle, a ring) the proof's ranks go round the cables, so
	// its one all_reduce crosses each of them, and the verdict gives each its transport.
	expect := dataplane.Expect{Mode: plan.DataPlane, RDMA: rails > 0, Rails: rails}
	rank := func(node string) int { return plan.NodeRank(d.spec, node) }
	if f := plan.Fabric; f != nil && f.Used && rails == 0 {
		order := f.ProofOrder(d.spec.Head().Name)
		expect.RDMA, expect.Links, expect.Shape = true, netplan.ProofLinks(order), f.Name()
		what = fmt.Sprintf("RDMA on %d link(s) (%s)", len(expect.Links), expect.Shape)
		rank = func(node string) int { return slices.Index(order, node) }
	}
	return d.step(ctx, PhaseDataPlane, fmt.Sprintf("proving the data plane: one NCCL all_reduce across %d nodes, expecting %s", len(d.spec.Nodes), what), func() error {
		o := deployStep(dataPlaneTimeout+time.Minute, 1)
		nodes := nodeNames(d.spec.Nodes)
		results := map[string]contract.ProofResult{}
		err := forEachNode(ctx, "prove the data plane", nodes, func(node string) workflow.Future {
			n, _ := d.spec.Node(node)
			np, _ := plan.Node(node)
			role := contract.RoleRayWorker
			if n.Role == spec.RoleHead {
				role = contract.RoleRayHead
			}
			req := contract.ProofRequest{
				Node: node, DockerHost: n.DockerHost, Container: contract.ContainerName(d.spec.Name, node, role), Plan: np,
				Rank: rank(node), World: len(nodes), Master: master, Timeout: dataPlaneTimeout, Intent: d.req.Intent,
			}
			if d.spec.Executor == spec.ExecutorMP {
				// Nothing runs on a node before its rank: the proof gets a container of its
				// own, made as the rank's.
				rr := d.rankRequest(node, false)
				req.Container, req.Fresh = "", &rr
			}
			return workflow.ExecuteActivity(d.onNode(ctx, node, "data-plane proof on "+node, o), contract.ActivityProveDataPlane, req)
		}, func(node string, r contract.ProofResult) { results[node] = r })
		if err != nil {
			return err
		}
		var ranks []dataplane.Node
		for _, node := range nodes {
			r := results[node].Rank
			r.Verbs = d.imageHasVerbs(node)
			r.EnvDisables = envDisablingRDMA(d.spec, node)
			ranks = append(ranks, r)
		}
		v := dataplane.Decide(expect, ranks)
		d.state.DataPlane = &v
		d.state.Warnings = append(d.state.Warnings, v.Warnings...)
		rec := metrics.Workflow(ctx)
		rec.DataPlane(d.spec.Name, v.Transport, v.BusBW)
		for _, l := range v.Links {
			rec.DataPlaneLink(d.spec.Name, l.A+"-"+l.B, l.Transport)
		}
		if v.ErrType == "" {
			return nil
		}
		se := &stepError{Step: "prove the data plane", Type: v.ErrType, Msg: v.Err}
		for _, r := range ranks {
			if strings.Contains(v.Err, r.Node+" (rank") {
				se.Node = r.Node
				break
			}
		}
		return se
	})
}

// imageHasVerbs is what the image read found on the node (true when it was not read).
func (d *deployment) imageHasVerbs(node string) bool {
	for _, img := range d.state.Images {
		if img.Node == node {
			return img.Verbs
		}
	}
	return true
}

// envDisablingRDMA names a setting of the node's env that turns NCCL's RDMA off.
func envDisablingRDMA(c spec.Cluster, node string) string {
	n, _ := c.Node(node)
	if v := strings.TrimSpace(n.Env["NCCL_IB_DISABLE"]); v != "" && v != "0" {
		return "NCCL_IB_DISABLE=" + v
	}
	if v := n.Env["NCCL_NET"]; strings.EqualFold(strings.TrimSpace(v), "Socket") {
		return "NCCL_NET=" + v
	}
	return ""
}
