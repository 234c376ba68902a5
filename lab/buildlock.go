package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// buildLockFile is host-wide, not per lab: `make test` runs the e2e tests in several
// processes at once, each bringing up a lab of its own, beside the packages whose tests
// build the same images. The images' tags are shared by every lab on the engine, so two
// builds at once would do the longest step of a fresh machine (the debootstrap of the torch
// base) twice and tag one image over the other.
var buildLockFile = filepath.Join(os.TempDir(), "tpdeploy-lab-build.lock")

// lockBuilds holds the host's build lock until the returned function is called. flock's
// lock belongs to the open file, so a process that dies mid-build releases it.
func lockBuilds(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(buildLockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lab: build lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lab: build lock %s: %w", buildLockFile, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("lab: waiting for another process's image build: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
