package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/workflows"
)

// RollStep is one member's deploy in a roll: its cluster, its result, how long it took.
type RollStep struct {
	Member string
	Result workflows.DeployResult
	Took   time.Duration
	Err    error
}

// Roll deploys a spec's member clusters (spec.Cluster.Members: one per replica) one at a
// time, in replica order, each deploy waited for before the next starts. A member whose
// cluster serves another spec is a staged swap, whose router drain takes its traffic away
// first: the other replicas answer meanwhile, so a roll of a model with replicas stops no
// request and holds none. A member that fails ends the roll there, and the members after
// it keep what they serve. step, when not nil, hears each member as it ends. Each member
// is signed on its own (its spec is what its agents check).
func (c Controller) Roll(ctx context.Context, req workflows.DeployRequest, step func(RollStep)) ([]RollStep, error) {
	var out []RollStep
	for _, m := range req.Spec.Members() {
		r := req
		r.Spec, r.Intent = m, nil
		start := time.Now()
		s := RollStep{Member: m.Name}
		run, _, err := c.DeployOrJoin(ctx, r)
		if err == nil {
			err = c.wait(ctx, run.GetID(), run.GetRunID(), &s.Result)
		}
		s.Took, s.Err = time.Since(start), err
		out = append(out, s)
		if step != nil {
			step(s)
		}
		if err != nil {
			return out, fmt.Errorf("replica %s: %w (the replicas after it were not redeployed)", m.Name, err)
		}
	}
	return out, nil
}

// wait is the deploy's result, asked again after a poll that ends without one (the
// service's long poll times out on a long deploy).
func (c Controller) wait(ctx context.Context, id, runID string, v any) error {
	for {
		err := c.Client.GetWorkflow(ctx, id, runID).Get(ctx, v)
		var app *temporal.ApplicationError
		var canceled *temporal.CanceledError
		var term *temporal.TerminatedError
		var timeout *temporal.TimeoutError
		if err == nil || errors.As(err, &app) || errors.As(err, &canceled) || errors.As(err, &term) || errors.As(err, &timeout) || ctx.Err() != nil {
			return Reason(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
