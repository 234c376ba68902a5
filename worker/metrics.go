package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/metrics"
)

// The metrics endpoint (/metrics, /healthz) asks for no credentials and names the node's
// clusters, task queues and step failures, so where it listens is the operator's explicit
// choice: an address with no host (":9464") listens on loopback only, and every interface
// (0.0.0.0, ::, or a name that resolves to them) only with --metrics-all-interfaces.

// flagMetricsAll is the flag that allows the all-interfaces bind, as refusals name it.
const flagMetricsAll = "--metrics-all-interfaces"

// metricsListen is where --metrics-addr listens, and a note for the log when that is not
// literally what was given (a port alone means loopback).
func metricsListen(addr string, allInterfaces bool) (listen, note string, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", fmt.Errorf("--metrics-addr %q: %v (give HOST:PORT, e.g. 10.0.0.11:9464, this node's management address)", addr, err)
	}
	switch ip, perr := netip.ParseAddr(host); {
	case host == "" && allInterfaces:
		return addr, "every interface (" + flagMetricsAll + ")", nil
	case host == "":
		return net.JoinHostPort("127.0.0.1", port), fmt.Sprintf("--metrics-addr %s names no host: listening on loopback only; give this node's management address (e.g. 10.0.0.11:%s) to be scraped from elsewhere", addr, port), nil
	case perr == nil && ip.IsUnspecified() && !allInterfaces:
		return "", "", everyInterface(addr)
	}
	return addr, "", nil
}

func everyInterface(addr string) error {
	return fmt.Errorf("--metrics-addr %s listens on every interface, and /metrics and /healthz ask for no credentials: give this node's management address (e.g. 10.0.0.11:9464) or 127.0.0.1:9464, or add %s (env TPDEPLOY_METRICS_ALL_INTERFACES=true) to mean every interface", addr, flagMetricsAll)
}

// serveMetrics starts the agent's /metrics and /healthz endpoint where metricsListen
// says; stop ends it. A name that resolved to every interface is refused as 0.0.0.0 is.
func serveMetrics(addr string, allInterfaces bool, node string, live *metrics.Liveness, z *zap.Logger) (exp *metrics.Exporter, stop func(), err error) {
	listen, note, err := metricsListen(addr, allInterfaces)
	if err != nil {
		return nil, nil, err
	}
	exp, err = metrics.NewExporter()
	if err != nil {
		return nil, nil, err
	}
	if err := exp.RegisterAgent(node, live); err != nil {
		return nil, nil, err
	}
	srv, err := metrics.Serve(listen, exp, live)
	if err != nil {
		return nil, nil, err
	}
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := errors.Join(srv.Shutdown(ctx), exp.Shutdown(ctx)); err != nil {
			z.Warn("metrics endpoint shutdown", zap.Error(err))
		}
	}
	if bound, err := netip.ParseAddrPort(srv.Addr()); err == nil && bound.Addr().IsUnspecified() {
		if !allInterfaces {
			stop()
			return nil, nil, everyInterface(addr)
		}
		z.Warn("metrics endpoint on every interface: anyone who reaches this node can read /metrics and /healthz", zap.String("addr", srv.Addr()), zap.String("why", note))
	} else if note != "" {
		z.Warn("metrics endpoint", zap.String("addr", srv.Addr()), zap.String("note", note))
	}
	z.Info("metrics endpoint", zap.String("metrics", "http://"+srv.Addr()+"/metrics"), zap.String("healthz", "http://"+srv.Addr()+"/healthz"))
	return exp, stop, nil
}
