package server

import (
	"bufio"
	"bytes"
	"context"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/contract"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
)

// metricValue returns the value of the sample named name (with its labels,
// if any) in a Prometheus text exposition, failing the test if it is absent.
func metricValue(t *testing.T, body []byte, name string) float64 {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("metrics lack %s:\n%s", name, body)
	return 0
}

// TestFsyncMetric checks that tock_fsync_duration_seconds is exported from
// the start, counts the group commits of durable puts, and stays flat when
// the queue does not sync.
func TestFsyncMetric(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []delayq.Option
		durable bool
	}{
		{"durable", nil, true},
		{"NoSync", []delayq.Option{delayq.WithNoSync()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := delayq.Open(t.TempDir(), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(contract.Handler(t, New(q)))
			defer func() {
				ts.Close()
				if err := q.Close(); err != nil {
					t.Error(err)
				}
			}()
			scrape := func() (count, sum, fast float64) {
				t.Helper()
				r := call(t, ts, "GET", "/metrics", "")
				return metricValue(t, r.body, "tock_fsync_duration_seconds_count"),
					metricValue(t, r.body, "tock_fsync_duration_seconds_sum"),
					metricValue(t, r.body, `tock_fsync_duration_seconds_bucket{le="3.2768"}`)
			}
			count0, sum0, _ := scrape()
			const puts = 10
			for range puts {
				if r := call(t, ts, "POST", "/v1/topics/s/messages", `{"delay":"1h","payload":1}`); r.status != 201 {
					t.Fatalf("put: %d %s", r.status, r.body)
				}
			}
			count, sum, fast := scrape()
			switch {
			case tc.durable && (count-count0 < puts || sum <= sum0 || fast < puts):
				t.Errorf("after %d durable puts: fsyncs %v -> %v, seconds %v -> %v, %v within 3.3s; want %d more syncs, more time",
					puts, count0, count, sum0, sum, fast, puts)
			case !tc.durable && (count != count0 || sum != sum0):
				t.Errorf("NoSync: fsyncs %v -> %v, seconds %v -> %v; want them flat", count0, count, sum0, sum)
			}
		})
	}
}

// TestMetricsLint runs the exposition, after traffic of every kind, through
// client_golang's port of "promtool check metrics". It found a gauge with a
// quantile label (tock_due_lateness_seconds, now a summary). It runs on
// both engines, whose own metrics (queue.Reporter) are part of the
// exposition.
func TestMetricsLint(t *testing.T) {
	t.Run("delayq", func(t *testing.T) {
		ts, s := newTestServer(t)
		lintAfterTraffic(t, ts, s, "# TYPE tock_fsync_duration_seconds histogram")
	})
	t.Run("redisq", func(t *testing.T) {
		q := openRedisq(t, redistest.Start(t).Addr)
		t.Cleanup(func() { q.Close() })
		s := New(q)
		lintAfterTraffic(t, newHTTPTestServer(t, s), s,
			"# TYPE tock_redis_script_duration_seconds histogram", "# TYPE tock_redis_write_retries_total counter",
			"# TYPE tock_redis_owned_shards gauge")
	})
}

// lintAfterTraffic sends s, served by ts, traffic of every kind, lints the
// exposition and checks that it has the lines of want.
func lintAfterTraffic(t *testing.T, ts *httptest.Server, s *Server, want ...string) {
	t.Helper()
	call(t, ts, "POST", "/v1/topics/m/batch", `{"messages":[{},{"delay":"1h"}]}`)
	// Wait: an engine may take a moment to make a message due now receivable (redisq under load).
	r := call(t, ts, "POST", "/v1/topics/m/receive", `{"max":1,"wait":"10s"}`)
	var got struct {
		Messages []struct {
			Receipt string `json:"receipt"`
		} `json:"messages"`
	}
	r.json(t, &got)
	if len(got.Messages) != 1 {
		t.Fatalf("receive of the message due now: %d %s", r.status, r.body)
	}
	call(t, ts, "POST", "/v1/ack", `{"receipts":["`+got.Messages[0].Receipt+`"]}`)
	call(t, ts, "GET", "/nothing", "")
	call(t, ts, "POST", "/v1/topics/m/pause", "")
	call(t, ts, "POST", "/v1/topics/m/purge", `{"state":"scheduled"}`)
	call(t, ts, "GET", "/metrics", "")

	problems, err := testutil.GatherAndLint(s.metrics.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	r = call(t, ts, "GET", "/metrics", "")
	for _, w := range append(want, "# TYPE tock_due_lateness_seconds summary", "tock_puts_total 2",
		`tock_admin_actions_total{action="deliver"} 0`, `tock_admin_messages_moved_total{action="purge"}`) {
		if !strings.Contains(string(r.body), w) {
			t.Errorf("metrics lack %q", w)
		}
	}
}

// TestRefusedRequestsAreCounted is the regression test of 401 and 404
// answers missing from tock_http_requests_total: every answer counts.
func TestRefusedRequestsAreCounted(t *testing.T) {
	ts, _ := newTestServer(t, WithToken("t"))
	call(t, ts, "POST", "/v1/topics/x/messages", `{}`)                                        // 401
	call(t, ts, "GET", "/nothing", "", "Authorization", "Bearer t")                           // 404
	call(t, ts, "DELETE", "/v1/messages/nobody", "", "Authorization", "Bearer t")             // 404
	call(t, ts, "PUT", "/v1/ack", `{}`, "Authorization", "Bearer t")                          // 405
	rawCall(t, ts, "POST", "/v1/ack", `{}`, "Authorization", "Bearer t")                      // 415
	call(t, ts, "GET", "/v1/stats", "", "Sec-Fetch-Site", "cross-site", "Origin", "http://e") // 403
	r := call(t, ts, "GET", "/metrics", "", "Authorization", "Bearer t")
	for _, want := range []string{
		`tock_http_requests_total{code="401",route="POST /v1/topics/{topic}/messages"} 1`,
		`tock_http_requests_total{code="404",route="unmatched"} 1`,
		`tock_http_requests_total{code="404",route="DELETE /v1/messages/{id}"} 1`,
		`tock_http_requests_total{code="405",route="unmatched"} 1`,
		`tock_http_requests_total{code="415",route="POST /v1/ack"} 1`,
		`tock_http_requests_total{code="403",route="GET /v1/stats"} 1`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestBucketBoundsAreExact is the regression test of the fsync histogram's
// le="1.6383999999999999": every bucket bound prints as the short decimal
// it stands for.
func TestBucketBoundsAreExact(t *testing.T) {
	ts, _ := newTestServer(t)
	call(t, ts, "POST", "/v1/topics/b/messages", `{}`)
	r := call(t, ts, "GET", "/metrics", "")
	re := regexp.MustCompile(`le="([^"]+)"`)
	n := 0
	for _, m := range re.FindAllStringSubmatch(string(r.body), -1) {
		n++
		if m[1] == "+Inf" {
			continue
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("le=%q: %v", m[1], err)
		}
		if short := strconv.FormatFloat(v, 'g', 8, 64); len(m[1]) > len(short) {
			t.Errorf("bucket bound le=%q, want %s", m[1], short)
		}
	}
	if n == 0 || !strings.Contains(string(r.body), `tock_fsync_duration_seconds_bucket{le="1.6384"}`) {
		t.Errorf("no fsync bucket le=\"1.6384\" among %d bucket bounds", n)
	}
}

// latenessEngine is an engine whose stats report a fixed lateness.
type latenessEngine struct {
	queue.Engine
	lateness queue.Lateness
}

func (e latenessEngine) Stats(ctx context.Context) (queue.Stats, error) {
	st, err := e.Engine.Stats(ctx)
	st.Lateness = e.lateness
	return st, err
}

// TestDueLatenessSummaryHasCountAndSum is the regression test of a summary
// whose _count and _sum were always 0: they are the engine's count and sum
// of every message's lateness.
func TestDueLatenessSummaryHasCountAndSum(t *testing.T) {
	e := latenessEngine{Engine: openEngine(t), lateness: queue.Lateness{
		P50: time.Millisecond, P99: 3 * time.Millisecond, Max: 4 * time.Millisecond, Count: 7, Sum: 1500 * time.Millisecond}}
	ts := newHTTPTestServer(t, New(e))
	r := call(t, ts, "GET", "/metrics", "")
	for _, want := range []string{
		"tock_due_lateness_seconds_count 7", "tock_due_lateness_seconds_sum 1.5",
		`tock_due_lateness_seconds{quantile="0.99"} 0.003`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
