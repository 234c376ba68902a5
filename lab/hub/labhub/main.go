// Command labhub serves one model directory as a repository of the lab's Hugging Face hub
// (package hub), for the lab's nodes to download from through HF_ENDPOINT. It is built
// static (CGO_ENABLED=0), so an image FROM scratch holds only it and the model.
package main

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tpdeploy/tpdeploy/lab/hub"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "labhub:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", ":8080", "listen address")
	repo := flag.String("repo", "", "repository id, Org/Name")
	dir := flag.String("dir", "", "the model's directory")
	gated := flag.Bool("gated", false, "serve the repository as gated")
	tokens := flag.String("tokens", "", "comma-separated tokens granted the repository")
	others := flag.String("other-tokens", "", "comma-separated valid tokens without access")
	flag.Parse()
	if *repo == "" || *dir == "" {
		return errors.New("-repo and -dir are required")
	}
	files, err := load(*dir)
	if err != nil {
		return err
	}
	commit := commitOf(files)
	h := &hub.Hub{
		Repos:  map[string]*hub.Repo{*repo: {ID: *repo, Gated: *gated, Refs: map[string]string{"main": commit}, Commits: map[string][]hub.File{commit: files}}},
		Tokens: map[string][]string{},
	}
	for _, t := range split(*tokens) {
		h.Tokens[t] = []string{*repo}
	}
	for _, t := range split(*others) {
		h.Tokens[t] = nil
	}
	fmt.Printf("labhub: %s at commit %s, %d files, on %s\n", *repo, commit, len(files), *addr)
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// load reads the model's files; weights and files over 10 MB are LFS files, as the hub's
// default .gitattributes has them.
func load(dir string) ([]hub.File, error) {
	var files []hub.File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		name := filepath.ToSlash(rel)
		lfs := strings.HasSuffix(name, ".safetensors") || strings.HasSuffix(name, ".bin") || len(data) > 10<<20
		files = append(files, hub.File{Name: name, Data: data, LFS: lfs})
		return nil
	})
	return files, err
}

// commitOf derives a commit id from the files, so that the same directory is the same
// commit every time.
func commitOf(files []hub.File) string {
	h := sha1.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s %s\n", f.Name, hub.GitBlobID(f.Data))
	}
	return hex.EncodeToString(h.Sum(nil))
}
