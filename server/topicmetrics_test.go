package server

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/internal/testwait"
	"github.com/tockwheel/tock/queue"
)

// lint fails t with every problem client_golang's port of "promtool check metrics" finds in s's
// exposition.
func lint(t *testing.T, s *Server) {
	t.Helper()
	problems, err := testutil.GatherAndLint(s.metrics.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// topicLabelsIn returns the topic labels of name's samples in a scrape.
func topicLabelsIn(body []byte, name string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^`+name+`\{topic="([^"]*)"\} `).FindAllSubmatch(body, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

// TestTopicMetrics checks every per-topic metric on both engines after traffic on two topics:
// puts, deliveries, acks, nacks (one to the dead letters), the backlog and its age, and the
// lateness of first deliveries; and that the exposition lints clean.
func TestTopicMetrics(t *testing.T) {
	for _, engine := range []string{"delayq", "redisq"} {
		t.Run(engine, func(t *testing.T) {
			var s *Server
			now := time.Now()
			clock := func() time.Time { return now }
			if engine == "delayq" {
				q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { q.Close() })
				s = New(q, withClock(clock))
			} else {
				q := openRedisq(t, redistest.Start(t).Addr)
				t.Cleanup(func() { q.Close() })
				s = New(q, withClock(clock))
			}
			ts := newHTTPTestServer(t, s)
			call(t, ts, "POST", "/v1/topics/orders/batch", `{"messages":[{},{},{},{"delay":"1h"}]}`)
			call(t, ts, "POST", "/v1/topics/mail/batch", `{"messages":[{},{}]}`)
			var got struct {
				Messages []struct {
					Receipt string `json:"receipt"`
				} `json:"messages"`
			}
			r := call(t, ts, "POST", "/v1/topics/orders/receive", `{"max":3,"wait":"10s"}`)
			r.json(t, &got)
			for i := 0; len(got.Messages) < 3 && i < 10; i++ { // an engine may hand over the due ones in steps
				var more struct {
					Messages []struct {
						Receipt string `json:"receipt"`
					} `json:"messages"`
				}
				call(t, ts, "POST", "/v1/topics/orders/receive", fmt.Sprintf(`{"max":%d,"wait":"10s"}`, 3-len(got.Messages))).json(t, &more)
				got.Messages = append(got.Messages, more.Messages...)
			}
			if len(got.Messages) != 3 {
				t.Fatalf("received %d of the 3 due messages of orders", len(got.Messages))
			}
			call(t, ts, "POST", "/v1/ack", `{"receipts":["`+got.Messages[0].Receipt+`"]}`)
			call(t, ts, "POST", "/v1/nack", `{"receipt":"`+got.Messages[1].Receipt+`","delay":"1h"}`)
			call(t, ts, "POST", "/v1/nack", `{"receipt":"`+got.Messages[2].Receipt+`","dead_letter":true}`)
			// The backlog of mail has waited a minute.
			now = time.Now().Add(time.Minute)

			body := call(t, ts, "GET", "/metrics", "").body
			for name, want := range map[string]float64{
				`tock_topic_puts_total{topic="orders"}`:                           4,
				`tock_topic_puts_total{topic="mail"}`:                             2,
				`tock_topic_deliveries_total{topic="orders"}`:                     3,
				`tock_topic_deliveries_total{topic="mail"}`:                       0,
				`tock_topic_acks_total{topic="orders"}`:                           1,
				`tock_topic_nacks_total{topic="orders"}`:                          2,
				`tock_topic_scheduled_messages{topic="orders"}`:                   2,
				`tock_topic_dead_messages{topic="orders"}`:                        1,
				`tock_topic_due_messages{topic="mail"}`:                           2,
				`tock_topic_due_messages{topic="orders"}`:                         0,
				`tock_topic_leased_messages{topic="orders"}`:                      0,
				`tock_topic_puts_total{topic="other"}`:                            0,
				`tock_delivery_lateness_seconds_count{topic="orders"}`:            3,
				`tock_delivery_lateness_seconds_bucket{topic="orders",le="+Inf"}`: 3,
			} {
				if v := metricValue(t, body, name); v != want {
					t.Errorf("%s = %v, want %v", name, v, want)
				}
			}
			if age := metricValue(t, body, `tock_topic_oldest_due_age_seconds{topic="mail"}`); age < 60 || age > 120 {
				t.Errorf("mail's oldest due message is %v s old; want a minute and the test's time", age)
			}
			if age := metricValue(t, body, `tock_topic_oldest_due_age_seconds{topic="orders"}`); age != 0 {
				t.Errorf("orders has no due message, but its oldest is %v s old", age)
			}
			lint(t, s)
		})
	}
}

// TestTopicMetricsBound puts on 10,000 topics with a bound of 3 labels, and topics no request
// path could name, through the Go API: 3 topics have a label, every other counts under "other",
// the exposition lints clean (a label must be UTF-8), and other's counters never go back when
// its topics empty and leave the engine's listing.
func TestTopicMetricsBound(t *testing.T) {
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	s := New(q, WithMetricsTopics(3))
	ts := newHTTPTestServer(t, s)
	ctx := context.Background()

	const topics = 10_000
	var hostile = []string{"other", "a\xffb", `q"}{topic="x`, strings.Repeat("L", 60000), "new\nline", "ünïcode"}
	for i := range topics {
		if _, err := q.Put(ctx, queue.Message{Topic: fmt.Sprintf("t%05d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range hostile {
		if _, err := q.Put(ctx, queue.Message{Topic: h}); err != nil {
			t.Fatalf("put on %q: %v", h, err)
		}
	}
	// A put due at once is made due by the engine's loader, which moves each slot of its disk
	// wheel into memory ahead of the slot's start: on a loaded machine the loader can be late, and
	// the messages of a slot it has not reached count as scheduled until it does.
	want := float64(topics + len(hostile))
	var body []byte
	wctx, cancel := context.WithTimeout(ctx, time.Minute) // a bug's bound: the loader is never a minute late
	defer cancel()
	testwait.Until(t, wctx, "other's messages all due", func() bool {
		body = call(t, ts, "GET", "/metrics", "").body
		return metricValue(t, body, `tock_topic_due_messages{topic="other"}`) == want-3
	})
	labels := topicLabelsIn(body, "tock_topic_puts_total")
	if len(labels) != 4 || !strings.Contains(strings.Join(labels, ","), "other") {
		t.Fatalf("tock_topic_puts_total has topics %q; want 3 and other", labels)
	}
	var sum float64
	for _, l := range labels {
		sum += metricValue(t, body, `tock_topic_puts_total{topic="`+l+`"}`)
	}
	if sum != want {
		t.Errorf("puts add up to %v over the labels; want %v", sum, want)
	}
	before := metricValue(t, body, `tock_topic_puts_total{topic="other"}`)
	lint(t, s)

	// Deliveries and acks of topics beyond the bound count as other: of the last topic, of a
	// hostile one, and of one that empties and so leaves the engine's listing, other's puts
	// staying as they were.
	last, emptied := fmt.Sprintf("t%05d", topics-1), fmt.Sprintf("t%05d", topics-2)
	for _, topic := range []string{last, "a\xffb"} {
		if _, err := q.Put(ctx, queue.Message{Topic: topic}); err != nil {
			t.Fatal(err)
		}
	}
	body = call(t, ts, "GET", "/metrics", "").body
	before += 2
	for _, topic := range []string{last, "a\xffb", emptied} {
		ds, err := q.Receive(ctx, topic, 1, time.Minute)
		if err != nil || len(ds) != 1 {
			t.Fatalf("receive %q: %v %v", topic, ds, err)
		}
		if err := q.Ack(ctx, ds[0].Receipt); err != nil {
			t.Fatal(err)
		}
	}
	call(t, ts, "POST", fmt.Sprintf("/v1/topics/%s/batch", last), `{"messages":[{}]}`)
	r := call(t, ts, "POST", fmt.Sprintf("/v1/topics/%s/receive", last), `{"max":2,"wait":"10s"}`)
	if r.status != 200 || !strings.Contains(string(r.body), `"receipt"`) {
		t.Fatalf("receive over HTTP: %d %s", r.status, r.body)
	}
	body = call(t, ts, "GET", "/metrics", "").body
	if got := topicLabelsIn(body, "tock_topic_puts_total"); len(got) != 4 {
		t.Errorf("after more traffic, topics %q", got)
	}
	for _, l := range topicLabelsIn(body, "tock_delivery_lateness_seconds_count") {
		if v := metricValue(t, body, `tock_delivery_lateness_seconds_count{topic="`+l+`"}`); (l == "other") != (v > 0) {
			t.Errorf("lateness of %s counts %v; only other has deliveries over HTTP", l, v)
		}
	}
	if v := metricValue(t, body, `tock_topic_puts_total{topic="other"}`); v != before+1 {
		t.Errorf("other's puts went from %v to %v after one more put and a topic emptied; want %v", before, v, before+1)
	}
	// The ack that emptied its topic is not seen: the embedded engine forgot the topic, and
	// its counts, before the scrape.
	if v := metricValue(t, body, `tock_topic_acks_total{topic="other"}`); v != 2 {
		t.Errorf("other's acks = %v, want 2", v)
	}
	if v := metricValue(t, body, `tock_topic_deliveries_total{topic="other"}`); v != 4 {
		t.Errorf("other's deliveries = %v, want 4 (2 through the engine, 2 over HTTP)", v)
	}
	lint(t, s)

	// The emptied topic comes back, counting from zero in the engine: other grows.
	if _, err := q.Put(ctx, queue.Message{Topic: emptied}); err != nil {
		t.Fatal(err)
	}
	call(t, ts, "POST", fmt.Sprintf("/v1/topics/%s/batch", emptied), `{"messages":[{}]}`)
	body = call(t, ts, "GET", "/metrics", "").body
	if v := metricValue(t, body, `tock_topic_puts_total{topic="other"}`); v != before+3 {
		t.Errorf("other's puts = %v after the emptied topic came back with 2; want %v", v, before+3)
	}
}

// TestTopicMetricsNone checks WithMetricsTopics(0): every topic is other.
func TestTopicMetricsNone(t *testing.T) {
	ts, s := newTestServer(t, WithMetricsTopics(0))
	call(t, ts, "POST", "/v1/topics/a/batch", `{"messages":[{}]}`)
	call(t, ts, "POST", "/v1/topics/b/receive", `{"max":1}`)
	call(t, ts, "POST", "/v1/topics/a/receive", `{"max":1,"wait":"10s"}`)
	body := call(t, ts, "GET", "/metrics", "").body
	if got := topicLabelsIn(body, "tock_topic_puts_total"); len(got) != 1 || got[0] != "other" {
		t.Errorf("topics %q; want other only", got)
	}
	if v := metricValue(t, body, `tock_delivery_lateness_seconds_count{topic="other"}`); v != 1 {
		t.Errorf("other's lateness count = %v, want 1", v)
	}
	lint(t, s)
	defer func() {
		if recover() == nil {
			t.Error("WithMetricsTopics(-1) did not panic")
		}
	}()
	New(s.engine, WithMetricsTopics(-1))
}

// BenchmarkTopicLabel measures what a receive's deliveries pay for the topic label: the lookup of
// the topic's series, once per receive, for a topic with a label and one counted as other (the
// bound reached), beside the anchor, one Observe of the lateness histogram, which every first
// delivery paid before labels too.
//
//	go test ./server -run '^$' -bench TopicLabel -benchmem -count 3
func BenchmarkTopicLabel(b *testing.B) {
	m := newMetrics(plainEngine{}, newConnLimiter(16, nil, slog.Default()), slog.Default(), 3, time.Now)
	for i := range 3 {
		m.topics.of(fmt.Sprintf("t%d", i))
	}
	b.Run("observe", func(b *testing.B) {
		o := m.topics.of("t1").lateness
		for b.Loop() {
			o.Observe(0.003)
		}
	})
	b.Run("labelled", func(b *testing.B) {
		for b.Loop() {
			m.topics.of("t1")
		}
	})
	b.Run("other", func(b *testing.B) {
		for b.Loop() {
			m.topics.of("beyond-the-bound")
		}
	})
}
