package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
)

// openEngine opens the delayq engine in a fresh directory; the test closes
// it unless it did so itself.
func openEngine(t *testing.T) queue.Engine {
	t.Helper()
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	e := q
	t.Cleanup(func() { e.Close() })
	return e
}

// flakyEngine is the delayq engine with Ready, Stats and Metrics failing
// with err while it is set: an engine whose storage is unreachable.
type flakyEngine struct {
	queue.Engine
	err atomic.Pointer[error]
}

func (f *flakyEngine) failing() error {
	if err := f.err.Load(); err != nil {
		return *err
	}
	return nil
}

func (f *flakyEngine) Ready(ctx context.Context) error {
	if err := f.failing(); err != nil {
		return err
	}
	return f.Engine.Ready(ctx)
}

func (f *flakyEngine) Stats(ctx context.Context) (queue.Stats, error) {
	if err := f.failing(); err != nil {
		return queue.Stats{}, err
	}
	return f.Engine.Stats(ctx)
}

func (f *flakyEngine) Metrics(ctx context.Context) ([]queue.Metric, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	ms, err := f.Engine.(queue.Reporter).Metrics(ctx)
	return append(ms,
		queue.Metric{Name: "damaged_records_total", Help: "Damaged records found.", Kind: queue.Counter, Value: 3},
		queue.Metric{Name: "open_segments", Help: "Log segments open.", Kind: queue.Gauge, Value: 2},
		queue.Metric{Name: "script_duration_seconds", Help: "Latency of scripts.", Kind: queue.Histogram, Count: 5, Sum: 0.0125,
			Buckets: []queue.Bucket{{UpperBound: 0.001, Count: 1}, {UpperBound: 0.01, Count: 4}}},
	), err
}

// TestReadyzFollowsTheEngine checks that /readyz asks the engine: 200 while
// it is ready, 503 with its reason while it is unavailable and once it is
// closed.
func TestReadyzFollowsTheEngine(t *testing.T) {
	e := &flakyEngine{Engine: openEngine(t)}
	ts := newHTTPTestServer(t, New(e))
	if r := call(t, ts, "GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("readyz of a ready engine: %d %s", r.status, r.body)
	}
	down := fmt.Errorf("redis: connection refused: %w", queue.ErrUnavailable)
	e.err.Store(&down)
	r := call(t, ts, "GET", "/readyz", "")
	if r.status != 503 || r.errorCode(t) != api.CodeUnavailable || !strings.Contains(r.errorMsg(t), "connection refused") {
		t.Fatalf("readyz of an unavailable engine: %d %s; want 503 saying why", r.status, r.body)
	}
	e.err.Store(nil)
	if r := call(t, ts, "GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("readyz once the engine is back: %d %s", r.status, r.body)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	r = call(t, ts, "GET", "/readyz", "")
	if r.status != 503 || !strings.Contains(r.errorMsg(t), "closed") {
		t.Fatalf("readyz of a closed engine: %d %s; want 503 saying it is closed", r.status, r.body)
	}
	if r := call(t, ts, "POST", "/v1/topics/t/messages", `{}`); r.status != 503 {
		t.Fatalf("put on a closed engine: %d %s; want 503", r.status, r.body)
	}
	if r := call(t, ts, "GET", "/healthz", ""); r.status != 200 {
		t.Fatalf("healthz of a server whose engine is closed: %d %s; want 200, the process is alive", r.status, r.body)
	}
}

// TestEngineMetricsAreExported checks that every metric of an engine that
// is a queue.Reporter is exported as tock_ and its name, of its kind, and
// that the exposition stays lint-clean with them.
func TestEngineMetricsAreExported(t *testing.T) {
	e := &flakyEngine{Engine: openEngine(t)}
	s := New(e)
	ts := newHTTPTestServer(t, s)
	call(t, ts, "POST", "/v1/topics/m/messages", `{}`)
	r := call(t, ts, "GET", "/metrics", "")
	for _, want := range []string{
		"# TYPE tock_damaged_records_total counter", "tock_damaged_records_total 3",
		"# TYPE tock_corrupt_records_total counter", "# TYPE tock_log_bytes gauge",
		"# TYPE tock_open_segments gauge", "tock_open_segments 2",
		"# TYPE tock_script_duration_seconds histogram", `tock_script_duration_seconds_bucket{le="0.001"} 1`,
		`tock_script_duration_seconds_bucket{le="0.01"} 4`, `tock_script_duration_seconds_bucket{le="+Inf"} 5`,
		"tock_script_duration_seconds_sum 0.0125",
		"# TYPE tock_fsync_duration_seconds histogram",
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	problems, err := testutil.GatherAndLint(s.metrics.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestScrapeWhileTheEngineFails checks that a scrape while the engine's
// stats and metrics fail still serves the server's own metrics and counts
// the failure, and that /v1/stats answers 503.
func TestScrapeWhileTheEngineFails(t *testing.T) {
	e := &flakyEngine{Engine: openEngine(t)}
	ts := newHTTPTestServer(t, New(e, WithLogger(slog.New(slog.DiscardHandler))))
	call(t, ts, "POST", "/v1/topics/m/messages", `{}`)
	down := fmt.Errorf("cluster down: %w", queue.ErrUnavailable)
	e.err.Store(&down)
	r := call(t, ts, "GET", "/metrics", "")
	if r.status != 200 || !strings.Contains(string(r.body), "tock_puts_total 1") {
		t.Fatalf("scrape while the engine fails: %d, %d bytes; want 200 with the server's metrics", r.status, len(r.body))
	}
	for _, gone := range []string{"tock_scheduled_messages", "tock_corrupt_records_total"} {
		if strings.Contains(string(r.body), gone) {
			t.Errorf("scrape while the engine fails reports %s", gone)
		}
	}
	// A scrape counts its own failure after it gathered: the next one shows it.
	r = call(t, ts, "GET", "/metrics", "")
	if v := metricValue(t, r.body, `promhttp_metric_handler_errors_total{cause="gathering"}`); v != 1 {
		t.Errorf("promhttp_metric_handler_errors_total{cause=\"gathering\"} = %v after a failed scrape; want 1", v)
	}
	r = call(t, ts, "GET", "/v1/stats", "")
	if r.status != 503 || !strings.Contains(r.errorMsg(t), "cluster down") {
		t.Fatalf("stats while the engine fails: %d %s; want 503", r.status, r.body)
	}
}
