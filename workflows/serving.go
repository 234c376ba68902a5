package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/metrics"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// waitServing follows vLLM on the head until it serves, in bounded watches that each
// return its progress, so the workflow's queries and UI details stay current (a few events
// per report, not per line). Over Ray the head's watch also checks Ray's node table against
// the plan. Under executor mp every headless rank is followed on its own node at the same
// time: a headless rank that fails or dies is not noticed by rank 0 (vLLM's executor
// monitors only its own node's workers, NCCL has no timeout), so only its own node can say.
func (d *deployment) waitServing(ctx workflow.Context) error {
	head := d.spec.Head().Name
	np, _ := d.state.Plan.Node(head)
	endpoint := fmt.Sprintf("http://%s:%d", np.Address, d.spec.Ports.VLLM)
	d.result.Endpoint = endpoint
	refs := map[string]contract.ContainerRef{}
	for _, c := range d.state.Containers {
		if c.Role == contract.RoleVLLM {
			refs[c.Node] = c
		}
	}
	rayPlan, headless := d.state.Plan, []string(nil)
	if d.spec.Executor == spec.ExecutorMP {
		rayPlan, headless = nil, d.workers()
	}
	return d.step(ctx, PhaseWaitingUntilServing, "waiting for vllm on "+head, func() error {
		every := d.req.ReportEvery.D()
		if every <= 0 {
			every = 10 * time.Second
		}
		o := watchStep(d.spec, every)
		wctx, stopRanks := workflow.WithCancel(ctx)
		defer stopRanks()
		failed := workflow.NewChannel(ctx)
		for _, node := range headless {
			d.watchHeadlessRank(wctx, node, refs[node], o, every, failed)
		}
		deadline := workflow.Now(ctx).Add(d.spec.Timeouts.Serving.D())
		cursor := contract.ServingProgress{}
		// The load's progress: a new output line or a new shard moves it; standing still
		// for timeouts.load_stall ends the wait (a wedged engine, a hung rank print
		// nothing more, and the serving bound is half an hour).
		// The time standing still is the workflow's clock, or the watches' own measure of
		// how long they followed (recorded in their results), whichever is longer.
		stall := d.spec.Timeouts.LoadStallTimeout()
		moved := workflow.Now(ctx)
		var watched time.Duration
		for {
			var p contract.ServingProgress
			var err error
			var rankErr *stepError
			hctx, stopHead := workflow.WithCancel(ctx)
			f := workflow.ExecuteActivity(d.onNode(hctx, head, "watch vllm on "+head, o), contract.ActivityWatchServing,
				contract.WatchRequest{Node: head, Container: refs[head], Spec: d.spec, Endpoint: endpoint, Cursor: cursor, ReportWithin: every, Plan: rayPlan, Engine: d.state.Engine, DataPlane: d.state.DataPlane,
					Intent: d.req.Intent})
			sel := workflow.NewSelector(ctx)
			sel.AddFuture(f, func(f workflow.Future) { err = f.Get(ctx, &p) })
			sel.AddReceive(failed, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, &rankErr) })
			sel.Select(ctx)
			if rankErr != nil {
				stopHead()
				_ = f.Get(ctx, nil) // the head's watch acknowledges the cancel
				return rankErr
			}
			stopHead()
			if err != nil {
				return classify("wait until serving", head, err)
			}
			d.state.Progress = p
			d.setPhase(ctx, PhaseWaitingUntilServing, describeProgress(p, head))
			if p.ShardsTotal > 0 {
				metrics.Workflow(ctx).Shards(d.spec.Name, head, p.ShardsLoaded, p.ShardsTotal)
			}
			if p.Serving {
				return nil
			}
			if p.Lines != cursor.Lines || p.ShardsLoaded != cursor.ShardsLoaded || p.Phase != cursor.Phase {
				moved, watched = workflow.Now(ctx), 0
			} else if watched += p.Elapsed; max(workflow.Now(ctx).Sub(moved), watched) >= stall {
				still := max(workflow.Now(ctx).Sub(moved), watched)
				last := p.LastLine
				if last == "" {
					last = "no output yet"
				}
				return &stepError{Step: "wait until serving", Node: head, Type: contract.ErrLoadStalled,
					Msg: fmt.Sprintf("vllm on %s made no progress for %s (timeouts.load_stall %s): %s; last line: %s",
						head, still.Round(time.Second), stall, describeProgress(p, head), last)}
			}
			if !workflow.Now(ctx).Before(deadline) {
				return &stepError{Step: "wait until serving", Node: head, Type: contract.ErrStepTimeout,
					Msg: fmt.Sprintf("not serving after %s (last: %s)", d.spec.Timeouts.Serving.D(), describeProgress(p, head))}
			}
			cursor = p
		}
	})
}

// watchHeadlessRank follows one headless rank (executor mp) until ctx is cancelled, and
// sends its failure, if it fails, on failed.
func (d *deployment) watchHeadlessRank(ctx workflow.Context, node string, ref contract.ContainerRef, o stepOptions, every time.Duration, failed workflow.Channel) {
	workflow.Go(ctx, func(gctx workflow.Context) {
		cursor := contract.ServingProgress{}
		for {
			var p contract.ServingProgress
			err := workflow.ExecuteActivity(d.onNode(gctx, node, "watch vllm rank on "+node, o), contract.ActivityWatchServing,
				contract.WatchRequest{Node: node, Container: ref, Spec: d.spec, Cursor: cursor, ReportWithin: every, Headless: true, Engine: d.state.Engine, DataPlane: d.state.DataPlane,
					Intent: d.req.Intent},
			).Get(gctx, &p)
			if gctx.Err() != nil {
				return
			}
			if err != nil {
				failed.Send(gctx, classify("vllm rank on "+node, node, err))
				return
			}
			cursor = p
		}
	})
}

func describeProgress(p contract.ServingProgress, node string) string {
	switch {
	case p.Serving:
		return "serving on " + node
	case p.ShardsTotal > 0:
		return fmt.Sprintf("loading weights: %d/%d shards on %s", p.ShardsLoaded, p.ShardsTotal, node)
	case p.Phase != "":
		return fmt.Sprintf("vllm %s on %s", p.Phase, node)
	default:
		return "waiting for vllm on " + node
	}
}
