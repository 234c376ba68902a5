package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// compileOnce runs the compile step for f and returns its lines and how long it took.
func compileOnce(t *testing.T, f serveFlags) ([]string, time.Duration) {
	t.Helper()
	var lines []string
	e := &engine{flags: f, log: func(level, where, msg string) { lines = append(lines, msg) }}
	start := time.Now()
	if err := e.torchCompile(context.Background()); err != nil {
		t.Fatal(err)
	}
	return lines, time.Since(start)
}

func has(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// A cold start compiles and writes the cache; a second start with the same configuration
// loads it, in less time; another configuration (TP, a graph-changing flag) has another
// directory and compiles again; an argument that changes no graph (the port) shares it.
func TestCompileCacheColdThenWarm(t *testing.T) {
	t.Setenv("VLLM_CACHE_ROOT", t.TempDir())
	f := serveFlags{model: "/models/tiny", tp: 1, pp: 1, port: 8000, maxLen: 2048, rel: release{vllm: "0.32.0"},
		args: []string{"serve", "/models/tiny", "--dtype", "bfloat16", "--port", "8000"}}
	cold, coldTook := compileOnce(t, f)
	if !has(cold, "Compiling a graph for dynamic compile range takes ") || has(cold, "Directly load") || !has(cold, "torch.compile takes ") {
		t.Fatalf("cold start: %q", cold)
	}
	other := f
	other.port, other.args = 9000, []string{"serve", "/models/tiny", "--dtype", "bfloat16", "--port", "9000"}
	warm, warmTook := compileOnce(t, other)
	if !has(warm, "Directly load the compiled graph(s) for dynamic shape from the cache, took ") || has(warm, "Compiling a graph") {
		t.Fatalf("warm start (another port): %q", warm)
	}
	if warmTook >= coldTook {
		t.Errorf("warm %v, cold %v: the cache saved nothing", warmTook, coldTook)
	}
	if cold[0] != warm[0] {
		t.Errorf("cache directories differ: %q, %q", cold[0], warm[0])
	}
	tp2 := f
	tp2.tp = 2
	dtype := f
	dtype.args = []string{"serve", "/models/tiny", "--dtype=float16"}
	for name, g := range map[string]serveFlags{"TP=2": tp2, "--dtype=float16": dtype} {
		again, _ := compileOnce(t, g)
		if !has(again, "Compiling a graph for dynamic compile range takes ") {
			t.Errorf("%s loaded another configuration's cache: %q", name, again)
		}
		if again[0] == cold[0] {
			t.Errorf("%s shares the directory %q", name, again[0])
		}
	}
	eager := f
	eager.args = append(eager.args, "--enforce-eager")
	if lines, _ := compileOnce(t, eager); len(lines) != 0 {
		t.Errorf("--enforce-eager compiled: %q", lines)
	}
}

// VLLM_CACHE_ROOT's default is envs.py's: $XDG_CACHE_HOME/vllm, else ~/.cache/vllm.
func TestVLLMCacheRootDefault(t *testing.T) {
	t.Setenv("VLLM_CACHE_ROOT", "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if got := vllmCacheRoot(); got != "/home/u/.cache/vllm" {
		t.Errorf("%s", got)
	}
	t.Setenv("XDG_CACHE_HOME", "/x")
	if got := vllmCacheRoot(); got != "/x/vllm" {
		t.Errorf("%s", got)
	}
}
