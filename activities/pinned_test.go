package activities

import (
	"context"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// fakeImages answers ImageInspect from a table of references.
type fakeImages map[string]image.InspectResponse

func (f fakeImages) ImageInspect(_ context.Context, ref string, _ ...client.ImageInspectOption) (client.ImageInspectResult, error) {
	img, ok := f[ref]
	if !ok {
		return client.ImageInspectResult{}, cerrdefs.ErrNotFound
	}
	return client.ImageInspectResult{InspectResponse: img}, nil
}

// A repository digest (an image pulled by digest) resolves through Docker's own lookup;
// a tag given with it must name the same image; the image runs by its ID.
func TestPinnedImageByRepositoryDigest(t *testing.T) {
	const digest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	const id, other = "sha256:aaaa", "sha256:bbbb"
	pulled := image.InspectResponse{ID: id, RepoTags: []string{"registry.internal/vllm/vllm-openai:v0.22.1"}, RepoDigests: []string{"registry.internal/vllm/vllm-openai@" + digest}}
	a := New(Config{Name: "node-a"})
	eng := fakeImages{"registry.internal/vllm/vllm-openai@" + digest: pulled, "registry.internal/vllm/vllm-openai:v0.22.1": pulled}
	for _, ref := range []string{"registry.internal/vllm/vllm-openai@" + digest, "registry.internal/vllm/vllm-openai:v0.22.1@" + digest} {
		got, run, err := a.Images.docker.resolveImage(context.Background(), eng, "unix:///var/run/docker.sock", ref)
		if err != nil || got != id || run != id {
			t.Errorf("%s: %s, run %s, %v; want %s run by its ID", ref, got, run, err, id)
		}
	}
	eng["registry.internal/vllm/vllm-openai:v0.22.1"] = image.InspectResponse{ID: other, RepoTags: []string{"registry.internal/vllm/vllm-openai:v0.22.1"}}
	_, _, err := a.Images.docker.resolveImage(context.Background(), eng, "unix:///var/run/docker.sock", "registry.internal/vllm/vllm-openai:v0.22.1@"+digest)
	if app := appError(t, err); app.Type() != contract.ErrImageMissing ||
		!strings.Contains(app.Message(), "node-a: image registry.internal/vllm/vllm-openai:v0.22.1@"+digest+" (the spec's image, pinned by content): registry.internal/vllm/vllm-openai:v0.22.1 on this node is sha256:bbbb, not the pinned image sha256:aaaa") {
		t.Errorf("the tag retagged: %s: %s", app.Type(), app.Message())
	}
}
