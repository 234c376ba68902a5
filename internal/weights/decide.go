package weights

import (
	"fmt"
	"sort"
	"strings"
)

// Verdict is the preflight's decision on a model across the nodes.
type Verdict struct {
	// Problems fail the deploy (ModelIncomplete), naming each node and file.
	Problems []Problem `json:"problems,omitempty"`
	// Copy is, per node, what it must receive from the head (model.sync: from-head).
	Copy map[string][]File `json:"copy,omitempty"`
	// Warnings do not stop the deploy.
	Warnings []string `json:"warnings,omitempty"`
}

// Decide compares every node's manifest with the head's. Without sync a node that lacks a
// file or holds another one fails the deploy; with sync it gets a copy of what it lacks.
// The head must hold a complete model either way: it is the reference and the source.
// When no node holds the model and it is a Hugging Face name (hubFallback), vLLM downloads
// it on every node: that is allowed, with a warning (a partial presence is not).
func Decide(head string, manifests map[string]Manifest, nodes []string, sync, hubFallback bool) Verdict {
	var v Verdict
	hm := manifests[head]
	if hubFallback && allAbsent(manifests, nodes) {
		v.Warnings = append(v.Warnings, fmt.Sprintf("no node holds %s (%s): vLLM will download it from the Hugging Face Hub on every node", hm.Source, hm.Absent))
		return v
	}
	if ps := Check(head, hm); len(ps) > 0 {
		v.Problems = ps // nothing to compare with, nothing to copy from
		return v
	}
	for _, n := range nodes {
		if n == head {
			continue
		}
		m := manifests[n]
		ps := append(Check(n, m), Compare(hm, n, m)...)
		if len(ps) == 0 {
			continue
		}
		if !sync {
			v.Problems = append(v.Problems, dedupe(ps)...)
			continue
		}
		if files := Lacking(hm, m); len(files) > 0 {
			if v.Copy == nil {
				v.Copy = map[string][]File{}
			}
			v.Copy[n] = files
		}
	}
	return v
}

func allAbsent(manifests map[string]Manifest, nodes []string) bool {
	for _, n := range nodes {
		if manifests[n].Absent == "" {
			return false
		}
	}
	return true
}

// dedupe keeps one problem per node and file: a file the node's own index lists and the
// head holds is reported once, with the head's size.
func dedupe(ps []Problem) []Problem {
	byFile := map[string]int{}
	var out []Problem
	for _, p := range ps {
		if p.File == "" {
			out = append(out, p)
			continue
		}
		if i, ok := byFile[p.File]; ok {
			if p.Kind == KindLacks { // the head's size says more
				out[i] = p
			}
			continue
		}
		byFile[p.File] = len(out)
		out = append(out, p)
	}
	return out
}

// Summary is the problems as one message: each node's first few, then how many more.
func Summary(ps []Problem, perNode int) string {
	byNode := map[string][]string{}
	var nodes []string
	for _, p := range ps {
		if _, ok := byNode[p.Node]; !ok {
			nodes = append(nodes, p.Node)
		}
		byNode[p.Node] = append(byNode[p.Node], p.Message)
	}
	sort.Strings(nodes)
	var parts []string
	for _, n := range nodes {
		msgs := byNode[n]
		if len(msgs) > perNode {
			msgs = append(msgs[:perNode:perNode], fmt.Sprintf("and %d more files on %s", len(byNode[n])-perNode, n))
		}
		parts = append(parts, strings.Join(msgs, "; "))
	}
	return strings.Join(parts, "; ")
}

// CopySize is the bytes of a copy plan.
func CopySize(files []File) int64 {
	var n int64
	for _, f := range files {
		n += f.Size
	}
	return n
}
