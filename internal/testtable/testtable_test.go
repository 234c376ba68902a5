package testtable

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCollectTiersTimesAndRoundTrip(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/a_test.go", "package a\nimport \"testing\"\n// TestPlan: a plan | with a pipe. More.\nfunc TestPlan(t *testing.T) {}\nfunc TestNodeBRebootsMidLoad(t *testing.T) {}\nfunc Testify(t *testing.T) {}\nfunc TestMain(m *testing.M) {}\n")
	write("b/b_integration_test.go", "//go:build integration\n\npackage b\nimport \"testing\"\nfunc TestDocker(t *testing.T) {}\n")
	write("e2e/x_test.go", "package e2e\nimport \"testing\"\nfunc TestLab(t *testing.T) {}\n")
	tests, err := Collect(root, "m")
	if err != nil {
		t.Fatal(err)
	}
	want := []Test{
		{"TestNodeBRebootsMidLoad", "a", "node b reboots mid load", TierUnit},
		{"TestPlan", "a", `a plan \| with a pipe.`, TierUnit},
		{"TestDocker", "b", "docker", TierIntegration},
		{"TestLab", "e2e", "lab", TierE2E},
	}
	if len(tests) != len(want) {
		t.Fatalf("got %+v, want %+v", tests, want)
	}
	for i := range want {
		if tests[i] != want[i] {
			t.Errorf("test %d: got %+v, want %+v", i, tests[i], want[i])
		}
	}
	log := `{"Action":"pass","Package":"m/a","Test":"TestPlan","Elapsed":1.25}
{"Action":"pass","Package":"m/a","Test":"TestPlan/sub","Elapsed":9}
{"Action":"pass","Package":"m/a","Elapsed":3}`
	secs, err := Times(strings.NewReader(log), "m")
	if err != nil || len(secs) != 1 || secs[[2]string{"a", "TestPlan"}] != 1.25 {
		t.Fatalf("Times = %v, %v", secs, err)
	}
	doc := Splice("# Tests\n", Render(tests, FormatTimes(secs), nil))
	rows, ok := Parse(doc)
	if !ok || len(rows) != 4 || rows[[2]string{"a", "TestPlan"}] != [3]string{`a plan \| with a pipe.`, TierUnit, "1.2"} {
		t.Fatalf("Parse(Render) = %v, %v", rows, ok)
	}
	again := Splice(doc, Render(tests, nil, OldTimes(doc)))
	if again != doc {
		t.Errorf("re-rendering without times changed the page:\n%s\nwas\n%s", again, doc)
	}
}
