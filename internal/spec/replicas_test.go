package spec

import (
	"strings"
	"testing"
)

// replicas: 2 on two nodes is two one-node clusters NAME-r0 and NAME-r1, each its node's
// head, the same model, served name and router; without replicas the spec is its own one
// member, unchanged.
func TestReplicasExpandIntoMemberClusters(t *testing.T) {
	c, err := Parse([]byte(strings.Replace(validYAML, "tensor: 2", "tensor: 1", 1) + "replicas: 2\nrouter: {node: node-a}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ms := c.Members()
	if len(ms) != 2 {
		t.Fatalf("%d members", len(ms))
	}
	for i, m := range ms {
		if m.Name != MemberName("lab", i) || len(m.Nodes) != 1 || m.Nodes[0].Name != c.Nodes[i].Name || m.Nodes[0].Role != RoleHead ||
			m.Replicas != 0 || m.Model.ServedName != "tiny" || m.Router == nil || m.Router.Node != "node-a" || m.Parallel.Tensor != 1 {
			t.Errorf("member %d: %+v", i, m)
		}
		if err := m.Validate(); err != nil {
			t.Errorf("member %d invalid: %v", i, err)
		}
	}
	if ms[0].Router == c.Router || ms[0].Router == ms[1].Router {
		t.Error("members share the parent's router pointer")
	}
	if ms[0].Name != "lab-r0" || ms[1].Hash() == ms[0].Hash() {
		t.Errorf("names %s %s, hashes %s %s", ms[0].Name, ms[1].Name, ms[0].Hash(), ms[1].Hash())
	}
	again := c.Members()
	if again[1].Hash() != ms[1].Hash() {
		t.Error("Members is not a pure function of the spec")
	}
	one, _ := Parse([]byte(validYAML))
	if m := one.Members(); len(m) != 1 || m[0].Hash() != one.Hash() || m[0].Name != "lab" {
		t.Errorf("no replicas: %+v", m)
	}
}

// What replicas cannot be is refused at the replicas field, naming what does not fit.
func TestReplicasValidation(t *testing.T) {
	base := strings.Replace(validYAML, "tensor: 2", "tensor: 1", 1)
	for _, tt := range []struct{ name, yaml, want string }{
		{"two of tensor 2 on two one-GPU nodes", validYAML + "replicas: 2\nrouter: {node: node-a}\n",
			"replicas: 2 replicas x tensor 2 x pipeline 1 = 4 GPUs, the nodes provide 2: replica 0 (node-a) has 1, replica 1 (node-b) has 1"},
		{"nodes that do not split", base + "replicas: 3\nrouter: {node: node-a}\n", "replicas: 3 replicas split the nodes in the spec's order into groups of equal size: 2 nodes do not divide by 3"},
		{"no router", base + "replicas: 2\n", "replicas: 2 replicas are served as one model by the router: set router"},
		{"negative", base + "replicas: -1\n", "replicas: -1 must be between 0 and 64"},
		{"mp per replica", four(validYAML) + "replicas: 2\nrouter: {node: node-a}\nexecutor: mp\n", ""},
		{"mp of one rank over two nodes", four(base) + "replicas: 2\nrouter: {node: node-a}\nexecutor: mp\n",
			"replicas: replica 0 (node-a, node-c): executor: mp runs tensor x pipeline = 1 ranks as 0 per node over 2 nodes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
	// One replica of tensor 2 over both nodes, or two of tensor 1: both fit two Sparks.
	for _, y := range []string{validYAML + "router: {node: node-a}\n", base + "replicas: 2\nrouter: {node: node-a}\n"} {
		if _, err := Parse([]byte(y)); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// four adds node-c and node-d after node-a.
func four(y string) string {
	return strings.Replace(y, "gpus: 1}", "gpus: 1}\n  - {name: node-c, role: worker, gpus: 1}\n  - {name: node-d, role: worker, gpus: 1}", 1)
}
