// Package srctest reads a package's own source in its tests, for the checks that a name
// is declared once or used only through its constant.
package srctest

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"testing"
)

// OwnFiles parses the non-test Go files of the package in the test's directory, as the
// build selects them.
func OwnFiles(t *testing.T, fset *token.FileSet) []*ast.File {
	t.Helper()
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}
