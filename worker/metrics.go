package worker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The outcomes of a handled message, the values of the label "outcome".
const (
	outcomeAcked        = "acked"
	outcomeRetried      = "retried"
	outcomeDeadLettered = "dead_lettered"
	outcomeHandedBack   = "handed_back"
	outcomeLost         = "lost" // the ack or nack was refused: the lease was lost
)

// metrics are a Worker's Prometheus collectors; without a registerer they count nowhere.
type metrics struct {
	handled  *prometheus.CounterVec   // topic, outcome
	failures *prometheus.CounterVec   // topic, kind
	inFlight *prometheus.GaugeVec     // topic
	duration *prometheus.HistogramVec // topic
	extends  *prometheus.CounterVec   // topic
	errors   *prometheus.CounterVec   // topic, call
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_worker_handled_total",
			Help: "Messages whose handler returned (or was abandoned at shutdown), by outcome: acked, retried, dead_lettered, handed_back, lost.",
		}, []string{"topic", "outcome"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_worker_failures_total",
			Help: "Handlers that failed, by kind: error, panic, permanent.",
		}, []string{"topic", "kind"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tock_worker_in_flight",
			Help: "Handlers running.",
		}, []string{"topic"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tock_worker_handler_duration_seconds",
			Help:    "Time handlers took, successful or not.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 12),
		}, []string{"topic"}),
		extends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_worker_extends_total",
			Help: "Leases extended while their handlers ran.",
		}, []string{"topic"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_worker_errors_total",
			Help: "Calls to the engine that failed, by call: receive, ack, nack, extend.",
		}, []string{"topic", "call"}),
	}
	if reg != nil {
		reg.MustRegister(m.handled, m.failures, m.inFlight, m.duration, m.extends, m.errors)
	}
	return m
}
