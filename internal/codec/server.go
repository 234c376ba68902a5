package codec

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"

	"go.temporal.io/sdk/converter"
)

// DefaultUIOrigin is the origin of the Temporal dev server's Web UI.
const DefaultUIOrigin = "http://localhost:8233"

// maxBody bounds a request's body: a page of a history's payloads (Temporal's blob limit
// is 2 MiB a payload by default) fits.
const maxBody = 8 << 20

// HandlerOptions say whom a codec server answers.
type HandlerOptions struct {
	// Origins are the browser origins allowed to call it (the Temporal UI's address, e.g.
	// http://localhost:8233); a request from any other origin is refused. "*" allows any
	// origin, never with credentials.
	Origins []string
	// Hosts are the Host headers it answers besides loopback's (127.0.0.1, ::1,
	// localhost, at any port): a page whose name an attacker rebinds to 127.0.0.1 sends
	// its own name, and is refused.
	Hosts []string
	// Encode turns /encode on (the UI's Start Workflow and Signal forms use it). Off, only
	// /decode answers: an /encode anyone can reach makes payloads every agent accepts.
	Encode bool
}

// NewHTTPHandler serves c as a codec server: POST .../decode (and, with Encode,
// .../encode) with the Temporal UI's and CLI's JSON, answering CORS preflights from the
// allowed origins.
//
// Whoever can reach this handler can decrypt payloads: bind it to loopback or put it
// behind the same access control as the UI.
func NewHTTPHandler(c *Codec, o HandlerOptions) http.Handler {
	inner := converter.NewPayloadCodecHTTPHandler(c)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(o.Hosts, r.Host) {
			http.Error(w, "codec server: host "+r.Host+" is not this server's", http.StatusForbidden)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			if !allowed(o.Origins, origin) {
				http.Error(w, "codec server: origin "+origin+" is not allowed (--ui-origin)", http.StatusForbidden)
				return
			}
			h := w.Header()
			if slices.Contains(o.Origins, "*") {
				h.Set("Access-Control-Allow-Origin", "*")
			} else {
				h.Set("Access-Control-Allow-Origin", origin)
				h.Set("Access-Control-Allow-Credentials", "true")
				h.Add("Vary", "Origin")
			}
			h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization")
		}
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/encode") && !o.Encode {
			http.Error(w, "codec server: /encode is off (starter codec-server --allow-encode)", http.StatusForbidden)
			return
		}
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			code := http.StatusBadRequest
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				code = http.StatusRequestEntityTooLarge
			}
			http.Error(w, "codec server: read the request: "+err.Error(), code)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
		inner.ServeHTTP(w, r)
	})
}

func hostAllowed(hosts []string, host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	if ip := net.ParseIP(name); ip != nil && ip.IsLoopback() || strings.EqualFold(name, "localhost") {
		return true
	}
	return slices.ContainsFunc(hosts, func(h string) bool { return strings.EqualFold(h, host) || strings.EqualFold(h, name) })
}

func allowed(origins []string, origin string) bool {
	return slices.Contains(origins, "*") || slices.ContainsFunc(origins, func(o string) bool {
		return strings.EqualFold(strings.TrimSuffix(o, "/"), origin)
	})
}
