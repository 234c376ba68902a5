package workflows

import (
	"flag"
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/srctest"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/operations.md's table of phases from DeployPhases")

// TestPhasesDeclaredOnce: every Phase constant is in DeployPhases exactly once with a
// meaning, and no phase is set by a string literal (setPhase, step, upsertSearch, a
// Phase field), which would escape the list and the docs.
func TestPhasesDeclaredOnce(t *testing.T) {
	fset := token.NewFileSet()
	files := srctest.OwnFiles(t, fset)
	consts := map[string]string{} // value → constant
	var setBy []*ast.BasicLit     // string literals given where a phase is set
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if !strings.HasPrefix(name.Name, "Phase") || i >= len(n.Values) {
						continue
					}
					lit, ok := n.Values[i].(*ast.BasicLit)
					if !ok {
						t.Errorf("%s is not a string literal", name.Name)
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					consts[v] = name.Name
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && len(n.Args) > 1 {
					switch sel.Sel.Name {
					case "setPhase", "step", "upsertSearch":
						if lit, ok := n.Args[1].(*ast.BasicLit); ok {
							setBy = append(setBy, lit)
						}
					}
				}
			case *ast.KeyValueExpr:
				if key, ok := n.Key.(*ast.Ident); ok && key.Name == "Phase" {
					if lit, ok := n.Value.(*ast.BasicLit); ok {
						setBy = append(setBy, lit)
					}
				}
			}
			return true
		})
	}
	listed := map[string]int{}
	for _, p := range DeployPhases {
		listed[p.Name]++
		if _, ok := consts[p.Name]; !ok {
			t.Errorf("DeployPhases lists %q, which is no Phase constant", p.Name)
		}
		if p.Meaning == "" || strings.ContainsAny(p.Meaning, "\n|") {
			t.Errorf("phase %q: the meaning must be one line without '|': %q", p.Name, p.Meaning)
		}
	}
	for v, name := range consts {
		if listed[v] != 1 {
			t.Errorf("%s (%q) is in DeployPhases %d times, want once", name, v, listed[v])
		}
	}
	for _, lit := range setBy {
		t.Errorf("%s: the phase %s is set by its string; use a Phase constant", fset.Position(lit.Pos()), lit.Value)
	}
}

// The table of phases in docs/operations.md sits between these lines.
const (
	phasesBegin = "<!-- deploy phases: generated from workflows.DeployPhases; go test ./workflows -run TestPhasesTable -update rewrites it -->"
	phasesEnd   = "<!-- end of deploy phases -->"
)

// TestPhasesTable: docs/operations.md's table of phases is DeployPhases, in its order.
func TestPhasesTable(t *testing.T) {
	path := filepath.Join("..", "docs", "operations.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(b), phasesBegin+"\n")
	got, after, ok2 := strings.Cut(rest, phasesEnd)
	if !ok1 || !ok2 {
		t.Fatalf("docs/operations.md lacks the lines that bound the table of phases:\n%s\n%s", phasesBegin, phasesEnd)
	}
	var want strings.Builder
	want.WriteString("| phase | meaning |\n|---|---|\n")
	for _, p := range DeployPhases {
		want.WriteString("| `" + p.Name + "` | " + p.Meaning + " |\n")
	}
	if got == want.String() {
		return
	}
	if *updateDocs {
		if err := os.WriteFile(path, []byte(before+phasesBegin+"\n"+want.String()+phasesEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/operations.md's table of phases is not DeployPhases (rerun with -update); want:\n%s", want.String())
}
