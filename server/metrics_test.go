package server

import (
	"bufio"
	"bytes"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/tockwheel/tock/delayq"
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
			ts := httptest.NewServer(New(QueueStore(q)))
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
