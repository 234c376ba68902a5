package main

import (
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/deptest"
)

// TestDeps: the operator's CLI links none of the node agent's code — no Docker client, no
// netlink. What it shares with the agent (the readiness check, Ray's node table) lives in
// packages of its own (readiness, raygcs); planning over this host's network namespaces,
// which needs the probe, is `netns plan` (lab/netns).
func TestDeps(t *testing.T) {
	deptest.Forbid(t, ".", deptest.Agent)
}
