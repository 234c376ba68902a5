package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/tpdeploy/tpdeploy/internal/logscan"
)

// maxDiagnoseLine is how much of one line diagnose keeps: the classifier reads less
// (logscan's own bound), and a line without newlines (a binary file) must not fill memory.
const maxDiagnoseLine = 64 << 10

// diagnosis is what diagnose prints with --json.
type diagnosis struct {
	Lines    int       `json:"lines"`
	Findings []finding `json:"findings"`
	// Verdict is the type the first fatal finding gives: what a deploy watching this output
	// would have failed with ("" when nothing fatal was found).
	Verdict string `json:"verdict"`
}

type finding struct {
	Line      int    `json:"line"`
	Type      string `json:"type"`
	Fatal     bool   `json:"fatal"`
	Node      string `json:"node,omitempty"`
	Diagnosis string `json:"diagnosis"`
	Fix       string `json:"fix"`
	Text      string `json:"text"`
}

// cmdDiagnose reads a saved log (vLLM's output, or Ray's, torch's, NCCL's, Docker's) the
// way a deploy's watch reads vLLM's, and prints what it finds. It needs no Temporal: an
// operator can read a log from a run tpdeploy never started.
func cmdDiagnose(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("diagnose", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the findings as JSON")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: starter diagnose [--json] [FILE|-]\n\nReads FILE (standard input for - or none) and prints every failure the deploy's watch would see in it;\nthe first fatal one is what a deploy would have failed with.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return helpOK(err)
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return errUsage
	}
	in := io.Reader(os.Stdin)
	if name := fs.Arg(0); name != "" && name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	d, err := diagnoseLog(in)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	for _, f := range d.Findings {
		kind := "warning"
		if f.Fatal {
			kind = "fatal"
		}
		if f.Node != "" {
			kind += ", node " + f.Node
		}
		fmt.Fprintf(stdout, "line %d: %s (%s): %s\n  fix: %s\n  line: %s\n", f.Line, f.Type, kind, f.Diagnosis, f.Fix, f.Text)
	}
	if d.Verdict == "" {
		fmt.Fprintf(stdout, "no failure found in %d lines (%d warnings)\n", d.Lines, len(d.Findings))
		return nil
	}
	fmt.Fprintf(stdout, "a deploy would fail with %s (line %d of %d)\n", d.Verdict, firstFatal(d).Line, d.Lines)
	return nil
}

// diagnoseLog runs the watch's scanner over every line of in. The same finding on many
// lines (a warning every few seconds) is reported once.
func diagnoseLog(in io.Reader) (diagnosis, error) {
	var (
		d    = diagnosis{Findings: []finding{}}
		scan logscan.Scanner
		seen = map[string]bool{}
		r    = bufio.NewReaderSize(in, 64<<10)
	)
	add := func(n int, f *logscan.Finding) {
		if f == nil || seen[f.Type+"\x00"+f.Message()] {
			return
		}
		seen[f.Type+"\x00"+f.Message()] = true
		d.Findings = append(d.Findings, finding{Line: n, Type: f.Type, Fatal: f.Fatal, Node: f.Node, Diagnosis: f.Diagnosis, Fix: f.Fix, Text: f.Line})
		if f.Fatal && d.Verdict == "" {
			d.Verdict = f.Type
		}
	}
	for {
		line, err := readLine(r)
		if errors.Is(err, io.EOF) && line == "" {
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return d, fmt.Errorf("read line %d: %w", d.Lines+1, err)
		}
		d.Lines++
		_, f := scan.Scan(line)
		add(d.Lines, f)
		if errors.Is(err, io.EOF) {
			break
		}
	}
	add(d.Lines, scan.Flush())
	return d, nil
}

// readLine reads one line without its newline, keeping at most maxDiagnoseLine bytes of it.
func readLine(r *bufio.Reader) (string, error) {
	var line []byte
	for {
		chunk, more, err := r.ReadLine()
		if len(line) < maxDiagnoseLine {
			line = append(line, chunk[:min(len(chunk), maxDiagnoseLine-len(line))]...)
		}
		if err != nil || !more {
			return string(line), err
		}
	}
}

func firstFatal(d diagnosis) finding {
	for _, f := range d.Findings {
		if f.Fatal {
			return f
		}
	}
	return finding{}
}
