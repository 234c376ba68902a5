package barrier

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/deptest"
)

func TestHoldReachRelease(t *testing.T) {
	dir := t.TempDir()
	if err := Wait(context.Background(), dir, "StartRayWorker", 1); err != nil {
		t.Fatalf("no barrier: %v", err)
	}
	if err := Hold(dir, "StartRayWorker"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Wait(context.Background(), dir, "StartRayWorker", 2) }()
	deadline := time.Now().Add(5 * time.Second)
	for !Reached(dir, "StartRayWorker") {
		if time.Now().After(deadline) {
			t.Fatal("never reached")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("went on while held: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := Release(dir, "StartRayWorker"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("after release: %v", err)
	}
	if Reached(dir, "StartRayWorker") {
		t.Error("reached mark left after release")
	}
	// A held activity whose context ends (cancelled, timed out) stops waiting.
	_ = Hold(dir, "LaunchVLLM")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := Wait(ctx, dir, "LaunchVLLM", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held past its context: %v", err)
	}
}

// TestProductionAgentHasNoBarriers: the agent as built for a node does not link this
// package; the lab's build (-tags lab) does.
func TestProductionAgentHasNoBarriers(t *testing.T) {
	const self = "github.com/tpdeploy/tpdeploy/internal/barrier"
	for _, dep := range deptest.Find(t, "../../worker", []string{self}) {
		t.Errorf("the production worker links %s: barriers must be a lab build's only", dep)
	}
	if len(deptest.Find(t, "../../worker", []string{self}, "-tags", "lab")) == 0 {
		t.Errorf("the lab build of the worker (-tags lab) does not link %s: the fault matrix's barriers would be off", self)
	}
}
