// Command testtable rewrites the table of every test in docs/tests.md (make test-table),
// with times from a `go test -json` log when one is given.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tpdeploy/tpdeploy/internal/testtable"
)

const module = "github.com/tpdeploy/tpdeploy"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testtable:", err)
		os.Exit(1)
	}
}

func run() error {
	doc := flag.String("doc", "docs/tests.md", "the page whose table is rewritten")
	timesFile := flag.String("times", "", "a `go test -json` log to take the tests' times from")
	flag.Parse()
	tests, err := testtable.Collect(".", module)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(*doc)
	if err != nil {
		return err
	}
	page := string(b)
	var times map[[2]string]string
	if *timesFile != "" {
		f, err := os.Open(*timesFile)
		if err != nil {
			return err
		}
		defer f.Close()
		secs, err := testtable.Times(f, module)
		if err != nil {
			return fmt.Errorf("%s: %w", *timesFile, err)
		}
		times = testtable.FormatTimes(secs)
	}
	page = testtable.Splice(page, testtable.Render(tests, times, testtable.OldTimes(page)))
	return os.WriteFile(*doc, []byte(page), 0o644)
}
