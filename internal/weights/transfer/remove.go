package transfer

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tpdeploy/tpdeploy/internal/confined"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// RemovePartial removes the *.tpdeploy-partial files (and half-made snapshot links) below
// rel, and nothing else: complete files, verified and renamed into place, stay. It walks
// and removes beneath dir without following a link: a planted link is removed itself (it
// is a partial name), never what it points to. It returns what it removed, relative to
// rel and sorted; a rel that is not there is not an error.
func RemovePartial(dir *confined.Dir, rel string) ([]string, error) {
	removed := []string{}
	err := fs.WalkDir(dir, filepath.ToSlash(rel), func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(p, weights.PartialSuffix) && !strings.HasSuffix(p, LinkSuffix) {
			return err
		}
		if err := dir.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		r, _ := filepath.Rel(rel, p)
		removed = append(removed, filepath.ToSlash(r))
		return nil
	})
	slices.Sort(removed)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	return removed, err
}
