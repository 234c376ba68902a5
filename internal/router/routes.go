// Package router is tpdeploy's OpenAI-compatible front: one endpoint for every model a
// fleet serves. A request is routed by its JSON body's `model` to the replica of that model
// with the fewest requests outstanding; a replica marked down or draining gets none; while a
// model has no replica to take a request (its only engine being replaced) new requests are
// held in a bounded queue for a bounded time, then answered 503 with Retry-After.
//
// The routes (model → replicas) are the supervisors' state, pushed to the router (Set); the
// router keeps no file of its own to edit by hand (docs/decisions.md, "The router's routes").
// The choice of a replica (Table) is pure and I/O-free; Handler is the HTTP side.
package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Routes is every model the router fronts, with its replicas.
type Routes struct {
	Models []Model `json:"models"`
}

// Model is one served model id (the name clients send as `model`, vLLM's
// --served-model-name) and the replicas serving it. A model with no replica (or none up) is
// known: its requests are held, not refused, as during the swap of its only engine.
type Model struct {
	ID       string    `json:"id"`
	Replicas []Replica `json:"replicas"`
}

// Replica is one engine group serving a model: its OpenAI endpoint and its state as its
// supervisor sees it.
type Replica struct {
	// Name identifies the replica within the model (e.g. the cluster's name, or
	// CLUSTER/rN); metrics carry it.
	Name string `json:"name"`
	// URL is the engine's API base, http://HOST:PORT (no path).
	URL string `json:"url"`
	// Down marks a replica the canary or the supervisor's health check found bad: it gets
	// no traffic.
	Down bool `json:"down,omitempty"`
	// Draining marks a replica about to be stopped: it gets no new requests, and the ones in
	// flight finish (Table.Drain waits for them).
	Draining bool `json:"draining,omitempty"`
	// Key is the replica's cluster's API key (its spec's secrets.api_key): a client must
	// send it (or one of the router's own keys) for the replica's model, and the router
	// sends it to this replica in place of the client's. Empty: the cluster has none. The
	// routes carry it so that each cluster keeps its own key behind the one endpoint; they
	// are read and written only over the admin socket (0600) and kept in the state file
	// (0600, in a 0700 directory), never logged or shown in /state or the metrics.
	Key string `json:"key,omitempty"`
	// Unconfirmed marks a replica read from the state file of a router older than per-route
	// keys (no StateVersion): that router kept one fleet key of its own, not in the file,
	// so a keyless route there may be a keyed cluster's. It gets no traffic and opens to no
	// client key (401; 503 to the router's own keys) until its cluster pushes its route
	// again (a deploy). It is kept through other clusters' pushes, which merge the routes
	// they read back.
	Unconfirmed bool `json:"unconfirmed,omitempty"`
}

// StateVersion is the format of the router's state file ({"version": N, "models": ...}):
// 2 since the routes carry their clusters' API keys. A file without a version was written
// before, or by a router that kept the version out of it; see ParseState.
const StateVersion = 2

// ParseState reads the router's state file: its routes, and how many of their replicas it
// marked Unconfirmed. A file of StateVersion is read as written. One without a version
// may be older than per-route keys, when the router had one fleet key that the file did not
// hold: serving its keyless replicas would open a keyed cluster's model to anyone, so each
// keyless one is marked Unconfirmed (fail closed) until its cluster pushes it again. A
// newer version than this router knows is refused.
func ParseState(b []byte) (Routes, int, error) {
	var st struct {
		Version int     `json:"version"`
		Models  []Model `json:"models"`
	}
	if err := yaml.UnmarshalStrict(b, &st); err != nil {
		return Routes{}, 0, fmt.Errorf("state: %w", err)
	}
	if st.Version > StateVersion {
		return Routes{}, 0, fmt.Errorf("state: version %d, newer than this router's %d", st.Version, StateVersion)
	}
	r := Routes{Models: st.Models}
	marked := 0
	if st.Version < StateVersion {
		for i := range r.Models {
			for j := range r.Models[i].Replicas {
				if rep := &r.Models[i].Replicas[j]; rep.Key == "" && !rep.Unconfirmed {
					rep.Unconfirmed = true
					marked++
				}
			}
		}
	}
	return r, marked, r.Validate()
}

// MarshalState is r as the state file, of StateVersion.
func MarshalState(r Routes) ([]byte, error) {
	return json.MarshalIndent(struct {
		Version int     `json:"version"`
		Models  []Model `json:"models"`
	}{StateVersion, r.Models}, "", "  ")
}

// ParseRoutes reads routes in YAML or JSON and validates them.
func ParseRoutes(b []byte) (Routes, error) {
	var r Routes
	if err := yaml.UnmarshalStrict(b, &r); err != nil {
		return Routes{}, fmt.Errorf("routes: %w", err)
	}
	return r, r.Validate()
}

// Validate names every field that is wrong.
func (r Routes) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, m := range r.Models {
		field := fmt.Sprintf("models[%d]", i)
		switch {
		case m.ID == "":
			errs = append(errs, fmt.Errorf("%s.id: empty", field))
		case seen[m.ID]:
			errs = append(errs, fmt.Errorf("%s.id: %q listed twice", field, m.ID))
		case strings.ContainsAny(m.ID, "\x00\n\r"):
			errs = append(errs, fmt.Errorf("%s.id: %q has a control character", field, m.ID))
		}
		seen[m.ID] = true
		names := map[string]bool{}
		for j, rep := range m.Replicas {
			rf := fmt.Sprintf("%s.replicas[%d]", field, j)
			if rep.Name == "" {
				errs = append(errs, fmt.Errorf("%s.name: empty", rf))
			} else if names[rep.Name] {
				errs = append(errs, fmt.Errorf("%s.name: %q listed twice in model %q", rf, rep.Name, m.ID))
			}
			names[rep.Name] = true
			if strings.ContainsAny(rep.Key, "\x00\n\r ") {
				errs = append(errs, fmt.Errorf("%s.key: a space or control character (keys are one token, sent as Authorization: Bearer KEY)", rf))
			}
			if err := checkURL(rep.URL); err != nil {
				errs = append(errs, fmt.Errorf("%s.url: %w", rf, err))
			}
		}
	}
	return errors.Join(errs...)
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return err
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want http://HOST:PORT or https://HOST:PORT", s)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%q: no host", s)
	case u.User != nil:
		return fmt.Errorf("%q: credentials do not belong in a route (the router's --upstream-key-file)", s)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%q: the engine's base, without a path (requests keep theirs, e.g. /v1/completions)", s)
	}
	return nil
}

// IDs are the models' ids, sorted.
func (r Routes) IDs() []string {
	ids := make([]string, 0, len(r.Models))
	for _, m := range r.Models {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}

// MarshalRoutes is r as JSON, as ParseRoutes reads it.
func MarshalRoutes(r Routes) ([]byte, error) {
	return json.MarshalIndent(r, "", "  ")
}
