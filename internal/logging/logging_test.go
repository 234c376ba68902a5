package logging

import (
	"testing"

	"go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestTemporalBridgeKeepsFieldsAndLevels(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	l := Temporal(zap.New(core))
	l.Info("started", "node", "node-a")
	l.(log.WithLogger).With("cluster", "lab").Warn("slow", "step", "probe")
	l.Error("failed")
	got := logs.All()
	if len(got) != 3 {
		t.Fatalf("want 3 entries, got %d", len(got))
	}
	if got[0].Message != "started" || got[0].ContextMap()["node"] != "node-a" {
		t.Errorf("entry 0 = %+v", got[0])
	}
	if got[1].Level != zap.WarnLevel || got[1].ContextMap()["cluster"] != "lab" || got[1].ContextMap()["step"] != "probe" {
		t.Errorf("entry 1 = %+v %v", got[1], got[1].ContextMap())
	}
	if got[2].Level != zap.ErrorLevel {
		t.Errorf("entry 2 level = %v", got[2].Level)
	}
}

func TestNewRejectsUnknownLevel(t *testing.T) {
	if _, err := New("loud", false); err == nil {
		t.Fatal("accepted level \"loud\"")
	}
	if _, err := New("debug", true); err != nil {
		t.Fatal(err)
	}
}
