package activities

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.temporal.io/sdk/temporal"
	"golang.org/x/sys/unix"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/policy"
)

// The agent runs as root and the directories it serves and writes (the Hugging Face cache,
// model directories) are also mounted read-write into containers that run whatever the
// model brings. Whatever a container plants there — a *.tpdeploy-partial that is a link
// to /root/.ssh/authorized_keys, a blobs/ that is a link to /etc, a config.json that is a
// link to /etc/shadow — must not make the agent read or write outside. So the agent opens
// every path below one of the node's allowed mounts with openat2(2), the kernel resolving
// it beneath the mount's directory:
//
//   - writes (and the directories leading to them) refuse every symlink
//     (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS): a planted link fails with ELOOP;
//   - reads of model files follow a link only while it stays beneath the mount
//     (RESOLVE_BENEATH): a Hugging Face snapshot's ../../blobs/<hash> links work, a link to
//     /etc/passwd or out through ../.. fails with EXDEV.
//
// Renames, links and removals act on a parent directory opened the same way (renameat,
// symlinkat, unlinkat never follow their last component).

const (
	resolveStrict = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
	resolveLinks  = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS
)

// confined is an allowed directory the agent opened; every path below it is relative.
type confined struct {
	root string // the host path, for messages
	dir  *os.File
}

func openConfined(root string) (*confined, error) {
	// The root itself is the operator's setting: it may be a link (e.g. /models on
	// another disk); what is below it is not trusted.
	f, err := os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &confined{root: root, dir: f}, nil
}

func (c *confined) Close() error { return c.dir.Close() }

// rel checks a path relative to the root: local, cleaned, "." for the root itself.
func relPath(rel string) (string, error) {
	rel = filepath.Clean(filepath.FromSlash(rel))
	if rel != "." && !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%q is not a path beneath the directory", rel)
	}
	return rel, nil
}

func (c *confined) openat2(dirfd int, rel string, flags int, mode uint32, resolve uint64) (*os.File, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolve}
	for {
		fd, err := unix.Openat2(dirfd, rel, &how)
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
			continue
		case err == unix.ENOSYS:
			return nil, &fs.PathError{Op: "openat2", Path: filepath.Join(c.root, rel), Err: errors.New("this kernel lacks openat2 (Linux 5.6 or later is needed), or a seccomp profile refuses it: the agent will not open paths below its roots without it")}
		case err != nil:
			return nil, &fs.PathError{Op: "open", Path: filepath.Join(c.root, rel), Err: explainResolve(err)}
		}
		return os.NewFile(uintptr(fd), filepath.Join(c.root, rel)), nil
	}
}

// explainResolve names what the kernel refused.
func explainResolve(err error) error {
	switch err {
	case unix.ELOOP:
		return fmt.Errorf("%w (a symbolic link where the agent follows none)", err)
	case unix.EXDEV:
		return fmt.Errorf("%w (the path or a link in it leads outside the allowed directory)", err)
	}
	return err
}

// open opens rel without following any symlink (writes, and anything the agent trusts).
// No O_NOFOLLOW: with RESOLVE_NO_SYMLINKS a trailing link fails with ELOOP, while
// O_PATH|O_NOFOLLOW would hand back a descriptor of the link itself.
func (c *confined) open(rel string, flags int, mode uint32) (*os.File, error) {
	rel, err := relPath(rel)
	if err != nil {
		return nil, err
	}
	return c.openat2(int(c.dir.Fd()), rel, flags, mode, resolveStrict)
}

// openRead opens rel for reading, following links only while they stay beneath the root.
func (c *confined) openRead(rel string) (*os.File, error) {
	rel, err := relPath(rel)
	if err != nil {
		return nil, err
	}
	return c.openat2(int(c.dir.Fd()), rel, unix.O_RDONLY, 0, resolveLinks)
}

// parent opens rel's directory (no symlinks) and returns it with rel's last component.
func (c *confined) parent(rel string) (*os.File, string, error) {
	rel, err := relPath(rel)
	if err != nil {
		return nil, "", err
	}
	if rel == "." {
		return nil, "", fmt.Errorf("the directory itself has no parent here")
	}
	d, err := c.openat2(int(c.dir.Fd()), filepath.Dir(rel), unix.O_PATH|unix.O_DIRECTORY, 0, resolveStrict)
	if err != nil {
		return nil, "", err
	}
	return d, filepath.Base(rel), nil
}

// mkdirAll makes rel and its parents, one component at a time, none of them a symlink.
func (c *confined) mkdirAll(rel string) error {
	rel, err := relPath(rel)
	if err != nil {
		return err
	}
	if rel == "." {
		return nil
	}
	dir, err := c.openat2(int(c.dir.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY, 0, resolveStrict)
	if err != nil {
		return err
	}
	for _, comp := range strings.Split(rel, string(filepath.Separator)) {
		if err := unix.Mkdirat(int(dir.Fd()), comp, 0o755); err != nil && err != unix.EEXIST {
			dir.Close()
			return &fs.PathError{Op: "mkdir", Path: filepath.Join(c.root, rel), Err: err}
		}
		next, err := c.openat2(int(dir.Fd()), comp, unix.O_PATH|unix.O_DIRECTORY, 0, resolveStrict)
		dir.Close()
		if err != nil {
			return err
		}
		dir = next
	}
	return dir.Close()
}

// rename moves from to to (both beneath the root; neither's last component followed).
func (c *confined) rename(from, to string) error {
	fd, fbase, err := c.parent(from)
	if err != nil {
		return err
	}
	defer fd.Close()
	td, tbase, err := c.parent(to)
	if err != nil {
		return err
	}
	defer td.Close()
	if err := unix.Renameat(int(fd.Fd()), fbase, int(td.Fd()), tbase); err != nil {
		return &os.LinkError{Op: "rename", Old: filepath.Join(c.root, from), New: filepath.Join(c.root, to), Err: err}
	}
	return nil
}

// symlink makes rel a link to target (the link's text; the agent writes only relative
// links that stay beneath the root).
func (c *confined) symlink(target, rel string) error {
	d, base, err := c.parent(rel)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Symlinkat(target, int(d.Fd()), base); err != nil {
		return &os.LinkError{Op: "symlink", Old: target, New: filepath.Join(c.root, rel), Err: err}
	}
	return nil
}

// remove unlinks rel (a file or a link, never what a link points to).
func (c *confined) remove(rel string) error {
	d, base, err := c.parent(rel)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Unlinkat(int(d.Fd()), base, 0); err != nil {
		return &fs.PathError{Op: "remove", Path: filepath.Join(c.root, rel), Err: err}
	}
	return nil
}

// lstat describes rel itself (a link is reported as a link).
func (c *confined) lstat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	d, base, err := c.parent(rel)
	if err != nil {
		return st, err
	}
	defer d.Close()
	if err := unix.Fstatat(int(d.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, &fs.PathError{Op: "lstat", Path: filepath.Join(c.root, rel), Err: err}
	}
	return st, nil
}

// readlink reads the link rel.
func (c *confined) readlink(rel string) (string, error) {
	d, base, err := c.parent(rel)
	if err != nil {
		return "", err
	}
	defer d.Close()
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(int(d.Fd()), base, buf)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: filepath.Join(c.root, rel), Err: err}
	}
	return string(buf[:n]), nil
}

// writeFile writes data to rel through a temporary name and a rename.
func (c *confined) writeFile(rel string, data []byte) error {
	tmp := rel + ".tpdeploy-tmp"
	_ = c.remove(tmp)
	f, err := c.open(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return c.rename(tmp, rel)
}

// walkFiles calls fn for every file and link below rel (rel relative to the root), never
// descending through a link.
func (c *confined) walkFiles(rel string, fn func(rel string, typ fs.FileMode) error) error {
	d, err := c.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(rel, e.Name())
		if e.Type().IsDir() {
			if err := c.walkFiles(p, fn); err != nil {
				return err
			}
			continue
		}
		if err := fn(p, e.Type()); err != nil {
			return err
		}
	}
	return nil
}

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
func (a *Node) beneath(nodePath, what string) (*confined, string, error) {
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
	c, err := openConfined(a.hostPath(root))
	if errors.Is(err, fs.ErrNotExist) {
		// An allowed mount not made yet (a fresh node's cache): the operator's directory,
		// made as the engine would make a bind mount's source.
		if err := os.MkdirAll(a.hostPath(root), 0o755); err != nil {
			return nil, "", fmt.Errorf("%s: allowed mount %s: %w", a.Name, root, err)
		}
		c, err = openConfined(a.hostPath(root))
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

// isResolveRefusal says an open failed because of a link (ELOOP) or a way out (EXDEV).
func isResolveRefusal(err error) bool {
	return errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV)
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
	d, err := dir.open(rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		if isResolveRefusal(err) {
			return a.denyPath(what+" "+nodePath, err)
		}
		return nil
	}
	return d.Close()
}
