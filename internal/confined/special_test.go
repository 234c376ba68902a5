package confined

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// #36 finding 3: containers keep CAP_MKNOD and share the cache, so they can plant a FIFO
// (whose open blocks until a writer comes: a hung scan) or a device node (/dev/zero, read
// without end; a disk, written through) under a name the agent opens. Every open of a
// file refuses what is not a regular file or a directory before opening it: an O_PATH
// descriptor is described first, and only a regular file is then opened through it.

// planted makes a directory holding a FIFO, a /dev/zero-like character device (1,5), a
// regular file and a subdirectory.
func planted(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(root, "zero"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 5))); err != nil {
		t.Skipf("mknod: %v (needs root and a file system without nodev)", err)
	}
	if err := os.WriteFile(filepath.Join(root, "plain"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// within runs open, failing the test when it does not return in time (a FIFO's open
// blocks forever); the FIFO is then opened for writing, which releases the blocked open.
func within(t *testing.T, root, what string, open func() (io.Closer, error)) error {
	t.Helper()
	type result struct {
		c   io.Closer
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := open()
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.c != nil {
			r.c.Close()
		}
		return r.err
	case <-time.After(3 * time.Second):
		if w, err := os.OpenFile(filepath.Join(root, "fifo"), os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatalf("%s did not return in 3 s: it opened the FIFO", what)
		return nil
	}
}

func TestOpensRefuseSpecialFiles(t *testing.T) {
	root := planted(t)
	d, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	opens := map[string]func(name string) (io.Closer, error){
		"Open":                     func(n string) (io.Closer, error) { return d.Open(n) },
		"OpenBeneath":              func(n string) (io.Closer, error) { return d.OpenBeneath(n) },
		"OpenFile O_RDONLY":        func(n string) (io.Closer, error) { return d.OpenFile(n, os.O_RDONLY, 0) },
		"OpenFile O_RDWR|O_CREATE": func(n string) (io.Closer, error) { return d.OpenFile(n, os.O_RDWR|os.O_CREATE, 0o644) },
	}
	for how, open := range opens {
		for _, name := range []string{"fifo", "zero"} {
			err := within(t, root, how+" "+name, func() (io.Closer, error) { return open(name) })
			switch {
			case err == nil:
				t.Errorf("%s opened the planted %s", how, name)
			case !IsRefusal(err) || !errors.Is(err, ErrNotRegular):
				t.Errorf("%s %s: %v is not a refusal (ErrNotRegular)", how, name, err)
			case !strings.Contains(err.Error(), filepath.Join(root, name)):
				t.Errorf("%s %s: %v does not name the path", how, name, err)
			}
		}
		if err := within(t, root, how+" plain", func() (io.Closer, error) { return open("plain") }); err != nil {
			t.Errorf("%s refused a regular file: %v", how, err)
		}
	}
	if _, err := d.ReadDir("sub"); err != nil {
		t.Errorf("a directory refused: %v", err)
	}
	f, err := d.OpenFile("new", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("create refused: %v", err)
	}
	f.Close()
	if err := d.WriteFile("written", []byte("x")); err != nil {
		t.Errorf("WriteFile: %v", err)
	}
	f, err = d.OpenFile("plain", os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, _ := os.Stat(filepath.Join(root, "plain")); fi.Size() != 0 {
		t.Errorf("O_TRUNC not honoured: %d bytes", fi.Size())
	}
}
