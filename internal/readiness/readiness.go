// Package readiness is the test every part of tpdeploy uses to say that vLLM serves: plain
// HTTP, no Docker, no netlink, so the operator's CLI and the agent share it.
package readiness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// Check is the readiness test every part of tpdeploy uses: GET /health answers 200
// and GET /v1/models lists the served name. fetch returns a body for a 200 answer only.
func Check(ctx context.Context, fetch func(ctx context.Context, url string) ([]byte, error), endpoint, served string) error {
	if _, err := fetch(ctx, endpoint+"/health"); err != nil {
		return err
	}
	body, err := fetch(ctx, endpoint+"/v1/models")
	if err != nil {
		return err
	}
	var models struct {
		Data []modelEntry `json:"data"`
	}
	if err := json.Unmarshal(body, &models); err != nil {
		return fmt.Errorf("GET %s/v1/models: %w", endpoint, err)
	}
	if !slices.Contains(models.Data, modelEntry{ID: served}) {
		return fmt.Errorf("GET %s/v1/models does not list %q", endpoint, served)
	}
	return nil
}

// modelEntry is the part of a /v1/models entry the readiness check compares.
type modelEntry struct {
	ID string `json:"id"`
}

// Client is an HTTP client for readiness checks and the smoke test: it follows no
// redirect (a 3xx is answered as it is, not 200), so a check, and the API key it may
// carry, stays on the endpoint it was given.
func Client(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: Transport, CheckRedirect: NoRedirects}
}

// Transport is the checks' transport: a new connection for every check. vLLM's API server
// closes a connection idle for 5 s (uvicorn's timeout_keep_alive, VLLM_HTTP_TIMEOUT_KEEP_ALIVE
// in vllm/envs.py), and checks come seconds apart, so a kept connection would often be one
// the server is closing; a POST sent on it (a smoke test's or a canary's completion) fails
// without reaching vLLM and Go does not resend it, a false alarm on a healthy engine.
var Transport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableKeepAlives = true
	return t
}()

// NoRedirects is an http.Client's CheckRedirect that follows none.
func NoRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Authorize sets vLLM's API key on a request (vLLM's AuthenticationMiddleware wants
// `Authorization: Bearer KEY` on /v1/*; /health is open); no key, no header.
func Authorize(r *http.Request, apiKey string) {
	if apiKey != "" {
		r.Header.Set("Authorization", "Bearer "+apiKey)
	}
}

// Get GETs url with hc, sending apiKey when set, and returns at most limit bytes of the
// body of a 200 answer; any other status is an error that names it (never the key).
func Get(ctx context.Context, hc *http.Client, url, apiKey string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	Authorize(req, apiKey)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
		if resp.StatusCode == http.StatusUnauthorized {
			err = fmt.Errorf("GET %s: %s (vLLM wants an API key: is secrets.api_key the key vLLM was started with?)", url, resp.Status)
		}
	}
	return body, err
}
