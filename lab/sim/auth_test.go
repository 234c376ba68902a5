package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// With a key, /v1/* wants `Authorization: Bearer KEY` (any case of the scheme); /health and
// OPTIONS stay open; without a key nothing is checked (vLLM's AuthenticationMiddleware).
func TestAPIKeyGuardsV1Only(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	h := authenticate(ok, []string{"k1", "k2"})
	for _, tc := range []struct {
		method, path, auth string
		want               int
	}{
		{"GET", "/health", "", 200},
		{"GET", "/v1/models", "", 401},
		{"GET", "/v1/models", "Bearer k0", 401},
		{"GET", "/v1/models", "Basic k1", 401},
		{"GET", "/v1/models", "Bearer k1", 200},
		{"GET", "/v1/models", "bearer k2", 200},
		{"POST", "/v1/completions", "Bearer k1x", 401},
		{"OPTIONS", "/v1/models", "", 200},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s %s %q: %d, want %d", tc.method, tc.path, tc.auth, w.Code, tc.want)
		}
	}
	w := httptest.NewRecorder()
	authenticate(ok, nil).ServeHTTP(w, httptest.NewRequest("GET", "/v1/models", nil))
	if w.Code != 200 {
		t.Errorf("without a key: %d", w.Code)
	}
}
