package codec

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Issue #36, item 4: the codec server answered /encode to anyone (an encryption oracle
// for payloads every agent accepts), echoed any Origin with credentials allowed under
// "*", checked no Host (a DNS-rebound page could reach it on loopback) and read bodies of
// any size.
func TestCodecServerAnswersOnlyTheUIsRequests(t *testing.T) {
	c := mustNew(t, newKey(t))
	body := `{"payloads":[]}`
	post := func(t *testing.T, h http.Handler, path, origin, host string, body string) *http.Response {
		t.Helper()
		srv := httptest.NewServer(h)
		defer srv.Close()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	h := NewHTTPHandler(c, HandlerOptions{Origins: []string{DefaultUIOrigin}})
	for _, tc := range []struct {
		name, path, origin, host, body string
		want                           int
	}{
		{"the UI decodes", "/decode", DefaultUIOrigin, "", body, http.StatusOK},
		{"the CLI decodes (no Origin)", "/decode", "", "", body, http.StatusOK},
		{"encode is off", "/encode", DefaultUIOrigin, "", body, http.StatusForbidden},
		{"another origin", "/decode", "http://evil.example", "", body, http.StatusForbidden},
		{"another host (DNS rebinding)", "/decode", "", "evil.example:8081", body, http.StatusForbidden},
		{"a body over the cap", "/decode", "", "", `{"payloads":["` + strings.Repeat("A", maxBody) + `"]}`, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if resp := post(t, h, tc.path, tc.origin, tc.host, tc.body); resp.StatusCode != tc.want {
				t.Errorf("%s %s: %d; want %d", tc.path, tc.origin, resp.StatusCode, tc.want)
			}
		})
	}
	enc := NewHTTPHandler(c, HandlerOptions{Origins: []string{DefaultUIOrigin}, Encode: true})
	if resp := post(t, enc, "/encode", DefaultUIOrigin, "", body); resp.StatusCode != http.StatusOK {
		t.Errorf("encode turned on: %d", resp.StatusCode)
	}
	// Any origin ("*"): the grant never carries credentials.
	any := NewHTTPHandler(c, HandlerOptions{Origins: []string{"*"}})
	resp := post(t, any, "/decode", "http://evil.example", "", body)
	if resp.Header.Get("Access-Control-Allow-Credentials") != "" || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("with *: %v", resp.Header)
	}
}
