package lab

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/images"
)

// TorchImage is the base every release's simulator image is built FROM: a Debian trixie
// root (debootstrap --variant=minbase) with Debian's python3-torch (CPU, Gloo, the c10d
// TCPStore), so every simulated rank's torch.distributed init runs for real
// (lab/torch/rank.py). One base, shared by every release image's layers.
const TorchImage = "tpdeploy/torch:trixie"

// TorchPackages are what the base installs from trixie (no recommends), TorchMirror where
// from. TPDEPLOY_DEBIAN_MIRROR names another mirror (part of the image's hash).
var TorchPackages = []string{"python3-torch"}

const TorchMirror = "http://deb.debian.org/debian"

// torchChanges are the image's settings. Debian's torch is built without libuv, and torch
// 2.4 and later ask for it by default (RuntimeError: use_libuv was requested but PyTorch was
// build without libuv support): USE_LIBUV=0 is the lab's own setting, no upstream one.
var torchChanges = []string{"ENV USE_LIBUV=0", "ENV PATH=/usr/local/bin:/usr/bin:/bin", "ENV HOME=/root"}

//go:embed torch/rootfs.sh
var rootfsScript []byte

//go:embed torch/rank.py
var rankProgram []byte

// RankProgram is where the images hold lab/torch/rank.py (lab/sim runs it with python3).
const RankProgram = "/usr/lib/tpdeploy-lab/rank.py"

func torchMirror() string {
	if m := os.Getenv("TPDEPLOY_DEBIAN_MIRROR"); m != "" {
		return m
	}
	return TorchMirror
}

// torchHash is the hash of the base's inputs: the script, the mirror, the packages and the
// image's settings. Debian's archive moves on; a base already built is kept until an input
// here changes.
func torchHash() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", rootfsScript, torchMirror(), strings.Join(TorchPackages, " "), strings.Join(torchChanges, "\n"))
	return hex.EncodeToString(h.Sum(nil))[:20]
}

// TorchBuild says what ensureTorch did: whether it built, and how long each step took.
type TorchBuild struct {
	Built            bool
	Rootfs, Import   time.Duration
	RootfsBytes      int64
	ImageID, Skipped string
}

// importer is what building the base needs of the engine beyond images.Engine.
type importer interface {
	ImageImport(ctx context.Context, source client.ImageImportSource, ref string, options client.ImageImportOptions) (client.ImageImportResult, error)
}

// EnsureTorch builds TorchImage unless an image with its tag and input hash exists: the
// root with debootstrap and apt-get from Debian's mirror (lab/torch/rootfs.sh, as root;
// debootstrap is installed by `make deps`), then `docker import`. When the packages cannot
// be fetched it fails naming the step; nothing falls back to the Go imitation.
func EnsureTorch(ctx context.Context, eng images.Engine) (TorchBuild, error) {
	unlock, err := lockBuilds(ctx)
	if err != nil {
		return TorchBuild{}, err
	}
	defer unlock()
	return ensureTorch(ctx, eng)
}

// ensureTorch is EnsureTorch under a build lock its caller holds.
func ensureTorch(ctx context.Context, eng images.Engine) (TorchBuild, error) {
	var b TorchBuild
	sum := torchHash()
	got, err := eng.ImageInspect(ctx, TorchImage)
	if err == nil && got.Config != nil && got.Config.Labels[images.LabelSourceHash] == sum {
		b.ImageID, b.Skipped = got.ID, "up to date"
		return b, nil
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return b, fmt.Errorf("inspect %s: %w", TorchImage, err)
	}
	imp, ok := eng.(importer)
	if !ok {
		return b, fmt.Errorf("lab: building %s needs an engine that imports images", TorchImage)
	}
	if os.Geteuid() != 0 {
		return b, fmt.Errorf("lab: building %s (debootstrap of Debian trixie) needs root", TorchImage)
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return b, fmt.Errorf("lab: building %s needs debootstrap (apt-get install debootstrap; make deps does): %w", TorchImage, err)
	}
	dir, err := os.MkdirTemp("/var/tmp", "tpd-torch-")
	if err != nil {
		return b, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "rootfs.sh")
	if err := os.WriteFile(script, rootfsScript, 0o755); err != nil {
		return b, err
	}
	root := filepath.Join(dir, "root")
	start := time.Now()
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{script, root, torchMirror()}, TorchPackages...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return b, fmt.Errorf("lab: building %s: %s failed (%v); the lab needs Debian trixie's packages from %s, there is no fallback to the imitation:\n%s",
			TorchImage, lastStep(out.String()), err, torchMirror(), tail(out.String(), 30))
	}
	b.Rootfs = time.Since(start)
	_ = filepath.Walk(root, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b.RootfsBytes += fi.Size()
		}
		return nil
	})
	start = time.Now()
	tarCmd := exec.CommandContext(ctx, "tar", "--numeric-owner", "--xattrs", "-C", root, "-cf", "-", ".")
	pipe, err := tarCmd.StdoutPipe()
	if err != nil {
		return b, err
	}
	var tarErr bytes.Buffer
	tarCmd.Stderr = &tarErr
	if err := tarCmd.Start(); err != nil {
		return b, fmt.Errorf("lab: building %s: tar of the root: %w", TorchImage, err)
	}
	changes := append([]string{"LABEL " + images.LabelSourceHash + "=" + sum}, torchChanges...)
	resp, err := imp.ImageImport(ctx, client.ImageImportSource{Source: pipe, SourceName: "-"}, TorchImage, client.ImageImportOptions{Changes: changes})
	if err != nil {
		_ = tarCmd.Process.Kill()
		_ = tarCmd.Wait()
		return b, fmt.Errorf("lab: building %s: docker import: %w", TorchImage, err)
	}
	msg, _ := io.ReadAll(resp)
	resp.Close()
	if err := tarCmd.Wait(); err != nil {
		return b, fmt.Errorf("lab: building %s: tar of the root: %v: %s", TorchImage, err, tarErr.String())
	}
	if e := importError(msg); e != "" {
		return b, fmt.Errorf("lab: building %s: docker import: %s", TorchImage, e)
	}
	b.Import, b.Built = time.Since(start), true
	if got, err := eng.ImageInspect(ctx, TorchImage); err == nil {
		b.ImageID = got.ID
	}
	return b, nil
}

// importError is the error in the import's JSON message stream, if any.
func importError(stream []byte) string {
	dec := json.NewDecoder(bytes.NewReader(stream))
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err != nil {
			return ""
		}
		if m.Error != "" {
			return m.Error
		}
	}
}

// lastStep is the last step rootfs.sh announced.
func lastStep(out string) string {
	step := "lab/torch/rootfs.sh"
	for _, l := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(l, "tpdeploy-torch-step: "); ok {
			step = s
		}
	}
	return step
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
