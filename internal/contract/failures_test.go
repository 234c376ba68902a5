package contract

import (
	"go/ast"
	"go/token"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/failure"
	"github.com/tpdeploy/tpdeploy/internal/srctest"
)

// TestErrNamesEveryFailure: each contract.ErrX is one failure type of failure.All, named
// from it rather than written again, no two ErrX name the same type, and every type in
// the list has its ErrX (a type added there is one the workflows can branch on).
func TestErrNamesEveryFailure(t *testing.T) {
	files := srctest.OwnFiles(t, token.NewFileSet())
	named := map[string]string{} // failure constant → the ErrX that names it
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Err") {
						continue
					}
					sel, ok := failureName(vs.Values[i])
					if !ok {
						t.Errorf("%s is not a failure type's name (contract.%s = failure.X)", name.Name, name.Name)
						continue
					}
					if other, dup := named[sel.Sel.Name]; dup {
						t.Errorf("%s and %s both name failure.%s", other, name.Name, sel.Sel.Name)
					}
					named[sel.Sel.Name] = name.Name
				}
			}
		}
	}
	// failure's own test holds its constants and All one to one.
	if len(named) != len(failure.All) {
		var missing []string
		for _, f := range failure.All {
			if _, ok := named[f.Type]; !ok {
				missing = append(missing, f.Type)
			}
		}
		t.Errorf("contract names %d failure types of %d; no ErrX for %s", len(named), len(failure.All), strings.Join(missing, ", "))
	}
}

// failureName is the constant of package failure that e names, if it names one.
func failureName(e ast.Expr) (*ast.SelectorExpr, bool) {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return nil, false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return sel, ok && pkg.Name == "failure"
}
