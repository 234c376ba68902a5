package activities

import (
	"context"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/lab"
	"github.com/tpdeploy/tpdeploy/policy"
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

// Images built or loaded on the node have no repository digest: they are pinned by their
// image ID. The agent preflights, reads and runs exactly that image, by its ID; an image by
// tag is refused where the policy requires pinning (PolicyDenied naming the node, the
// setting and the spec's field); a digest the node holds no image of, or one of an image
// that is not the spec's name, is ImageMissing.
func TestPinnedImageByImageID(t *testing.T) {
	eng := engineForTest(t)
	ctx := context.Background()
	sim, err := eng.ImageInspect(ctx, lab.SimImage)
	if err != nil {
		t.Fatal(err)
	}
	chatter, err := eng.ImageInspect(ctx, chatterImage)
	if err != nil {
		t.Fatal(err)
	}
	c := testCluster(t)
	pol, err := policy.Parse([]byte("require_pinned_images: true\nallowed_images: [\"tpdeploy/*:*\"]\nallowed_mounts: [\""+c.HFCache+"\"]\n"), "/etc/tpdeploy/policy.yaml", policy.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("node-a")
	cfg.Policy = &pol
	a := New(cfg)

	pinned := c
	pinned.Image = lab.SimImage + "@" + sim.ID
	pre, err := a.Containers.PreflightNode(ctx, contract.PreflightRequest{Node: "node-a", Image: pinned.Image, Spec: &pinned})
	if err != nil || pre.ImageID != sim.ID {
		t.Fatalf("preflight of the pinned image: %+v, %v", pre, err)
	}
	read, err := a.Images.ReadImage(ctx, contract.ImageRequest{Node: "node-a", Image: pinned.Image})
	if err != nil || read.ID != sim.ID || read.VLLM == "" {
		t.Fatalf("read of the pinned image: %+v, %v", read, err)
	}
	ref, err := a.Ray.StartRayHead(ctx, headRequest(pinned, "run-1", nil))
	if err != nil {
		t.Fatalf("ray head of the pinned image: %v", err)
	}
	info, err := eng.ContainerInspect(ctx, ref.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Container.Config.Image != sim.ID || info.Container.Image != sim.ID {
		t.Errorf("the container runs %q (image %s), want the pinned ID %s", info.Container.Config.Image, info.Container.Image, sim.ID)
	}

	byTag := c
	byTag.Image = lab.SimImage
	for name, call := range map[string]func() error{
		"preflight": func() error {
			_, err := a.Containers.PreflightNode(ctx, contract.PreflightRequest{Node: "node-a", Image: byTag.Image, Spec: &byTag})
			return err
		},
		"image read": func() error {
			_, err := a.Images.ReadImage(ctx, contract.ImageRequest{Node: "node-a", Image: byTag.Image})
			return err
		},
		"ray head": func() error { _, err := a.Ray.StartRayHead(ctx, headRequest(byTag, "run-2", nil)); return err },
	} {
		app := appError(t, call())
		if app.Type() != contract.ErrPolicyDenied || !strings.HasPrefix(app.Message(), "node-a: ") ||
			!strings.Contains(app.Message(), "require_pinned_images: true in /etc/tpdeploy/policy.yaml") || !strings.Contains(app.Message(), "the spec's image field") {
			t.Errorf("%s of an image by tag: %s: %s", name, app.Type(), app.Message())
		}
	}

	for _, tc := range []struct{ image, want string }{
		{lab.SimImage + "@sha256:" + strings.Repeat("0", 64), "no image on this node has the content sha256:" + strings.Repeat("0", 64)},
		{lab.SimImage + "@" + chatter.ID, "the image " + chatter.ID + " is not named tpdeploy/sim on this node"},
		{chatterImage + "@" + sim.ID, "the image " + sim.ID + " is not named tpdeploy/chatter on this node"},
	} {
		s := c
		s.Image = tc.image
		_, err := a.Containers.PreflightNode(ctx, contract.PreflightRequest{Node: "node-a", Image: s.Image, Spec: &s})
		if app := appError(t, err); app.Type() != contract.ErrImageMissing || !strings.Contains(app.Message(), "node-a: image "+tc.image+" (the spec's image, pinned by content): "+tc.want) {
			t.Errorf("%s: %s: %s", tc.image, app.Type(), app.Message())
		}
	}
}
