package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// The release the simulator imitates is the one its image holds, read the way a preflight
// that only reads the filesystem reads it: pip's dist-info directories under the image's
// site directory (vLLM's images install into /usr/local/lib/python3.12/dist-packages), each
// with a METADATA file whose Version: header is the installed version (PEP 566 core
// metadata). Ray is importable exactly when its dist-info is there.

// distPackages is the image's site directory; a variable so the package's own tests can
// point it at a directory of their own.
var distPackages = "/usr/local/lib/python3.12/dist-packages"

type release struct {
	vllm string // vLLM's version, e.g. 0.17.1
	ray  string // Ray's version; empty when Ray is not installed
}

var (
	relOnce sync.Once
	rel     release
	relErr  error
)

// imageRelease reads the image's vLLM and Ray versions once.
func imageRelease() (release, error) {
	relOnce.Do(func() {
		rel.vllm, relErr = distVersion("vllm")
		if relErr == nil {
			rel.ray, _ = distVersion("ray")
		}
	})
	return rel, relErr
}

// distVersion is the Version: of the one <name>-<version>.dist-info in distPackages.
func distVersion(name string) (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(distPackages, name+"-*.dist-info"))
	if len(dirs) != 1 {
		return "", errors.New("no single " + name + " dist-info in " + distPackages)
	}
	f, err := os.Open(filepath.Join(dirs[0], "METADATA"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "Version: "); ok {
			return strings.TrimSpace(v), nil
		}
		if s.Text() == "" {
			break // the headers end at the first empty line
		}
	}
	return "", errors.New(dirs[0] + "/METADATA has no Version")
}

// atLeast compares dotted release numbers: v >= than.
func atLeast(v, than string) bool { return !versionBefore(v, than) }

// versionBefore compares dotted release numbers (a local version such as +cu129 is ignored).
func versionBefore(v, than string) bool {
	v, _, _ = strings.Cut(v, "+")
	a, b := strings.Split(v, "."), strings.Split(than, ".")
	for i := range max(len(a), len(b)) {
		var x, y int
		if i < len(a) {
			x, _ = strconv.Atoi(a[i])
		}
		if i < len(b) {
			y, _ = strconv.Atoi(b[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// What a release does, each from vLLM's source (lab/README.md, "Releases").

// hasMultiNodeMP: --nnodes, --node-rank, --master-addr, --master-port (ParallelConfig's
// multi-node fields, vLLM PR #23691, first released in v0.11.1).
func (r release) hasMultiNodeMP() bool { return atLeast(r.vllm, "0.11.1") }

// copiesPrefixes: the legacy Ray executor copies every VLLM_/NCCL_/UCX_/HF_/... variable
// (vLLM PR #34383, merged 2026-02-11; in the 0.17 releases), not only vLLM's registered ones.
func (r release) copiesPrefixes() bool { return atLeast(r.vllm, "0.17") }

// rayV2 says whether `--distributed-executor-backend ray` runs RayExecutorV2: the executor
// exists from vLLM PR #36836 behind VLLM_USE_RAY_V2_EXECUTOR_BACKEND (default 0) and is the
// default from v0.21.0 (PR #41421: envs.py default "1"); `=0` brings back the legacy
// RayDistributedExecutor. envs.py reads it as bool(int(os.getenv(name, default))).
func (r release) rayV2() bool {
	on, _ := r.rayV2Switch()
	return on
}

// rayV2Switch is rayV2 with the error int() raises for a value it refuses ("false",
// "yes"): vLLM ends in that ValueError when the executor is chosen. os.getenv's default
// applies only when the variable is unset; a set, empty value is int("") and fails too.
func (r release) rayV2Switch() (bool, error) {
	if !atLeast(r.vllm, "0.20") {
		return false, nil
	}
	v, set := os.LookupEnv("VLLM_USE_RAY_V2_EXECUTOR_BACKEND")
	if !set {
		return atLeast(r.vllm, "0.21"), nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Errorf("ValueError: invalid literal for int() with base 10: '%s'", v)
	}
	return n != 0, nil
}
