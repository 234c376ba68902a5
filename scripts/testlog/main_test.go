package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A failed test's own last lines come again at the end, after every log, and a passing
// test's do not.
func TestFailedTestsTailsComeLast(t *testing.T) {
	var log strings.Builder
	log.WriteString(`{"Action":"run","Package":"p","Test":"TestGood"}` + "\n")
	log.WriteString(`{"Action":"output","Package":"p","Test":"TestGood","Output":"good line\n"}` + "\n")
	log.WriteString(`{"Action":"pass","Package":"p","Test":"TestGood"}` + "\n")
	log.WriteString(`{"Action":"run","Package":"p","Test":"TestBad"}` + "\n")
	for i := range failedTail + 5 {
		log.WriteString(`{"Action":"output","Package":"p","Test":"TestBad","Output":"bad line ` + strings.Repeat("x", i) + `\n"}` + "\n")
	}
	log.WriteString(`{"Action":"output","Package":"p","Test":"TestBad","Output":"why: ` + strings.Repeat("y", 2*failedLineMax) + `\n"}` + "\n")
	log.WriteString(`{"Action":"fail","Package":"p","Test":"TestBad"}` + "\n")
	log.WriteString(`{"Action":"fail","Package":"p"}` + "\n")
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(log.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.json")
	if err := os.WriteFile(other, []byte(`{"Action":"output","Package":"q","Output":"ok  \tq\t1s\n"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run([]string{bad, other}, &out); err != nil {
		t.Fatal(err)
	}
	_, tail, found := strings.Cut(out.String(), "== 1 failed tests, the end of each one's output\n")
	if !found {
		t.Fatalf("no failed tests' section:\n%s", out.String())
	}
	if !strings.HasPrefix(tail, "-- p TestBad\n") || strings.Contains(tail, "good line") || strings.Contains(tail, "ok  \tq") {
		t.Errorf("the section is not TestBad's alone:\n%s", tail)
	}
	lines := strings.Split(strings.TrimSuffix(tail, "\n"), "\n")
	if len(lines) != failedTail+1 || !strings.HasPrefix(lines[len(lines)-1], "why: ") || len(lines[len(lines)-1]) > failedLineMax+len("…") {
		t.Errorf("the section has %d lines, want the header and the last %d, the long last one cut:\n%s", len(lines), failedTail, tail)
	}
}
