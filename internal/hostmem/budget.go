package hostmem

import (
	"fmt"
	"strconv"
	"strings"
)

const (
	GiB = int64(1) << 30
	MiB = int64(1) << 20
)

// Estimates of what an engine rank takes of host memory besides weights and KV cache,
// documented in docs/operations.md ("Host memory"). They are estimates, stated as such in
// every budget: a rank's Python, torch and CUDA context (vLLM's worker process; a CUDA
// context alone is several hundred MiB, and on unified memory it is host memory), and
// NCCL's host-side buffers for a network transport (NCCL_BUFFSIZE, 4 MiB by default, per
// channel, per direction, per peer, pinned host memory when GPUDirect RDMA is not used).
const (
	EngineRankBytes = 2 * GiB
	NCCLRankBytes   = 256 * MiB
)

// DefaultGPUMemoryUtilization is vLLM's default --gpu-memory-utilization
// (vllm/config/cache.py, gpu_memory_utilization: float = 0.9).
const DefaultGPUMemoryUtilization = 0.9

// Reserve is the node policy's host reserve: the larger of a fixed amount and a share of
// the node's memory, kept free of everything the deploy starts.
type Reserve struct {
	Bytes   int64   `json:"bytes"`
	Percent float64 `json:"percent"`
}

// DefaultReserve is max(8 GiB, 10 % of the node's memory): what the OS, the Docker engine
// and the agent need to stay responsive. vLLM's own cap on unified memory (PR #49760)
// takes a host reserve for the same reason.
var DefaultReserve = Reserve{Bytes: 8 * GiB, Percent: 10}

// Of is the reserve for a node with total bytes.
func (r Reserve) Of(total int64) int64 {
	return max(r.Bytes, int64(float64(total)*r.Percent/100))
}

// String is the reserve as the policy writes it.
func (r Reserve) String() string {
	return fmt.Sprintf("max(%s, %g%%)", Human(r.Bytes), r.Percent)
}

// ParseReserve reads a policy's host_reserve: a size ("8GiB", "512MiB", "1073741824"), a
// share ("10%"), or both as "8GiB,10%" (the larger applies).
func ParseReserve(s string) (Reserve, error) {
	var r Reserve
	if strings.TrimSpace(s) == "" {
		return r, fmt.Errorf("host_reserve: empty")
	}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if p, ok := strings.CutSuffix(part, "%"); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil || v < 0 || v >= 100 {
				return r, fmt.Errorf("host_reserve: %q is not a share between 0%% and 100%%", part)
			}
			r.Percent = v
			continue
		}
		b, err := ParseSize(part)
		if err != nil {
			return r, fmt.Errorf("host_reserve: %w", err)
		}
		r.Bytes = b
	}
	return r, nil
}

// ParseSize reads "8GiB", "512MiB", "64KiB", "2G" (taken as GiB) or plain bytes.
func ParseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", GiB}, {"MiB", MiB}, {"KiB", 1 << 10}, {"G", GiB}, {"M", MiB}, {"K", 1 << 10}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a size (8GiB, 512MiB, bytes)", s)
	}
	return int64(v * float64(mult)), nil
}

// Human prints bytes in GiB (or MiB below one GiB).
func Human(n int64) string {
	if n < GiB && n > -GiB {
		return fmt.Sprintf("%.0f MiB", float64(n)/float64(MiB))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/float64(GiB))
}

// Input is what a node's budget is made of.
type Input struct {
	Node  string
	Facts Facts
	// Ranks is how many engine ranks (GPUs) the deploy puts on this node; WorldSize is
	// tensor × pipeline.
	Ranks, WorldSize int
	// ModelBytes is the model's files' total size (0: unknown, as for a model inside the
	// image); a node holds ModelBytes × Ranks / WorldSize of its weights.
	ModelBytes int64
	// GPUMemoryUtilization is --gpu-memory-utilization (0: vLLM's default).
	GPUMemoryUtilization float64
	// MultiNode says the ranks talk over the network (NCCL's host buffers count).
	MultiNode bool
	// Reserve is the node policy's host reserve (nil: the facts' ReserveBytes, which the
	// node's agent computed from its policy, else DefaultReserve).
	Reserve *Reserve
}

// Budget is what a deploy needs of one node's host memory, and whether it fits.
type Budget struct {
	Node    string `json:"node"`
	Unified bool   `json:"unified,omitempty"`
	Ranks   int    `json:"ranks"`
	// WeightBytes is this node's share of the model's files; on a discrete GPU they go to
	// the GPU (their page cache is reclaimable, and MemAvailable counts it as available),
	// so only on unified memory do they count in NeedBytes.
	WeightBytes int64 `json:"weight_bytes"`
	// KVBytes is, on unified memory, what --gpu-memory-utilization takes of the host
	// beyond the weights: vLLM requests utilization × the GPU's total memory
	// (vllm/v1/worker/gpu_worker.py, requested_memory), and on a GB10 that total is the
	// host's RAM; weights, activations and KV cache all come out of it.
	KVBytes     int64   `json:"kv_bytes,omitempty"`
	Utilization float64 `json:"gpu_memory_utilization,omitempty"`
	// EngineBytes and NCCLBytes are the per-rank estimates (EngineRankBytes, NCCLRankBytes).
	EngineBytes int64 `json:"engine_bytes"`
	NCCLBytes   int64 `json:"nccl_bytes,omitempty"`
	// ReserveBytes is the node policy's host reserve; NeedBytes everything above plus it.
	ReserveBytes   int64    `json:"reserve_bytes"`
	NeedBytes      int64    `json:"need_bytes"`
	AvailableBytes int64    `json:"available_bytes"`
	TotalBytes     int64    `json:"total_bytes"`
	Fits           bool     `json:"fits"`
	Notes          []string `json:"notes,omitempty"`
}

// Decide makes a node's budget: on unified memory the engine's take is the larger of its
// weights and utilization × total per rank (vLLM's requested memory, which holds the
// weights and the KV cache), on a discrete GPU none of it is host memory; every rank adds
// EngineRankBytes (or the node policy's engine_rank_memory), NCCLRankBytes when the deploy spans nodes; the reserve goes on top.
// It fits when that need is at most what the node has available now.
func Decide(in Input) Budget {
	f := in.Facts
	res := DefaultReserve
	if in.Reserve != nil {
		res = *in.Reserve
	}
	b := Budget{Node: in.Node, Unified: f.Unified, Ranks: in.Ranks, AvailableBytes: f.AvailableBytes, TotalBytes: f.TotalBytes}
	if in.WorldSize > 0 && in.ModelBytes > 0 {
		b.WeightBytes = in.ModelBytes * int64(in.Ranks) / int64(in.WorldSize)
	} else if in.ModelBytes == 0 {
		b.Notes = append(b.Notes, "model size unknown here (not on this node yet, or inside the image): weights counted as the utilization's share only")
	}
	perRank := EngineRankBytes
	if f.EngineRankBytes > 0 {
		perRank = f.EngineRankBytes // the node's policy, as its agent reported it
	}
	b.EngineBytes = int64(in.Ranks) * perRank
	if in.MultiNode {
		b.NCCLBytes = int64(in.Ranks) * NCCLRankBytes
	}
	need := b.EngineBytes + b.NCCLBytes
	if f.Unified {
		util := in.GPUMemoryUtilization
		if util <= 0 {
			util = DefaultGPUMemoryUtilization
		}
		b.Utilization = util
		take := int64(util*float64(f.TotalBytes)) * int64(in.Ranks)
		b.KVBytes = max(take-b.WeightBytes, 0)
		need += b.WeightBytes + b.KVBytes
	}
	b.ReserveBytes = res.Of(f.TotalBytes)
	if in.Reserve == nil && f.ReserveBytes > 0 {
		b.ReserveBytes = f.ReserveBytes // the node's policy, as its agent reported it
	}
	b.NeedBytes = need + b.ReserveBytes
	b.Fits = b.NeedBytes <= b.AvailableBytes
	return b
}

// Summary says what the node needs and has, for a refusal or `starter plan`.
func (b Budget) Summary() string {
	parts := []string{}
	weights := "weights " + Human(b.WeightBytes)
	if b.WeightBytes == 0 {
		weights = "weights (size unknown here)"
	}
	if b.Unified {
		parts = append(parts, fmt.Sprintf("%s + KV cache %s (unified memory, --gpu-memory-utilization %g of %s)",
			weights, Human(b.KVBytes), b.Utilization, Human(b.TotalBytes)))
	} else {
		parts = append(parts, weights+" on the GPUs")
	}
	parts = append(parts, fmt.Sprintf("engine %s (%d ranks, estimate)", Human(b.EngineBytes), b.Ranks))
	if b.NCCLBytes > 0 {
		parts = append(parts, fmt.Sprintf("NCCL buffers %s (estimate)", Human(b.NCCLBytes)))
	}
	parts = append(parts, fmt.Sprintf("host reserve %s", Human(b.ReserveBytes)))
	return fmt.Sprintf("needs %s (%s), %s available of %s", Human(b.NeedBytes), strings.Join(parts, " + "),
		Human(b.AvailableBytes), Human(b.TotalBytes))
}

// Fix says how to make a budget that does not fit fit.
func (b Budget) Fix() string {
	if b.Unified {
		return "lower --gpu-memory-utilization (on unified memory it is a share of the host's RAM), use more nodes (a larger tensor × pipeline), free the host's memory, or lower the node policy's host_reserve"
	}
	return "free the host's memory, put fewer ranks on this node, or lower the node policy's host_reserve"
}

// UtilizationFromArgs is --gpu-memory-utilization in model.extra_args (0 when absent),
// spelled as vLLM's parser accepts it (underscores, "=value" or the next token).
func UtilizationFromArgs(args []string) (float64, error) {
	const flag = "--gpu-memory-utilization"
	for i, a := range args {
		key, val, hasVal := strings.Cut(a, "=")
		if !strings.HasPrefix(key, "--") || "--"+strings.ReplaceAll(key[2:], "_", "-") != flag {
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return 0, fmt.Errorf("%s has no value", flag)
			}
			val = args[i+1]
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil || v <= 0 || v > 1 {
			return 0, fmt.Errorf("%s %q is not a share in (0, 1]", flag, val)
		}
		return v, nil
	}
	return 0, nil
}
