package main

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// vLLM's torch.compile step and its cache, as vllm/compilation/backends.py does it
// (vllm-project/vllm at 0041b00e4c3d13dd3aea07267e4ff19004e65764; the hashing and the
// directory layout are the same at 8ea6b3784388430d347f1f6d9761c6b90f3dd493):
//
//   - VllmBackend.__call__ keys the cache directory by md5(str(factors))[:10], the factors
//     being compilation_config_hash_factors (caching.py: envs' hash and
//     vllm_config.compute_hash(), which covers the vLLM version, the model config — model,
//     revision, dtype, quantization, max_model_len —, the cache, parallel (TP, PP),
//     scheduler, LoRA, speculative and compilation configs), the traced code's hash and the
//     compiler's. The directory is VLLM_CACHE_ROOT/torch_compile_cache/HASH/rank_R_D/backbone;
//     VLLM_CACHE_ROOT defaults to $XDG_CACHE_HOME/vllm, else ~/.cache/vllm (envs.py).
//   - It prints "Using cache directory: %s for vLLM's torch.compile", then "Dynamo bytecode
//     transform time: %.2f s".
//   - CompilerManager.compile loads a graph whose handle vllm_compile_cache.py holds
//     ("Directly load the compiled graph(s) for dynamic shape from the cache, took %.3f s"),
//     else compiles it, stores its handle ("Cache the graph for dynamic shape for later
//     use") and prints "Compiling a graph for dynamic compile range takes %.2f s";
//     save_to_file writes vllm_compile_cache.py; computation_graph.py is written beside it.
//   - monitor.py closes with "torch.compile takes %.2f s in total".
//   - --enforce-eager leaves the compilation mode NONE (VllmConfig.__post_init__): nothing
//     is compiled and no cache is read.
//
// The lab's times are users' logs scaled down by 20 (a cold Inductor compile of a small
// model is about 20 s, Dynamo's transform about 4 s, a cached load about 2.5 s; lab/README.md
// says where from), so that a cold start costs the lab about 1.2 s more than a warm one and
// the suite's many cold deploys stay short. Only rank 0 (the EngineCore's executor) compiles
// here; upstream every rank does, each in its own rank_R_D directory.
const (
	dynamoTime    = 200 * time.Millisecond
	compileTime   = 1000 * time.Millisecond
	cacheLoadTime = 125 * time.Millisecond
)

// compileFlags are the `vllm serve` flags whose values enter vllm_config.compute_hash (the
// model, cache, scheduler, LoRA, speculative and compilation configs' factors); boolean
// ones take no value.
var compileFlags = map[string]bool{
	"--dtype": false, "--quantization": false, "-q": false, "--kv-cache-dtype": false, "--revision": false,
	"--compilation-config": false, "-O": false, "--max-num-seqs": false, "--max-num-batched-tokens": false,
	"--speculative-config": false, "--max-lora-rank": false, "--hf-overrides": false,
	"--enable-lora": true, "--trust-remote-code": true, "--enforce-eager": true,
}

// compileFactors are the lab's stand-ins for vLLM's factors: the release, the model, its
// parallel layout and the values of the flags that change the graph, in order.
func compileFactors(f serveFlags) []string {
	factors := []string{"vllm=" + f.rel.vllm, "model=" + f.model, "tp=" + strconv.Itoa(f.tp), "pp=" + strconv.Itoa(max(f.pp, 1)), "max_model_len=" + strconv.Itoa(f.maxLen)}
	args := f.args
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(args[i], "=")
		if strings.HasPrefix(name, "-O") && name != "-O" { // -O3
			factors = append(factors, name)
			continue
		}
		boolean, ok := compileFlags[name]
		if !ok {
			continue
		}
		if !hasVal && !boolean && i+1 < len(args) {
			i++
			val = args[i]
		}
		factors = append(factors, name+"="+val)
	}
	return factors
}

// vllmCacheRoot is envs.VLLM_CACHE_ROOT.
func vllmCacheRoot() string {
	if v := os.Getenv("VLLM_CACHE_ROOT"); v != "" {
		return v
	}
	if v := os.Getenv("XDG_CACHE_HOME"); v != "" {
		return filepath.Join(v, "vllm")
	}
	home := os.Getenv("HOME")
	if home == "" {
		home = "/root"
	}
	return filepath.Join(home, ".cache", "vllm")
}

// compileDir is VllmBackend's local_cache_dir for rank 0 of data-parallel rank 0.
func compileDir(f serveFlags) string {
	sum := md5.Sum([]byte(fmt.Sprintf("%q", compileFactors(f))))
	return filepath.Join(vllmCacheRoot(), "torch_compile_cache", hex.EncodeToString(sum[:])[:10], "rank_0_0", "backbone")
}

// torchCompile is the compile step of the profiling run: cold, it compiles and writes the
// cache; warm (vllm_compile_cache.py there), it loads. A cache it cannot write is vLLM's
// OSError from os.makedirs.
func (e *engine) torchCompile(ctx context.Context) error {
	if e.flags.hasFlag("--enforce-eager") {
		return nil
	}
	start := time.Now()
	dir := compileDir(e.flags)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("OSError: [Errno 13] Permission denied: '%s'", dir)
	}
	e.log("INFO", "backends.py:548", "Using cache directory: "+dir+" for vLLM's torch.compile")
	if err := sleepCtx(ctx, dynamoTime); err != nil {
		return err
	}
	e.log("INFO", "backends.py:559", fmt.Sprintf("Dynamo bytecode transform time: %.2f s", time.Since(start).Seconds()))
	cacheFile := filepath.Join(dir, "vllm_compile_cache.py")
	graphStart := time.Now()
	if _, err := os.Stat(cacheFile); err == nil {
		if err := sleepCtx(ctx, cacheLoadTime); err != nil {
			return err
		}
		e.log("INFO", "backends.py:164", fmt.Sprintf("Directly load the compiled graph(s) for dynamic shape from the cache, took %.3f s", time.Since(graphStart).Seconds()))
	} else {
		e.log("INFO", "backends.py:197", "Cache the graph for dynamic shape for later use")
		if err := sleepCtx(ctx, compileTime); err != nil {
			return err
		}
		e.log("INFO", "backends.py:218", fmt.Sprintf("Compiling a graph for dynamic compile range takes %.2f s", time.Since(graphStart).Seconds()))
		// save_to_file: the handles by (compile range, graph index, compiler), as a Python literal.
		handles := "{   (None, 0, 'inductor'): ('fxgraph-" + randomHex(16) + "', '/tmp/torchinductor_root/" + randomHex(2) + "')}"
		for name, body := range map[string]string{"computation_graph.py": "from __future__ import annotations\nimport torch\n", cacheFile: handles} {
			p := name
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, name)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				return fmt.Errorf("OSError: %v", err)
			}
		}
	}
	e.log("INFO", "monitor.py:34", fmt.Sprintf("torch.compile takes %.2f s in total", time.Since(start).Seconds()))
	return nil
}

// hasFlag says whether the command line has the boolean flag name.
func (f serveFlags) hasFlag(name string) bool {
	for _, a := range f.args {
		if a == name || a == name+"=true" || a == name+"=True" {
			return true
		}
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
