// Command router is tpdeploy's OpenAI-compatible front for a fleet: one endpoint for every
// model the fleet serves, each request routed by its body's model to the replica with the
// fewest requests outstanding, held while a model's only engine is being replaced. Its
// routes are pushed by the supervisors through its admin API (loopback or a unix socket);
// it keeps the last routes in its state file, so a restart serves them at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/tpdeploy/tpdeploy/internal/router"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], func(string) {})
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// run serves until ctx ends. ready is called with the API's and the admin's addresses once
// both listen (tests).
func run(ctx context.Context, args []string, ready func(string)) error {
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: router [flags]\n\nServes one OpenAI-compatible endpoint in front of every model tpdeploy deploys.\n\n")
		fs.PrintDefaults()
	}
	var (
		listen     = fs.String("listen", envOr("TPDEPLOY_ROUTER_LISTEN", ":8000"), "the OpenAI API's address (env TPDEPLOY_ROUTER_LISTEN)")
		admin      = fs.String("admin", envOr("TPDEPLOY_ROUTER_ADMIN", "unix:/run/tpdeploy/router.sock"), "the admin API (routes, drain, state, metrics): unix:PATH or a loopback HOST:PORT; it takes no credentials, so no other address is allowed (env TPDEPLOY_ROUTER_ADMIN)")
		stateFile  = fs.String("state", envOr("TPDEPLOY_ROUTER_STATE", ""), "keep the routes last pushed in this file and serve them at start, before the supervisors push again; written by the router, not by hand (env TPDEPLOY_ROUTER_STATE)")
		keyFile    = fs.String("api-key-file", envOr("TPDEPLOY_ROUTER_API_KEY_FILE", ""), "the router's own keys (one a line), each opening every model; a route's own key (its cluster's secrets.api_key, pushed with it) opens its model; empty: env TPDEPLOY_ROUTER_API_KEY, else only the routes' keys")
		upFile     = fs.String("upstream-key-file", envOr("TPDEPLOY_ROUTER_UPSTREAM_KEY_FILE", ""), "the key sent to a replica whose route carries none, in place of the client's; empty: env TPDEPLOY_ROUTER_UPSTREAM_KEY, else none")
		hold       = fs.Duration("hold", 60*time.Second, "how long a request waits for a replica of its model (a swap of its only engine) before 503")
		maxHeld    = fs.Int("max-held", 256, "requests held per model at most; more are answered 503 at once (0: none is held)")
		retryAfter = fs.Duration("retry-after", 5*time.Second, "the Retry-After of a 503")
		maxBody    = fs.Int64("max-body", 32<<20, "the largest request body in bytes (larger: 413)")
		logLevel   = fs.String("log-level", "info", "debug, info, warn or error")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	lvl, err := zapcore.ParseLevel(*logLevel)
	if err != nil {
		return fmt.Errorf("--log-level %q: %w", *logLevel, err)
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	z, err := zc.Build()
	if err != nil {
		return err
	}
	defer func() { _ = z.Sync() }()
	keys, err := readKeys(*keyFile, "TPDEPLOY_ROUTER_API_KEY", "--api-key-file")
	if err != nil {
		return err
	}
	upstream, err := readKeys(*upFile, "TPDEPLOY_ROUTER_UPSTREAM_KEY", "--upstream-key-file")
	if err != nil {
		return err
	}
	if len(upstream) > 1 {
		return fmt.Errorf("--upstream-key-file %s: %d keys, the engines take one", *upFile, len(upstream))
	}
	table := router.NewTable(*maxHeld)
	if *stateFile != "" {
		switch b, err := os.ReadFile(*stateFile); {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return fmt.Errorf("--state: %w", err)
		default:
			routes, unconfirmed, err := router.ParseState(b)
			if err == nil {
				err = table.Set(routes)
			}
			if err != nil {
				return fmt.Errorf("--state %s: %w", *stateFile, err)
			}
			z.Info("routes from the state file", zap.String("file", *stateFile), zap.Strings("models", routes.IDs()))
			if unconfirmed > 0 {
				z.Warn("the state file is older than per-route API keys: its keyless replicas serve no one until their clusters push their routes again (redeploy them)",
					zap.String("file", *stateFile), zap.Int("replicas", unconfirmed))
			}
		}
	}
	if len(keys) == 0 {
		z.Info("no router key: a model is open through " + *listen + " unless its route carries its cluster's key")
	}
	metrics := router.NewMetrics(table)
	opt := router.Options{Keys: keys, Hold: *hold, MaxHeld: *maxHeld, RetryAfter: *retryAfter, MaxBody: *maxBody, Metrics: metrics}
	if *maxHeld <= 0 {
		opt.MaxHeld = -1 // hold none: answer 503 at once
	}
	if len(upstream) == 1 {
		opt.UpstreamKey = upstream[0]
	}
	adminLn, err := listenAdmin(*admin)
	if err != nil {
		return err
	}
	apiLn, err := net.Listen("tcp", *listen)
	if err != nil {
		adminLn.Close()
		return fmt.Errorf("--listen: %w", err)
	}
	adm := &router.Admin{Table: table, Metrics: metrics}
	if *stateFile != "" {
		adm.OnSet = func(r router.Routes) error { return writeState(*stateFile, table.Routes()) }
	}
	api := &http.Server{Handler: router.NewHandler(table, opt), ReadHeaderTimeout: 10 * time.Second}
	adminSrv := &http.Server{Handler: adm, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- api.Serve(apiLn) }()
	go func() { errc <- adminSrv.Serve(adminLn) }()
	z.Info("router serving", zap.String("api", apiLn.Addr().String()), zap.String("admin", *admin), zap.Strings("models", table.Routes().IDs()))
	ready(apiLn.Addr().String() + " " + adminLn.Addr().String())
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	// Requests in flight (streams) get a while to end; held ones are answered when the
	// server closes.
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = errors.Join(api.Shutdown(sctx), adminSrv.Shutdown(sctx))
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(serveErr, err)
	}
	return err
}

// readKeys reads one key a line from file, else the env variable's one key.
func readKeys(file, env, flagName string) ([]string, error) {
	var raw string
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flagName, err)
		}
		raw = string(b)
	} else {
		raw = os.Getenv(env)
	}
	var keys []string
	for _, l := range strings.Split(raw, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			keys = append(keys, l)
		}
	}
	if file != "" && len(keys) == 0 {
		return nil, fmt.Errorf("%s %s: no key in it", flagName, file)
	}
	return keys, nil
}

// listenAdmin listens on a unix socket (mode 0600 in a directory made 0700, a stale one replaced) or a loopback
// TCP address; anything else is refused, since the admin API takes no credentials.
func listenAdmin(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if !filepath.IsAbs(path) {
			return nil, fmt.Errorf("--admin %q: the socket's path must be absolute", addr)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("--admin: %w", err)
		}
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(path) // a previous router's socket
		}
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("--admin: %w", err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			ln.Close()
			return nil, fmt.Errorf("--admin: %w", err)
		}
		return ln, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--admin %q: %v (give unix:PATH or 127.0.0.1:PORT)", addr, err)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("--admin %q: not loopback; the admin API takes no credentials, so it listens on a unix socket or 127.0.0.1 only", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--admin: %w", err)
	}
	return ln, nil
}

// writeState replaces the state file atomically (a crash leaves the old routes or the new).
func writeState(path string, r router.Routes) error {
	b, err := router.MarshalState(r)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".routes-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
