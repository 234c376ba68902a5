package logscan

import (
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// realLine is a row of testdata/real_lines.json: an output line as users pasted it in a
// public thread (or as upstream source prints it), what it must classify as, and where it
// came from. Rows with real=false were written for the table and say why.
type realLine struct {
	Line   string `json:"line"`
	Type   string `json:"type"` // "" = no finding
	Fatal  bool   `json:"fatal"`
	Source string `json:"source"` // a thread URL, or owner/repo:path for source text
	Real   bool   `json:"real"`
	Kind   string `json:"kind"` // "source": a Python source line that must never be taken
	Note   string `json:"note"`
	Reason string `json:"reason"` // why a row is not real
	Diag   string `json:"diag"`   // a phrase the diagnosis must hold, where the line gives one
	Date   string `json:"date"`   // the thread's date (YYYY-MM-DD) where its page shows one
}

func loadRealLines(t testing.TB) []realLine {
	t.Helper()
	b, err := os.ReadFile("testdata/real_lines.json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []realLine
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

var allTypes = []string{
	failure.PlacementGroupPending, failure.C10dUnreachable, failure.NCCLNoInterface, failure.NCCLError, failure.GlooLoopback, failure.CUDAOutOfMemory,
	failure.EngineDead, failure.DuplicateAddress, failure.GCSUnreachable, failure.InsufficientGPUs, failure.ModelUnsupported, failure.ModelUnavailable,
	failure.KVCacheTooSmall, failure.InvalidParallelLayout, failure.GlooNoInterface, failure.ResourcesBusy, failure.RayDriverAttach, failure.ModelIncomplete,
	failure.ImageLacksRay, failure.VersionMismatch, failure.ModelNotFound, failure.ModelGated, failure.GPUsNotVisible,
}

func TestRealLines(t *testing.T) {
	rows := loadRealLines(t)
	real := map[string]int{}
	ordinary := 0
	for i, r := range rows {
		switch {
		case r.Real && !strings.HasPrefix(r.Source, "https://github.com/") && !strings.Contains(r.Source, ":"):
			t.Errorf("row %d: real line without a URL or repo:path source: %q", i, r.Source)
		case !r.Real && r.Reason == "":
			t.Errorf("row %d: invented line without a reason", i)
		}
		if r.Type == "" {
			ordinary++
		} else if r.Real {
			real[r.Type]++
		}
		f := Classify(Parse(r.Line))
		if r.Type == "" {
			if f != nil {
				t.Errorf("row %d: got %s fatal=%v for an ordinary line\n  line: %s\n  diag: %s", i, f.Type, f.Fatal, r.Line, f.Diagnosis)
			}
			continue
		}
		if f == nil {
			t.Errorf("row %d: no finding, want %s\n  line: %s", i, r.Type, r.Line)
			continue
		}
		if f.Type != r.Type || f.Fatal != r.Fatal {
			t.Errorf("row %d: got %s fatal=%v, want %s fatal=%v\n  line: %s\n  diag: %s", i, f.Type, f.Fatal, r.Type, r.Fatal, r.Line, f.Diagnosis)
		}
		if r.Diag != "" && !strings.Contains(f.Diagnosis, r.Diag) {
			t.Errorf("row %d: diagnosis %q does not hold %q", i, f.Diagnosis, r.Diag)
		}
		if f.Diagnosis == "" || f.Fix == "" || f.Line == "" {
			t.Errorf("row %d: incomplete finding %+v", i, f)
		}
		if n := Parse(r.Line).Node(); n != "" && !strings.Contains(f.Diagnosis, n) {
			t.Errorf("row %d: diagnosis %q does not name the node %s", i, f.Diagnosis, n)
		}
	}
	if ordinary < 40 {
		t.Errorf("%d ordinary lines, want at least 40", ordinary)
	}
	for _, typ := range allTypes {
		if real[typ] < 3 {
			t.Errorf("%s: %d real lines, want at least 3", typ, real[typ])
		}
	}
	if testing.Verbose() {
		keys := make([]string, 0, len(real))
		for k := range real {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t.Logf("%-22s %d real lines", k, real[k])
		}
		t.Logf("%-22s %d lines", "(ordinary)", ordinary)
	}
}

// TestRealLinesScanner feeds every table line alone to a fresh Scanner: the same verdict as
// Classify, except that an engine line announcing a traceback waits for it (Flush).
func TestRealLinesScanner(t *testing.T) {
	for i, r := range loadRealLines(t) {
		var s Scanner
		_, f := s.Scan(r.Line)
		if f == nil {
			f = s.Flush()
		}
		switch {
		case r.Type == "" && f != nil:
			t.Errorf("row %d: scanner found %s in an ordinary line %q", i, f.Type, r.Line)
		case r.Type != "" && (f == nil || f.Type != r.Type || f.Fatal != r.Fatal):
			t.Errorf("row %d: scanner got %+v, want %s fatal=%v for %q", i, f, r.Type, r.Fatal, r.Line)
		}
	}
}
