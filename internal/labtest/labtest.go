// Package labtest is what the agent's own tests take from the lab (package lab): the
// simulator's image names and, for the tests that run containers, the lab's images built
// on this machine's Docker engine. The agent's tests import it rather than lab, so they
// depend on these few names, not on the lab's networks, seeds and operators, and the lab
// is free to change those.
package labtest

import (
	"context"
	"fmt"
	"sync"

	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/lab"
)

// SimImage is the simulator image of the lab's default release, which has Ray installed.
const SimImage = lab.SimImage

// ReleaseImage is the simulator image of the modelled vLLM release of that name
// (lab/README.md, "Releases"); a name the lab does not model panics, as a typo in a test
// should.
func ReleaseImage(name string) string {
	r, ok := lab.ReleaseNamed(name)
	if !ok {
		panic(fmt.Sprintf("labtest: the lab models no release %q", name))
	}
	return r.Image()
}

var built struct {
	once sync.Once
	err  error
}

// BuildImages builds the lab's simulator and node images on eng (not its Temporal image),
// once per test binary: each call returns the first one's error. The tests that call it
// need a Docker engine and fail without one.
func BuildImages(ctx context.Context, eng images.Engine) error {
	built.once.Do(func() {
		if err := lab.BuildImages(ctx, eng, ""); err != nil {
			built.err = fmt.Errorf("build the lab's images (Docker engine required): %w", err)
		}
	})
	return built.err
}
