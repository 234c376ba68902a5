package activities

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.temporal.io/sdk/temporal"
	"golang.org/x/sys/unix"

	"github.com/tpdeploy/tpdeploy/confined"
	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/policy"
)

// The agent opens every path below one of the node's allowed mounts through package
// confined: beneath the mount's directory, following no link out of it.

// modelRoots are the node's allowed mounts, the only directories the agent reads models
// from, serves and writes: everything when the Node has no policy (tests).
func (a *Node) modelRoots() []string {
	if a.Policy == nil {
		return []string{"/"}
	}
	return a.Policy.Mounts
}

// beneath opens the allowed mount a node path is under and returns it with the path
// relative to it. A path under none is PolicyDenied.
func (a *Node) beneath(nodePath, what string) (*confined.Dir, string, error) {
	p := policy.Policy{Mounts: a.modelRoots()}
	if a.Policy != nil {
		p = *a.Policy
	}
	root, ok := p.MountRoot(nodePath)
	if !ok && a.Policy == nil {
		return nil, "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s %q is not an absolute path", what, nodePath), contract.ErrBadRequest, nil)
	}
	if !ok {
		return nil, "", a.allowed(func(p policy.Policy) error {
			err := p.CheckMount(nodePath)
			if err == nil { // unreachable: MountRoot agrees with CheckMount
				err = fmt.Errorf("%s %s is under no allowed mount", what, nodePath)
			}
			return fmt.Errorf("%s: %w", what, err)
		})
	}
	rel, err := filepath.Rel(root, filepath.Clean(nodePath))
	if err != nil {
		return nil, "", err
	}
	c, err := confined.Open(a.hostPath(root))
	if errors.Is(err, fs.ErrNotExist) {
		// An allowed mount not made yet (a fresh node's cache): the operator's directory,
		// made as the engine would make a bind mount's source.
		if err := os.MkdirAll(a.hostPath(root), 0o755); err != nil {
			return nil, "", fmt.Errorf("%s: allowed mount %s: %w", a.Name, root, err)
		}
		c, err = confined.Open(a.hostPath(root))
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s: allowed mount %s: %w", a.Name, root, err)
	}
	return c, rel, nil
}

// denyPath is a refusal of a path the kernel would not resolve beneath its root (a
// planted symlink): non-retryable, PolicyDenied, naming the path.
func (a *Node) denyPath(what string, err error) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: %s: %v", a.Name, what, err), contract.ErrPolicyDenied, nil)
}

// checkModelDir refuses a model directory (or cache) that is not beneath an allowed mount,
// or whose path there passes through a symlink. One that is not there yet is fine (the
// manifest says it is absent).
func (a *Node) checkModelDir(nodePath, what string) error {
	dir, rel, err := a.beneath(nodePath, what)
	if err != nil {
		return err
	}
	defer dir.Close()
	d, err := dir.OpenFile(rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		if confined.IsRefusal(err) {
			return a.denyPath(what+" "+nodePath, err)
		}
		return nil
	}
	return d.Close()
}
