// Package confined opens paths beneath a directory the way the node agent must: the kernel
// resolves every path with openat2(2) beneath the directory, so no symlink or ".." planted
// below it can make the agent read or write outside.
//
// Mount points below the directory are crossed (no RESOLVE_NO_XDEV), on purpose: an
// operator's allowed mount may have disks mounted below it (a cache on another volume;
// without a policy the root is "/", and every other filesystem is below it), and those
// must keep working. What a container plants cannot be a mount point of the agent's: the
// containers have no CAP_SYS_ADMIN (CapDrop ALL), and a mount made inside a container's
// namespace does not propagate to the host's (Docker's binds are rprivate). Only the
// host's root can add a mount below an allowed mount, and it needs no agent to reach it.
//
// The agent runs as root, and the directories it reads, serves and writes (the Hugging
// Face cache, model directories, secret directories) are also mounted read-write into
// containers that run whatever the model brings. Whatever a container plants there — a
// *.tpdeploy-partial that is a link to /root/.ssh/authorized_keys, a blobs/ that is a link
// to /etc, a config.json that is a link to /etc/shadow — must not take the agent out. So:
//
//   - every open, stat and directory read refuses any symlink on the way
//     (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS): a planted link fails with ELOOP. A caller that
//     must honour links (a Hugging Face snapshot's ../../blobs/<hash>) reads them with
//     ReadLink and opens the target itself (package weights does);
//   - OpenBeneath, for a model file served as it is, follows a link only while it stays
//     beneath the directory (RESOLVE_BENEATH): a link to /etc/passwd or out through ../..
//     fails with EXDEV;
//   - every open of a file opens only a regular file or a directory (ErrNotRegular): a FIFO
//     or device node a container planted (it keeps CAP_MKNOD) is described through an
//     O_PATH descriptor and refused before anything opens it;
//   - renames, links and removals act on a parent directory opened the same way (renameat,
//     symlinkat, unlinkat never follow their last component).
//
// Without openat2 (Linux < 5.6, or a seccomp profile refusing it) every open fails: the
// agent refuses rather than fall back to a resolution it cannot trust.
//
// A Dir is an fs.FS (and fs.ReadDirFS, fs.StatFS, fs.ReadLinkFS) with those rules, so code
// that only reads (the model scan) can take an fs.FS and be tested with fstest.MapFS.
package confined

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	resolveStrict = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
	resolveLinks  = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS
)

// Dir is a directory opened as a root; every path given to its methods is relative to it.
type Dir struct {
	root string // the host path, for messages
	dir  *os.File
}

// Open opens root. The root itself is the operator's setting and may be a link (e.g.
// /models on another disk); what is below it is not trusted.
func Open(root string) (*Dir, error) {
	f, err := os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &Dir{root: root, dir: f}, nil
}

// Close releases the directory.
func (d *Dir) Close() error { return d.dir.Close() }

// Root is the directory's path as it was opened.
func (d *Dir) Root() string { return d.root }

// Path is rel's path below the root, for messages.
func (d *Dir) Path(rel string) string { return filepath.Join(d.root, rel) }

// ErrNotRegular is an open refused because the path is neither a regular file nor a
// directory: a FIFO (whose open blocks until a writer comes), a device node (a planted
// /dev/zero reads without end, a disk would be written through) or a socket.
var ErrNotRegular = errors.New("not a regular file or a directory")

// IsRefusal says an operation failed because the path was refused: a symbolic link where
// none is followed (ELOOP), a way out of the directory (EXDEV), or a special file
// (ErrNotRegular).
func IsRefusal(err error) bool {
	return errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, ErrNotRegular)
}

// relPath checks a path relative to the root: local, cleaned, "." for the root itself.
func relPath(rel string) (string, error) {
	rel = filepath.Clean(filepath.FromSlash(rel))
	if rel != "." && !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%q is not a path beneath the directory", rel)
	}
	return rel, nil
}

func (d *Dir) openat2(dirfd int, rel string, flags int, mode uint32, resolve uint64) (*os.File, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolve}
	for {
		fd, err := unix.Openat2(dirfd, rel, &how)
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
			continue
		case err == unix.ENOSYS:
			return nil, &fs.PathError{Op: "openat2", Path: d.Path(rel), Err: errors.New("this kernel lacks openat2 (Linux 5.6 or later is needed), or a seccomp profile refuses it: the agent will not open paths below its roots without it")}
		case err != nil:
			return nil, &fs.PathError{Op: "open", Path: d.Path(rel), Err: explainResolve(err)}
		}
		return os.NewFile(uintptr(fd), d.Path(rel)), nil
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

// OpenFile opens rel without following any symlink (writes, and anything the agent
// trusts). No O_NOFOLLOW: with RESOLVE_NO_SYMLINKS a trailing link fails with ELOOP, while
// O_PATH|O_NOFOLLOW would hand back a descriptor of the link itself. What is there must be
// a regular file or a directory (ErrNotRegular): a planted FIFO or device is never opened.
func (d *Dir) OpenFile(rel string, flags int, mode uint32) (*os.File, error) {
	rel, err := relPath(rel)
	if err != nil {
		return nil, err
	}
	return d.openChecked(rel, flags, mode, resolveStrict)
}

// OpenBeneath opens rel for reading, following links only while they stay beneath the
// root; it too opens only a regular file or a directory.
func (d *Dir) OpenBeneath(rel string) (*os.File, error) {
	rel, err := relPath(rel)
	if err != nil {
		return nil, err
	}
	return d.openChecked(rel, unix.O_RDONLY, 0, resolveLinks)
}

// openChecked opens rel only when it is a regular file or a directory, without opening
// anything else first: opening a FIFO blocks until a writer comes and opening a device
// runs its driver, so rel is looked up as an O_PATH descriptor (which opens nothing),
// described with fstat, and only then opened for real through that very descriptor
// (/proc/self/fd/N: the same inode, so nothing can be swapped in between). A name not
// there is created with O_EXCL when flags ask for it, so an existing file is never
// opened by the create either. O_PATH and O_DIRECTORY opens need no check (neither
// opens a special file).
func (d *Dir) openChecked(rel string, flags int, mode uint32, resolve uint64) (*os.File, error) {
	if flags&(unix.O_PATH|unix.O_DIRECTORY) != 0 {
		return d.openat2(int(d.dir.Fd()), rel, flags, mode, resolve)
	}
	for attempt := 0; ; attempt++ {
		p, err := d.openat2(int(d.dir.Fd()), rel, unix.O_PATH, 0, resolve)
		if errors.Is(err, unix.ENOENT) && flags&unix.O_CREAT != 0 && attempt < 3 {
			f, err := d.openat2(int(d.dir.Fd()), rel, flags|unix.O_EXCL, mode, resolve)
			if errors.Is(err, unix.EEXIST) && flags&unix.O_EXCL == 0 {
				continue // made meanwhile: look at what it is
			}
			return f, err
		}
		if err != nil {
			return nil, err
		}
		defer p.Close()
		return d.reopen(p, rel, flags&^(unix.O_CREAT|unix.O_EXCL))
	}
}

// reopen opens the file an O_PATH descriptor names, with flags, if it is a regular file or
// a directory (a directory only for reading).
func (d *Dir) reopen(p *os.File, rel string, flags int) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(p.Fd()), &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: d.Path(rel), Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		flags |= unix.O_DIRECTORY // a write open then fails with EISDIR, as it would
	default:
		kind := statInfo{st: st}.Mode().Type().String()
		return nil, &fs.PathError{Op: "open", Path: d.Path(rel), Err: fmt.Errorf("%w: it is a special file (%s), which a container may have planted", ErrNotRegular, kind)}
	}
	for {
		fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", p.Fd()), flags|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ENOENT:
			return nil, &fs.PathError{Op: "open", Path: d.Path(rel), Err: fmt.Errorf("%w (reopening through /proc/self/fd: is /proc mounted?)", err)}
		case err != nil:
			return nil, &fs.PathError{Op: "open", Path: d.Path(rel), Err: err}
		}
		return os.NewFile(uintptr(fd), d.Path(rel)), nil
	}
}

// parent opens rel's directory (no symlinks) and returns it with rel's last component.
func (d *Dir) parent(rel string) (*os.File, string, error) {
	rel, err := relPath(rel)
	if err != nil {
		return nil, "", err
	}
	if rel == "." {
		return nil, "", fmt.Errorf("the directory itself has no parent here")
	}
	p, err := d.openat2(int(d.dir.Fd()), filepath.Dir(rel), unix.O_PATH|unix.O_DIRECTORY, 0, resolveStrict)
	if err != nil {
		return nil, "", err
	}
	return p, filepath.Base(rel), nil
}

// MkdirAll makes rel and its parents, one component at a time, none of them a symlink.
func (d *Dir) MkdirAll(rel string) error {
	rel, err := relPath(rel)
	if err != nil {
		return err
	}
	if rel == "." {
		return nil
	}
	dir, err := d.openat2(int(d.dir.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY, 0, resolveStrict)
	if err != nil {
		return err
	}
	for _, comp := range strings.Split(rel, string(filepath.Separator)) {
		if err := unix.Mkdirat(int(dir.Fd()), comp, 0o755); err != nil && err != unix.EEXIST {
			dir.Close()
			return &fs.PathError{Op: "mkdir", Path: d.Path(rel), Err: err}
		}
		next, err := d.openat2(int(dir.Fd()), comp, unix.O_PATH|unix.O_DIRECTORY, 0, resolveStrict)
		dir.Close()
		if err != nil {
			return err
		}
		dir = next
	}
	return dir.Close()
}

// Rename moves from to to (both beneath the root; neither's last component followed).
func (d *Dir) Rename(from, to string) error {
	fd, fbase, err := d.parent(from)
	if err != nil {
		return err
	}
	defer fd.Close()
	td, tbase, err := d.parent(to)
	if err != nil {
		return err
	}
	defer td.Close()
	if err := unix.Renameat(int(fd.Fd()), fbase, int(td.Fd()), tbase); err != nil {
		return &os.LinkError{Op: "rename", Old: d.Path(from), New: d.Path(to), Err: err}
	}
	return nil
}

// Symlink makes rel a link to target (the link's text; the agent writes only relative
// links that stay beneath the root).
func (d *Dir) Symlink(target, rel string) error {
	p, base, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := unix.Symlinkat(target, int(p.Fd()), base); err != nil {
		return &os.LinkError{Op: "symlink", Old: target, New: d.Path(rel), Err: err}
	}
	return nil
}

// Remove unlinks rel (a file or a link, never what a link points to).
func (d *Dir) Remove(rel string) error {
	p, base, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := unix.Unlinkat(int(p.Fd()), base, 0); err != nil {
		return &fs.PathError{Op: "remove", Path: d.Path(rel), Err: err}
	}
	return nil
}

// WriteFile writes data to rel through a temporary name and a rename.
func (d *Dir) WriteFile(rel string, data []byte) error {
	tmp := rel + ".tpdeploy-tmp"
	_ = d.Remove(tmp)
	f, err := d.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
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
	return d.Rename(tmp, rel)
}

// The read-only file system. Names are fs.FS names (slash-separated, unrooted); every
// method refuses a symlink on the way with ELOOP, the last component included — except
// Lstat and ReadLink, which describe a last component that is a link.

// Open opens name for reading (a file or a directory).
func (d *Dir) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	return d.OpenFile(name, unix.O_RDONLY, 0)
}

// Stat describes name; a link is refused, not followed.
func (d *Dir) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrInvalid}
	}
	f, err := d.OpenFile(name, unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

// ReadDir lists the directory name, sorted by name.
func (d *Dir) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	f, err := d.OpenFile(name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

// Lstat describes name itself: a link is reported as a link.
func (d *Dir) Lstat(name string) (fs.FileInfo, error) {
	if rel, err := relPath(name); err == nil && rel == "." {
		return d.dir.Stat()
	}
	p, base, err := d.parent(name)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(p.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: d.Path(name), Err: err}
	}
	return statInfo{name: base, st: st}, nil
}

// ReadLink reads the link name.
func (d *Dir) ReadLink(name string) (string, error) {
	p, base, err := d.parent(name)
	if err != nil {
		return "", err
	}
	defer p.Close()
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(int(p.Fd()), base, buf)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: d.Path(name), Err: err}
	}
	return string(buf[:n]), nil
}

var (
	_ fs.ReadDirFS  = (*Dir)(nil)
	_ fs.StatFS     = (*Dir)(nil)
	_ fs.ReadLinkFS = (*Dir)(nil)
)

// statInfo is an fs.FileInfo of an fstatat result.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func (s statInfo) Name() string       { return s.name }
func (s statInfo) Size() int64        { return s.st.Size }
func (s statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s statInfo) Sys() any           { return &s.st }

func (s statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		m |= fs.ModeDir
	case syscall.S_IFLNK:
		m |= fs.ModeSymlink
	case syscall.S_IFIFO:
		m |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		m |= fs.ModeSocket
	case syscall.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		m |= fs.ModeDevice
	}
	return m
}
