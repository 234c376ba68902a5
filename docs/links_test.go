// Package docs holds the project's documentation; its one test checks that the pages'
// relative links resolve in a clone, so no page cites a file only one machine has.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// mdLink is an inline Markdown link or image: [text](target) or ![alt](target "title").
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

func TestRelativeLinksResolve(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pages := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		pages++
		for _, bad := range brokenLinks(t, path) {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s: link %q does not resolve in the repository", rel, bad)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pages < 10 {
		t.Fatalf("found %d Markdown pages under %s; the walk is looking in the wrong place", pages, root)
	}
}

// brokenLinks are the relative link targets of page that name no file or folder. Links
// with a scheme and in-page anchors are not checked; code spans are skipped.
func brokenLinks(t *testing.T, page string) []string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(withoutCodeSpans(line), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := filepath.Join(filepath.Dir(page), file)
			if _, err := os.Stat(path); err != nil {
				bad = append(bad, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !headingSlugs(t, path)[anchor] {
				bad = append(bad, target)
			}
		}
	}
	return bad
}

// headingSlugs are the anchors GitHub gives a page's headings: lower case, punctuation
// other than '-' and '_' dropped, spaces as '-'.
func headingSlugs(t *testing.T, page string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	slugs := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		slug := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return r
			}
			return -1
		}, title)
		slugs[slug] = true
	}
	return slugs
}

func withoutCodeSpans(line string) string {
	parts := strings.Split(line, "`")
	for i := 1; i < len(parts); i += 2 {
		parts[i] = ""
	}
	return strings.Join(parts, "`")
}
