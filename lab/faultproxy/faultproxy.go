// Package faultproxy sits between one lab node and the host's Docker engine and injects
// faults into chosen Engine API calls deterministically: a call can fail, hang, lose its
// connection, be delayed, or be held at a barrier until the test releases it. A test can
// so stop a deploy at an exact step ("the ContainerCreate of the ray-worker on node-b"),
// do something there (reboot node-b), and let it go on, instead of racing a 30 ms phase.
//
// Everything a rule does not stop is forwarded unchanged, including keep-alive
// connections, streamed responses (logs with follow, events), which are flushed at once,
// and upgraded connections (exec and attach), which become raw bidirectional byte streams.
package faultproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"
)

// maxBody is the largest request body buffered to match a rule's Body.
const maxBody = 1 << 20

// Rule chooses requests and what happens to them. Method, Path, Query and Body must all
// match; empty ones match anything.
type Rule struct {
	// Method is the HTTP method, e.g. "POST".
	Method string
	// Path is a regular expression matched against the URL path with the API version
	// prefix (/v1.41) removed, e.g. `^/containers/create$`. Add panics if it is invalid.
	Path string
	// Query holds query parameters that must have exactly these values, e.g.
	// {"name": "tpd-x-node-b-ray-worker"} for a create.
	Query map[string]string
	// Body is a substring the request body must contain (a create's body holds the
	// image, command and env). Bodies over 1 MiB never match.
	Body string
	// Action is what happens to a matching request.
	Action Action
	// Times is how many requests the rule applies to; 0 is every one.
	Times int
}

// Action is what a rule does: Fail, Hang, Drop, Delay or Pause.
type Action interface{ action() }

// Fail answers with an error in the engine's own form, so clients report Message as
// the engine's error.
type Fail struct {
	Status  int // 500 when 0
	Message string
}

// Hang never answers: the request waits until its client gives up, the rule is
// removed (the request then goes on) or the proxy is closed. A client giving up is seen
// only for bodies up to 1 MiB, which the proxy reads while holding a request.
type Hang struct{}

// Drop closes the client's connection without an answer. Go's HTTP client retries an
// idempotent request (GET) once on a fresh connection when a reused one was closed, so
// a Drop with Times 1 may go unnoticed on a GET.
type Drop struct{}

// Delay holds the request for D, then lets it go on.
type Delay struct{ D time.Duration }

// Pause holds requests at a barrier until Release (or Remove); then they go on. Reached
// tells the test when the first one arrives.
type Pause struct{}

func (Fail) action()  {}
func (Hang) action()  {}
func (Drop) action()  {}
func (Delay) action() {}
func (Pause) action() {}

// Call is one request the proxy saw.
type Call struct {
	Method string
	Path   string // without the API version prefix
	Query  string
	// Status is the answer's status code; 0 while in flight and when there was none
	// (dropped, hung, client gone).
	Status   int
	Duration time.Duration // until the answer ended, streams and upgrades included
	Rule     int           // the last rule applied, 0 if none
	Err      string        // why there was no answer, or the proxy's error
}

type rule struct {
	Rule
	id       int
	path     *regexp.Regexp
	applied  int
	reached  chan struct{} // closed when the rule first applies
	released chan struct{} // closed by Release or Remove
	removed  chan struct{} // closed by Remove
}

// Proxy forwards one Docker engine's API and applies fault rules to it. It is safe for
// concurrent use.
type Proxy struct {
	upstream    string
	upstreamErr error
	rp          *httputil.ReverseProxy
	srv         *http.Server
	ctx         context.Context // parent of every request's context
	cancel      context.CancelFunc

	mu     sync.Mutex
	rules  []*rule // in the order added, which is id order
	nextID int
	calls  []Call
}

// New returns a proxy for the engine at upstream ("unix:///var/run/docker.sock" or
// "tcp://host:port"). An invalid address is reported by ListenUnix.
func New(upstream string) *Proxy {
	p := &Proxy{upstream: upstream, nextID: 1}
	network, addr, err := parseUpstream(upstream)
	p.upstreamErr = err
	dialer := &net.Dialer{}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The engine ignores the host; the transport dials the socket.
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "docker"
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, network, addr)
			},
			DisableCompression:  true, // pass the client's Accept-Encoding through as it is
			MaxIdleConnsPerHost: 16,
		},
		FlushInterval: -1, // logs and events must reach the client line by line
		ModifyResponse: func(res *http.Response) error {
			callOf(res.Request.Context()).Status = res.StatusCode
			return nil
		},
		ErrorHandler: p.upstreamFailed,
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	// Request contexts derive from p.ctx, so Close also ends held requests and upgraded
	// connections, which http.Server.Close does not track.
	p.srv = &http.Server{Handler: p, BaseContext: func(net.Listener) context.Context { return p.ctx }}
	return p
}

func parseUpstream(s string) (network, addr string, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", fmt.Errorf("faultproxy: upstream %q: %w", s, err)
	}
	switch u.Scheme {
	case "unix":
		return "unix", u.Path, nil
	case "tcp":
		return "tcp", u.Host, nil
	}
	return "", "", fmt.Errorf("faultproxy: upstream %q: want unix:// or tcp://", s)
}

// ListenUnix serves the proxy on a unix socket at path, replacing a stale socket there.
// The socket is world-accessible: node containers reach it through a bind mount.
func (p *Proxy) ListenUnix(path string) error {
	if p.upstreamErr != nil {
		return p.upstreamErr
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("faultproxy: %w", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		l.Close()
		return fmt.Errorf("faultproxy: %w", err)
	}
	go p.srv.Serve(l)
	return nil
}

// Close stops serving and ends every request in flight, held or upgraded.
func (p *Proxy) Close() error {
	p.cancel()
	return p.srv.Close()
}

// Add installs a rule and returns its id. Rules apply in the order added.
func (p *Proxy) Add(r Rule) (id int) {
	nr := &rule{Rule: r, path: regexp.MustCompile(r.Path),
		reached: make(chan struct{}), released: make(chan struct{}), removed: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	nr.id = p.nextID
	p.nextID++
	p.rules = append(p.rules, nr)
	return nr.id
}

// Remove uninstalls a rule; requests it holds (Pause, Hang) go on as if it had not
// matched.
func (p *Proxy) Remove(id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.rules {
		if r.id == id {
			r.remove()
			p.rules = append(p.rules[:i], p.rules[i+1:]...)
			return
		}
	}
}

// Clear removes every rule.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		r.remove()
	}
	p.rules = nil
}

// remove lets held requests go on; callers hold p.mu.
func (r *rule) remove() {
	closeOnce(r.released)
	closeOnce(r.removed)
}

// Reached returns a channel closed when the rule first applies to a request; for a
// Pause, the request is then held. It is nil (never ready) for an unknown id.
func (p *Proxy) Reached(id int) <-chan struct{} {
	if r := p.rule(id); r != nil {
		return r.reached
	}
	return nil
}

// Release opens a Pause rule's barrier: held requests go on, and later ones pass it.
func (p *Proxy) Release(id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.id == id {
			closeOnce(r.released)
		}
	}
}

// Calls returns the requests seen so far, in arrival order.
func (p *Proxy) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Call(nil), p.calls...)
}

func (p *Proxy) rule(id int) *rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.id == id {
			return r
		}
	}
	return nil
}

// closeOnce closes ch unless it is closed; callers hold p.mu.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

var versionPrefix = regexp.MustCompile(`^/v[0-9]+\.[0-9]+/`)

// ServeHTTP walks the request through the matching rules in the order they were added:
// Delay and Pause hold it and then let it go on to later rules (so a test can add a Fail
// while a request is paused), Fail, Hang and Drop end it; what is not ended is forwarded.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	c := &Call{Method: req.Method, Path: versionPrefix.ReplaceAllString(req.URL.Path, "/"), Query: req.URL.RawQuery}
	p.mu.Lock()
	p.calls = append(p.calls, *c)
	n := len(p.calls) - 1
	p.mu.Unlock()
	defer func() {
		c.Duration = time.Since(start)
		p.mu.Lock()
		p.calls[n] = *c
		p.mu.Unlock()
	}()
	req = req.WithContext(context.WithValue(req.Context(), callKey{}, c))
	ctx, q := req.Context(), req.URL.Query()

	// The body is read before forwarding only when a rule asks for it, or when the request
	// is held: once the body is read, the server watches the connection and cancels ctx
	// if the client gives up.
	var body []byte
	var bodyRead, bodyOK bool
	readBody := func() {
		if !bodyRead {
			bodyRead = true
			body, bodyOK = bufferBody(req)
		}
	}
	if p.wantsBody(req.Method, c.Path, q) {
		readBody()
	}
	for after := 0; ; {
		r := p.match(req.Method, c.Path, q, body, bodyOK, after)
		if r == nil {
			p.rp.ServeHTTP(w, req)
			return
		}
		after, c.Rule = r.id, r.id
		switch a := r.Action.(type) {
		case Fail:
			c.Status = a.Status
			if c.Status == 0 {
				c.Status = http.StatusInternalServerError
			}
			writeError(w, c.Status, a.Message)
			return
		case Drop:
			c.Err = "dropped"
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		case Hang:
			readBody()
			select {
			case <-ctx.Done():
				c.Err = "hung until the client gave up"
				return
			case <-r.removed:
			}
		case Delay:
			readBody()
			t := time.NewTimer(a.D)
			select {
			case <-ctx.Done():
				t.Stop()
				c.Err = "client gave up while delayed"
				return
			case <-t.C:
			}
		case Pause:
			readBody()
			select {
			case <-ctx.Done():
				c.Err = "client gave up while paused"
				return
			case <-r.released:
			}
		}
	}
}

type callKey struct{}

func callOf(ctx context.Context) *Call { return ctx.Value(callKey{}).(*Call) }

func (p *Proxy) wantsBody(method, path string, q url.Values) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.Body != "" && r.matchesHead(method, path, q) {
			return true
		}
	}
	return false
}

// match returns the first rule after id `after` that applies, counting it as applied.
func (p *Proxy) match(method, path string, q url.Values, body []byte, bodyOK bool, after int) *rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.id <= after || (r.Times > 0 && r.applied >= r.Times) || !r.matchesHead(method, path, q) {
			continue
		}
		if r.Body != "" && (!bodyOK || !bytes.Contains(body, []byte(r.Body))) {
			continue
		}
		r.applied++
		closeOnce(r.reached)
		return r
	}
	return nil
}

func (r *rule) matchesHead(method, path string, q url.Values) bool {
	if r.Method != "" && !strings.EqualFold(r.Method, method) {
		return false
	}
	if !r.path.MatchString(path) {
		return false
	}
	for k, v := range r.Query {
		if !q.Has(k) || q.Get(k) != v {
			return false
		}
	}
	return true
}

// bufferBody reads up to maxBody of req's body and puts it back in front of the rest;
// ok is false when the body is larger or could not be read.
func bufferBody(req *http.Request) (body []byte, ok bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, true
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
	req.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), req.Body), req.Body}
	return body, err == nil && len(body) <= maxBody
}

func (p *Proxy) upstreamFailed(w http.ResponseWriter, req *http.Request, err error) {
	c := callOf(req.Context())
	c.Err = err.Error()
	if req.Context().Err() != nil {
		return // the client is gone; nobody reads an answer
	}
	c.Status = http.StatusBadGateway
	writeError(w, http.StatusBadGateway, fmt.Sprintf("faultproxy: engine at %s: %v", p.upstream, err))
}

// writeError answers as the engine does; the moby client reads the message only with
// exactly this content type.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Message string `json:"message"`
	}{msg})
}
