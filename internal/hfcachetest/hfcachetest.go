// Package hfcachetest writes model repositories into a directory laid out as
// huggingface_hub lays out its cache, for the tests of the code that scans and copies
// such caches (weights, activities). It uses only the standard library, so that any
// package's tests may import it; it spells the layout out itself rather than asking the
// code under test.
package hfcachetest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// File is one file of a model repository: its name in a snapshot and its content.
type File struct {
	Name string
	Data []byte
}

// BlobName is what the Hub names a file's blob: the sha256 of the content for LFS files
// (the .safetensors weights), the git blob sha1 for the rest.
func BlobName(f File) string {
	if strings.HasSuffix(f.Name, ".safetensors") {
		s := sha256.Sum256(f.Data)
		return hex.EncodeToString(s[:])
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(f.Data))
	h.Write(f.Data)
	return hex.EncodeToString(h.Sum(nil))
}

// RepoDir is the directory of repo ("Org/Name") in cache: hub/models--Org--Name.
func RepoDir(cache, repo string) string {
	return filepath.Join(cache, "hub", "models--"+strings.ReplaceAll(repo, "/", "--"))
}

// WriteSnapshot lays files out in cache as commit of repo: blobs named by BlobName,
// snapshot entries linking to them (../../blobs/<name>), and, unless ref is empty,
// refs/<ref> holding the commit.
func WriteSnapshot(t testing.TB, cache, repo, ref, commit string, files []File) {
	t.Helper()
	dir := RepoDir(cache, repo)
	for _, f := range files {
		WriteFile(t, filepath.Join(dir, "blobs", BlobName(f)), f.Data)
		link := filepath.Join(dir, "snapshots", commit, f.Name)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../blobs/"+BlobName(f), link); err != nil {
			t.Fatal(err)
		}
	}
	if ref != "" {
		WriteFile(t, filepath.Join(dir, "refs", ref), []byte(commit))
	}
}

// WriteFile writes data at p, making the directories above it.
func WriteFile(t testing.TB, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
