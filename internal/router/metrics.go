package router

import (
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The router's Prometheus series. Requests are counted per model and replica; the table's
// state (outstanding, available, held) is read at each scrape, so it is never stale.
const (
	// MetricRequests counts requests answered by an engine (or cut): labels model, replica,
	// code (the HTTP status, 502 when the engine gave none, 499 when the client left,
	// aborted when a stream broke off). tpdeploy_router_requests_total.
	MetricRequests = "tpdeploy_router_requests_total"
	// MetricDuration is the time from the router's pick to the response's end (a stream's
	// last event): labels model, replica. A histogram.
	MetricDuration = "tpdeploy_router_request_duration_seconds"
	// MetricRejected counts requests the router answered itself: labels model (empty when
	// the body named none or a model the router does not front, so that clients cannot make
	// series of their own) and reason (unknown_model, queue_full, hold_timeout,
	// body_too_large, bad_json, no_model, unauthorized, unconfirmed).
	MetricRejected = "tpdeploy_router_rejected_total"
	// MetricHoldDuration is how long held requests waited for a replica: label model.
	MetricHoldDuration = "tpdeploy_router_hold_duration_seconds"
	// MetricUpstreamErrors counts tries that got no response from an engine: labels model,
	// replica.
	MetricUpstreamErrors = "tpdeploy_router_upstream_errors_total"
	// MetricOutstanding is a replica's requests in flight; MetricAvailable is 1 when it may
	// take new ones (not down, not draining, not ejected); MetricHeld is a model's requests
	// held now.
	MetricOutstanding = "tpdeploy_router_outstanding"
	MetricAvailable   = "tpdeploy_router_replica_available"
	MetricHeld        = "tpdeploy_router_held"
)

// requestBuckets span a cached reply (milliseconds) to a long generation (minutes).
var requestBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// Metrics is the router's registry.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	rejects  *prometheus.CounterVec
	hold     *prometheus.HistogramVec
	upstream *prometheus.CounterVec
}

// NewMetrics registers the router's series, with the table's state read at each scrape.
func NewMetrics(t *Table) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRequests,
			Help: "Requests the router sent to an engine, by model, replica and HTTP status."}, []string{"model", "replica", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricDuration, Buckets: requestBuckets,
			Help: "Time from the router's pick of a replica to the response's end."}, []string{"model", "replica"}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRejected,
			Help: "Requests the router answered itself, by model and reason."}, []string{"model", "reason"}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricHoldDuration, Buckets: requestBuckets,
			Help: "How long held requests waited for a replica of their model."}, []string{"model"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricUpstreamErrors,
			Help: "Tries that got no response from an engine, by model and replica."}, []string{"model", "replica"}),
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.duration, m.rejects, m.hold, m.upstream, tableCollector{t})
	return m
}

// HTTPHandler serves the metrics in Prometheus' text format.
func (m *Metrics) HTTPHandler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *Metrics) done(model, replica, code string, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(model, replica, code).Inc()
	m.duration.WithLabelValues(model, replica).Observe(d.Seconds())
}

func (m *Metrics) rejected(model, reason string) {
	if m != nil {
		m.rejects.WithLabelValues(model, reason).Inc()
	}
}

// held records a wait for a replica (none when one was free at once).
func (m *Metrics) held(model string, waited time.Duration, err error) {
	if m == nil || (waited == 0 && err == nil) || errors.Is(err, ErrUnknownModel) || errors.Is(err, ErrQueueFull) || errors.Is(err, ErrUnconfirmed) {
		return
	}
	m.hold.WithLabelValues(model).Observe(waited.Seconds())
}

func (m *Metrics) upstreamError(model, replica string) {
	if m != nil {
		m.upstream.WithLabelValues(model, replica).Inc()
	}
}

var (
	descOutstanding = prometheus.NewDesc(MetricOutstanding, "Requests in flight on a replica.", []string{"model", "replica"}, nil)
	descAvailable   = prometheus.NewDesc(MetricAvailable, "1 when the replica may take new requests (not down, draining or ejected), else 0.", []string{"model", "replica"}, nil)
	descHeld        = prometheus.NewDesc(MetricHeld, "Requests held now for want of a replica of the model.", []string{"model"}, nil)
)

type tableCollector struct{ t *Table }

func (c tableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descOutstanding
	ch <- descAvailable
	ch <- descHeld
}

func (c tableCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.t.State() {
		ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(m.Held), m.ID)
		for _, r := range m.Replicas {
			ch <- prometheus.MustNewConstMetric(descOutstanding, prometheus.GaugeValue, float64(r.Outstanding), m.ID, r.Name)
			avail := 0.0
			if r.Available {
				avail = 1
			}
			ch <- prometheus.MustNewConstMetric(descAvailable, prometheus.GaugeValue, avail, m.ID, r.Name)
		}
	}
}
