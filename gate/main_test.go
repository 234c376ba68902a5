package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/agentgate"
)

// The keys file: one node and its key's SHA-256 per line; a malformed line, a key given
// to two nodes or a file with no node is refused, naming the file and line.
func TestReadKeys(t *testing.T) {
	h := agentgate.KeyHash
	write := func(text string) string {
		p := filepath.Join(t.TempDir(), "gate-keys")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nodes, err := readKeys(write("# the fleet\n\nnode-a " + h("ka") + "\nnode-b " + h("kb") + "\n"))
	if err != nil || len(nodes) != 2 || nodes[h("ka")] != "node-a" || nodes[h("kb")] != "node-b" {
		t.Fatalf("%v, %v", nodes, err)
	}
	for text, want := range map[string]string{
		"node-a ka\n":                                      ":1: want 'NODE SHA256-HEX'",
		"node-a " + h("ka") + " extra\n":                   ":1: want",
		"node-a " + h("ka") + "\nnode-b " + h("ka") + "\n": ":2: node-b has the key of node-a",
		"# nobody\n":                                       "no node",
	} {
		if _, err := readKeys(write(text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}
