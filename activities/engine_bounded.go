package activities

import (
	"context"
	"time"

	"github.com/moby/moby/client"
)

// engineCallTimeout bounds one engine call that returns an answer (not a stream). An engine
// can hang (a dockerd deadlock, a stuck storage driver): without a bound a step would wait
// for its own start-to-close timeout, minutes; with one it fails in seconds as
// DockerUnreachable, which retries. The fault matrix measured a hung create holding the
// launch step for 2 minutes.
const engineCallTimeout = 30 * time.Second

// boundedEngine gives every call that returns an answer its own deadline. Calls that return
// a stream (logs, an exec's attached output) are bounded by their caller, which reads
// them.
type boundedEngine struct{ containerEngine }

func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

func (b boundedEngine) ServerVersion(ctx context.Context, o client.ServerVersionOptions) (client.ServerVersionResult, error) {
	ctx, cancel := bounded(ctx, engineCallTimeout)
	defer cancel()
	return b.containerEngine.ServerVersion(ctx, o)
}

func (b boundedEngine) ImageInspect(ctx context.Context, image string, o ...client.ImageInspectOption) (client.ImageInspectResult, error) {
	ctx, cancel := bounded(ctx, engineCallTimeout)
	defer cancel()
	return b.containerEngine.ImageInspect(ctx, image, o...)
}

func (b boundedEngine) ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	ctx, cancel := bounded(ctx, engineCallTimeout)
	defer cancel()
	return b.containerEngine.ContainerCreate(ctx, o)
}

func (b boundedEngine) ContainerStart(ctx context.Context, id string, o client.ContainerStartOptions) (client.ContainerStartResult, error) {
	ctx, cancel := bounded(ctx, engineCallTimeout)
	defer cancel()
	return b.containerEngine.ContainerStart(ctx, id, o)
}

func (b boundedEngine) ContainerInspect(ctx context.Context, id string, o client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	ctx, cancel := bounded(ctx, engineCallTimeout)
	defer cancel()
	return b.containerEngine.ContainerInspect(ctx, id, o)
}

func (b boundedEngine) ContainerList(ctx context.Context, o client.ContainerListOptions) (client.ContainerListResult, error) {
	ctx, cancel := bounded(ctx, engineCallTimeout)
	defer cancel()
	return b.containerEngine.ContainerList(ctx, o)
}

// ContainerStop waits for the container's own stop timeout before the engine kills it.
func (b boundedEngine) ContainerStop(ctx context.Context, id string, o client.ContainerStopOptions) (client.ContainerStopResult, error) {
	d := engineCallTimeout
	if o.Timeout != nil && *o.Timeout > 0 {
		d += time.Duration(*o.Timeout) * time.Second
	}
	ctx, cancel := bounded(ctx, d)
	defer cancel()
	return b.containerEngine.ContainerStop(ctx, id, o)
}

func (b boundedEngine) ContainerRemove(ctx context.Context, id string, o client.ContainerRemoveOptions) (client.ContainerRemoveResult, error) {
	ctx, cancel := bounded(ctx, engineCallTimeout)
	defer cancel()
	return b.containerEngine.ContainerRemove(ctx, id, o)
}

func (b boundedEngine) ExecCreate(ctx context.Context, id string, o client.ExecCreateOptions) (client.ExecCreateResult, error) {
	ctx, cancel := bounded(ctx, engineCallTimeout)
	defer cancel()
	return b.containerEngine.ExecCreate(ctx, id, o)
}

func (b boundedEngine) ExecInspect(ctx context.Context, id string, o client.ExecInspectOptions) (client.ExecInspectResult, error) {
	ctx, cancel := bounded(ctx, engineCallTimeout)
	defer cancel()
	return b.containerEngine.ExecInspect(ctx, id, o)
}

func (b boundedEngine) ExecStart(ctx context.Context, id string, o client.ExecStartOptions) (client.ExecStartResult, error) {
	ctx, cancel := bounded(ctx, engineCallTimeout)
	defer cancel()
	return b.containerEngine.ExecStart(ctx, id, o)
}

func (b boundedEngine) CopyToContainer(ctx context.Context, id string, o client.CopyToContainerOptions) (client.CopyToContainerResult, error) {
	ctx, cancel := bounded(ctx, engineCallTimeout)
	defer cancel()
	return b.containerEngine.CopyToContainer(ctx, id, o)
}
