package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Admin is the supervisors' side of the router, served on loopback or a unix socket only
// (it takes no credentials; the agent that starts the router is its one caller):
//
//	GET  /routes                          the routes as the router holds them
//	PUT  /routes                          replace them (JSON or YAML, Routes)
//	POST /drain?model=M&replica=R&timeout=D   mark R draining, answer when its requests
//	                                      in flight have ended (200) or after D (504)
//	GET  /state                           per replica: outstanding, available; held per model
//	GET  /metrics                         Prometheus
//
// OnSet, when set, is called with routes a PUT accepted (the binary keeps them in its
// state file, so a restarted router serves the last routes before the supervisor pushes).
type Admin struct {
	Table   *Table
	Metrics *Metrics
	OnSet   func(Routes) error
}

// maxRoutesBody caps a PUT /routes body.
const maxRoutesBody = 4 << 20

func (a *Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/routes" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, a.Table.Routes())
	case r.URL.Path == "/routes" && r.Method == http.MethodPut:
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRoutesBody))
		if err != nil {
			adminError(w, http.StatusBadRequest, "read routes: %v", err)
			return
		}
		routes, err := ParseRoutes(b)
		if err != nil {
			adminError(w, http.StatusBadRequest, "%v", err)
			return
		}
		if err := a.Table.Set(routes); err != nil {
			adminError(w, http.StatusBadRequest, "%v", err)
			return
		}
		if a.OnSet != nil {
			if err := a.OnSet(routes); err != nil {
				adminError(w, http.StatusInternalServerError, "routes set, but not kept for a restart: %v", err)
				return
			}
		}
		writeJSON(w, http.StatusOK, a.Table.Routes())
	case r.URL.Path == "/drain" && r.Method == http.MethodPost:
		a.drain(w, r)
	case r.URL.Path == "/state" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, a.Table.State())
	case r.URL.Path == "/metrics" && r.Method == http.MethodGet && a.Metrics != nil:
		a.Metrics.HTTPHandler().ServeHTTP(w, r)
	default:
		adminError(w, http.StatusNotFound, "%s %s: no such admin route", r.Method, r.URL.Path)
	}
}

func (a *Admin) drain(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	model, replica := q.Get("model"), q.Get("replica")
	if model == "" || replica == "" {
		adminError(w, http.StatusBadRequest, "drain: give model= and replica=")
		return
	}
	timeout := 5 * time.Minute
	if s := q.Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			adminError(w, http.StatusBadRequest, "drain: timeout=%q: want a positive duration such as 90s", s)
			return
		}
		timeout = d
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	start := time.Now()
	switch err := a.Table.Drain(ctx, model, replica); {
	case errors.Is(err, ErrUnknownReplica):
		adminError(w, http.StatusNotFound, "drain: %v", err)
	case err != nil:
		adminError(w, http.StatusGatewayTimeout, "drain: %v", err)
	default:
		writeJSON(w, http.StatusOK, map[string]any{"model": model, "replica": replica, "drained": true, "waited_seconds": time.Since(start).Seconds()})
	}
}

func adminError(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, args...)})
}
