package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/tockwheel/tock/queue"
)

// unmatchedRoute is the route label of requests whose path and method no
// route has: 404s and 405s, and requests refused before routing that
// would not have matched either.
const unmatchedRoute = "unmatched"

// metrics are a Server's Prometheus collectors, on a registry of its own so
// that two Servers in one process (as in tests) do not collide.
type metrics struct {
	reg        *prometheus.Registry
	puts       prometheus.Counter
	deliveries prometheus.Counter
	acks       prometheus.Counter
	nacks      prometheus.Counter
	extends    prometheus.Counter
	cancels    prometheus.Counter
	lateness   *prometheus.HistogramVec
	topics     *topicLabels
	writes     *prometheus.HistogramVec
	requests   *prometheus.CounterVec
	inFlight   *prometheus.GaugeVec
	duration   *prometheus.HistogramVec
	actions    *prometheus.CounterVec
	moved      *prometheus.CounterVec
	log        *slog.Logger

	// routes holds the collectors of each route pattern, and of
	// unmatchedRoute under "". It is written only by New.
	routes map[string]*routeMetrics
}

// routeMetrics are the collectors of one route, looked up once.
type routeMetrics struct {
	name     string
	matched  bool // a route of the mux, not unmatchedRoute
	inFlight prometheus.Gauge
	duration prometheus.Observer
	requests *prometheus.CounterVec
	codes    sync.Map // status code (int) -> prometheus.Counter
}

func newMetrics(engine queue.Engine, conns *connLimiter, log *slog.Logger, maxTopics int, now func() time.Time) *metrics {
	m := &metrics{
		log: log,
		reg: prometheus.NewRegistry(),
		puts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_puts_total", Help: "Messages accepted by puts and batch puts, retried puts of a waiting message included.",
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
		extends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_extends_total", Help: "Leases extended.",
		}),
		cancels: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_cancels_total", Help: "Waiting messages cancelled.",
		}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tock_delivery_lateness_seconds",
			Help: "Time from a message's due time (the later of its deliver_at and its put) to its first delivery " +
				"to a consumer, by topic: the queue's own lateness plus any time the message waited for a consumer to ask.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60,
				300, 1800, 3600},
		}, []string{"topic"}),
		writes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tock_store_write_duration_seconds",
			Help: "Time the engine's writes took, by operation: for the embedded engine mostly the wait for their group-committed fsync.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512,
				1, 2},
		}, []string{"op"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_http_requests_total",
			Help: "HTTP requests by route and status code, refused ones (401, 403, 404, 405, 415, ...) included; " +
				"route \"unmatched\" counts paths no route has.",
		}, []string{"route", "code"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tock_http_requests_in_flight", Help: "HTTP requests being served, by route.",
		}, []string{"route"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tock_http_request_duration_seconds", Help: "HTTP request latency by route, long polls included.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_admin_actions_total",
			Help: "Admin actions done through the API, by action: deliver (now), requeue, purge, pause, resume, limit.",
		}, []string{"action"}),
		moved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_admin_messages_moved_total",
			Help: "Messages that admin actions moved, by action: made due at once (deliver), requeued (requeue) or removed (purge).",
		}, []string{"action"}),
		routes: map[string]*routeMetrics{},
	}
	m.topics = newTopicLabels(maxTopics, m.lateness)
	// Export every action from the start, at zero, so that rates and alerts see the first one.
	for _, a := range []string{"deliver", "requeue", "purge", "pause", "resume", "limit"} {
		m.actions.WithLabelValues(a)
	}
	for _, a := range []string{"deliver", "requeue", "purge"} {
		m.moved.WithLabelValues(a)
	}
	m.reg.MustRegister(m.puts, m.deliveries, m.acks, m.nacks, m.extends, m.cancels, m.lateness, m.writes, m.requests, m.inFlight, m.duration,
		m.actions, m.moved,
		engineCollector{engine},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tock_http_connections", Help: "Connections open to Serve.",
		}, func() float64 { return float64(conns.stats().Open) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tock_http_connections_shed_total",
			Help: "Connections to Serve closed at the connection limit to make room for new ones: the idlest, or the slowest to send a request.",
		}, func() float64 { return float64(conns.shed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tock_http_connections_refused_total",
			Help: "Connections to Serve turned away at the connection limit because every open one was serving a request.",
		}, func() float64 { return float64(conns.refused.Load()) }),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if r, ok := engine.(queue.Reporter); ok {
		m.reg.MustRegister(reporterCollector{r})
	}
	if sc, ok := engine.(queue.Scheduler); ok {
		m.reg.MustRegister(schedulerCollector{sc})
	}
	if a, ok := engine.(queue.Admin); ok {
		m.reg.MustRegister(&topicCollector{admin: a, labels: m.topics, now: now, acc: map[string]*topicCounts{OtherTopic: {}}})
	}
	m.addRoute("")
	return m
}

// addRoute creates the collectors of the route pattern ("" for
// unmatchedRoute).
func (m *metrics) addRoute(pattern string) {
	name := pattern
	if name == "" {
		name = unmatchedRoute
	}
	m.routes[pattern] = &routeMetrics{
		name:     name,
		matched:  pattern != "",
		inFlight: m.inFlight.WithLabelValues(name),
		duration: m.duration.WithLabelValues(name),
		requests: m.requests,
	}
}

// routeOf returns the collectors of the route the mux matched, pattern,
// and those of unmatchedRoute for anything else: the mux reports the
// cleaned path of a redirect as its pattern, which must not become a
// label.
func (m *metrics) routeOf(pattern string) *routeMetrics {
	if rm, ok := m.routes[pattern]; ok {
		return rm
	}
	return m.routes[""]
}

// count counts one answer with status.
func (rm *routeMetrics) count(status int) {
	if c, ok := rm.codes.Load(status); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := rm.requests.WithLabelValues(rm.name, strconv.Itoa(status))
	rm.codes.Store(status, c)
	c.Inc()
}

// handler serves the metrics. A collector that fails (the engine's stats
// while it is unreachable) is left out of the answer, logged, and counted in
// promhttp_metric_handler_errors_total; the others are served.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:      m.reg,
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      scrapeLog{m.log},
	})
}

// scrapeLog logs promhttp's errors as warnings.
type scrapeLog struct{ log *slog.Logger }

func (l scrapeLog) Println(v ...any) {
	l.log.Warn("metrics scrape", "err", strings.TrimSpace(fmt.Sprintln(v...)))
}

// scrapeTimeout bounds the engine's calls made for one scrape.
const scrapeTimeout = 5 * time.Second

// engineCollector reports the engine's gauges, asking it for its stats once
// per scrape.
type engineCollector struct{ engine queue.Engine }

var (
	scheduledDesc = prometheus.NewDesc("tock_scheduled_messages", "Messages waiting for their due time.", nil, nil)
	dueDesc       = prometheus.NewDesc("tock_due_messages", "Messages due and waiting for a consumer, dead letters included.", nil, nil)
	leasedDesc    = prometheus.NewDesc("tock_leased_messages", "Messages delivered and not yet acked, nacked or expired.", nil, nil)
	dueLateDesc   = prometheus.NewDesc("tock_due_lateness_seconds",
		"Lateness inside the engine: how long after their due time messages became available to receive, "+
			"without any wait for a consumer. Quantiles are over the engine's recent messages (the last 4096 for delayq); "+
			"_count and _sum cover every message since the engine started.",
		nil, nil)
)

func (c engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- scheduledDesc
	ch <- dueDesc
	ch <- leasedDesc
	ch <- dueLateDesc
}

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	st, err := c.engine.Stats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(scheduledDesc, fmt.Errorf("engine stats: %w", err))
		return
	}
	ch <- prometheus.MustNewConstMetric(scheduledDesc, prometheus.GaugeValue, float64(st.Scheduled))
	ch <- prometheus.MustNewConstMetric(dueDesc, prometheus.GaugeValue, float64(st.Due))
	ch <- prometheus.MustNewConstMetric(leasedDesc, prometheus.GaugeValue, float64(st.Leased))
	ch <- prometheus.MustNewConstSummary(dueLateDesc, st.Lateness.Count, seconds(st.Lateness.Sum), map[float64]float64{
		0.5: seconds(st.Lateness.P50), 0.99: seconds(st.Lateness.P99), 1: seconds(st.Lateness.Max),
	})
}

// reporterCollector exports the engine's own measurements, each [queue.Metric]
// as tock_ and its name. It describes nothing ahead (an unchecked
// collector): the engine says what it has at each scrape.
type reporterCollector struct{ r queue.Reporter }

func (reporterCollector) Describe(chan<- *prometheus.Desc) {}

func (c reporterCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	ms, err := c.r.Metrics(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(prometheus.NewDesc("tock_engine_metrics", "The engine's own metrics.", nil, nil),
			fmt.Errorf("engine metrics: %w", err))
		return
	}
	for _, m := range ms {
		pm, err := constMetric(m)
		if err != nil {
			pm = prometheus.NewInvalidMetric(prometheus.NewDesc("tock_"+m.Name, m.Help, nil, nil),
				fmt.Errorf("engine metric %q: %w", m.Name, err))
		}
		ch <- pm
	}
}

// constMetric returns m as a Prometheus metric named tock_ and m's name.
func constMetric(m queue.Metric) (prometheus.Metric, error) {
	desc := prometheus.NewDesc("tock_"+m.Name, m.Help, nil, nil)
	switch m.Kind {
	case queue.Counter:
		return prometheus.NewConstMetric(desc, prometheus.CounterValue, m.Value)
	case queue.Gauge:
		return prometheus.NewConstMetric(desc, prometheus.GaugeValue, m.Value)
	case queue.Histogram:
		buckets := make(map[float64]uint64, len(m.Buckets))
		for _, b := range m.Buckets {
			buckets[b.UpperBound] = b.Count
		}
		return prometheus.NewConstHistogram(desc, m.Count, m.Sum, buckets)
	}
	return nil, fmt.Errorf("unknown kind %d", m.Kind)
}

// seconds converts d to seconds in one division, so that a whole number of
// microseconds comes out as the nearest float64 to its decimal value:
// d.Seconds() adds the fractional part to the whole seconds, and labels
// 1.6384 s as le="1.6383999999999999".
func seconds(d time.Duration) float64 { return float64(d) / float64(time.Second) }

// admin counts one admin action that moved n messages.
func (m *metrics) admin(action string, n int) {
	m.actions.WithLabelValues(action).Inc()
	if n > 0 {
		m.moved.WithLabelValues(action).Add(float64(n))
	}
}

// wrote records the duration of an engine write that began at start.
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
