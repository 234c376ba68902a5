package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A load's memory: --gpu-memory-utilization in either spelling (0, vLLM's default, without
// it), or as a Ray worker rank is handed it;
// on unified memory the weights' share is held, page by page, and the KV cache is what
// the utilization leaves; a discrete GPU holds none of it; too little left for the cache
// is upstream's error.
func TestLoadMemory(t *testing.T) {
	for args, want := range map[string]float64{"--gpu-memory-utilization=0.3": 0.3, "--gpu-memory-utilization 0.4": 0.4, "--max-model-len 128": 0} {
		if got := utilization(strings.Fields(args)); got != want {
			t.Errorf("%s: %v, want %v", args, got, want)
		}
	}
	if got := (serveFlags{util: 0.2, args: []string{"--gpu-memory-utilization", "0.5"}}).gpuMemoryUtilization(); got != 0.2 {
		t.Errorf("a rank handed 0.2 sizes its cache for %v", got)
	}
	if got := (serveFlags{args: []string{"--gpu-memory-utilization", "0.5"}}).gpuMemoryUtilization(); got != 0.5 {
		t.Errorf("the command line's 0.5 read as %v", got)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envUnifiedMemory, "")
	before := held.bytes
	w := newWeightLoad(dir, 2, 4)
	w.all()
	if err := w.kvCache(0, func(string, string, string) {}); err != nil || held.bytes != before {
		t.Fatalf("a discrete GPU's load held %d bytes (%v)", held.bytes-before, err)
	}
	t.Setenv(envUnifiedMemory, "1")
	w = newWeightLoad(dir, 2, 4)
	w.all()
	if got := held.bytes - before; got != 4<<20 {
		t.Fatalf("unified: the weights' share held %d bytes, want %d", got, 4<<20)
	}
	if err := w.kvCache(0.000000001, func(string, string, string) {}); err == nil {
		t.Fatal("no room for the KV cache, and no error")
	}
	if nodeMemory() <= 0 {
		t.Fatal("no node memory")
	}
}
