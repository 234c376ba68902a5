package activities

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// A copy chain's node checks the node it is told to copy from against the signed spec:
// a node of the spec before it in the chain's order (the head, then the spec's nodes),
// at that node's pinned address. Not itself, not a node after it (a loop), not a node
// the spec does not name, not another address.
func TestCopySourceIsANodeBeforeThisOneInTheSignedSpec(t *testing.T) {
	c := spec.Cluster{Name: "chain", Nodes: []spec.Node{
		{Name: "node-b", Role: spec.RoleWorker, Address: "10.0.0.2"},
		{Name: "node-a", Role: spec.RoleHead, Address: "10.0.0.1"},
		{Name: "node-c", Role: spec.RoleWorker, Address: "10.0.0.3"},
		{Name: "node-d", Role: spec.RoleWorker, Address: "10.0.0.4"},
	}}
	at := func(a string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(a), 40000) }
	for _, tc := range []struct {
		self, source, from string
		want               string // "" accepts
	}{
		{"node-b", "", "10.0.0.1", ""},
		{"node-b", "node-a", "10.0.0.1", ""},
		{"node-c", "node-b", "10.0.0.2", ""},
		{"node-d", "node-b", "10.0.0.2", ""}, // node-c lacked nothing: not in the chain
		{"node-c", "node-b", "10.0.0.9", "the model server 10.0.0.9:40000 (node-b's, the node before node-c in the copy chain) is 10.0.0.9, not the signed spec's nodes[0].address 10.0.0.2"},
		{"node-b", "", "10.0.0.9", "(the head node-a's) is 10.0.0.9, not the signed spec's nodes[1].address 10.0.0.1"},
		{"node-c", "node-c", "10.0.0.3", "node-c is to copy the model from node-c, which comes after it in the copy chain"},
		{"node-b", "node-d", "10.0.0.4", "node-b is to copy the model from node-d, which comes after it in the copy chain"},
		{"node-b", "node-x", "10.0.0.4", "the model server's node node-x is not a node of the signed spec of cluster chain"},
	} {
		b := &nodeBase{name: tc.self}
		err := b.signedSource(&c, tc.source, at(tc.from))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s copying from %q at %s: %v", tc.self, tc.source, tc.from, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s copying from %q at %s: %v, want ...%s", tc.self, tc.source, tc.from, err, tc.want)
		}
	}
}
