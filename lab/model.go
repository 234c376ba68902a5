package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// NodeRoot is the directory that stands for a lab node's / : its agent runs with
// --host-root there, so a spec's host paths (hf_cache, model.host_dir) are that node's own,
// as on separate machines.
func (l *Lab) NodeRoot(node string) string {
	return filepath.Join(stateDir(l.Prefix), "root-"+node)
}

// ShardName is the n-th of total shards, as Hugging Face names them.
func ShardName(n, total int) string {
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", n, total)
}

// MakeModel writes a model directory vLLM (and the lab's vLLM) would take as a sharded
// safetensors checkpoint: config.json, model.safetensors.index.json listing every shard,
// and the shards (shardSize bytes each, pseudo-random content from seed, so two calls with
// one seed write identical files). skip names shard numbers not to write: a node that
// lacks them.
func MakeModel(dir string, shards int, shardSize int64, seed uint64, skip ...int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	config := `{"architectures": ["LabForCausalLM"], "model_type": "lab", "num_attention_heads": 8}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
		return err
	}
	weightMap := map[string]string{}
	for i := 1; i <= shards; i++ {
		weightMap[fmt.Sprintf("model.layers.%d.weight", i-1)] = ShardName(i, shards)
	}
	index, _ := json.MarshalIndent(map[string]any{"metadata": map[string]int64{"total_size": int64(shards) * shardSize}, "weight_map": weightMap}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), index, 0o644); err != nil {
		return err
	}
	skipped := map[int]bool{}
	for _, s := range skip {
		skipped[s] = true
	}
	for i := 1; i <= shards; i++ {
		if skipped[i] {
			continue
		}
		if err := writeRandom(filepath.Join(dir, ShardName(i, shards)), shardSize, seed+uint64(i)); err != nil {
			return err
		}
	}
	return nil
}

func writeRandom(path string, size int64, seed uint64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24)})
	if _, err := io.CopyN(f, r, size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
