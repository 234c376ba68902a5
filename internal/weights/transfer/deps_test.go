package transfer

import (
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/deptest"
)

// TestDeps: the copy is a library below the agent; it owns its request and result types
// and reaches up into neither the workflows' contract nor the activities.
func TestDeps(t *testing.T) {
	for _, dep := range deptest.Find(t, ".", []string{"github.com/tpdeploy/tpdeploy/internal/contract", "github.com/tpdeploy/tpdeploy/activities"}) {
		t.Errorf("weights/transfer links %s", dep)
	}
}
