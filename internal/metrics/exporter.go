package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
)

// DurationBuckets are the histogram bounds, in seconds, of every duration: the SDK's
// latencies (milliseconds to seconds) and tpdeploy's steps (seconds to the 30 minutes a
// large model may take to load).
var DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600}

// Exporter turns the SDK's metrics and tpdeploy's into Prometheus metrics.
type Exporter struct {
	// Handler is the SDK metrics handler to give the Temporal client
	// (client.Options.MetricsHandler); tpdeploy's Recorders write through it too.
	Handler  client.MetricsHandler
	registry *prometheus.Registry
	provider *sdkmetric.MeterProvider
}

// NewExporter makes an exporter with its own registry (plus the Go runtime's and the
// process's collectors).
func NewExporter() (*Exporter, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	seconds := sdkmetric.NewView(
		sdkmetric.Instrument{Name: "*", Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: DurationBuckets}},
	)
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithView(seconds))
	handler := temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter:                provider.Meter("tpdeploy"),
		UseMonotonicCounters: true,
		OnError:              otel.Handle, // a bad instrument is logged by otel, never a panic in a worker
	})
	return &Exporter{Handler: handler, registry: reg, provider: provider}, nil
}

// Agent series (Prometheus conventions: an info metric is a gauge of 1 whose labels carry
// the information; an up gauge is 1 or 0), present from the agent's start, before any
// deploy records tpdeploy's other instruments.
const (
	// BuildInfo is tpdeploy_build_info{version, revision, goversion} 1.
	BuildInfo = "tpdeploy_build_info"
	// AgentUp is tpdeploy_agent_up{node} 1 while the agent's worker polls Temporal (what
	// /healthz answers 200 for), else 0.
	AgentUp = "tpdeploy_agent_up"
)

// RegisterAgent adds the node agent's build info and its up gauge, which follows live.
func (e *Exporter) RegisterAgent(node string, live *Liveness) error {
	version, revision := "(devel)", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: BuildInfo, Help: "tpdeploy's build: version, VCS revision and Go version, as labels.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()}})
	info.Set(1)
	up := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: AgentUp, Help: "1 while the node agent's worker polls Temporal, else 0.",
		ConstLabels: prometheus.Labels{"node": node}}, func() float64 {
		if ok, _ := live.Live(); ok {
			return 1
		}
		return 0
	})
	return errors.Join(e.registry.Register(info), e.registry.Register(up))
}

// HTTPHandler serves the metrics in Prometheus' text format.
func (e *Exporter) HTTPHandler() http.Handler {
	return promhttp.HandlerFor(e.registry, promhttp.HandlerOpts{})
}

// Shutdown stops the meter provider.
func (e *Exporter) Shutdown(ctx context.Context) error {
	return e.provider.Shutdown(ctx)
}

// Liveness answers /healthz: 200 while live (the worker's pollers run), 503 otherwise,
// with the reason as the body.
type Liveness struct {
	mu     sync.Mutex
	live   bool
	detail string
}

// Set records whether the agent is live and why.
func (l *Liveness) Set(live bool, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live, l.detail = live, detail
}

// Live reports the state and its reason.
func (l *Liveness) Live() (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.live, l.detail
}

func (l *Liveness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	live, detail := l.Live()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !live {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not live:", detail)
		return
	}
	fmt.Fprintln(w, "ok:", detail)
}

// Server is the agent's HTTP endpoint: /metrics and /healthz.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// Serve listens on addr (e.g. ":9464", or "127.0.0.1:0" for any free port) and serves
// e's metrics on /metrics and live on /healthz until Shutdown.
func Serve(addr string, e *Exporter, live *Liveness) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", e.HTTPHandler())
	mux.Handle("/healthz", live)
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln: ln, done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops the server, letting requests in flight finish until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if serveErr := <-s.done; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}

// Host memory gauges, per node (label node), as the agent's memory guard samples them
// every second (activities.GuardMemory): what is available now, the lowest seen while the
// node's engines last ran (kept after they stop; 0 before any ran), the guard's
// floor and the node's total (the memory cgroup's limit when the node is a container).
const (
	HostMemoryAvailable = "tpdeploy_host_memory_available_bytes"
	HostMemoryLowest    = "tpdeploy_host_memory_lowest_bytes"
	HostMemoryFloor     = "tpdeploy_host_memory_floor_bytes"
	HostMemoryTotal     = "tpdeploy_host_memory_total_bytes"
)

// HostMemory is the guard's last sample, which the host memory gauges read. A nil
// HostMemory records nothing (an agent without --metrics-addr).
type HostMemory struct {
	available, lowest, floor, total atomic.Int64
}

// Set records one sample.
func (m *HostMemory) Set(total, available, lowest, floor int64) {
	if m == nil {
		return
	}
	m.total.Store(total)
	m.available.Store(available)
	m.lowest.Store(lowest)
	m.floor.Store(floor)
}

// RegisterHostMemory adds node's host memory gauges and returns what sets them.
func (e *Exporter) RegisterHostMemory(node string) (*HostMemory, error) {
	m := &HostMemory{}
	var errs []error
	for _, g := range []struct {
		name, help string
		v          *atomic.Int64
	}{
		{HostMemoryAvailable, "Host memory available now (MemAvailable, or what the node's memory cgroup may still take), in bytes.", &m.available},
		{HostMemoryLowest, "The lowest host memory available seen while the node's engine containers last ran (kept after they stop; 0 before any ran), in bytes.", &m.lowest},
		{HostMemoryFloor, "The memory guard's floor: below it available, the agent stops the node's engine containers, in bytes.", &m.floor},
		{HostMemoryTotal, "The node's memory (MemTotal, or its memory cgroup's limit), in bytes.", &m.total},
	} {
		v := g.v
		errs = append(errs, e.registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help,
			ConstLabels: prometheus.Labels{"node": node}}, func() float64 { return float64(v.Load()) })))
	}
	return m, errors.Join(errs...)
}
