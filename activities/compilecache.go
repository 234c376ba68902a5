package activities

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// vLLM's compilation cache, kept per node so that a redeploy or a recovery of the same
// engine does not compile again (docs/upstream.md §19). vLLM keeps torch.compile's
// artifacts under VLLM_CACHE_ROOT/torch_compile_cache/HASH/rank_R_D/: HASH is
// md5(str(factors))[:10] of envs' hash, vllm_config.compute_hash() (the vLLM version and
// the model, cache, parallel, scheduler, LoRA, speculative and compilation configs), the
// traced code's hash and the compiler's (vllm/compilation/backends.py VllmBackend.__call__
// and caching.py compilation_config_hash_factors, vllm-project/vllm at
// 0041b00e4c3d13dd3aea07267e4ff19004e65764). vLLM itself decides whether a cached graph
// fits; the agent only keeps one directory per engine configuration, so that two clusters
// or two engines never share one and a stale image's artifacts stay apart.

// CompileCacheDir is the node's directory of vLLM compilation caches, one subdirectory per
// key. The agent's own (no spec names it), as RouterDir is.
const CompileCacheDir = "/var/lib/tpdeploy/compile-cache"

// compileCacheMount is where the engine's containers see their key's directory, and
// VLLM_CACHE_ROOT: stock images' default (~/.cache/vllm for root).
const compileCacheMount = "/root/.cache/vllm"

// CompileCacheKey is the cluster's engine as far as the node's directory goes: its image
// (vLLM, torch and their code), model, revision, TP and PP; sha256, hex, 32 characters.
// The extra args that change compilation (--dtype, --max-model-len, -O, …) are not in it:
// vLLM's own HASH one level down covers them (VllmConfig.compute_hash), so an args-only
// change compiles into its own subdirectory of the same directory, and a change back loads
// the earlier graphs. Keeping them out also keeps the engine containers' spec, and so
// Ray's containers, across an args-only change (only vLLM restarts; the staged redeploy's
// cheap case).
func CompileCacheKey(c spec.Cluster) string {
	parts := []string{"image=" + c.Image, "model=" + c.Model.Path, "revision=" + c.Model.Revision,
		"tp=" + strconv.Itoa(c.Parallel.Tensor), "pp=" + strconv.Itoa(max(c.Parallel.Pipeline, 1))}
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:])[:32]
}

// withCompileCache mounts the cluster's compilation cache (o.CompileCache/KEY on the
// node, which Docker makes on the first mount, as for any bind source) at
// compileCacheMount in s, and forces VLLM_CACHE_ROOT there: a node env of the spec cannot
// point vLLM elsewhere, where the cache would not outlive the container. With no
// o.CompileCache the spec's VLLM_CACHE_ROOT is dropped all the same (the variable is the
// agent's), and vLLM keeps its default inside the container.
func withCompileCache(s containerSpec, c spec.Cluster, o ContainerOptions) containerSpec {
	env := make([]string, 0, len(s.Env)+1)
	for _, e := range s.Env {
		if !strings.HasPrefix(e, "VLLM_CACHE_ROOT=") {
			env = append(env, e)
		}
	}
	s.Env = env
	if o.CompileCache == "" {
		return s
	}
	s.AgentBinds = append(append([]string(nil), s.AgentBinds...), o.HostPath(filepath.Join(o.CompileCache, CompileCacheKey(c)))+":"+compileCacheMount)
	s.Env = append(s.Env, "VLLM_CACHE_ROOT="+compileCacheMount)
	return s
}
