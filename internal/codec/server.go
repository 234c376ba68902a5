package codec

import (
	"net/http"
	"slices"
	"strings"

	"go.temporal.io/sdk/converter"
)

// DefaultUIOrigin is the origin of the Temporal dev server's Web UI.
const DefaultUIOrigin = "http://localhost:8233"

// NewHTTPHandler serves c as a codec server: POST .../encode and .../decode with the
// Temporal UI's and CLI's JSON, answering CORS preflights from the given browser origins
// (the Temporal UI's address, e.g. http://localhost:8233; "*" allows any origin).
//
// Whoever can reach this handler can decrypt payloads: bind it to loopback or put it
// behind the same access control as the UI.
func NewHTTPHandler(c *Codec, origins ...string) http.Handler {
	inner := converter.NewPayloadCodecHTTPHandler(c)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" && allowed(origins, origin) {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Allow-Credentials", "true")
			h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization")
			h.Add("Vary", "Origin")
		}
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		inner.ServeHTTP(w, r)
	})
}

func allowed(origins []string, origin string) bool {
	return slices.Contains(origins, "*") || slices.ContainsFunc(origins, func(o string) bool {
		return strings.EqualFold(strings.TrimSuffix(o, "/"), origin)
	})
}
