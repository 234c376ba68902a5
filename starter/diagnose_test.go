package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A log whose engine announces a failure and whose traceback ends in a CUDA OOM: the
// specific cause is the verdict, the generic EngineDead after it is reported but is not.
func TestDiagnoseNamesTheCauseBeforeTheEnginesDeath(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"diagnose", filepath.Join("testdata", "engine_oom.log")}, &out, &errOut); err != nil {
		t.Fatalf("%v: %s", err, errOut.String())
	}
	got := out.String()
	for _, want := range []string{"line 7: CUDAOutOfMemory (fatal)", "fix: lower --gpu-memory-utilization", "line 8: EngineDead (fatal)",
		"a deploy would fail with CUDAOutOfMemory (line 7 of 8)"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Casting torch.bfloat16") {
		t.Errorf("an ordinary warning was reported:\n%s", got)
	}
}

// --json gives the same findings, their line numbers and the verdict as data.
func TestDiagnoseJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"diagnose", "--json", filepath.Join("testdata", "engine_oom.log")}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	var d diagnosis
	if err := json.Unmarshal(out.Bytes(), &d); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if d.Lines != 8 || d.Verdict != "CUDAOutOfMemory" || len(d.Findings) != 2 || d.Findings[0].Line != 7 || !d.Findings[0].Fatal {
		t.Errorf("got %+v", d)
	}
}

// Ordinary lines, a line far longer than any the classifier reads, binary bytes and a last
// line without a newline: no failure, every line counted.
func TestDiagnoseOfOrdinaryOrGarbageInputFindsNothing(t *testing.T) {
	p := filepath.Join(t.TempDir(), "garbage.log")
	long := strings.Repeat("x", 3*maxDiagnoseLine)
	body := "INFO 01-01 00:00:00 [loader.py:1] Loading weights took 12.30 seconds\n" + long + "\n\x00\x01\xff\xfe\n(RayWorkerWrapper pid=9) INFO ok"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := diagnoseLog(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if d.Lines != 4 || d.Verdict != "" || len(d.Findings) != 0 {
		t.Errorf("got %+v", d)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"diagnose", p}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "no failure found in 4 lines (0 warnings)\n" {
		t.Errorf("got %q", got)
	}
}

// A file that is not there is named in the error; two files are a usage error.
func TestDiagnoseRefusesAMissingFileAndTwoFiles(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"diagnose", filepath.Join(t.TempDir(), "none.log")}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "none.log") {
		t.Errorf("missing file: %v", err)
	}
	if err := run(context.Background(), []string{"diagnose", "a", "b"}, &out, &errOut); !errors.Is(err, errUsage) {
		t.Errorf("two files: %v", err)
	}
}

// A line from a Ray worker names the node it came from (the prefix's ip=).
func TestDiagnoseNamesTheNodeOfARayWorkersLine(t *testing.T) {
	d, err := diagnoseLog(strings.NewReader("(RayWorkerWrapper pid=77, ip=198.51.100.3) RuntimeError: connect() timed out.\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Findings) != 1 || d.Findings[0].Node != "198.51.100.3" || d.Verdict != "C10dUnreachable" {
		t.Errorf("got %+v", d)
	}
}
