package confined

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"golang.org/x/sys/unix"
)

// tree lays out a directory with a file, a subdirectory, and links: one that stays
// beneath the root, one out of it, and a directory link out of it.
func tree(t *testing.T) (root, outside string) {
	t.Helper()
	root, outside = t.TempDir(), t.TempDir()
	// t.TempDir's directories are siblings: "../<outside>" from root is outside.
	for p, body := range map[string]string{filepath.Join(root, "a.txt"): "alpha", filepath.Join(root, "sub/b.txt"): "beta", filepath.Join(outside, "secret"): "secret"} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"inside":  "sub/b.txt",
		"escape":  filepath.Join(outside, "secret"),
		"dotdot":  "../" + filepath.Base(outside) + "/secret",
		"outdir":  outside,
		"sub/up":  "../a.txt",
		"sub/out": "../../" + filepath.Base(outside),
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root, outside
}

func open(t *testing.T, root string) *Dir {
	t.Helper()
	d, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// Every read of the file system refuses a link, whether it stays beneath the root or not:
// the caller resolves links itself (ReadLink) when it must.
func TestReadsRefuseEveryLink(t *testing.T) {
	root, _ := tree(t)
	d := open(t, root)
	for _, name := range []string{"inside", "escape", "dotdot", "outdir/secret", "sub/up", "sub/out/secret"} {
		if _, err := d.Open(name); !errors.Is(err, unix.ELOOP) {
			t.Errorf("Open(%s) = %v, want ELOOP", name, err)
		}
		if _, err := d.Stat(name); !errors.Is(err, unix.ELOOP) {
			t.Errorf("Stat(%s) = %v, want ELOOP", name, err)
		}
		if _, err := fs.ReadFile(d, name); !IsRefusal(err) {
			t.Errorf("ReadFile(%s) = %v, want a refusal", name, err)
		}
	}
	if _, err := d.ReadDir("outdir"); !errors.Is(err, unix.ELOOP) {
		t.Errorf("ReadDir through a link = %v, want ELOOP", err)
	}
	if _, err := d.Open("../" + filepath.Base(root)); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("Open of a name with .. = %v, want ErrInvalid", err)
	}
	// What is not a link reads as it is.
	if b, err := fs.ReadFile(d, "sub/b.txt"); err != nil || string(b) != "beta" {
		t.Errorf("ReadFile(sub/b.txt) = %q, %v", b, err)
	}
}

// Lstat and ReadLink describe a link itself; OpenBeneath follows one only beneath the root.
func TestLinksAreReadNotFollowed(t *testing.T) {
	root, outside := tree(t)
	d := open(t, root)
	fi, err := d.Lstat("escape")
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 || fi.Name() != "escape" {
		t.Fatalf("Lstat(escape) = %v, %v", fi, err)
	}
	if target, err := d.ReadLink("escape"); err != nil || target != filepath.Join(outside, "secret") {
		t.Errorf("ReadLink(escape) = %q, %v", target, err)
	}
	if fi, err := d.Lstat("sub/b.txt"); err != nil || !fi.Mode().IsRegular() || fi.Size() != 4 {
		t.Errorf("Lstat(sub/b.txt) = %v, %v", fi, err)
	}
	if fi, err := d.Lstat("."); err != nil || !fi.IsDir() {
		t.Errorf("Lstat(.) = %v, %v", fi, err)
	}
	if _, err := d.Lstat("outdir/secret"); !errors.Is(err, unix.ELOOP) {
		t.Errorf("Lstat through a directory link = %v, want ELOOP", err)
	}
	f, err := d.OpenBeneath("inside")
	if err != nil {
		t.Fatalf("OpenBeneath(inside): %v", err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "beta" {
		t.Errorf("OpenBeneath(inside) read %q", b)
	}
	for _, name := range []string{"escape", "dotdot", "outdir/secret", "sub/out/secret"} {
		if _, err := d.OpenBeneath(name); !errors.Is(err, unix.EXDEV) {
			t.Errorf("OpenBeneath(%s) = %v, want EXDEV", name, err)
		}
	}
}

// Writes never go through a link: a planted link is refused where it stands, and what it
// points to is left as it was.
func TestWritesRefuseLinks(t *testing.T) {
	root, outside := tree(t)
	d := open(t, root)
	if _, err := d.OpenFile("escape", os.O_WRONLY|os.O_TRUNC, 0); !errors.Is(err, unix.ELOOP) {
		t.Errorf("OpenFile(escape) for writing = %v, want ELOOP", err)
	}
	if err := d.MkdirAll("outdir/new"); !errors.Is(err, unix.ELOOP) {
		t.Errorf("MkdirAll through a link = %v, want ELOOP", err)
	}
	if err := d.WriteFile("outdir/x", []byte("x")); !IsRefusal(err) {
		t.Errorf("WriteFile through a link = %v, want a refusal", err)
	}
	if err := d.Remove("escape"); err != nil {
		t.Errorf("Remove(escape): %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != "secret" {
		t.Errorf("the link's target after its removal: %q, %v", b, err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("%d entries outside, want the one there was", len(entries))
	}
	if err := d.MkdirAll("new/deep"); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFile("new/deep/f", []byte("f")); err != nil {
		t.Fatal(err)
	}
	if err := d.Symlink("f", "new/deep/l"); err != nil {
		t.Fatal(err)
	}
	if err := d.Rename("new/deep/f", "new/g"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "new/g")); err != nil || string(b) != "f" {
		t.Errorf("after the rename: %q, %v", b, err)
	}
}

// Without links, a Dir is an ordinary fs.FS.
func TestDirIsAnFS(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"a.txt", "sub/b.txt", "sub/deeper/c.txt"} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := fstest.TestFS(open(t, root), "a.txt", "sub/b.txt", "sub/deeper/c.txt"); err != nil {
		t.Fatal(err)
	}
}

// Mount points below the root are crossed (the package comment says why): /proc is a
// mount point below "/", the root an agent without a policy opens, and a model cache on
// another disk below an allowed mount is the same case.
func TestCrossesMountPointsBelowTheRoot(t *testing.T) {
	d := open(t, "/")
	f, err := d.OpenFile("proc/version", os.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("a file on the procfs mounted below /: %v", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil || len(b) == 0 {
		t.Fatalf("read /proc/version: %q, %v", b, err)
	}
}
