package workflows

import (
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/deptest"
)

// TestDeps: the workflows link no Docker client and no netlink; what they share with the
// agents is package contract.
func TestDeps(t *testing.T) {
	deptest.Forbid(t, ".", deptest.Agent)
}
