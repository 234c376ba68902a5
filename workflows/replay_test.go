package workflows

import (
	"path/filepath"
	"testing"
)

// TestReplayCommittedHistories replays histories recorded from real runs on the dev
// server (control/histories_test.go and control/integration_test.go write them with
// TPDEPLOY_UPDATE_HISTORY=1): every workflow type, a staged deploy, and a supervisor run
// that starts from the state its previous run handed on. A change to the workflows
// that alters their commands fails here unless it is guarded by workflow.GetVersion (see
// doc.go, "Versioning the next change").
func TestReplayCommittedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no committed histories in workflows/testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if err := ReplayHistoryFile(f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}
