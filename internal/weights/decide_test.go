package weights

import (
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	shard := func(name string, size int64) File { return File{Name: name, Size: size} }
	full := Manifest{Source: "/models/m", Dir: "/models/m", Files: []File{
		shard("config.json", 700), shard("model-00001-of-00003.safetensors", 4_900_000_000),
		shard("model-00002-of-00003.safetensors", 4_900_000_000), shard("model-00003-of-00003.safetensors", 1_200_000_000),
		shard("model.safetensors.index.json", 30_000),
	}}
	lacking2 := Manifest{Source: "/models/m", Dir: "/models/m", Files: []File{full.Files[0], full.Files[1], full.Files[4]},
		Missing: []string{"model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}}
	absent := Manifest{Source: "Qwen/Qwen3-8B", Absent: "no models--Qwen--Qwen3-8B in /root/.cache/huggingface/hub"}
	nodes := []string{"node-a", "node-b", "node-c"}
	for _, tc := range []struct {
		name       string
		ms         map[string]Manifest
		sync, hub  bool
		problems   []string
		copyTo     map[string]int
		warning    string
		noProblems bool
	}{
		{name: "identical everywhere", ms: map[string]Manifest{"node-a": full, "node-b": full, "node-c": full}, noProblems: true},
		{name: "a node lacks two shards", ms: map[string]Manifest{"node-a": full, "node-b": lacking2, "node-c": full},
			problems: []string{"node-b lacks model-00002-of-00003.safetensors (head has 4.9 GB)", "node-b lacks model-00003-of-00003.safetensors (head has 1.2 GB)"}},
		{name: "synced instead", ms: map[string]Manifest{"node-a": full, "node-b": lacking2, "node-c": full}, sync: true,
			noProblems: true, copyTo: map[string]int{"node-b": 2}},
		{name: "a node without the model gets all of it", ms: map[string]Manifest{"node-a": full, "node-b": full, "node-c": {Absent: "no directory /models/m"}}, sync: true,
			noProblems: true, copyTo: map[string]int{"node-c": 5}},
		{name: "the head is incomplete: nothing to copy from", ms: map[string]Manifest{"node-a": lacking2, "node-b": full, "node-c": full}, sync: true,
			problems: []string{"node-a lacks model-00002-of-00003.safetensors (the model's index lists it)"}},
		{name: "a size differs", ms: map[string]Manifest{"node-a": full, "node-b": full, "node-c": {Source: "/models/m", Files: append([]File{shard("config.json", 699)}, full.Files[1:]...)}},
			problems: []string{"node-c has config.json at 699 B, head has 700 B"}},
		{name: "nobody has an HF model: the hub downloads it", ms: map[string]Manifest{"node-a": absent, "node-b": absent, "node-c": absent}, hub: true,
			noProblems: true, warning: "vLLM will download it from the Hugging Face Hub on every node"},
		{name: "some have an HF model, some do not", ms: map[string]Manifest{"node-a": full, "node-b": absent, "node-c": full}, hub: true,
			problems: []string{"node-b lacks the model: no models--Qwen--Qwen3-8B"}},
		{name: "a directory nobody has is a problem", ms: map[string]Manifest{"node-a": {Absent: "no directory /models/m"}, "node-b": full, "node-c": full},
			problems: []string{"node-a lacks the model: no directory /models/m"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide("node-a", tc.ms, nodes, tc.sync, tc.hub)
			msg := Summary(v.Problems, 5)
			if tc.noProblems != (len(v.Problems) == 0) {
				t.Fatalf("problems %q", msg)
			}
			for _, p := range tc.problems {
				if !strings.Contains(msg, p) {
					t.Errorf("summary %q lacks %q", msg, p)
				}
			}
			if len(v.Copy) != len(tc.copyTo) {
				t.Errorf("copy to %v, want %v", v.Copy, tc.copyTo)
			}
			for n, k := range tc.copyTo {
				if len(v.Copy[n]) != k {
					t.Errorf("%s gets %d files, want %d", n, len(v.Copy[n]), k)
				}
			}
			if tc.warning != "" && (len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], tc.warning)) {
				t.Errorf("warnings %q, want %q", v.Warnings, tc.warning)
			}
		})
	}
}

func TestSummaryCapsEachNode(t *testing.T) {
	var ps []Problem
	for i := 0; i < 9; i++ {
		ps = append(ps, Problem{Node: "node-b", Kind: KindLacks, File: string(rune('a' + i)), Message: "node-b lacks " + string(rune('a'+i))})
	}
	if got := Summary(ps, 3); got != "node-b lacks a; node-b lacks b; node-b lacks c; and 6 more files on node-b" {
		t.Errorf("Summary = %q", got)
	}
}
