// Command testlog prints `go test -json` logs the way `go test` would have, but short:
// a package that passed shows its tests' result lines and its summary, one that failed
// shows everything it printed. scripts/integration runs the e2e shards and the other
// integration packages at once, each into a log of its own, and prints them with this,
// one after another, so their output is not interleaved. Last come the failed tests' own
// lines, each test's tail, so that the end of a long CI log says why each one failed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testlog:", err)
		os.Exit(1)
	}
}

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func run(files []string, w io.Writer) error {
	var failures []failedTest
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "== %s\n", name)
		failed, err := print(f, w)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		failures = append(failures, failed...)
	}
	if len(failures) > 0 {
		fmt.Fprintf(w, "== %d failed tests, the end of each one's output\n", len(failures))
	}
	for _, f := range failures {
		fmt.Fprintf(w, "-- %s %s\n", f.pkg, f.test)
		lines := f.output[max(0, len(f.output)-failedTail):]
		for _, l := range lines {
			if len(l) > failedLineMax {
				l = l[:failedLineMax] + "…\n"
			}
			fmt.Fprint(w, l)
		}
	}
	return nil
}

// failedTail is how many of a failed test's last lines are repeated at the end, and
// failedLineMax how much of each: a few failures' tails must fit in the part of the log a
// CI report keeps.
const (
	failedTail    = 20
	failedLineMax = 300
)

// failedTest is a test that failed, and what it printed; a subtest's lines are its own,
// and its parent's are the parent's.
type failedTest struct {
	pkg, test string
	output    []string
}

// print writes one log's packages in the order they started, and returns the tests that
// failed, in the order they ended.
func print(r io.Reader, w io.Writer) ([]failedTest, error) {
	var order []string
	output := map[string][]string{}
	failed := map[string]bool{}
	testOutput := map[[2]string][]string{}
	var failedTests []failedTest
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			// go test writes build failures as plain text beside the JSON.
			fmt.Fprintln(w, string(line))
			continue
		}
		if _, seen := output[ev.Package]; !seen {
			order = append(order, ev.Package)
			output[ev.Package] = nil
		}
		switch ev.Action {
		case "output":
			output[ev.Package] = append(output[ev.Package], ev.Output)
			if ev.Test != "" {
				k := [2]string{ev.Package, ev.Test}
				testOutput[k] = append(testOutput[k], ev.Output)
			}
		case "fail":
			failed[ev.Package] = true
			if ev.Test != "" {
				k := [2]string{ev.Package, ev.Test}
				failedTests = append(failedTests, failedTest{pkg: ev.Package, test: ev.Test, output: testOutput[k]})
			}
		}
	}
	for _, pkg := range order {
		for _, out := range output[pkg] {
			if failed[pkg] || summary(out) {
				fmt.Fprint(w, out)
			}
		}
	}
	return failedTests, sc.Err()
}

// summary is a line a passing package keeps: a top-level test's verdict with its time, and
// the package's own result.
func summary(line string) bool {
	for _, p := range []string{"--- ", "ok  ", "PASS\n", "FAIL"} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}
