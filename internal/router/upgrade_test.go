package router

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// A state file from a router older than per-route keys (no version): that router kept one
// fleet key of its own, which the file did not hold, so a keyless route in it may be a keyed
// cluster's. Such a route fails closed: its model opens to no client key (401, and
// /v1/models does not list it), the router's own keys get 503 at once (not a hold), its
// engine is never reached, until its cluster pushes its route again; other clusters'
// pushes keep it unconfirmed (the agent merges the routes it reads back). A route with its
// own key, and a file of the current version, are read as written.
func TestAnOlderStateFileFailsClosedUntilThePush(t *testing.T) {
	old, keyed := newEngine(t, "old"), newEngine(t, "keyed")
	file := `{"models": [{"id": "m-old", "replicas": [{"name": "a", "url": "` + old.srv.URL + `"}]},
		{"id": "m-keyed", "replicas": [{"name": "b", "url": "` + keyed.srv.URL + `", "key": "sk-b"}]}]}`
	rs, marked, err := ParseState([]byte(file))
	if err != nil || marked != 1 || !rs.Models[0].Replicas[0].Unconfirmed || rs.Models[1].Replicas[0].Unconfirmed {
		t.Fatalf("ParseState: %d marked, %+v, %v; want m-old's replica alone unconfirmed", marked, rs, err)
	}
	// As the agent runs it: no key of the router's own.
	f := newRouter(t, Options{}, rs)
	for _, tc := range []struct {
		model, key string
		want       int
	}{{"m-old", "", 401}, {"m-old", "sk-b", 401}, {"m-keyed", "sk-b", 200}, {"m-keyed", "", 401}} {
		if code, _, body := post(t, f.router.URL+"/v1/completions", tc.key, `{"model": "`+tc.model+`"}`); code != tc.want {
			t.Errorf("%s with key %q: %d %s, want %d", tc.model, tc.key, code, body, tc.want)
		}
	}
	if code, ids := getModels(t, f.router.URL, "sk-b"); code != 200 || !slices.Equal(ids, []string{"m-keyed"}) {
		t.Errorf("/v1/models with m-keyed's key: %d %v", code, ids)
	}
	if code, ids := getModels(t, f.router.URL, ""); code != 401 || len(ids) != 0 {
		t.Errorf("/v1/models without a key: %d %v, want 401", code, ids)
	}
	// The router's own keys open every model, but an unconfirmed one has no replica to
	// serve: 503 with Retry-After at once, not a hold.
	own := newRouter(t, Options{Keys: []string{"sk-router"}, Hold: 40 * time.Second}, rs)
	code, h, body := post(t, own.router.URL+"/v1/completions", "sk-router", `{"model": "m-old"}`)
	if code != 503 || h.Get("Retry-After") == "" || !strings.Contains(body, "its cluster's next deploy pushes it again") {
		t.Errorf("m-old with the router's own key: %d %v %s", code, h, body)
	}
	if n := old.hits.Load(); n != 0 {
		t.Fatalf("the unconfirmed route's engine was reached %d times", n)
	}
	// Another cluster's push merges the routes read back: the mark stays.
	back := f.table.Routes()
	if !back.Models[0].Replicas[0].Unconfirmed {
		t.Fatalf("Routes() dropped the mark: %+v", back)
	}
	mustSet(t, f.table, back)
	if code, _, _ := post(t, f.router.URL+"/v1/completions", "", `{"model": "m-old"}`); code != 401 {
		t.Errorf("m-old after another cluster's push: %d, want 401", code)
	}
	// Its own cluster's push (a deploy: no mark, its key if it has one) serves it.
	back.Models[0].Replicas[0].Unconfirmed = false
	mustSet(t, f.table, back)
	if code, _, body := post(t, f.router.URL+"/v1/completions", "", `{"model": "m-old"}`); code != 200 {
		t.Errorf("m-old once pushed again: %d %s", code, body)
	}
	// The state file this router writes is of the current version: read back as written.
	b, err := MarshalState(f.table.Routes())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"version": 2`) {
		t.Errorf("state file without its version: %s", b)
	}
	if again, marked, err := ParseState(b); err != nil || marked != 0 || again.Models[0].Replicas[0].Unconfirmed {
		t.Errorf("ParseState of the current version: %d marked, %+v, %v", marked, again, err)
	}
	if _, _, err := ParseState([]byte(`{"version": 3, "models": []}`)); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("a newer version: %v", err)
	}
}
