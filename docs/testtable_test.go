package docs

import (
	"os"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/testtable"
)

// TestTestTableIsCurrent: docs/tests.md lists every test the code has, with the tier and
// the sentence the code gives it; a new, renamed or re-tagged test fails this until
// `make test-table` is run.
func TestTestTableIsCurrent(t *testing.T) {
	tests, err := testtable.Collect("..", "github.com/tpdeploy/tpdeploy")
	if err != nil {
		t.Fatal(err)
	}
	if len(tests) < 100 {
		t.Fatalf("found %d tests; the walk is looking in the wrong place", len(tests))
	}
	b, err := os.ReadFile("tests.md")
	if err != nil {
		t.Fatal(err)
	}
	rows, ok := testtable.Parse(string(b))
	if !ok {
		t.Fatal("docs/tests.md has no generated table; run make test-table")
	}
	seen := map[[2]string]bool{}
	for _, tc := range tests {
		key := [2]string{tc.Package, tc.Name}
		seen[key] = true
		row, ok := rows[key]
		switch {
		case !ok:
			t.Errorf("%s %s is not in docs/tests.md; run make test-table", tc.Package, tc.Name)
		case row[0] != tc.Proves || row[1] != tc.Tier:
			t.Errorf("%s %s: docs/tests.md says %q (%s), the code %q (%s); run make test-table", tc.Package, tc.Name, row[0], row[1], tc.Proves, tc.Tier)
		}
	}
	for key := range rows {
		if !seen[key] {
			t.Errorf("docs/tests.md lists %s %s, which no longer exists; run make test-table", key[0], key[1])
		}
	}
}
