// Command testlog prints `go test -json` logs the way `go test` would have, but short:
// a package that passed shows its tests' result lines and its summary, one that failed
// shows everything it printed. scripts/integration runs the e2e shards and the other
// integration packages at once, each into a log of its own, and prints them with this,
// one after another, so their output is not interleaved.
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
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "== %s\n", name)
		err = print(f, w)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// print writes one log's packages in the order they started.
func print(r io.Reader, w io.Writer) error {
	var order []string
	output := map[string][]string{}
	failed := map[string]bool{}
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
		case "fail":
			failed[ev.Package] = true
		}
	}
	for _, pkg := range order {
		for _, out := range output[pkg] {
			if failed[pkg] || summary(out) {
				fmt.Fprint(w, out)
			}
		}
	}
	return sc.Err()
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
