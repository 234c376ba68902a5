package router

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"
)

// Options are the router's limits and credentials.
type Options struct {
	// Keys are the router's own API keys (Authorization: Bearer KEY): each opens every
	// model. A model's replicas' keys (Replica.Key, each cluster's secrets.api_key) open
	// that model. With neither, a model is open to anyone.
	Keys []string
	// UpstreamKey is sent to a replica with no key of its own in place of the client's
	// Authorization; empty: the client's is dropped, never forwarded.
	UpstreamKey string
	// MaxBody caps a request body (default 32 MiB): a larger one is answered 413 unread.
	MaxBody int64
	// Hold is how long a request waits for a replica of its model (default 60 s).
	Hold time.Duration
	// MaxHeld bounds the requests held per model (0: the default, 256; negative: hold none).
	MaxHeld int
	// RetryAfter is the Retry-After of a 503 (default 5 s).
	RetryAfter time.Duration
	// EjectFor keeps a replica whose dial failed from new requests (default 2 s).
	EjectFor time.Duration
	// Transport reaches the engines (default: one tuned for many keep-alive connections).
	Transport http.RoundTripper
	// Metrics records per model and replica (nil: none).
	Metrics *Metrics
}

func (o *Options) defaults() {
	if o.MaxBody <= 0 {
		o.MaxBody = 32 << 20
	}
	if o.Hold <= 0 {
		o.Hold = 60 * time.Second
	}
	if o.MaxHeld == 0 {
		o.MaxHeld = 256
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = 5 * time.Second
	}
	if o.EjectFor <= 0 {
		o.EjectFor = 2 * time.Second
	}
	if o.Transport == nil {
		o.Transport = NewTransport()
	}
}

// IdleConnTimeout is how long the router keeps an idle connection to an engine: less than
// the 5 s vLLM's API server keeps one (uvicorn's timeout_keep_alive, from
// VLLM_HTTP_TIMEOUT_KEEP_ALIVE, vllm/envs.py), so the router closes it first. A request
// sent on a connection the server is closing fails before it reaches vLLM, and Go's
// transport retries only idempotent requests: a completion POST would come back a 502 and
// its healthy replica be taken out.
const IdleConnTimeout = 4 * time.Second

// NewTransport is the engines' transport: keep-alive connections enough for a router's
// concurrency (the default keeps 2 per host, so every third concurrent request would dial),
// closed while idle before vLLM closes them (IdleConnTimeout), no response header timeout
// (a non-streaming completion answers only at its end), no compression added.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 4096
	t.MaxIdleConnsPerHost = 1024
	t.IdleConnTimeout = IdleConnTimeout
	t.DisableCompression = true
	t.ForceAttemptHTTP2 = false
	return t
}

// Handler serves the OpenAI API in front of the table's replicas.
type Handler struct {
	table *Table
	opt   Options
	keys  [][32]byte
	proxy *httputil.ReverseProxy
}

// NewHandler serves table's routes with opt.
func NewHandler(table *Table, opt Options) *Handler {
	opt.defaults()
	table.mu.Lock()
	table.maxHeld = max(opt.MaxHeld, 0)
	table.mu.Unlock()
	h := &Handler{table: table, opt: opt}
	for _, k := range opt.Keys {
		if k != "" {
			h.keys = append(h.keys, sha256.Sum256([]byte(k)))
		}
	}
	h.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			a := pr.In.Context().Value(attemptKey{}).(*attempt)
			pr.SetURL(a.lease.URL())
			pr.SetXForwarded()
			pr.Out.Header.Del("Authorization")
			key := a.lease.Key()
			if key == "" {
				key = opt.UpstreamKey
			}
			if key != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+key)
			}
		},
		Transport: opt.Transport,
		// Server-sent events (stream: true) reach the client token by token.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			a := r.Context().Value(attemptKey{}).(*attempt)
			a.err = err
		},
	}
	return h
}

type attemptKey struct{}

// attempt is one try of a request on one replica; the proxy's ErrorHandler fills err when
// the engine gave no response.
type attempt struct {
	lease *Lease
	err   error
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		w.WriteHeader(http.StatusOK)
		return
	}
	acc := h.access(r)
	if !acc.any {
		unauthorized(w)
		return
	}
	switch {
	case r.URL.Path == "/v1/models" && r.Method == http.MethodGet:
		h.models(w, acc)
	case strings.HasPrefix(r.URL.Path, "/v1/models/") && r.Method == http.MethodGet:
		h.model(w, acc, strings.TrimPrefix(r.URL.Path, "/v1/models/"))
	case strings.HasPrefix(r.URL.Path, "/v1/") && r.Method == http.MethodPost:
		h.forward(w, r, acc)
	default:
		apiError(w, http.StatusNotFound, "invalid_request_error", "", "not_found", fmt.Sprintf("%s %s: no such route (the router forwards POST /v1/... by the body's model, and answers GET /v1/models)", r.Method, r.URL.Path))
	}
}

// unauthorized is vLLM's own answer (AuthenticationMiddleware), so a client sees one
// behaviour.
func unauthorized(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(`{"error":"Unauthorized"}`))
}

// access is what a request's key opens.
type access struct {
	// all: one of the router's own keys, or no key anywhere (every model open).
	all bool
	// models are the models it opens, when not all.
	models map[string]bool
	// any: it opens something (or there is nothing to open and no key to ask for); else
	// every path but /health is 401.
	any bool
}

func (a access) opens(id string) bool { return a.all || a.models[id] }

func (h *Handler) access(r *http.Request) access {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	bearer := strings.EqualFold(scheme, "bearer")
	got := sha256.Sum256([]byte(token))
	ok := 0
	for _, k := range h.keys {
		ok |= subtle.ConstantTimeCompare(got[:], k[:])
	}
	if bearer && ok == 1 {
		return access{all: true, any: true}
	}
	models, keyed := h.table.Opens(got, bearer, len(h.keys) > 0)
	if len(h.keys) == 0 && !keyed {
		return access{all: true, any: true}
	}
	return access{models: models, any: len(models) > 0}
}

func (h *Handler) models(w http.ResponseWriter, acc access) {
	type entry struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	data := []entry{}
	for _, id := range h.table.Routes().IDs() {
		if acc.opens(id) {
			data = append(data, entry{ID: id, Object: "model", Created: 0, OwnedBy: "tpdeploy"})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (h *Handler) model(w http.ResponseWriter, acc access, id string) {
	for _, m := range h.table.Routes().IDs() {
		if m == id && acc.opens(id) {
			writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "model", "created": 0, "owned_by": "tpdeploy"})
			return
		}
	}
	notFound(w, id)
}

func notFound(w http.ResponseWriter, id string) {
	apiError(w, http.StatusNotFound, "invalid_request_error", "model", "model_not_found", fmt.Sprintf("The model `%s` does not exist.", id))
}

// forward reads the body (capped), routes it by its model and proxies it, holding it while
// the model has no replica and trying another when a replica's dial fails.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, acc access) {
	start := time.Now()
	if r.ContentLength > h.opt.MaxBody {
		h.opt.Metrics.rejected("", "body_too_large")
		apiError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "", "request_too_large", fmt.Sprintf("request body of %d bytes: the router takes at most %d", r.ContentLength, h.opt.MaxBody))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opt.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			h.opt.Metrics.rejected("", "body_too_large")
			apiError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "", "request_too_large", fmt.Sprintf("request body over %d bytes: the router takes at most %d", h.opt.MaxBody, h.opt.MaxBody))
			return
		}
		apiError(w, http.StatusBadRequest, "invalid_request_error", "", "", "reading the request body: "+err.Error())
		return
	}
	var req struct {
		Model *string `json:"model"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		h.opt.Metrics.rejected("", "bad_json")
		apiError(w, http.StatusBadRequest, "invalid_request_error", "", "", "the request body is not a JSON object: "+err.Error())
		return
	}
	if req.Model == nil || *req.Model == "" {
		h.opt.Metrics.rejected("", "no_model")
		apiError(w, http.StatusBadRequest, "invalid_request_error", "model", "", "the request names no model: the router routes by the body's \"model\" (GET /v1/models lists them)")
		return
	}
	id := *req.Model
	if !acc.opens(id) {
		// Another cluster's key, or none: the model's own engine would answer 401 too. A
		// model the key does not open is not told apart from one that does not exist.
		h.opt.Metrics.rejected("", "unauthorized")
		unauthorized(w)
		return
	}
	deadline := start.Add(h.opt.Hold)
	for tries := 0; ; tries++ {
		lease, held, err := h.table.Acquire(r.Context(), id, deadline)
		h.opt.Metrics.held(id, held.Waited, err)
		if err != nil {
			switch {
			case errors.Is(err, ErrUnknownModel):
				// Not the client's id as a label: any string would make a series.
				h.opt.Metrics.rejected("", "unknown_model")
				notFound(w, id)
			case errors.Is(err, ErrUnconfirmed):
				h.opt.Metrics.rejected(id, "unconfirmed")
				w.Header().Set("Retry-After", strconv.Itoa(int(h.opt.RetryAfter.Round(time.Second).Seconds())))
				apiError(w, http.StatusServiceUnavailable, "service_unavailable", "model", "model_unavailable", fmt.Sprintf("The model `%s` has no replica ready: %v", id, err))
			case errors.Is(err, ErrQueueFull), errors.Is(err, ErrHoldTimeout):
				h.opt.Metrics.rejected(id, reason(err))
				w.Header().Set("Retry-After", strconv.Itoa(int(h.opt.RetryAfter.Round(time.Second).Seconds())))
				apiError(w, http.StatusServiceUnavailable, "service_unavailable", "model", "model_unavailable", fmt.Sprintf("The model `%s` has no replica ready: %v; retry later", id, err))
			default: // the client went away while held
			}
			return
		}
		if !h.proxyOnce(w, r, lease, body, tries) {
			continue
		}
		return
	}
}

func reason(err error) string {
	if errors.Is(err, ErrQueueFull) {
		return "queue_full"
	}
	return "hold_timeout"
}

// maxTries bounds how often one request is tried on replicas whose dial failed.
const maxTries = 4

// proxyOnce sends the request to the lease's replica. It reports false when the replica
// could not be dialled and the request may go to another (nothing reached the engine).
func (h *Handler) proxyOnce(w http.ResponseWriter, r *http.Request, lease *Lease, body []byte, tries int) bool {
	start := time.Now()
	defer lease.Release()
	a := &attempt{lease: lease}
	out := r.Clone(context.WithValue(r.Context(), attemptKey{}, a))
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	rec := &statusRecorder{ResponseWriter: w}
	// A stream the engine cuts mid-way aborts the client's connection (the proxy panics
	// with http.ErrAbortHandler); it is counted before the panic goes on.
	defer func() {
		if v := recover(); v != nil {
			h.opt.Metrics.done(lease.rep.model, lease.Replica(), "aborted", time.Since(start))
			if r.Context().Err() == nil {
				lease.Eject(h.opt.EjectFor) // the engine cut it, not the client
			}
			panic(v)
		}
	}()
	h.proxy.ServeHTTP(rec, out)
	if a.err == nil {
		h.opt.Metrics.done(lease.rep.model, lease.Replica(), strconv.Itoa(rec.code()), time.Since(start))
		return true
	}
	h.opt.Metrics.upstreamError(lease.rep.model, lease.Replica())
	if r.Context().Err() == nil {
		// Any failure of the engine's connection ejects its replica, not only a refused
		// dial: a reset of a request already sent means the engine's process went away
		// (its kill resets every open connection), and without the ejection the next
		// request would take a pooled connection to the same dead engine (CI: 5 streams
		// failed for 4 clients). Only a refused dial is tried again elsewhere, since only
		// then did nothing reach the engine.
		lease.Eject(h.opt.EjectFor)
		if isDialError(a.err) && tries+1 < maxTries {
			return false
		}
	}
	code := http.StatusBadGateway
	if r.Context().Err() != nil {
		code = 499 // the client went away; nothing is written to it
	}
	h.opt.Metrics.done(lease.rep.model, lease.Replica(), strconv.Itoa(code), time.Since(start))
	if code == http.StatusBadGateway {
		apiError(w, code, "upstream_error", "", "bad_gateway", fmt.Sprintf("model `%s` replica %s: %v", lease.rep.model, lease.Replica(), a.err))
	}
	return true
}

// isDialError: the connection to the engine was never made, so the request did not reach it.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// statusRecorder remembers the status the proxy wrote, and passes Flush through (the
// proxy's flushes reach the client through http.ResponseController's Unwrap).
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

// apiError writes OpenAI's error object: {"error": {"message", "type", "param", "code"}}.
func apiError(w http.ResponseWriter, status int, typ, param, code, msg string) {
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if param != "" {
		e["param"] = param
	}
	if code != "" {
		e["code"] = code
	}
	writeJSON(w, status, map[string]any{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
