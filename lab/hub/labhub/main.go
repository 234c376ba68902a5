// Command labhub is the lab's Hugging Face hub (package lab/hub) as a server: the lab runs
// it in a container of its own (FROM scratch) on the lab's management network, serving the
// lab's model as a public repository and as a gated one that only the lab's token reads.
package main

import (
	"flag"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tpdeploy/tpdeploy/lab/hub"
)

func main() {
	listen := flag.String("listen", ":80", "address to serve on")
	public := flag.String("repo", "lab/tiny-moe", "the public repository (Org/Name) holding the lab's model")
	gated := flag.String("gated", "lab/gated-moe", "the gated repository holding the same model")
	shards := flag.Int("shards", 2, "the model's shards")
	size := flag.Int64("shard-size", 16<<20, "bytes per shard")
	seed := flag.Uint64("seed", 7, "seed of the shards' content")
	flag.Parse()
	// The token granted the gated repository comes from the environment, not argv.
	token := os.Getenv("LABHUB_TOKEN")
	files := hub.LabModel(*shards, *size, *seed)
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
