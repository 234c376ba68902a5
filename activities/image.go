package activities

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/release"
)

// Images reads what an image holds (ReadImage), keeping the answer by image ID.
type Images struct {
	*nodeBase
	docker *docker
	cache  imageCache
}

// LabelImageRead marks the short-lived containers that read an image (shortlived.go), so a
// leftover (an agent killed mid-read) can be found and removed; LabelNode says whose.
const LabelImageRead = "tpdeploy.image-read"

// imageReadTimeout bounds one read: the script only globs a few directories.
const imageReadTimeout = 30 * time.Second

// imageReader is what reading an image needs of a node's engine.
type imageReader interface {
	ImageInspect(ctx context.Context, image string, o ...client.ImageInspectOption) (client.ImageInspectResult, error)
	ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerStart(ctx context.Context, id string, o client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerWait(ctx context.Context, id string, o client.ContainerWaitOptions) client.ContainerWaitResult
	ContainerLogs(ctx context.Context, id string, o client.ContainerLogsOptions) (client.ContainerLogsResult, error)
	ContainerRemove(ctx context.Context, id string, o client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
}

// ReadImage reports what the spec's image holds on this node: vLLM, Ray, torch, NCCL and
// Python versions, whether `ray` is on PATH and libibverbs is installed, and the image
// ID. It runs release.ReadScript in a container of the image with no network, a
// read-only root, no capabilities and no mounts, and keeps the answer by image ID: an
// image ID names its content, so a redeploy of an unchanged image costs one inspect.
func (im *Images) ReadImage(ctx context.Context, req contract.ImageRequest) (release.Image, error) {
	if err := im.checkNode(req.Node); err != nil {
		return release.Image{}, err
	}
	if err := im.allowed(func(p policy.Policy) error {
		return errors.Join(p.CheckImage(req.Image), p.CheckDockerHost(req.DockerHost))
	}); err != nil {
		return release.Image{}, err
	}
	eng, addr, err := im.docker.engine(req.DockerHost)
	if err != nil {
		return release.Image{}, err
	}
	// A pinned image is resolved to its content and read by its ID (pinned.go).
	id, run, err := im.docker.resolveImage(ctx, eng, addr, req.Image)
	if err != nil {
		return release.Image{}, err
	}
	if img, ok := im.cache.get(id); ok {
		img.Node, img.Ref, img.Cached = im.name, req.Image, true
		return img, nil
	}
	out, err := im.runImageRead(ctx, eng, run, id)
	if err != nil {
		return release.Image{}, fmt.Errorf("%s: read image %s: %w", im.name, req.Image, err)
	}
	img, err := release.ParseRead(out)
	if err != nil {
		return release.Image{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("%s: image %s: %v", im.name, req.Image, err), contract.ErrImageUnreadable, nil)
	}
	img.ID = id
	im.cache.put(img)
	img.Node, img.Ref = im.name, req.Image
	return img, nil
}

// runImageRead runs the read script in a fresh container of image and returns its output.
// The container is removed on every way out, a failed create too: a create whose answer
// was lost (the deadline passed while the engine made it) leaves a container all the same,
// which its name, chosen here, finds.
func (im *Images) runImageRead(ctx context.Context, eng imageReader, image, id string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, imageReadTimeout)
	defer cancel()
	name := "tpdeploy-image-read-" + strings.ToLower(rand.Text()[:16])
	defer func() {
		if err := removeNow(ctx, eng, name); err != nil {
			im.logger().Warn("remove the image-read container", zap.String("container", name), zap.Error(err))
		}
	}()
	created, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image: image, Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{release.ReadScript},
			Labels: map[string]string{LabelImageRead: id, LabelNode: im.name, LabelNetwork: im.docker.opts.Network}, NetworkDisabled: true,
		},
		HostConfig: &container.HostConfig{
			NetworkMode: "none", ReadonlyRootfs: true, CapDrop: []string{"ALL"},
			SecurityOpt: []string{"no-new-privileges"},
		},
	})
	if err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	wait := eng.ContainerWait(ctx, created.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := eng.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		// An image without a shell fails here, with the engine's own words.
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("start: %v", err), contract.ErrImageUnreadable, nil)
	}
	var code int64
	select {
	case r := <-wait.Result:
		code = r.StatusCode
	case err := <-wait.Error:
		return "", fmt.Errorf("wait: %w", err)
	case <-ctx.Done():
		return "", fmt.Errorf("no answer within %s: %w", imageReadTimeout, ctx.Err())
	}
	logs, err := eng.ContainerLogs(ctx, created.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "", fmt.Errorf("logs: %w", err)
	}
	defer logs.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, io.LimitReader(logs, release.MaxReadOutput)); err != nil {
		return "", fmt.Errorf("logs: %w", err)
	}
	if code != 0 {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("the read script exited %d: %s", code,
			strings.TrimSpace(tail(stderr.String()+stdout.String(), 400))), contract.ErrImageUnreadable, nil)
	}
	return stdout.String(), nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// imageCache keeps image reads by image ID. Bounded: a node holds few vLLM images, and an
// agent asked about many (a hostile caller) forgets the oldest.
type imageCache struct {
	mu    sync.Mutex
	byID  map[string]release.Image
	order []string
}

const maxCachedImages = 32

func (c *imageCache) get(id string) (release.Image, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	img, ok := c.byID[id]
	return img, ok
}

func (c *imageCache) put(img release.Image) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[string]release.Image{}
	}
	if _, ok := c.byID[img.ID]; !ok {
		c.order = append(c.order, img.ID)
	}
	c.byID[img.ID] = img
	for len(c.order) > maxCachedImages {
		delete(c.byID, c.order[0])
		c.order = c.order[1:]
	}
}
