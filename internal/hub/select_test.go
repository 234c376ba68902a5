package hub

import (
	"reflect"
	"strings"
	"testing"
)

func sib(names ...string) []Sibling {
	out := make([]Sibling, len(names))
	for i, n := range names {
		out[i] = Sibling{Name: n, Size: int64(10 * (i + 1))}
	}
	return out
}

func TestSelect(t *testing.T) {
	tok := []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
	cases := []struct {
		name      string
		files     []string
		weightMap map[string]string
		want      []string
		format    string
		err       string
	}{{
		// gpt-oss-120b: the shards the index names at the top, and the original checkpoint
		// (original/) and Metal weights (metal/) in subfolders vLLM never reads.
		name: "gpt-oss with original/ and metal/",
		files: append([]string{"model-00000-of-00002.safetensors", "model-00001-of-00002.safetensors", IndexName,
			"original/model--00001-of-00007.safetensors", "original/config.json", "original/dtypes.json",
			"metal/model.bin", "chat_template.jinja", "README.md", "LICENSE", ".gitattributes", "USAGE_POLICY"}, tok...),
		weightMap: map[string]string{"a": "model-00000-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"},
		want: []string{"chat_template.jinja", "config.json", "generation_config.json", "model-00000-of-00002.safetensors",
			"model-00001-of-00002.safetensors", IndexName, "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"},
		format: "safetensors",
	}, {
		// Mistral: shards, an index, and consolidated.safetensors of the same weights;
		// the index leaves the consolidated file out (filter_duplicate_safetensors_files).
		name:      "mistral consolidated beside shards",
		files:     []string{"consolidated.safetensors", "params.json", "tokenizer.model.v3", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", IndexName, "config.json", "tokenizer.model"},
		weightMap: map[string]string{"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors", "z": "model-00002-of-00002.safetensors"},
		want:      []string{"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", IndexName, "tokenizer.model"},
		format:    "safetensors",
	}, {
		name:      "a shard the index does not name is left out",
		files:     []string{"model-1.safetensors", "model-2.safetensors", "stale.safetensors", IndexName, "config.json"},
		weightMap: map[string]string{"x": "model-1.safetensors", "y": "model-2.safetensors"},
		want:      []string{"config.json", "model-1.safetensors", "model-2.safetensors", IndexName},
		format:    "safetensors",
	}, {
		name:   "one model.safetensors, no index; gguf, onnx and pth out",
		files:  []string{"model.safetensors", "model.gguf", "onnx/model.onnx", "model.pth", "pytorch_model.bin", "flax_model.msgpack", "tf_model.h5", "config.json", "vocab.json", "merges.txt"},
		want:   []string{"config.json", "merges.txt", "model.safetensors", "vocab.json"},
		format: "safetensors",
	}, {
		name:   "consolidated only is Mistral's format, without an index it is left out beside others",
		files:  []string{"consolidated.safetensors", "model.safetensors", "config.json"},
		want:   []string{"config.json", "model.safetensors"},
		format: "safetensors",
	}, {
		// .bin only when no safetensors exist, and never the trainer's state.
		name:   "bin when no safetensors",
		files:  []string{"pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin", "pytorch_model.bin.index.json", "training_args.bin", "optimizer.bin", "config.json", "tokenizer.json"},
		want:   []string{"config.json", "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin", "pytorch_model.bin.index.json", "tokenizer.json"},
		format: "bin",
	}, {
		name:  "safetensors only in a subfolder are not the model's",
		files: []string{"original/model.safetensors", "config.json"},
		err:   "no weights",
	}, {
		name:      "the index names a shard the commit lacks",
		files:     []string{"model-1.safetensors", IndexName, "config.json"},
		weightMap: map[string]string{"x": "model-1.safetensors", "y": "model-2.safetensors"},
		err:       "names model-2.safetensors, which the commit lacks",
	}, {
		name:      "the index names a path outside the directory",
		files:     []string{"model-1.safetensors", IndexName, "config.json", "original/model.safetensors"},
		weightMap: map[string]string{"x": "original/model.safetensors"},
		err:       "not a file of the model's directory",
	}, {
		name:  "consolidated only",
		files: []string{"consolidated.safetensors", "params.json", "config.json"},
		err:   "Mistral's own format",
	}, {
		name:  "no config",
		files: []string{"model.safetensors"},
		err:   "no config.json",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files := sib(c.files...)
			sel, err := Select(files, c.weightMap)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			var size int64
			for _, f := range sel.Files {
				got = append(got, f.Name)
				size += f.Size
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("files = %q\nwant    %q", got, c.want)
			}
			if sel.Format != c.format || sel.Size() != size || sel.Skipped != len(files)-len(c.want) {
				t.Errorf("format %q size %d skipped %d", sel.Format, sel.Size(), sel.Skipped)
			}
		})
	}
}
