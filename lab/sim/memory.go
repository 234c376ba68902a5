package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// What a rank's load takes of its node's memory, for real: pages allocated and touched,
// so the kernel's own accounting (the node container's memory cgroup, which the lab nests
// the engines under) sees them, and the agent's guard reacts to the kernel's numbers.
// It follows what vLLM allocates, and when (vllm/v1/worker/gpu_worker.py):
//
//   - load_model: each rank's share of the checkpoint's weights, shard by shard, goes to
//     GPU memory. On a discrete GPU that is not host memory: the host only reads the
//     files (safetensors are mmapped, so their pages are reclaimable page cache, which
//     MemAvailable counts as available). On a GPU that computes in host memory (a GB10:
//     cudaDevAttrIntegrated) GPU memory is host memory, so the weights are.
//   - determine_available_memory: profile_run (the lab's collective stands for it), then
//     the KV cache gets requested_memory (gpu_memory_utilization × the GPU's total, which
//     torch.cuda.mem_get_info reports as the host's RAM on unified memory) less what the
//     load and the profile took; initialize_kv_cache then allocates it. Too little left
//     is kv_cache_utils.py's "No available memory for the cache blocks".
//
// The lab's checkpoints are small, and its GPUs have no memory of their own: a lab node
// computes in host memory when its engines have TPDEPLOY_SIM_UNIFIED_MEMORY=1 (a spec
// stating a Spark's GB10, with nodes[].unified_memory for the agent). The node's "RAM"
// is its memory cgroup's limit (nodeMemory). vLLM keeps both until the process exits, and
// so does the lab: the pages are held in held.
//
// Not modelled: profile_run's transient (vllm#46307, unbounded by the utilization on a GB10: one
// forward of max_num_batched_tokens, sized by activations the lab's checkpoints lack;
// docs/upstream.md §14) and the engine's non-torch memory (CUDA context, NCCL).

const envUnifiedMemory = "TPDEPLOY_SIM_UNIFIED_MEMORY" // the node's GPU computes in host memory (a GB10)

// held is every page this process's loads allocated, kept until it exits.
var held struct {
	sync.Mutex
	chunks [][]byte
	bytes  int64
}

// holdMemory allocates n bytes and touches every page of them, in chunks: the kernel
// charges each page when it is first written.
func holdMemory(n int64) {
	const chunk = 16 << 20
	for n > 0 {
		size := min(n, chunk)
		b := make([]byte, size)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		held.Lock()
		held.chunks = append(held.chunks, b)
		held.bytes += size
		held.Unlock()
		n -= size
	}
}

// unifiedMemory says whether this lab node's GPU computes in host memory.
func unifiedMemory() bool {
	v, _ := strconv.ParseBool(os.Getenv(envUnifiedMemory))
	return v
}

// utilization is --gpu-memory-utilization from vllm serve's arguments, 0 when they do not
// set it (kvCache then takes vLLM's default 0.9, vllm/config/cache.py).
func utilization(args []string) float64 {
	for i, a := range args {
		name, val, ok := strings.Cut(a, "=")
		if name != "--gpu-memory-utilization" {
			continue
		}
		if !ok && i+1 < len(args) {
			val = args[i+1]
		}
		if u, err := strconv.ParseFloat(val, 64); err == nil && u > 0 {
			return u
		}
	}
	return 0
}

// weightFiles are the model directory's checkpoint files (none for a Hugging Face name,
// which the lab's default models are).
func weightFiles(model string) (files []string, total int64) {
	if fi, err := os.Stat(model); err != nil || !fi.IsDir() {
		return nil, 0
	}
	for _, pat := range []string{"*.safetensors", "*.bin", "*.pt"} {
		m, _ := filepath.Glob(filepath.Join(model, pat))
		for _, name := range m {
			if fi, err := os.Stat(name); err == nil && fi.Mode().IsRegular() {
				files = append(files, name)
				total += fi.Size()
			}
		}
	}
	return files, total
}

// weightLoad is one rank's load_model: its share of the checkpoint, in shards.
type weightLoad struct {
	unified bool
	files   []string
	share   int64
	shards  int
}

func newWeightLoad(model string, world, shards int) weightLoad {
	files, total := weightFiles(model)
	return weightLoad{unified: unifiedMemory(), files: files, share: total / int64(max(world, 1)), shards: max(shards, 1)}
}

// shard loads shard i (1-based): on unified memory its part of the rank's share is
// allocated; on a discrete GPU the first shard reads the files, whose pages stay in the
// page cache.
func (w weightLoad) shard(i int) {
	if w.unified {
		holdMemory(w.share / int64(w.shards))
		return
	}
	if i == 1 {
		for _, name := range w.files {
			if f, err := os.Open(name); err == nil {
				_, _ = io.Copy(io.Discard, f)
				f.Close()
			}
		}
	}
}

// all loads every shard at once (a worker rank, whose pacing is one wait).
func (w weightLoad) all() {
	for i := 1; i <= w.shards; i++ {
		w.shard(i)
	}
}

// kvCache allocates the rank's KV cache after the profile on unified memory: requested
// memory (util of the node's, vLLM's default 0.9 for 0) less the weights. It returns
// upstream's error when nothing is left for it.
func (w weightLoad) kvCache(util float64, log rankLog) error {
	if !w.unified {
		return nil
	}
	if util <= 0 {
		util = 0.9
	}
	requested := int64(util * float64(nodeMemory()))
	kv := requested - w.share
	if kv <= 0 {
		return fmt.Errorf("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.")
	}
	log("INFO", "gpu_worker.py:298", fmt.Sprintf("Available KV cache memory: %.2f GiB", float64(kv)/(1<<30)))
	holdMemory(kv)
	return nil
}

// nodeMemory is what torch.cuda.mem_get_info's total is on a GB10, the node's RAM: in the
// lab, the node container's memory limit, which cgroup v1 shows a nested container as
// memory.stat's hierarchical_memory_limit; else a v2 memory.max of its own; else MemTotal.
func nodeMemory() int64 {
	total := int64(0)
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				f := strings.Fields(rest)
				if len(f) > 0 {
					kb, _ := strconv.ParseInt(f[0], 10, 64)
					total = kb << 10
				}
			}
		}
	}
	limit := int64(0)
	if b, err := os.ReadFile("/sys/fs/cgroup/memory/memory.stat"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "hierarchical_memory_limit "); ok {
				limit, _ = strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			}
		}
	} else if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		limit, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	if limit > 0 && (total == 0 || limit < total) {
		return limit
	}
	return total
}
