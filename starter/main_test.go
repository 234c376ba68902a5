package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBadInputIsRefusedBeforeConnecting(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: lab\nimage: x\nmodel: {path: m}\nparallel: {tensor: 8}\nnodes: [{name: a, role: head, gpus: 1}, {name: a, role: worker, gpus: 1}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unknown := filepath.Join(dir, "unknown.yaml")
	if err := os.WriteFile(unknown, []byte("name: lab\nimage: x\nmodel: {name: m}\nparallel: {tensor: 8}\nnodes: [{name: a, role: head, gpus: 1}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Port 1 refuses connections: reaching it would be a different error.
	addr := []string{"--address", "127.0.0.1:1"}
	tests := []struct {
		args  []string
		want  []string
		usage bool
	}{
		{args: append([]string{"deploy", "-f", bad}, addr...), want: []string{`nodes[1].name: duplicate "a"`, "parallel: tensor 8 x pipeline 1 = 8 GPUs, nodes provide 2"}},
		{args: append([]string{"plan", "-f", bad}, addr...), want: []string{`nodes[1].name: duplicate "a"`}},
		{args: append([]string{"plan", "-f", unknown}, addr...), want: []string{"model.name: unknown field (did you mean model.path or model.served_name?)",
			"model.path: required", "parallel: tensor 8 x pipeline 1 = 8 GPUs, nodes provide 1"}},
		{args: append([]string{"deploy", "-f", filepath.Join(dir, "missing.yaml")}, addr...), want: []string{"read spec", "missing.yaml"}},
		{args: []string{"deploy"}, usage: true},
		{args: []string{"status"}, usage: true},
		{args: []string{"teardown", "a", "b"}, usage: true},
		{args: []string{"frobnicate"}, usage: true},
		{args: []string{"deploy", "--no-such-flag"}, usage: true},
		{args: append([]string{"status", "lab"}, addr...), want: []string{"connect to temporal at 127.0.0.1:1"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), tt.args, &out, &errOut)
			if err == nil {
				t.Fatal("accepted")
			}
			if tt.usage != errors.Is(err, errUsage) {
				t.Errorf("usage error = %v, want %v (%v)", errors.Is(err, errUsage), tt.usage, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"deploy", "--help"}, {"plan", "-h"}, {"status", "--help"}, {"teardown", "--help"}} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err != nil {
			t.Errorf("%v: %v", args, err)
		}
		if out.Len()+errOut.Len() == 0 {
			t.Errorf("%v printed nothing", args)
		}
	}
}

// #23 finding 1: a node env that makes the containers run code is refused by `starter
// plan` itself, naming the node and every such variable.
func TestPlanRefusesCodeExecutingEnv(t *testing.T) {
	hostile := filepath.Join(t.TempDir(), "hostile.yaml")
	spec := `name: lab
image: vllm/vllm-openai:v0.17.0
model: {path: /models/m}
parallel: {tensor: 2}
nodes:
  - {name: node-a, role: head, gpus: 1, env: {PYTHONWARNINGS: "all:0:antigravity.x:0:0", BROWSER: "sh -c id", NCCL_DEBUG: WARN}}
  - {name: node-b, role: worker, gpus: 1, env: {LD_PRELOAD: /tmp/x.so, PYTHONHASHSEED: "0"}}
`
	if err := os.WriteFile(hostile, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"plan", "-f", hostile, "--address", "127.0.0.1:1"}, &out, &errOut)
	if err == nil {
		t.Fatal("plan accepted a spec whose env runs code")
	}
	for _, w := range []string{"node node-a: PYTHONWARNINGS makes code run", "node node-a: BROWSER makes code run", "node node-b: LD_PRELOAD makes code run"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q: %v", w, err)
		}
	}
	for _, ok := range []string{"NCCL_DEBUG", "PYTHONHASHSEED"} {
		if strings.Contains(err.Error(), ok) {
			t.Errorf("error names the harmless %s: %v", ok, err)
		}
	}
}
