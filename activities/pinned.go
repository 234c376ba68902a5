package activities

import (
	"context"
	"fmt"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

// Images pinned by content. A spec's image NAME[:TAG]@sha256:DIGEST names one image's
// content: its repository digest (pulled from a registry; Docker resolves it) or, for an
// image with none (built or loaded on the node, as every image in a lab without a
// registry), its image ID, which the agent inspects. The agent runs what it resolved by
// its ID, never the tag, so nothing retagged between the check and the start runs, and a
// TAG given with the digest must name that same image on this node. The node policy's
// require_pinned_images refuses an image without a digest (policy.CheckImage).

// imageInspector is what resolving an image needs of a node's engine.
type imageInspector interface {
	ImageInspect(ctx context.Context, image string, o ...client.ImageInspectOption) (client.ImageInspectResult, error)
}

// resolveImage is the image ID that ref names on the engine, and what to give the engine
// to run it: ref itself when it pins nothing, the image ID when it is pinned. A pinned
// ref that names no image on the node, or whose TAG names another, is ImageMissing
// naming the node and the spec's field.
func (d *docker) resolveImage(ctx context.Context, eng imageInspector, addr, ref string) (id, run string, err error) {
	digest, pinned := policy.Digest(ref)
	if !pinned {
		img, err := eng.ImageInspect(ctx, ref)
		if cerrdefs.IsNotFound(err) {
			return "", "", imageMissing(ref)
		}
		if err != nil {
			return "", "", engineError(addr, "inspect image "+ref, err)
		}
		return img.ID, ref, nil
	}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", "", d.pinMissing(ref, "it is not an image reference: %v", err)
	}
	name := reference.TrimNamed(named)
	var tagged reference.NamedTagged
	if t, ok := named.(reference.NamedTagged); ok {
		tagged, _ = reference.WithTag(name, t.Tag())
	}
	// The repository digest first (Docker resolves NAME@DIGEST itself), then the image ID,
	// which must carry the spec's name: allowed_images judged that name.
	repoDigest := name.String() + "@" + digest
	var found *client.ImageInspectResult
	why := fmt.Sprintf("no image on this node has the content %s (load the pinned image on the node, or pull it by digest)", digest)
	for _, try := range []string{reference.FamiliarString(name) + "@" + digest, digest} {
		img, err := eng.ImageInspect(ctx, try)
		if cerrdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", "", engineError(addr, "inspect image "+try, err)
		}
		byRepoDigest := slices.ContainsFunc(img.RepoDigests, func(d string) bool { return sameRef(d, repoDigest) })
		named := byRepoDigest || slices.ContainsFunc(img.RepoTags, func(t string) bool { return sameName(t, name.String()) })
		if byRepoDigest || img.ID == digest && named {
			found = &img
			break
		}
		if img.ID == digest {
			why = fmt.Sprintf("the image %s is not named %s on this node (its names: %s)", digest, reference.FamiliarString(name), strings.Join(img.RepoTags, ", "))
		}
	}
	if found == nil {
		return "", "", d.pinMissing(ref, "%s", why)
	}
	if tagged != nil {
		img, err := eng.ImageInspect(ctx, reference.FamiliarString(tagged))
		switch {
		case cerrdefs.IsNotFound(err):
			return "", "", d.pinMissing(ref, "%s is not on this node, and the digest is given with that tag", reference.FamiliarString(tagged))
		case err != nil:
			return "", "", engineError(addr, "inspect image "+reference.FamiliarString(tagged), err)
		case img.ID != found.ID:
			return "", "", d.pinMissing(ref, "%s on this node is %s, not the pinned image %s", reference.FamiliarString(tagged), img.ID, found.ID)
		}
	}
	return found.ID, found.ID, nil
}

// pinMissing is ImageMissing for a pinned image the node does not hold as pinned.
func (d *docker) pinMissing(ref, format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: image %s (the spec's image, pinned by content): %s", d.name, ref, fmt.Sprintf(format, args...)),
		contract.ErrImageMissing, nil)
}

// sameRef says two references are one, in any of Docker's spellings.
func sameRef(a, b string) bool {
	na, errA := reference.ParseNormalizedNamed(a)
	nb, errB := reference.ParseNormalizedNamed(b)
	return errA == nil && errB == nil && na.String() == nb.String()
}

// sameName says a tag (NAME:TAG, as RepoTags lists it) is of the repository name.
func sameName(tag, name string) bool {
	n, err := reference.ParseNormalizedNamed(tag)
	return err == nil && reference.TrimNamed(n).String() == name
}
