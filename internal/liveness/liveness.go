// Package liveness heartbeats for a node agent's activities that do not heartbeat
// themselves, so that Temporal learns within a step's heartbeat timeout that an agent died
// mid-step, instead of after the step's start-to-close timeout (2 minutes for a Ray start:
// the fault matrix measured a deploy whose agents were killed while joining a worker
// serving 129 s later, all of it waiting for that timeout).
//
// An activity that records its own heartbeats (the serving watch, the model copy) is left
// to do so: from its first own heartbeat on, nothing is sent for it, so its details and its
// own notion of being stuck stay its own.
package liveness

import (
	"context"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
)

// Interceptor is the worker interceptor. Put it first in worker.Options.Interceptors, so
// it also covers the time an inner interceptor holds an activity.
type Interceptor struct {
	interceptor.WorkerInterceptorBase
}

// InterceptActivity implements interceptor.WorkerInterceptor.
func (*Interceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &inbound{}
	i.Next = next
	return i
}

type inbound struct {
	interceptor.ActivityInboundInterceptorBase
	out *outbound
}

type outbound struct {
	interceptor.ActivityOutboundInterceptorBase
	mu  sync.Mutex
	own bool
}

func (i *inbound) Init(next interceptor.ActivityOutboundInterceptor) error {
	i.out = &outbound{}
	i.out.Next = next
	return i.Next.Init(i.out)
}

// RecordHeartbeat marks the activity as one that heartbeats itself.
func (o *outbound) RecordHeartbeat(ctx context.Context, details ...any) {
	o.mu.Lock()
	o.own = true
	o.mu.Unlock()
	o.Next.RecordHeartbeat(ctx, details...)
}

func (o *outbound) heartbeatsItself() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.own
}

func (i *inbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	timeout := activity.GetInfo(ctx).HeartbeatTimeout
	if timeout <= 0 {
		return i.Next.ExecuteActivity(ctx, in)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(timeout / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if i.out.heartbeatsItself() {
					return
				}
				i.out.Next.RecordHeartbeat(ctx)
			}
		}
	}()
	return i.Next.ExecuteActivity(ctx, in)
}
