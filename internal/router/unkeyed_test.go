package router

import "testing"

// vLLM's --api-key covers only /v1, /v2, /inference and /cohere (vLLM's security guide,
// docs/usage/security.md, "API Key Authentication Limitations"); /invocations runs the same
// inference, and /pause, /pooling, /score, /tokenize answer anyone. The router asks for its
// key on every path but /health, and forwards only POST /v1/..., so none of those reaches
// an engine through it, with the key or without (#36 item 8).
func TestRouterForwardsNoRouteVLLMsKeyLeavesOpen(t *testing.T) {
	e := newEngine(t, "a")
	f := newRouter(t, Options{Keys: []string{"sk-router"}, UpstreamKey: "sk-engine"}, routes(Model{ID: "m", Replicas: []Replica{{Name: "a", URL: e.srv.URL}}}))
	for _, path := range []string{"/invocations", "/pooling", "/classify", "/score", "/rerank", "/tokenize", "/pause", "/resume", "/abort_requests", "/inference/v1/generate"} {
		if code, _, _ := post(t, f.router.URL+path, "", `{"model": "m"}`); code != 401 {
			t.Errorf("POST %s without the key: %d, want 401", path, code)
		}
		if code, _, _ := post(t, f.router.URL+path, "sk-router", `{"model": "m"}`); code != 404 {
			t.Errorf("POST %s with the key: %d, want 404 (not forwarded)", path, code)
		}
	}
	if n := e.hits.Load(); n != 0 {
		t.Fatalf("the engine was reached %d times", n)
	}
}
