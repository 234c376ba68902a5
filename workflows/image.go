package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/release"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// readImages reads the spec's image on every node, refuses nodes whose images differ,
// and lets the image's vLLM release decide the executor and how it behaves (package
// release). It is the first step: the executor decides what is probed and started, and
// an image that cannot run the spec (ray on an image without Ray) fails in seconds,
// before any container starts. The executor decided replaces the spec's auto for the
// rest of the run; the spec's identity (its hash) stays the operator's.
func (d *deployment) readImages(ctx workflow.Context) error {
	return d.step(ctx, PhaseImages, fmt.Sprintf("reading image %s on %d nodes", d.spec.Image, len(d.spec.Nodes)), func() error {
		o := deployStep(d.spec.Timeouts.Preflight.D(), stepAttempts)
		got := map[string]release.Image{}
		err := forEachNode(ctx, "read image", nodeNames(d.spec.Nodes), func(node string) workflow.Future {
			n, _ := d.spec.Node(node)
			return workflow.ExecuteActivity(d.onNode(ctx, node, "read image on "+node, o), contract.ActivityReadImage,
				contract.ImageRequest{Node: node, DockerHost: n.DockerHost, Image: d.spec.Image})
		}, func(node string, img release.Image) { got[node] = img })
		if err != nil {
			return err
		}
		images := make([]release.Image, 0, len(d.spec.Nodes))
		for _, n := range d.spec.Nodes {
			images = append(images, got[n.Name])
		}
		d.state.Images = images
		var dec ReleaseDecision
		if err := workflow.ExecuteLocalActivity(asDecision(ctx), DecideRelease, ReleaseInput{Spec: d.req.Spec.WithDefaults(), Images: images}).Get(ctx, &dec); err != nil {
			return classify("read image", "", err)
		}
		d.state.Engine = &dec.Model
		d.state.Warnings = appendNew(d.state.Warnings, dec.Warnings...)
		d.spec.Executor = dec.Model.Executor
		d.setPhase(ctx, PhaseImages, fmt.Sprintf("vLLM %s on every node; executor %s (%s)", dec.Model.VLLM, dec.Model.Executor, dec.Model.Why))
		return nil
	})
}

// ReleaseInput is DecideRelease's input.
type ReleaseInput struct {
	Spec   spec.Cluster    `json:"spec"`
	Images []release.Image `json:"images"`
}

// ReleaseDecision is what the images decide.
type ReleaseDecision struct {
	Model    release.Model `json:"model"`
	Warnings []string      `json:"warnings,omitempty"`
}

// DecideRelease is the release decision as a local activity: pure, but recorded in
// history, so a later change to package release cannot change a running deploy's
// executor. The spec is validated again with the executor decided: auto that became mp
// must satisfy mp's rules (ranks per node).
func DecideRelease(_ context.Context, in ReleaseInput) (ReleaseDecision, error) {
	c := in.Spec
	head := c.Head()
	warnings, err := release.Compare(in.Images, head.Name, c.ImageMismatch)
	if err == nil {
		err = release.CheckImageEnv(in.Images)
	}
	if err == nil {
		var headImage release.Image
		for _, img := range in.Images {
			if img.Node == head.Name {
				headImage = img
			}
		}
		var m release.Model
		m, err = release.Decide(release.Layout{Executor: c.Executor, Head: head.Name, HeadEnv: head.Env, World: c.WorldSize(), Nodes: len(c.Nodes)}, headImage)
		if err == nil {
			c.Executor = m.Executor
			if verr := c.Validate(); verr != nil {
				return ReleaseDecision{}, temporal.NewNonRetryableApplicationError(
					fmt.Sprintf("%s; %v", m.Why, verr), contract.ErrSpecInvalid, nil)
			}
			return ReleaseDecision{Model: m, Warnings: warnings}, nil
		}
	}
	var re *release.Error
	if errors.As(err, &re) {
		return ReleaseDecision{}, temporal.NewNonRetryableApplicationError(re.Msg, re.Type, nil)
	}
	return ReleaseDecision{}, err
}

func appendNew(list []string, vs ...string) []string {
	for _, v := range vs {
		if !strings.Contains(strings.Join(list, "\x00"), v) {
			list = append(list, v)
		}
	}
	return list
}
