//go:build integration

package activities

import (
	"context"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/labtest"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

// Images built or loaded on the node have no repository digest: they are pinned by their
// image ID. The agent preflights, reads and runs exactly that image, by its ID; an image by
// tag is refused where the policy requires pinning (PolicyDenied naming the node, the
// setting and the spec's field); a digest the node holds no image of, or one of an image
// that is not the spec's name, is ImageMissing.
func TestPinnedImageByImageID(t *testing.T) {
	eng := engineForTest(t)
	ctx := context.Background()
	sim, err := eng.ImageInspect(ctx, labtest.SimImage)
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
	pinned.Image = labtest.SimImage + "@" + sim.ID
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
	byTag.Image = labtest.SimImage
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
		{labtest.SimImage + "@sha256:" + strings.Repeat("0", 64), "no image on this node has the content sha256:" + strings.Repeat("0", 64)},
		{labtest.SimImage + "@" + chatter.ID, "the image " + chatter.ID + " is not named tpdeploy/sim on this node"},
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
