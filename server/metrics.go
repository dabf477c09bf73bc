package server

import (
	dto "github.com/prometheus/client_model/go"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are a Server's Prometheus collectors, on a registry of its own so
// that two Servers in one process (as in tests) do not collide.
type metrics struct {
	reg        *prometheus.Registry
	puts       prometheus.Counter
	deliveries prometheus.Counter
	acks       prometheus.Counter
	nacks      prometheus.Counter
	cancels    prometheus.Counter
	lateness   prometheus.Histogram
	writes     *prometheus.HistogramVec
	requests   *prometheus.CounterVec
	inFlight   *prometheus.GaugeVec
	duration   *prometheus.HistogramVec
}

func newMetrics(store Store) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		puts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_puts_total", Help: "Messages stored by puts and batch puts.",
		}),
		deliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_deliveries_total", Help: "Messages delivered to consumers, redeliveries included.",
		}),
		acks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_acks_total", Help: "Receipts acked.",
		}),
		nacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_nacks_total", Help: "Receipts nacked.",
		}),
		cancels: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_cancels_total", Help: "Pending messages cancelled.",
		}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tock_delivery_lateness_seconds",
			Help: "Time from a message's deliver_at to its first delivery to a consumer.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60,
				300},
		}),
		writes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tock_store_write_duration_seconds",
			Help: "Time durable writes took in the store, by operation: mostly the wait for their group-committed fsync.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512,
				1, 2},
		}, []string{"op"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_http_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tock_http_requests_in_flight", Help: "HTTP requests being served, by route.",
		}, []string{"route"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tock_http_request_duration_seconds", Help: "HTTP request latency by route, long polls included.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
	}
	m.reg.MustRegister(m.puts, m.deliveries, m.acks, m.nacks, m.cancels, m.lateness, m.writes, m.requests, m.inFlight, m.duration,
		storeCollector{store},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// instrument counts and times requests to the route named by pattern.
func (m *metrics) instrument(pattern string, h http.Handler) http.Handler {
	dur := m.duration.WithLabelValues(pattern)
	inFlight := m.inFlight.WithLabelValues(pattern)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Inc()
		defer inFlight.Dec()
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		dur.Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(pattern, strconv.Itoa(sw.status)).Inc()
	})
}

// statusWriter remembers the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// storeCollector reports the store's gauges, asking it for its stats once
// per scrape.
type storeCollector struct{ store Store }

var (
	pendingDesc = prometheus.NewDesc("tock_pending_messages", "Messages stored and not yet due.", nil, nil)
	dueDesc     = prometheus.NewDesc("tock_due_messages", "Messages due and waiting for a consumer.", nil, nil)
	leasedDesc  = prometheus.NewDesc("tock_leased_messages", "Messages delivered and not yet acked or expired.", nil, nil)
	fsyncDesc   = prometheus.NewDesc("tock_fsync_duration_seconds",
		"Latency of the store's fsyncs: one per group commit of durable writes (none with -nosync), one per full log segment.", nil, nil)
	dueLateDesc = prometheus.NewDesc("tock_due_lateness_seconds",
		"Recent lateness inside the store: how long after deliver_at messages became available to receive.",
		[]string{"quantile"}, nil)
)

func (c storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- dueDesc
	ch <- leasedDesc
	ch <- fsyncDesc
	ch <- dueLateDesc
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.store.Stats()
	ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(st.Pending))
	ch <- prometheus.MustNewConstMetric(dueDesc, prometheus.GaugeValue, float64(st.Due))
	ch <- prometheus.MustNewConstMetric(leasedDesc, prometheus.GaugeValue, float64(st.Leased))
	for q, d := range map[string]time.Duration{"0.5": st.LatenessP50, "0.99": st.LatenessP99, "1": st.LatenessMax} {
		ch <- prometheus.MustNewConstMetric(dueLateDesc, prometheus.GaugeValue, d.Seconds(), q)
	}
	if st.SyncBuckets != nil {
		ch <- prometheus.MustNewConstHistogram(fsyncDesc, st.Syncs, st.SyncTime.Seconds(), st.SyncBuckets)
	}
}

// wrote records the duration of a store write that began at start.
func (m *metrics) wrote(op string, start time.Time) {
	m.writes.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// counterValue reads c, so that the totals of /v1/stats are the counters /metrics exports rather
// than a second count kept beside them.
func counterValue(c prometheus.Counter) uint64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return uint64(m.GetCounter().GetValue())
}
