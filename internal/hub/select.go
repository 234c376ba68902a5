// Package hub talks to a Hugging Face hub (huggingface.co, or a mirror HF_ENDPOINT names)
// over its documented HTTP API: it resolves a revision to a commit, lists the commit's
// files, selects the files vLLM needs to serve the model (Select, pure), and downloads one
// file resumably with its size and hash verified (Client). It decides nothing about nodes;
// the head's agent calls it for model.source: hub (activities/hub.go), and writes the files
// into its cache through package transfer.
package hub

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// IndexName is the safetensors index of a sharded checkpoint (transformers'
// SAFE_WEIGHTS_INDEX_NAME): its weight_map names, for every tensor, the shard holding it.
const IndexName = "model.safetensors.index.json"

// Sibling is one file of a commit, as the hub's revision API lists it (siblings, with
// ?blobs=true for the sizes and hashes).
type Sibling struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	// SHA256 is an LFS file's content hash (lfs.sha256); empty for a file kept in git.
	SHA256 string `json:"sha256,omitempty"`
	// BlobID is the git blob id (blobId): of the pointer for an LFS file, of the content
	// otherwise.
	BlobID string `json:"blobId,omitempty"`
}

// Selection is the files a model needs, in name order, and why the others were left out.
type Selection struct {
	Files []Sibling `json:"files"`
	// Format is the weight format chosen: "safetensors" or "bin".
	Format string `json:"format"`
	// Skipped counts the repository's files left out.
	Skipped int `json:"skipped"`
}

// Size is the total size of the selected files.
func (s Selection) Size() int64 {
	var n int64
	for _, f := range s.Files {
		n += f.Size
	}
	return n
}

// The files besides the weights that serving reads: the model's config, its generation
// defaults, the tokenizer (transformers' AutoTokenizer: the fast tokenizer's JSON, a
// sentencepiece or tiktoken model, BPE vocab and merges) and chat templates (a separate
// chat_template.jinja or .json since transformers 4.43), and a processor's config for
// multimodal models. Only top-level names: vLLM and transformers read the model's own
// directory, not its subfolders.
var support = []string{
	"config.json",
	"generation_config.json",
	"tokenizer.json",
	"tokenizer_config.json",
	"tokenizer.model",
	"tiktoken.model",
	"special_tokens_map.json",
	"added_tokens.json",
	"vocab.json",
	"vocab.txt",
	"merges.txt",
	"chat_template.jinja",
	"chat_template.json",
	"preprocessor_config.json",
	"processor_config.json",
}

// notForInference are files vLLM drops from the weights it loads
// (weight_utils.filter_files_not_needed_for_inference, after transformers' trainer):
// training state saved beside a checkpoint.
var notForInference = []string{"training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt"}

// Select picks, from a commit's files, those vLLM's default loader reads to serve the model
// (load_format auto; vllm/model_executor/model_loader/default_loader.py _prepare_weights
// and weight_utils.py download_weights_from_hf):
//
//   - weights: vLLM tries the patterns *.safetensors, then *.bin, and uses the first that
//     matches a file in the model's directory (it globs the directory, so files in
//     subfolders such as gpt-oss's original/ and metal/ are never loaded, and vLLM's
//     --ignore-patterns defaults to original/**/* so that its download skips them too,
//     vllm/config/load.py LoadConfig); .bin files only when no safetensors exist.
//   - with safetensors and an index, only the shards the index's weight_map names
//     (filter_duplicate_safetensors_files: Mistral's repositories hold the shards and a
//     consolidated.safetensors of the same weights, and loading both breaks);
//     consolidated*.safetensors is also left out without an index, since it is Mistral's
//     own format (load_format mistral), not the default loader's.
//   - training files out (filter_files_not_needed_for_inference).
//   - the index itself, and the support files above.
//
// weightMap is the index's weight_map, nil when the commit has no index. A shard the index
// names but the commit lacks is an error: the checkpoint cannot be loaded.
func Select(files []Sibling, weightMap map[string]string) (Selection, error) {
	byName := make(map[string]Sibling, len(files))
	var top []Sibling
	for _, f := range files {
		byName[f.Name] = f
		if !strings.Contains(f.Name, "/") {
			top = append(top, f)
		}
	}
	var sel Selection
	keep := map[string]bool{}
	var safetensors, bins []string
	for _, f := range top {
		switch {
		case strings.HasSuffix(f.Name, ".safetensors"):
			safetensors = append(safetensors, f.Name)
		case strings.HasSuffix(f.Name, ".bin") && !slices.ContainsFunc(notForInference, func(s string) bool { return strings.HasSuffix(f.Name, s) }):
			bins = append(bins, f.Name)
		}
	}
	switch {
	case len(safetensors) > 0:
		sel.Format = "safetensors"
		if weightMap != nil {
			if _, ok := byName[IndexName]; ok {
				keep[IndexName] = true
			}
			for _, shard := range weightMap {
				if path.Clean(shard) != shard || strings.Contains(shard, "/") {
					// vLLM joins the name to the model's directory and keeps it only if
					// its glob of that directory found it.
					return Selection{}, fmt.Errorf("%s names %q, not a file of the model's directory", IndexName, shard)
				}
				if _, ok := byName[shard]; !ok {
					return Selection{}, fmt.Errorf("%s names %s, which the commit lacks", IndexName, shard)
				}
				keep[shard] = true
			}
		} else {
			for _, name := range safetensors {
				if !strings.HasPrefix(name, "consolidated") {
					keep[name] = true
				}
			}
		}
	case len(bins) > 0:
		sel.Format = "bin"
		for _, name := range bins {
			keep[name] = true
		}
		if _, ok := byName["pytorch_model.bin.index.json"]; ok {
			keep["pytorch_model.bin.index.json"] = true
		}
	default:
		return Selection{}, fmt.Errorf("no weights: the commit has no top-level *.safetensors or *.bin file")
	}
	if len(keep) == 0 {
		return Selection{}, fmt.Errorf("only consolidated*.safetensors: Mistral's own format (vLLM's load_format mistral), not the default loader's")
	}
	if _, ok := byName["config.json"]; !ok {
		return Selection{}, fmt.Errorf("no config.json in the commit")
	}
	for _, name := range support {
		if _, ok := byName[name]; ok {
			keep[name] = true
		}
	}
	for _, f := range files {
		if keep[f.Name] {
			sel.Files = append(sel.Files, f)
		}
	}
	slices.SortFunc(sel.Files, func(a, b Sibling) int { return strings.Compare(a.Name, b.Name) })
	sel.Skipped = len(files) - len(sel.Files)
	return sel, nil
}
