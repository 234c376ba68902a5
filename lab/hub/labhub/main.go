// Command labhub is the lab's Hugging Face hub (package lab/hub) as a server, built static
// (CGO_ENABLED=0): the lab runs it in a container of its own (FROM scratch) on the lab's
// management network, serving the lab's model (hub.LabModel, generated from a seed, so the
// image holds no weights) as a public repository and as a gated one that only the lab's
// token reads; with -dir it serves that model directory instead.
package main

import (
	"flag"
	"io/fs"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tpdeploy/tpdeploy/lab/hub"
)

func main() {
	listen := flag.String("addr", ":8080", "listen address")
	dir := flag.String("dir", "", "serve this model directory instead of the generated model")
	public := flag.String("repo", "lab/tiny-moe", "the public repository (Org/Name) holding the lab's model")
	gated := flag.String("gated", "lab/gated-moe", "the gated repository holding the same model")
	shards := flag.Int("shards", 2, "the model's shards")
	size := flag.Int64("shard-size", 16<<20, "bytes per shard")
	seed := flag.Uint64("seed", 7, "seed of the shards' content")
	flag.Parse()
	// The token granted the gated repository comes from the environment, not argv.
	token := os.Getenv("LABHUB_TOKEN")
	files := hub.LabModel(*shards, *size, *seed)
	if *dir != "" {
		var err error
		if files, err = load(*dir); err != nil {
			log.Fatal(err)
		}
	}
	h := &hub.Hub{Repos: map[string]*hub.Repo{}, Tokens: map[string][]string{}}
	for _, r := range []struct {
		id    string
		gated bool
	}{{*public, false}, {*gated, true}} {
		c := hub.CommitOf(r.id, files)
		h.Repos[r.id] = &hub.Repo{ID: r.id, Gated: r.gated, Refs: map[string]string{"main": c}, Commits: map[string][]hub.File{c: files}}
	}
	if token != "" {
		h.Tokens[token] = []string{*gated}
	}
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("lab hub on %s: %s and gated %s, %d shards of %d bytes", *listen, *public, *gated, *shards, *size)
	if err := srv.ListenAndServe(); err != nil && !strings.Contains(err.Error(), "closed") {
		log.Fatal(err)
	}
}

// load reads a model directory's files; weights and files over 10 MB are LFS files, as the
// hub's default .gitattributes has them.
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
