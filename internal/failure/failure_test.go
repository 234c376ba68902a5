package failure

import (
	"flag"
	"go/ast"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/srctest"
)

var update = flag.Bool("update", false, "rewrite docs/diagnosis.md's table of failure types from All")

// TestAllListsEveryTypeOnce: every constant of this package is in All exactly once, All
// holds nothing else, and every type has a one-line meaning.
func TestAllListsEveryTypeOnce(t *testing.T) {
	consts := declaredTypes(t)
	inAll := map[string]int{}
	for _, f := range All {
		inAll[f.Type]++
		if _, ok := consts[f.Type]; !ok {
			t.Errorf("All lists %q, which is no constant of this package", f.Type)
		}
		if f.Meaning == "" || strings.ContainsAny(f.Meaning, "\n|") || strings.HasSuffix(f.Meaning, ".") {
			t.Errorf("%s: the meaning must be one line, without '|' or a final full stop: %q", f.Type, f.Meaning)
		}
	}
	for typ, name := range consts {
		if name != typ {
			t.Errorf("constant %s = %q: a type's constant is named as its value", name, typ)
		}
		if n := inAll[typ]; n != 1 {
			t.Errorf("%s is in All %d times, want once", typ, n)
		}
	}
}

// declaredTypes is this package's string constants, value → name, read from its source.
func declaredTypes(t *testing.T) map[string]string {
	t.Helper()
	files := srctest.OwnFiles(t, token.NewFileSet())
	consts := map[string]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("constant %s is not a string literal", name.Name)
					}
					v, _ := strconv.Unquote(lit.Value)
					consts[v] = name.Name
				}
			}
		}
	}
	if len(consts) == 0 {
		t.Fatal("no constants found")
	}
	return consts
}

// TestDeclaredOnce: outside tests, each failure type's string is written once in the
// whole module, here; everything else names the constant (contract.ErrX, failure.X).
// A second literal is a second declaration that can drift from this one.
func TestDeclaredOnce(t *testing.T) {
	root := moduleRoot(t)
	types := map[string]bool{}
	for _, f := range All {
		types[f.Type] = true
	}
	where := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "bin" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, lit := range stringLiterals(path, src) {
			if types[lit.value] {
				where[lit.value] = append(where[lit.value], rel+":"+strconv.Itoa(lit.line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range All {
		if n := len(where[f.Type]); n != 1 {
			t.Errorf("%q is written %d times outside tests, want once (internal/failure): %s", f.Type, n, strings.Join(where[f.Type], ", "))
		}
	}
}

type literal struct {
	value string
	line  int
}

// stringLiterals is every string literal of a Go file, unquoted (comments are not read).
func stringLiterals(path string, src []byte) []literal {
	fset := token.NewFileSet()
	file := fset.AddFile(path, -1, len(src))
	var s scanner.Scanner
	s.Init(file, src, nil, 0)
	var out []literal
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return out
		}
		if tok == token.STRING {
			if v, err := strconv.Unquote(lit); err == nil {
				out = append(out, literal{v, fset.Position(pos).Line})
			}
		}
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// The table of failure types in docs/diagnosis.md sits between these lines.
const (
	tableBegin = "<!-- failure types: generated from internal/failure.All; go test ./internal/failure -run TestDiagnosisTable -update rewrites it -->"
	tableEnd   = "<!-- end of failure types -->"
)

// TestDiagnosisTable: docs/diagnosis.md's table of failure types is All, in its order.
func TestDiagnosisTable(t *testing.T) {
	path := filepath.Join(moduleRoot(t), "docs", "diagnosis.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	before, rest, ok1 := strings.Cut(doc, tableBegin+"\n")
	got, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok1 || !ok2 {
		t.Fatalf("docs/diagnosis.md lacks the lines that bound the table of failure types:\n%s\n%s", tableBegin, tableEnd)
	}
	want := table()
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(before+tableBegin+"\n"+want+tableEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/diagnosis.md's table of failure types is not All (rerun with -update); want:\n%s", want)
}

// table is All as a Markdown table.
func table() string {
	var b strings.Builder
	b.WriteString("| type | retried | meaning |\n|---|---|---|\n")
	for _, f := range All {
		retried := "no"
		if f.Retryable {
			retried = "yes"
		}
		b.WriteString("| `" + f.Type + "` | " + retried + " | " + f.Meaning + " |\n")
	}
	return b.String()
}
