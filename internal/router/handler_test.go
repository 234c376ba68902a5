package router

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// engine is a backend standing for one vLLM replica: it answers POST /v1/* with its name and
// the model it was asked, and streams when the body says stream (one event per release).
type engine struct {
	name string
	srv  *httptest.Server
	// auth is the Authorization header of the last request.
	auth atomic.Value
	hits atomic.Int64
	// aborted counts streams whose request ended (the router closed it) before their end.
	aborted atomic.Int64
	// gate, when set, holds each request until it is closed (a long generation).
	gate chan struct{}
	// events, when set, is read before each streamed event after the first.
	events chan struct{}
}

func newEngine(t *testing.T, name string) *engine {
	e := &engine{name: name}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		e.auth.Store(r.Header.Get("Authorization"))
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if e.gate != nil {
			<-e.gate
		}
		if !req.Stream {
			writeJSON(w, http.StatusOK, map[string]string{"replica": e.name, "model": req.Model, "path": r.URL.Path})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			if i > 0 && e.events != nil {
				select {
				case <-e.events:
				case <-r.Context().Done(): // the router let go: vLLM aborts the request
					e.aborted.Add(1)
					return
				}
			}
			fmt.Fprintf(w, "data: {\"replica\": %q, \"i\": %d}\n\n", e.name, i)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(e.srv.Close)
	return e
}

type fixture struct {
	table  *Table
	router *httptest.Server
	m      *Metrics
}

func newRouter(t *testing.T, opt Options, r Routes) *fixture {
	t.Helper()
	tb := NewTable(0)
	if err := tb.Set(r); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(tb)
	opt.Metrics = m
	srv := httptest.NewServer(NewHandler(tb, opt))
	t.Cleanup(srv.Close)
	return &fixture{table: tb, router: srv, m: m}
}

func post(t *testing.T, url, key, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// Each request reaches a replica of the model its body names; /v1/models lists every model;
// an unknown model is 404 in OpenAI's error shape; the per-model and per-replica series
// count them.
func TestRoutesByModel(t *testing.T) {
	a, b1, b2 := newEngine(t, "a"), newEngine(t, "b1"), newEngine(t, "b2")
	f := newRouter(t, Options{}, routes(
		Model{ID: "qwen", Replicas: []Replica{{Name: "a", URL: a.srv.URL}}},
		Model{ID: "llama", Replicas: []Replica{{Name: "b1", URL: b1.srv.URL}, {Name: "b2", URL: b2.srv.URL}}},
	))
	for range 10 {
		code, _, body := post(t, f.router.URL+"/v1/chat/completions", "", `{"model": "llama", "messages": []}`)
		if code != 200 || !strings.Contains(body, `"model":"llama"`) || !strings.Contains(body, `"path":"/v1/chat/completions"`) {
			t.Fatalf("%d %s", code, body)
		}
	}
	code, _, body := post(t, f.router.URL+"/v1/completions", "", `{"model": "qwen", "prompt": "x"}`)
	if code != 200 || !strings.Contains(body, `"replica":"a"`) {
		t.Fatalf("%d %s", code, body)
	}
	if a.hits.Load() != 1 || b1.hits.Load()+b2.hits.Load() != 10 || b1.hits.Load() == 0 || b2.hits.Load() == 0 {
		t.Fatalf("hits a=%d b1=%d b2=%d", a.hits.Load(), b1.hits.Load(), b2.hits.Load())
	}
	resp, err := http.Get(f.router.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Object string
		Data   []struct{ ID, Object string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if list.Object != "list" || len(list.Data) != 2 || list.Data[0].ID != "llama" || list.Data[1].ID != "qwen" || list.Data[0].Object != "model" {
		t.Fatalf("/v1/models: %+v", list)
	}
	code, _, body = post(t, f.router.URL+"/v1/completions", "", `{"model": "gpt-4", "prompt": "x"}`)
	var e struct {
		Error struct{ Message, Type, Param, Code string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || code != 404 || e.Error.Code != "model_not_found" || e.Error.Type != "invalid_request_error" || e.Error.Param != "model" || !strings.Contains(e.Error.Message, "gpt-4") {
		t.Fatalf("unknown model: %d %s", code, body)
	}
	metrics := scrape(t, f)
	for _, want := range []string{
		`tpdeploy_router_requests_total{code="200",model="llama",replica="b1"}`,
		`tpdeploy_router_requests_total{code="200",model="qwen",replica="a"} 1`,
		`tpdeploy_router_rejected_total{model="",reason="unknown_model"} 1`,
		`tpdeploy_router_outstanding{model="llama",replica="b2"} 0`,
		`tpdeploy_router_replica_available{model="qwen",replica="a"} 1`,
		`tpdeploy_router_request_duration_seconds_count{model="qwen",replica="a"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func scrape(t *testing.T, f *fixture) string {
	t.Helper()
	w := httptest.NewRecorder()
	f.m.HTTPHandler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	return w.Body.String()
}

// A streamed completion reaches the client event by event: the first event arrives while
// the engine still holds back the second.
func TestStreamingPassesEventByEvent(t *testing.T) {
	e := newEngine(t, "a")
	e.events = make(chan struct{})
	f := newRouter(t, Options{}, routes(Model{ID: "m", Replicas: []Replica{{Name: "a", URL: e.srv.URL}}}))
	resp, err := http.Post(f.router.URL+"/v1/completions", "application/json", strings.NewReader(`{"model": "m", "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() != "" {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	for i := range 3 {
		select {
		case l := <-lines:
			if !strings.Contains(l, fmt.Sprintf(`"i": %d`, i)) {
				t.Fatalf("event %d: %s", i, l)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d not passed on while the engine waits", i)
		}
		if i < 2 {
			e.events <- struct{}{}
		}
	}
	if l := <-lines; l != "data: [DONE]" {
		t.Fatalf("last: %q", l)
	}
}

// The key is checked at the router (Bearer, constant time); the engines get the upstream
// key, never the client's.
func TestAPIKeyAtTheRouter(t *testing.T) {
	e := newEngine(t, "a")
	f := newRouter(t, Options{Keys: []string{"sk-router"}, UpstreamKey: "sk-engine"}, routes(Model{ID: "m", Replicas: []Replica{{Name: "a", URL: e.srv.URL}}}))
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer sk-wrong", 401}, {"Basic sk-router", 401}, {"Bearer sk-router", 200}, {"bearer sk-router", 200}, {"Bearer sk-engine", 401}} {
		req, _ := http.NewRequest("POST", f.router.URL+"/v1/completions", strings.NewReader(`{"model": "m"}`))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, resp.StatusCode, tc.want)
		}
	}
	if got := e.auth.Load(); got != "Bearer sk-engine" {
		t.Fatalf("engine saw Authorization %q", got)
	}
	if e.hits.Load() != 2 {
		t.Fatalf("engine hit %d times, want the 2 authorized", e.hits.Load())
	}
	resp, _ := http.Get(f.router.URL + "/v1/models")
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("/v1/models without a key: %d", resp.StatusCode)
	}
	resp, _ = http.Get(f.router.URL + "/health")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/health: %d", resp.StatusCode)
	}
	// With no upstream key the client's key goes no further than the router.
	g := newRouter(t, Options{Keys: []string{"sk-router"}}, routes(Model{ID: "m", Replicas: []Replica{{Name: "a", URL: e.srv.URL}}}))
	if code, _, _ := post(t, g.router.URL+"/v1/completions", "sk-router", `{"model": "m"}`); code != 200 || e.auth.Load() != "" {
		t.Fatalf("%d, engine saw %q", code, e.auth.Load())
	}
}

// Hostile requests are answered by the router in OpenAI's shape and reach no engine: a body
// over the cap (declared or chunked), not JSON, no model.
func TestHostileRequests(t *testing.T) {
	e := newEngine(t, "a")
	f := newRouter(t, Options{MaxBody: 1024}, routes(Model{ID: "m", Replicas: []Replica{{Name: "a", URL: e.srv.URL}}}))
	big := `{"model": "m", "prompt": "` + strings.Repeat("x", 4096) + `"}`
	for _, tc := range []struct {
		name, body string
		chunked    bool
		want       int
		code       string
	}{
		{"declared too large", big, false, 413, "request_too_large"},
		{"chunked too large", big, true, 413, "request_too_large"},
		{"not JSON", `{"model": "m",`, false, 400, ""},
		{"a JSON array", `["m"]`, false, 400, ""},
		{"no model", `{"prompt": "x"}`, false, 400, ""},
		{"model not a string", `{"model": 7}`, false, 400, ""},
		{"empty model", `{"model": ""}`, false, 400, ""},
	} {
		var body io.Reader = strings.NewReader(tc.body)
		if tc.chunked {
			body = io.MultiReader(strings.NewReader(tc.body)) // no length: sent chunked
		}
		req, _ := http.NewRequest("POST", f.router.URL+"/v1/completions", body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got struct {
			Error struct{ Message, Type, Code string }
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if resp.StatusCode != tc.want || err != nil || got.Error.Message == "" || got.Error.Type != "invalid_request_error" || got.Error.Code != tc.code {
			t.Errorf("%s: %d %+v (%v), want %d", tc.name, resp.StatusCode, got, err, tc.want)
		}
	}
	if n := e.hits.Load(); n != 0 {
		t.Fatalf("the engine got %d hostile requests", n)
	}
	for _, path := range []string{"/v1/../admin", "/metrics", "/v2/x"} {
		resp, err := http.Get(f.router.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
	}
}

// The swap of a model's only replica: the old one drains (Drain answers once its stream has
// ended), new requests are held meanwhile and reach the replacement once it is routed;
// past the queue's bound a request is 503 with Retry-After.
func TestSwapHoldsAndDrains(t *testing.T) {
	old, repl := newEngine(t, "old"), newEngine(t, "new")
	old.events = make(chan struct{})
	f := newRouter(t, Options{MaxHeld: 2, Hold: 10 * time.Second, RetryAfter: 3 * time.Second}, routes(Model{ID: "m", Replicas: []Replica{{Name: "old", URL: old.srv.URL}}}))
	// A stream in flight on the old replica.
	resp, err := http.Post(f.router.URL+"/v1/completions", "application/json", strings.NewReader(`{"model": "m", "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	drained := make(chan error, 1)
	go func() { drained <- f.table.Drain(context.Background(), "m", "old") }()
	waitFor(t, func() bool { return f.table.State()[0].Replicas[0].Draining })
	// Two new requests are held, the third is past the bound.
	type result struct {
		code int
		body string
	}
	held := make(chan result, 2)
	for range 2 {
		go func() {
			code, _, body := post(t, f.router.URL+"/v1/completions", "", `{"model": "m"}`)
			held <- result{code, body}
		}()
	}
	waitFor(t, func() bool { return f.table.State()[0].Held == 2 })
	code, hdr, body := post(t, f.router.URL+"/v1/completions", "", `{"model": "m"}`)
	if code != 503 || hdr.Get("Retry-After") != "3" || !strings.Contains(body, "model_unavailable") {
		t.Fatalf("past the bound: %d Retry-After=%q %s", code, hdr.Get("Retry-After"), body)
	}
	select {
	case err := <-drained:
		t.Fatalf("drained with a stream in flight: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	old.events <- struct{}{}
	old.events <- struct{}{}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "[DONE]") || strings.Count(string(b), `"replica": "old"`) != 3 {
		t.Fatalf("the in-flight stream: %s", b)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if old.hits.Load() != 1 {
		t.Fatalf("the draining replica got %d requests", old.hits.Load())
	}
	// The supervisor routes the replacement: the held requests go there.
	if err := f.table.Set(routes(Model{ID: "m", Replicas: []Replica{{Name: "new", URL: repl.srv.URL}}})); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := <-held
		if r.code != 200 || !strings.Contains(r.body, `"replica":"new"`) {
			t.Fatalf("held request: %d %s", r.code, r.body)
		}
	}
	if m := scrape(t, f); !strings.Contains(m, `tpdeploy_router_rejected_total{model="m",reason="queue_full"} 1`) || !strings.Contains(m, `tpdeploy_router_hold_duration_seconds_count{model="m"} 2`) {
		t.Fatalf("metrics:\n%s", m)
	}
}

// A held request is answered 503 with Retry-After when no replica comes within the hold.
func TestHoldTimesOut(t *testing.T) {
	f := newRouter(t, Options{Hold: 100 * time.Millisecond}, routes(Model{ID: "m"}))
	start := time.Now()
	code, hdr, body := post(t, f.router.URL+"/v1/completions", "", `{"model": "m"}`)
	if code != 503 || hdr.Get("Retry-After") != "5" || !strings.Contains(body, "no replica within the hold") {
		t.Fatalf("%d %q %s", code, hdr.Get("Retry-After"), body)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("answered after %s, before the hold", d)
	}
}

// With two replicas, one draining: every new request goes to the other, none is held.
func TestDrainingReplicaGetsNoTraffic(t *testing.T) {
	a, b := newEngine(t, "a"), newEngine(t, "b")
	f := newRouter(t, Options{}, routes(Model{ID: "m", Replicas: []Replica{{Name: "a", URL: a.srv.URL}, {Name: "b", URL: b.srv.URL, Down: true}}}))
	if err := f.table.Drain(context.Background(), "m", "a"); err != nil {
		t.Fatal(err)
	}
	if err := f.table.Set(routes(Model{ID: "m", Replicas: []Replica{{Name: "a", URL: a.srv.URL, Draining: true}, {Name: "b", URL: b.srv.URL}}})); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if code, _, body := post(t, f.router.URL+"/v1/completions", "", `{"model": "m"}`); code != 200 || !strings.Contains(body, `"replica":"b"`) {
			t.Fatalf("%d %s", code, body)
		}
	}
	if a.hits.Load() != 0 {
		t.Fatalf("the draining replica got %d", a.hits.Load())
	}
}

// A replica whose engine is gone (its port refuses) costs no request: the request goes to
// the other replica, and the dead one is skipped for a while.
func TestDeadReplicaCostsNoRequest(t *testing.T) {
	live := newEngine(t, "live")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	f := newRouter(t, Options{EjectFor: time.Minute}, routes(Model{ID: "m", Replicas: []Replica{{Name: "dead", URL: dead}, {Name: "live", URL: live.srv.URL}}}))
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 20 {
		wg.Go(func() {
			if code, _, _ := post(t, f.router.URL+"/v1/completions", "", `{"model": "m", "prompt": "x"}`); code != 200 {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() != 0 || live.hits.Load() != 20 {
		t.Fatalf("%d failed, live got %d", failed.Load(), live.hits.Load())
	}
	m := scrape(t, f)
	if !strings.Contains(m, `tpdeploy_router_upstream_errors_total{model="m",replica="dead"}`) || !strings.Contains(m, `tpdeploy_router_replica_available{model="m",replica="dead"} 0`) {
		t.Fatalf("metrics:\n%s", m)
	}
	// The only replica dead: 502 in OpenAI's shape once the tries are spent (the hold is
	// shorter than the ejection).
	g := newRouter(t, Options{EjectFor: 10 * time.Millisecond, Hold: time.Second}, routes(Model{ID: "m", Replicas: []Replica{{Name: "dead", URL: dead}}}))
	code, _, body := post(t, g.router.URL+"/v1/completions", "", `{"model": "m"}`)
	if code != 502 || !strings.Contains(body, "bad_gateway") {
		t.Fatalf("%d %s", code, body)
	}
}

// An engine killed with requests in flight resets their connections: those fail (they had
// reached the engine, so they are not sent again), and the replica is ejected at once, so
// no later request takes a pooled connection to it.
func TestResetReplicaIsEjected(t *testing.T) {
	live := newEngine(t, "live")
	var resetHits atomic.Int64
	reset := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resetHits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with RST, as the kernel does for a killed process's sockets
		}
		conn.Close()
	}))
	defer reset.Close()
	f := newRouter(t, Options{EjectFor: time.Minute}, routes(Model{ID: "m", Replicas: []Replica{{Name: "reset", URL: reset.URL}, {Name: "live", URL: live.srv.URL}}}))
	failed := 0
	for range 22 {
		code, _, body := post(t, f.router.URL+"/v1/completions", "", `{"model": "m", "prompt": "x"}`)
		if code != 200 {
			failed++
			if code != 502 || !strings.Contains(body, "replica reset") {
				t.Errorf("%d %s", code, body)
			}
		}
	}
	if failed != 1 || resetHits.Load() != 1 || live.hits.Load() != 21 {
		t.Fatalf("%d failed, the resetting replica got %d, live %d: want 1, 1, 21", failed, resetHits.Load(), live.hits.Load())
	}
	if m := scrape(t, f); !strings.Contains(m, `tpdeploy_router_replica_available{model="m",replica="reset"} 0`) {
		t.Fatalf("metrics:\n%s", m)
	}
}

// The admin API: routes replaced and read back, bad routes refused naming the field, a
// drain of an unknown replica 404, a drain answered once the replica is idle.
func TestAdmin(t *testing.T) {
	e := newEngine(t, "a")
	tb := NewTable(4)
	var kept []Routes
	adm := httptest.NewServer(&Admin{Table: tb, Metrics: NewMetrics(tb), OnSet: func(r Routes) error { kept = append(kept, r); return nil }})
	defer adm.Close()
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, adm.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do("PUT", "/routes", "models: [{id: m, replicas: [{name: a, url: 'http://x/v1'}]}]"); code != 400 || !strings.Contains(body, "models[0].replicas[0].url") {
		t.Fatalf("%d %s", code, body)
	}
	if code, body := do("PUT", "/routes", fmt.Sprintf("models: [{id: m, replicas: [{name: a, url: %q}]}]", e.srv.URL)); code != 200 || !strings.Contains(body, e.srv.URL) || len(kept) != 1 {
		t.Fatalf("%d %s", code, body)
	}
	if code, body := do("POST", "/drain?model=m&replica=zz", ""); code != 404 || !strings.Contains(body, "unknown replica") {
		t.Fatalf("%d %s", code, body)
	}
	if code, body := do("POST", "/drain?model=m", ""); code != 400 {
		t.Fatalf("%d %s", code, body)
	}
	l := acquire(t, tb, "m")
	if code, body := do("POST", "/drain?model=m&replica=a&timeout=50ms", ""); code != 504 || !strings.Contains(body, "1 requests still in flight") {
		t.Fatalf("%d %s", code, body)
	}
	l.Release()
	if code, body := do("POST", "/drain?model=m&replica=a", ""); code != 200 || !strings.Contains(body, `"drained":true`) {
		t.Fatalf("%d %s", code, body)
	}
	if code, body := do("GET", "/routes", ""); code != 200 || !strings.Contains(body, `"draining":true`) {
		t.Fatalf("%d %s", code, body)
	}
	if code, body := do("GET", "/metrics", ""); code != 200 || !strings.Contains(body, "tpdeploy_router_replica_available") {
		t.Fatalf("%d %s", code, body)
	}
}

// An engine that dies mid-stream cuts only that stream: the client sees it end early, the
// request is counted aborted and leaves the replica, so a drain is not held by it; a client
// that goes away mid-stream frees its replica too, and the engine's request ends with it.
func TestCutStreamIsCountedAndReleased(t *testing.T) {
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"i\": 0}\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // the engine's process is gone
		}
	}))
	defer cut.Close()
	slow := newEngine(t, "slow")
	slow.events = make(chan struct{})
	f := newRouter(t, Options{}, routes(Model{ID: "m", Replicas: []Replica{{Name: "cut", URL: cut.URL}}}, Model{ID: "s", Replicas: []Replica{{Name: "slow", URL: slow.srv.URL}}}))
	resp, err := http.Post(f.router.URL+"/v1/completions", "application/json", strings.NewReader(`{"model": "m", "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil && strings.Contains(string(b), "[DONE]") {
		t.Fatalf("a cut stream ended cleanly: %s", b)
	}
	if !strings.Contains(string(b), `"i": 0`) {
		t.Fatalf("the event before the cut did not arrive: %q (%v)", b, err)
	}
	waitFor(t, func() bool { return f.table.State()[0].Replicas[0].Outstanding == 0 })
	if m := scrape(t, f); !strings.Contains(m, `tpdeploy_router_requests_total{code="aborted",model="m",replica="cut"} 1`) {
		t.Fatalf("metrics:\n%s", m)
	}
	// The client leaves a stream mid-way.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", f.router.URL+"/v1/completions", strings.NewReader(`{"model": "s", "stream": true}`))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return f.table.State()[1].Replicas[0].Outstanding == 1 })
	cancel()
	resp.Body.Close()
	ctxd, canceld := context.WithTimeout(context.Background(), 5*time.Second)
	defer canceld()
	if err := f.table.Drain(ctxd, "s", "slow"); err != nil {
		t.Fatalf("a stream the client left still holds the replica: %v", err)
	}
	// The router's request to the engine ended with the client's, as vLLM then aborts it.
	waitFor(t, func() bool { return slow.aborted.Load() == 1 })
}

// vllmKeepAlive is how long vLLM's API server keeps an idle connection by default
// (VLLM_HTTP_TIMEOUT_KEEP_ALIVE "5", vllm/envs.py, handed to uvicorn as
// timeout_keep_alive).
const vllmKeepAlive = 5 * time.Second

// The router closes an idle connection to an engine itself, and sooner than vLLM would: an
// engine that never closes one still sees it closed, IdleConnTimeout after its request.
func TestIdleEngineConnectionsCloseBeforeVLLMsKeepAlive(t *testing.T) {
	if IdleConnTimeout >= vllmKeepAlive {
		t.Fatalf("IdleConnTimeout %s, not below vLLM's keep-alive %s", IdleConnTimeout, vllmKeepAlive)
	}
	type change struct {
		state http.ConnState
		at    time.Time
	}
	changes := make(chan change, 16)
	e := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"replica": "a"})
	}))
	e.Config.ConnState = func(_ net.Conn, s http.ConnState) { changes <- change{s, time.Now()} }
	e.Start()
	t.Cleanup(e.Close)
	f := newRouter(t, Options{}, routes(Model{ID: "qwen", Replicas: []Replica{{Name: "a", URL: e.URL}}}))
	if code, _, body := post(t, f.router.URL+"/v1/completions", "", `{"model": "qwen", "prompt": "x"}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var idleAt time.Time
	timeout := time.After(IdleConnTimeout + 10*time.Second)
	for {
		select {
		case c := <-changes:
			switch c.state {
			case http.StateIdle:
				idleAt = c.at
			case http.StateClosed:
				if idleAt.IsZero() {
					t.Fatal("the connection closed before it was idle")
				}
				t.Logf("the router closed the idle engine connection %s after its request", c.at.Sub(idleAt).Round(time.Millisecond))
				return
			}
		case <-timeout:
			t.Fatalf("the idle engine connection was still open %s after its request", IdleConnTimeout+10*time.Second)
		}
	}
}
