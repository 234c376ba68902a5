package contract

import (
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/deptest"
)

// TestDeps: the contract carries no implementation, so it links none of the agent's.
func TestDeps(t *testing.T) {
	deptest.Forbid(t, ".", deptest.Agent)
}
