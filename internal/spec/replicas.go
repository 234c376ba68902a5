package spec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A spec with replicas: N (N > 1) is N member clusters (Members), one per replica: the
// nodes split in the spec's order into N groups of equal size, replica i the i-th group,
// its first node its head, named NAME-rI. Each member is a cluster like any other:
// deployed, supervised, recovered and torn down by the workflows as they are, its engine
// routed under the spec's served name by the router, where the member clusters are
// replicas of one model. A redeploy rolls through them one at a time (control.Roll): each
// member's staged swap drains its route first, so the others take its traffic.

// MemberName is replica i's cluster name.
func MemberName(cluster string, i int) string { return cluster + "-r" + strconv.Itoa(i) }

// Members are the clusters the spec deploys: itself when it has no replicas, else one per
// replica (see above). Pure: the same spec gives the same members, in replica order.
func (c Cluster) Members() []Cluster {
	if c.Replicas <= 1 {
		return []Cluster{c}
	}
	per := len(c.Nodes) / c.Replicas
	out := make([]Cluster, 0, c.Replicas)
	for i := range c.Replicas {
		m := c
		m.Name, m.Replicas = MemberName(c.Name, i), 0
		if m.Model.ServedName == "" {
			m.Model.ServedName = m.Model.Path
		}
		m.Nodes = slices.Clone(c.Nodes[i*per : (i+1)*per])
		for j := range m.Nodes {
			m.Nodes[j].Role = RoleWorker
			if j == 0 {
				m.Nodes[j].Role = RoleHead
			}
		}
		if c.Router != nil {
			r := *c.Router
			m.Router = &r
		}
		out = append(out, m)
	}
	return out
}

// maxReplicas bounds replicas (each is a cluster, with its own workflows).
const maxReplicas = 64

// replicas checks replicas: N: the nodes split evenly, each replica's share of the GPUs
// (where the spec counts them) holding tensor x pipeline, a router to put them behind,
// and each member valid as a cluster of its own (vLLM's mp layout per replica).
func (v *validator) replicas(c Cluster) {
	switch {
	case c.Replicas < 0 || c.Replicas > maxReplicas:
		v.add("replicas", fmt.Sprintf("%d must be between 0 and %d", c.Replicas, maxReplicas))
		return
	case c.Replicas <= 1:
		return
	case len(c.Nodes) == 0:
		return
	case len(c.Nodes)%c.Replicas != 0:
		v.add("replicas", fmt.Sprintf("%d replicas split the nodes in the spec's order into groups of equal size: %d nodes do not divide by %d", c.Replicas, len(c.Nodes), c.Replicas))
		return
	case len(c.Name) > 40-len("-r")-len(strconv.Itoa(c.Replicas-1)):
		v.add("name", fmt.Sprintf("%q is too long for its replicas' names (%s)", c.Name, MemberName(c.Name, c.Replicas-1)))
	}
	if c.Router == nil {
		v.add("replicas", fmt.Sprintf("%d replicas are served as one model by the router: set router (node, port)", c.Replicas))
	}
	if c.Parallel.Tensor < 1 || c.Parallel.Pipeline < 1 {
		return
	}
	need := c.WorldSize()
	var short []string
	total := 0
	for i, m := range c.Members() {
		declared, known := 0, true
		var names []string
		for _, n := range m.Nodes {
			names = append(names, n.Name)
			if n.GPUs <= 0 {
				known = false
			}
			declared += n.GPUs
		}
		total += declared
		if known && declared < need {
			short = append(short, fmt.Sprintf("replica %d (%s) has %d", i, strings.Join(names, ", "), declared))
		}
		if m.Executor == ExecutorMP {
			var mv validator
			mv.mp(m)
			for _, p := range mv.problems {
				v.add("replicas", fmt.Sprintf("replica %d (%s): %s: %s", i, strings.Join(names, ", "), p.Field, p.Message))
			}
		}
	}
	if len(short) > 0 {
		v.add("replicas", fmt.Sprintf("%d replicas x tensor %d x pipeline %d = %d GPUs, the nodes provide %d: %s; fewer replicas, or a smaller tensor x pipeline",
			c.Replicas, c.Parallel.Tensor, c.Parallel.Pipeline, c.Replicas*need, total, strings.Join(short, ", ")))
	}
}
