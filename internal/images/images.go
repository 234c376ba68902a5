// Package images builds the lab's FROM-scratch images out of static Go binaries compiled
// from this repository (there is no registry to pull from), and rebuilds an image only
// when its inputs changed: the image carries a hash of its Dockerfile and files.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"
)

// LabelSourceHash is the label holding the hash of an image's build inputs.
const LabelSourceHash = "tpdeploy.source-hash"

// Image is one image to build: a Dockerfile and the files its context holds.
type Image struct {
	Tag        string
	Dockerfile string
	// Files maps a path in the build context to a local file.
	Files map[string]string
	// Dirs are empty directories to create in the context (scratch has none).
	Dirs []string
}

// Engine is what building needs of a Docker engine.
type Engine interface {
	ImageInspect(ctx context.Context, image string, o ...client.ImageInspectOption) (client.ImageInspectResult, error)
	ImageBuild(ctx context.Context, buildContext io.Reader, o client.ImageBuildOptions) (client.ImageBuildResult, error)
}

// Ensure builds img unless an image with its tag and input hash exists. It reports
// whether it built.
func Ensure(ctx context.Context, eng Engine, img Image) (bool, error) {
	sum, err := img.hash()
	if err != nil {
		return false, err
	}
	got, err := eng.ImageInspect(ctx, img.Tag)
	if err == nil && got.Config != nil && got.Config.Labels[LabelSourceHash] == sum {
		return false, nil
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return false, fmt.Errorf("inspect %s: %w", img.Tag, err)
	}
	var buf bytes.Buffer
	if err := img.tar(&buf); err != nil {
		return false, err
	}
	resp, err := eng.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags: []string{img.Tag}, Remove: true, ForceRemove: true, Version: build.BuilderV1,
		Labels: map[string]string{LabelSourceHash: sum},
	})
	if err != nil {
		return false, fmt.Errorf("build %s: %w", img.Tag, err)
	}
	defer resp.Body.Close()
	// The build's outcome is in its JSON message stream.
	dec := json.NewDecoder(resp.Body)
	for {
		var m struct {
			Stream string `json:"stream"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return false, fmt.Errorf("build %s: %w", img.Tag, err)
		}
		if m.Error != "" {
			return false, fmt.Errorf("build %s: %s", img.Tag, m.Error)
		}
	}
	return true, nil
}

func (img Image) hash() (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", img.Dockerfile, strings.Join(img.Dirs, ","))
	for _, name := range sortedKeys(img.Files) {
		f, err := os.Open(img.Files[name])
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00", name)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}

func (img Image) tar(w io.Writer) error {
	tw := tar.NewWriter(w)
	add := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := add("Dockerfile", 0o644, []byte(img.Dockerfile)); err != nil {
		return err
	}
	for _, d := range img.Dirs {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o1777, Typeflag: tar.TypeDir}); err != nil {
			return err
		}
	}
	for _, name := range sortedKeys(img.Files) {
		data, err := os.ReadFile(img.Files[name])
		if err != nil {
			return err
		}
		if err := add(name, 0o755, data); err != nil {
			return err
		}
	}
	return tw.Close()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// GoBinary compiles a main package of this module into dir as a static binary
// (CGO_ENABLED=0) with reproducible output, so an unchanged source gives an unchanged
// image hash. tags are build tags (the lab builds its agent with "lab").
func GoBinary(ctx context.Context, pkg, dir string, tags ...string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, goTool(), append(args, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

func goTool() string {
	//lint:ignore SA1019 the lab builds its images with the toolchain that built this binary (go test, go run ./lab/labctl on this machine), which PATH may not name
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ModuleRoot is the directory holding this module's go.mod, found from the working
// directory (tests run in their package's directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		dir = parent
	}
}
