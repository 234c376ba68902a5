// Package deptest fails a test when a package links what it must not: the operator's CLI
// and the workflows must not link the node agent's Docker client or netlink. Modelled on
// tailscale's tstest/deptest: the question is asked of `go list -deps`, which is what the
// linker gets, so an import three packages down counts as much as a direct one.
package deptest

import (
	"os/exec"
	"strings"
	"testing"
)

// Agent is what only the node agent may link: the Docker Engine client (moby's and the
// frozen docker/docker one) and netlink, with the network-namespace package beside it.
var Agent = []string{
	"github.com/moby/moby/client",
	"github.com/docker/docker/client",
	"github.com/vishvananda/netlink",
	"github.com/vishvananda/netns",
}

// Forbid fails t when pkg (a `go list` pattern, e.g. "." for the test's own package)
// depends on any package whose import path is one of forbidden or lies below one.
// flags are go list's build flags (e.g. "-tags", "lab").
func Forbid(t *testing.T, pkg string, forbidden []string, flags ...string) {
	t.Helper()
	for _, dep := range Find(t, pkg, forbidden, flags...) {
		t.Errorf("%s links %s; that is the node agent's code", pkg, dep)
	}
}

// Find is the packages pkg depends on that are one of forbidden or lie below one, each
// with who imports it.
func Find(t *testing.T, pkg string, forbidden []string, flags ...string) []string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}"}, flags...)
	out, err := exec.Command("go", append(args, pkg)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	// importers[p] is who imports p, to say how a forbidden package got in.
	importers := map[string][]string{}
	var deps []string
	for line := range strings.Lines(string(out)) {
		path, imports, _ := strings.Cut(strings.TrimSpace(line), "\t")
		deps = append(deps, path)
		for _, imp := range strings.Fields(imports) {
			importers[imp] = append(importers[imp], path)
		}
	}
	var found []string
	for _, dep := range deps {
		for _, bad := range forbidden {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				found = append(found, dep+" (imported by "+strings.Join(importers[dep], ", ")+")")
			}
		}
	}
	return found
}
