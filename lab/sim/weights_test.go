package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCheckWeights(t *testing.T) {
	const index = `{"metadata":{"total_size":4},"weight_map":{"a":"model-00001-of-00004.safetensors","b":"model-00002-of-00004.safetensors",` +
		`"c":"model-00003-of-00004.safetensors","d":"model-00004-of-00004.safetensors","e":"model-00004-of-00004.safetensors"}}`
	shards := []string{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"}
	config := "config.json"
	for _, tc := range []struct {
		name   string
		files  []string // created in the model directory; the index gets its content
		path   func(dir string) string
		want   string // {dir} stands for the model directory
		logged bool
	}{
		{name: "a Hugging Face name", path: func(string) string { return "Qwen/Qwen3-8B" }},
		{name: "complete", files: append([]string{config, "model.safetensors.index.json"}, shards...)},
		{name: "one file, no index", files: []string{config, "model.safetensors"}},
		{name: "no config.json", files: append([]string{"model.safetensors.index.json"}, shards...),
			want: "OSError: {dir} does not appear to have a file named config.json. Checkout 'https://huggingface.co/{dir}/tree/main' for available files."},
		{name: "two shards missing", files: []string{config, "model.safetensors.index.json", shards[1], shards[3]}, logged: true,
			want: "FileNotFoundError: Weight files referenced in index but missing: {'{dir}/model-00001-of-00004.safetensors', '{dir}/model-00003-of-00004.safetensors'}"},
		{name: "two shards missing, path with a slash", files: []string{config, "model.safetensors.index.json", shards[1], shards[3]}, logged: true,
			path: func(dir string) string { return dir + "/" },
			want: "FileNotFoundError: Weight files referenced in index but missing: {'{dir}/model-00001-of-00004.safetensors', '{dir}/model-00003-of-00004.safetensors'}"},
		{name: "every shard missing", files: []string{config, "model.safetensors.index.json"}, logged: true,
			want: "RuntimeError: Cannot find any model weights with `{dir}`"},
		{name: "a half-finished download (the shard under another name)", files: []string{config, "model.safetensors.index.json", shards[0], shards[1], shards[2], shards[3] + ".incomplete"}, logged: true,
			want: "FileNotFoundError: Weight files referenced in index but missing: {'{dir}/model-00004-of-00004.safetensors'}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "Qwen3-8B")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range tc.files {
				content := "x"
				if f == "model.safetensors.index.json" {
					content = index
				}
				if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			path := dir
			if tc.path != nil {
				path = tc.path(dir)
			}
			var lines []string
			err := checkWeights(path, func(level, where, msg string) { lines = append(lines, level+" ["+where+"] "+msg) })
			want := strings.ReplaceAll(tc.want, "{dir}", dir)
			if got := errText(err); got != want {
				t.Fatalf("got  %q\nwant %q", got, want)
			}
			wantLines := []string(nil)
			if tc.logged {
				wantLines = []string{"ERROR [worker_base.py:620] Error executing method 'load_model'. This might cause deadlock in distributed execution."}
			}
			if !slices.Equal(lines, wantLines) {
				t.Errorf("logged %q", lines)
			}
		})
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
