package router

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// getModels is GET /v1/models with key: its status and the ids listed.
func getModels(t *testing.T, url, key string) (int, []string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/models", nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l struct {
		Data []struct{ ID string } `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&l)
	var ids []string
	for _, d := range l.Data {
		ids = append(ids, d.ID)
	}
	return resp.StatusCode, ids
}

// Each cluster's own key opens its own model behind the one endpoint, and is the key that
// cluster's engines get: two clusters with two keys, a third with none.
func TestEachRouteKeepsItsClustersKey(t *testing.T) {
	a, b, c := newEngine(t, "a"), newEngine(t, "b"), newEngine(t, "c")
	f := newRouter(t, Options{}, routes(
		Model{ID: "ma", Replicas: []Replica{{Name: "a", URL: a.srv.URL, Key: "sk-a"}}},
		Model{ID: "mb", Replicas: []Replica{{Name: "b", URL: b.srv.URL, Key: "sk-b"}}},
		Model{ID: "mc", Replicas: []Replica{{Name: "c", URL: c.srv.URL}}},
	))
	for _, tc := range []struct {
		model, key string
		want       int
	}{
		{"ma", "sk-a", 200}, {"mb", "sk-b", 200},
		{"ma", "sk-b", 401}, {"mb", "sk-a", 401}, {"ma", "", 401}, {"mb", "sk-wrong", 401},
		{"mc", "", 200}, {"mc", "sk-a", 200}, // a cluster without a key is open, as its engine is
		{"nope", "sk-a", 401}, {"nope", "", 401}, // an unknown model is not told apart from another cluster's
	} {
		if code, _, body := post(t, f.router.URL+"/v1/completions", tc.key, `{"model": "`+tc.model+`"}`); code != tc.want {
			t.Errorf("model %s with key %q: %d %s, want %d", tc.model, tc.key, code, body, tc.want)
		}
	}
	if got := a.auth.Load(); got != "Bearer sk-a" {
		t.Errorf("engine a saw %q, want its own key", got)
	}
	if got := b.auth.Load(); got != "Bearer sk-b" {
		t.Errorf("engine b saw %q, want its own key", got)
	}
	if got := c.auth.Load(); got != "" {
		t.Errorf("engine c (no key) saw %q: a client's key went past the router", got)
	}
	if a.hits.Load() != 1 || b.hits.Load() != 1 {
		t.Errorf("engines hit %d and %d times, want once each (the authorized ones)", a.hits.Load(), b.hits.Load())
	}
	// /v1/models lists what the key opens.
	for key, want := range map[string][]string{"sk-a": {"ma", "mc"}, "sk-b": {"mb", "mc"}, "": {"mc"}} {
		if code, ids := getModels(t, f.router.URL, key); code != 200 || !slices.Equal(ids, want) {
			t.Errorf("/v1/models with %q: %d %v, want %v", key, code, ids, want)
		}
	}
}

// The router's own keys open every model; with them, a model with no key of its own is
// closed to clients without one, and its engines get the upstream key.
func TestRouterKeysOpenEveryRoute(t *testing.T) {
	a, c := newEngine(t, "a"), newEngine(t, "c")
	f := newRouter(t, Options{Keys: []string{"sk-ops"}, UpstreamKey: "sk-up"}, routes(
		Model{ID: "ma", Replicas: []Replica{{Name: "a", URL: a.srv.URL, Key: "sk-a"}}},
		Model{ID: "mc", Replicas: []Replica{{Name: "c", URL: c.srv.URL}}},
	))
	for _, tc := range []struct {
		model, key string
		want       int
	}{{"ma", "sk-ops", 200}, {"mc", "sk-ops", 200}, {"mc", "", 401}, {"mc", "sk-a", 401}, {"ma", "sk-a", 200}, {"nope", "sk-ops", 404}} {
		if code, _, body := post(t, f.router.URL+"/v1/completions", tc.key, `{"model": "`+tc.model+`"}`); code != tc.want {
			t.Errorf("model %s with key %q: %d %s, want %d", tc.model, tc.key, code, body, tc.want)
		}
	}
	if got := a.auth.Load(); got != "Bearer sk-a" {
		t.Errorf("engine a saw %q, want its cluster's key (not the upstream one)", got)
	}
	if got := c.auth.Load(); got != "Bearer sk-up" {
		t.Errorf("engine c saw %q, want the upstream key", got)
	}
	if code, _ := getModels(t, f.router.URL, ""); code != 401 {
		t.Errorf("/v1/models without a key: %d, want 401", code)
	}
}

// Keys stay out of /state, and a key with a space is refused by Validate.
func TestRouteKeysStayOutOfState(t *testing.T) {
	tb := NewTable(0)
	if err := tb.Set(routes(Model{ID: "m", Replicas: []Replica{{Name: "a", URL: "http://10.0.0.1:8000", Key: "sk-secret"}}})); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(tb.State())
	if strings.Contains(string(b), "sk-secret") {
		t.Fatalf("state shows the key: %s", b)
	}
	if got := tb.Routes().Models[0].Replicas[0].Key; got != "sk-secret" {
		t.Fatalf("Routes lost the key: %q", got)
	}
	if err := (Routes{Models: []Model{{ID: "m", Replicas: []Replica{{Name: "a", URL: "http://10.0.0.1:8000", Key: "sk bad"}}}}}).Validate(); err == nil {
		t.Fatal("a key with a space passed")
	}
}
