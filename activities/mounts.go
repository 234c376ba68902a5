package activities

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/confined"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

// mounts are the node's allowed mounts (the policy's allowed_mounts), the only host
// directories the agent reads models from, serves, writes and bind-mounts. Every path
// below one is opened through package confined: beneath the mount's directory, following
// no link out of it.
type mounts struct {
	*nodeBase
	// hostRoot, when set, stands for the node's / (the lab: several nodes on one host).
	hostRoot string
}

// modelRoots are the node's allowed mounts, the only directories the agent reads models
// from, serves and writes: everything when the agent has no policy (tests).
func (m *mounts) modelRoots() []string {
	if m.policy == nil {
		return []string{"/"}
	}
	return m.policy.Mounts
}

// beneath opens the allowed mount a node path is under and returns it with the path
// relative to it. A path under none is PolicyDenied.
func (m *mounts) beneath(nodePath, what string) (*confined.Dir, string, error) {
	p := policy.Policy{Mounts: m.modelRoots()}
	if m.policy != nil {
		p = *m.policy
	}
	root, ok := p.MountRoot(nodePath)
	if !ok && m.policy == nil {
		return nil, "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s %q is not an absolute path", what, nodePath), contract.ErrBadRequest, nil)
	}
	if !ok {
		return nil, "", m.allowed(func(p policy.Policy) error {
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
	c, err := confined.Open(m.hostPath(root))
	if errors.Is(err, fs.ErrNotExist) {
		// An allowed mount not made yet (a fresh node's cache): the operator's directory,
		// made as the engine would make a bind mount's source.
		if err := os.MkdirAll(m.hostPath(root), 0o755); err != nil {
			return nil, "", fmt.Errorf("%s: allowed mount %s: %w", m.name, root, err)
		}
		c, err = confined.Open(m.hostPath(root))
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s: allowed mount %s: %w", m.name, root, err)
	}
	return c, rel, nil
}

// hostPath is a path of the node's filesystem as this agent reads it (under its host root,
// in the lab); empty stays empty.
func (m *mounts) hostPath(p string) string {
	if p == "" {
		return ""
	}
	return ContainerOptions{HostRoot: m.hostRoot}.HostPath(p)
}

// nodePath is hostPath's inverse, for paths the agent reports.
func (m *mounts) nodePath(p string) string {
	root := m.hostRoot
	if root == "" || p == "" {
		return p
	}
	if rel, err := filepath.Rel(root, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return "/" + filepath.ToSlash(rel)
	}
	return p
}

// bindSource makes sure a bind mount's source is a directory beneath an allowed mount
// with no symlink on the way there (the engine would follow one: an hf_cache that is a
// link to / would mount the host's root read-write), making it when it is not there (as
// the engine would, but without following links).
func (m *mounts) bindSource(nodePath string) error {
	dir, rel, err := m.beneath(nodePath, "host path")
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := dir.MkdirAll(rel); err != nil {
		if confined.IsRefusal(err) {
			return m.denyPath("host path "+nodePath, err)
		}
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: host path %s: %v", m.name, nodePath, err), contract.ErrBadRequest, nil)
	}
	return nil
}
