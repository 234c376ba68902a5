package hub

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
)

// LabModel is the lab's model as a hub repository holds it, laid out as a sharded
// safetensors checkpoint on huggingface.co is: config.json, the tokenizer, the index
// naming every shard (kept in git), the shards (LFS, pseudo-random content from seed, so
// two calls with one seed give identical files), and an original/ copy of the weights in
// another format that vLLM's default loader does not read (as gpt-oss and Llama
// repositories hold), which a download of only what vLLM needs must leave out.
func LabModel(shards int, shardSize int64, seed uint64) []File {
	config := `{"architectures": ["LabForCausalLM"], "model_type": "lab", "num_attention_heads": 8}` + "\n"
	files := []File{
		{Name: "config.json", Data: []byte(config)},
		{Name: "tokenizer.json", Data: []byte(`{"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}` + "\n")},
		{Name: "README.md", Data: []byte("# The lab's model\n")},
	}
	weightMap := map[string]string{}
	for i := 1; i <= shards; i++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i, shards)
		weightMap[fmt.Sprintf("model.layers.%d.weight", i-1)] = name
		files = append(files, File{Name: name, Data: random(shardSize, seed+uint64(i)), LFS: true})
	}
	index, _ := json.MarshalIndent(map[string]any{"metadata": map[string]int64{"total_size": int64(shards) * shardSize}, "weight_map": weightMap}, "", "  ")
	files = append(files, File{Name: "model.safetensors.index.json", Data: index},
		File{Name: "original/consolidated.00.pth", Data: random(shardSize, seed+1000), LFS: true})
	return files
}

func random(size int64, seed uint64) []byte {
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24)})
	b := make([]byte, size)
	_, _ = io.ReadFull(r, b)
	return b
}

// CommitOf is a stable commit id for a lab repository's files (the lab makes one commit
// per repository): sha1 of the repository's name and its files' blob ids.
func CommitOf(repo string, files []File) string {
	h := sha1.New()
	fmt.Fprintf(h, "%s\n", repo)
	for _, f := range files {
		fmt.Fprintf(h, "%s %s\n", f.Name, GitBlobID(f.Data))
	}
	return hex.EncodeToString(h.Sum(nil))
}
