package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
)

// newAdminServer serves a delayq queue on which a message dies at its first failed delivery, and
// logs to the returned buffer.
func newAdminServer(t *testing.T, opts ...Option) (*testServer, *bytes.Buffer) {
	t.Helper()
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync(), delayq.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	var logs bytes.Buffer
	s := New(q, append([]Option{WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}, opts...)...)
	return &testServer{t: t, ts: newHTTPTestServer(t, s), s: s}, &logs
}

// testServer sends requests to a served Server and checks their answers.
type testServer struct {
	t  *testing.T
	ts *httptest.Server
	s  *Server
}

func (x *testServer) httptest() *httptest.Server { return x.ts }

// ok sends a request and decodes its answer into v, failing the test unless the status is want.
func (x *testServer) ok(want int, method, path, body string, v any, hdr ...string) {
	x.t.Helper()
	r := call(x.t, x.ts, method, path, body, hdr...)
	if r.status != want {
		x.t.Fatalf("%s %s %s: %d %s; want %d", method, path, body, r.status, r.body, want)
	}
	if v != nil {
		r.json(x.t, v)
	}
}

// dieOnce puts a message on topic with id, receives it and nacks it, so that it dies.
func (x *testServer) dieOnce(topic, id string) {
	x.t.Helper()
	x.ok(201, "POST", api.PutPath(topic), `{"id":"`+id+`","payload":"`+id+`"}`, nil)
	var got api.ReceiveResponse
	x.ok(200, "POST", api.ReceivePath(topic), `{"max":1,"wait":"1s"}`, &got)
	if len(got.Messages) != 1 || got.Messages[0].ID != id {
		x.t.Fatalf("receive of %s: %+v", id, got)
	}
	x.ok(204, "POST", api.PathNack, `{"receipt":"`+got.Messages[0].Receipt+`"}`, nil)
}

func TestAdminRoutes(t *testing.T) {
	x, logs := newAdminServer(t)
	ctx := context.Background()
	for i := range 5 {
		x.ok(201, "POST", api.PutPath("jobs"), fmt.Sprintf(`{"id":"s%d","payload":{"n":%d},"delay":"%dh"}`, i, i, i+1), nil)
	}
	x.dieOnce("jobs", "d1")
	x.dieOnce("jobs", "d2")
	x.dieOnce("jobs", "d3")
	x.ok(201, "POST", api.PutPath("jobs"), `{"id":"now","payload":[1, 2]}`, nil)

	var topics api.TopicsResponse
	x.ok(200, "GET", api.PathTopics, "", &topics)
	if len(topics.Topics) != 2 || topics.Topics[0].Topic != "jobs" || topics.Topics[1].Topic != "jobs.dead" {
		t.Fatalf("topics: %+v; want jobs and jobs.dead, in order", topics)
	}
	j := topics.Topics[0]
	if j.Scheduled != 5 || j.Due != 1 || j.Dead != 3 || j.Leased != 0 || j.Paused || j.OldestDue.IsZero() || j.Puts != 9 || j.Deliveries != 3 {
		t.Fatalf("topic jobs: %+v; want 5 scheduled, 1 due, 3 dead, 9 puts, 3 deliveries, an oldest due time", j)
	}

	// Page through the scheduled messages two at a time: in due order, each once.
	var ids []string
	for cursor, pages := "", 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		var page api.MessagesResponse
		x.ok(200, "GET", api.MessagesPath("jobs")+"?state=scheduled&limit=2&cursor="+cursor, "", &page)
		for _, m := range page.Messages {
			if m.State != "scheduled" || m.Topic != "jobs" || m.Size == 0 || !strings.HasPrefix(m.Preview, `{"n":`) || m.Truncated {
				t.Fatalf("scheduled message: %+v", m)
			}
			ids = append(ids, m.ID)
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	if got := strings.Join(ids, ","); got != "s0,s1,s2,s3,s4" {
		t.Fatalf("scheduled pages: %s; want s0,s1,s2,s3,s4", got)
	}
	var dead api.MessagesResponse
	x.ok(200, "GET", api.MessagesPath("jobs")+"?state=dead", "", &dead)
	if len(dead.Messages) != 3 || dead.Next != "" || dead.Messages[0].LastFailure == "" || dead.Messages[0].FailedAt.IsZero() || dead.Messages[0].Attempts != 1 {
		t.Fatalf("dead page: %+v; want 3 dead letters with their failure, no next page", dead)
	}

	// One message, whole, as the JSON it was put as.
	var m api.MessageInfo
	x.ok(200, "GET", api.MessagePath("now"), "", &m)
	if string(m.Payload) != "[1,2]" || m.State != "due" || m.Preview != "[1,2]" || m.Size != 5 {
		t.Fatalf("message now: %+v", m)
	}
	r := call(t, x.httptest(), "GET", api.MessagePath("nothing"), "")
	if r.status != 404 || r.errorCode(t) != api.CodeNotFound {
		t.Fatalf("GET of no message: %d %s; want 404 not_found", r.status, r.body)
	}

	// Deliver now: the message is due, and a second time there is no such scheduled message.
	var moved api.MovedResponse
	x.ok(200, "POST", api.DeliverPath("s4"), "", &moved)
	if moved.Moved != 1 {
		t.Fatalf("deliver: %+v", moved)
	}
	x.ok(200, "GET", api.MessagePath("s4"), "", &m)
	if m.State != "due" {
		t.Fatalf("s4 after deliver now: %+v; want due", m)
	}
	if r := call(t, x.httptest(), "POST", api.DeliverPath("s4"), ""); r.status != 404 || r.errorCode(t) != api.CodeNotFound {
		t.Fatalf("second deliver: %d %s; want 404 not_found", r.status, r.body)
	}

	// Requeue one dead letter by ID (an unknown ID is skipped), then the rest.
	x.ok(200, "POST", api.RequeuePath("jobs"), `{"ids":["d1","nothing"]}`, &moved)
	if moved.Moved != 1 {
		t.Fatalf("requeue of d1: %+v; want 1", moved)
	}
	x.ok(200, "GET", api.MessagePath("d1"), "", &m)
	if m.State != "due" || m.Topic != "jobs" || m.Attempts != 0 {
		t.Fatalf("d1 after requeue: %+v; want due on jobs, attempts 0", m)
	}
	x.ok(200, "POST", api.RequeuePath("jobs"), `{"all":true}`, &moved)
	if moved.Moved != 2 {
		t.Fatalf("requeue of all: %+v; want 2", moved)
	}

	// Purge the scheduled ones.
	var purged api.PurgeResponse
	x.ok(200, "POST", api.PurgePath("jobs"), `{"state":"scheduled"}`, &purged)
	if purged.Removed != 4 {
		t.Fatalf("purge: %+v; want 4", purged)
	}

	// Pause: a receive gets nothing though messages are due; resume: it gets them.
	var p api.PauseResponse
	x.ok(200, "POST", api.PausePath("jobs"), "", &p)
	if p != (api.PauseResponse{Topic: "jobs", Paused: true}) {
		t.Fatalf("pause: %+v", p)
	}
	var got api.ReceiveResponse
	x.ok(200, "POST", api.ReceivePath("jobs"), `{"max":10}`, &got)
	if len(got.Messages) != 0 {
		t.Fatalf("receive on a paused topic: %+v", got)
	}
	x.ok(200, "GET", api.PathTopics, "", &topics)
	if !topics.Topics[0].Paused {
		t.Fatalf("topics after pause: %+v", topics)
	}
	x.ok(200, "POST", api.ResumePath("jobs"), `{}`, &p)
	if p.Paused {
		t.Fatalf("resume: %+v", p)
	}
	x.ok(200, "POST", api.ReceivePath("jobs"), `{"max":10}`, &got)
	if len(got.Messages) != 5 {
		t.Fatalf("receive after resume: %d messages; want 5 (now, s4, d1, d2, d3)", len(got.Messages))
	}
	if n, err := x.s.admin.Purge(ctx, "jobs", queue.Scheduled); n != 0 || err != nil {
		t.Fatalf("engine purge after the API's: %d, %v", n, err)
	}

	for _, c := range []struct {
		metric, action string
		want           float64
	}{
		{"tock_admin_actions_total", "deliver", 1},
		{"tock_admin_actions_total", "requeue", 2},
		{"tock_admin_actions_total", "purge", 1},
		{"tock_admin_actions_total", "pause", 1},
		{"tock_admin_actions_total", "resume", 1},
		{"tock_admin_messages_moved_total", "deliver", 1},
		{"tock_admin_messages_moved_total", "requeue", 3},
		{"tock_admin_messages_moved_total", "purge", 4},
	} {
		vec := x.s.metrics.actions
		if c.metric == "tock_admin_messages_moved_total" {
			vec = x.s.metrics.moved
		}
		if got := testutil.ToFloat64(vec.WithLabelValues(c.action)); got != c.want {
			t.Errorf("%s{action=%q} = %v; want %v", c.metric, c.action, got, c.want)
		}
	}
	for _, want := range []string{
		`msg="admin: deliver now" id=s4 count=1`,
		`msg="admin: requeue" topic=jobs ids=d1,nothing count=1`,
		`msg="admin: requeue" topic=jobs all=true count=2`,
		`msg="admin: purge" topic=jobs state=scheduled count=4`,
		`msg="admin: pause" topic=jobs`,
		`msg="admin: resume" topic=jobs`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
}

// plainEngine is an engine that is not a queue.Admin.
type plainEngine struct{ queue.Engine }

func TestAdminRoutesOfAPlainEngineAre501(t *testing.T) {
	ts := newHTTPTestServer(t, New(plainEngine{openEngine(t)}))
	for _, c := range []struct{ method, path, body string }{
		{"GET", api.PathTopics, ""},
		{"GET", api.MessagesPath("t") + "?state=due", ""},
		{"GET", api.MessagePath("m"), ""},
		{"POST", api.DeliverPath("m"), ""},
		{"POST", api.RequeuePath("t"), `{"all":true}`},
		{"POST", api.PurgePath("t"), `{"state":"dead"}`},
		{"POST", api.PausePath("t"), ""},
		{"POST", api.ResumePath("t"), ""},
	} {
		r := call(t, ts, c.method, c.path, c.body)
		if r.status != 501 || r.errorCode(t) != api.CodeNotImplemented || !strings.Contains(r.errorMsg(t), "queue.Admin") {
			t.Errorf("%s %s: %d %s; want 501 not_implemented naming queue.Admin", c.method, c.path, r.status, r.body)
		}
	}
	if r := call(t, ts, "POST", api.PutPath("t"), `{}`); r.status != 201 {
		t.Fatalf("put on a plain engine: %d %s", r.status, r.body)
	}
}

func TestAdminRefusesBadRequests(t *testing.T) {
	x, _ := newAdminServer(t)
	long := strings.Repeat("x", 2000)
	manyIDs := `{"ids":["a"` + strings.Repeat(`,"a"`, queue.MaxPage) + `]}`
	for _, c := range []struct {
		method, path, body string
		status             int
		code, msg          string
	}{
		{"GET", api.MessagesPath("t"), "", 400, api.CodeBadRequest, `"state" is required`},
		{"GET", api.MessagesPath("t") + "?state=gone", "", 400, api.CodeBadRequest, `"gone" is not`},
		{"GET", api.MessagesPath("t") + "?state=due&limit=0", "", 400, api.CodeBadRequest, "from 1 to 1000"},
		{"GET", api.MessagesPath("t") + "?state=due&limit=1001", "", 400, api.CodeBadRequest, "from 1 to 1000"},
		{"GET", api.MessagesPath("t") + "?state=due&limit=x", "", 400, api.CodeBadRequest, "from 1 to 1000"},
		{"GET", api.MessagesPath("t") + "?state=due&cursor=garbage", "", 400, api.CodeBadRequest, "cursor"},
		{"GET", api.MessagesPath("t") + "?state=due&cursor=" + long, "", 400, api.CodeBadRequest, "longer than"},
		{"GET", api.MessagesPath("a b"), "", 400, api.CodeBadRequest, "invalid topic"},
		{"GET", api.MessagePath("a*b"), "", 400, api.CodeBadRequest, "invalid id"},
		{"POST", api.DeliverPath("m"), `{"now":true}`, 400, api.CodeBadRequest, "unknown field"},
		{"POST", api.RequeuePath("t"), "", 400, api.CodeBadRequest, "body is empty"},
		{"POST", api.RequeuePath("t"), `{}`, 400, api.CodeBadRequest, `"all": true`},
		{"POST", api.RequeuePath("t"), `{"ids":[]}`, 400, api.CodeBadRequest, `"all": true`},
		{"POST", api.RequeuePath("t"), `{"all":false}`, 400, api.CodeBadRequest, `"all": true`},
		{"POST", api.RequeuePath("t"), `{"all":true,"ids":["a"]}`, 400, api.CodeBadRequest, "not both"},
		{"POST", api.RequeuePath("t"), `{"ids":["a/b"]}`, 400, api.CodeBadRequest, "invalid ids[0]"},
		{"POST", api.RequeuePath("t"), manyIDs, 413, api.CodeTooLarge, "at most 1000 IDs"},
		{"POST", api.RequeuePath("t"), `{"ids":["` + strings.Repeat("a", 300<<10) + `"]}`, 413, api.CodeTooLarge, "exceeds"},
		{"POST", api.PurgePath("t"), `{}`, 400, api.CodeBadRequest, `"state" is required`},
		{"POST", api.PurgePath("t"), `{"state":"leased"}`, 400, api.CodeBadRequest, "belong to their consumers"},
		{"POST", api.PurgePath("t"), `{"state":"all"}`, 400, api.CodeBadRequest, `"all" is not`},
		{"POST", api.PausePath("t"), `[]`, 400, api.CodeBadRequest, "JSON object"},
		{"GET", api.PausePath("t"), "", 405, api.CodeMethod, "POST"},
	} {
		r := call(t, x.httptest(), c.method, c.path, c.body)
		if r.status != c.status || r.errorCode(t) != c.code || !strings.Contains(r.errorMsg(t), c.msg) {
			t.Errorf("%s %s %.60s: %d %s; want %d %s saying %q", c.method, c.path, c.body, r.status, r.body, c.status, c.code, c.msg)
		}
	}
}

// TestAdminRoutesFollowTheRequestRules checks the token, origin and content-type rules on the
// admin routes: reads need the token as the other reads do, and the status page, same-origin with
// the token, may POST an action without a body.
func TestAdminRoutesFollowTheRequestRules(t *testing.T) {
	x, _ := newAdminServer(t, WithToken("secret"))
	ts := x.httptest()
	bearer := []string{"Authorization", "Bearer secret"}
	if r := call(t, ts, "GET", api.PathTopics, ""); r.status != 401 || r.errorCode(t) != api.CodeUnauthorized {
		t.Fatalf("topics without the token: %d %s", r.status, r.body)
	}
	if r := call(t, ts, "POST", api.PausePath("t"), ""); r.status != 401 {
		t.Fatalf("pause without the token: %d %s", r.status, r.body)
	}
	if r := call(t, ts, "GET", api.PathTopics, "", bearer...); r.status != 200 {
		t.Fatalf("topics with the token: %d %s", r.status, r.body)
	}
	page := append([]string{"Origin", ts.URL, "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors"}, bearer...)
	if r := call(t, ts, "POST", api.PausePath("t"), "", page...); r.status != 200 {
		t.Fatalf("pause from the page without a body: %d %s", r.status, r.body)
	}
	if r := call(t, ts, "POST", api.ResumePath("t"), "{}", page...); r.status != 200 {
		t.Fatalf("resume from the page with {}: %d %s", r.status, r.body)
	}
	other := append([]string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors"}, bearer...)
	if r := call(t, ts, "POST", api.PausePath("t"), "", other...); r.status != 403 || r.errorCode(t) != api.CodeCrossOrigin {
		t.Fatalf("pause from another site: %d %s; want 403", r.status, r.body)
	}
	if r := call(t, ts, "GET", api.PathTopics, "", other...); r.status != 403 {
		t.Fatalf("topics read from another site: %d %s; want 403", r.status, r.body)
	}
	plain := append([]string{"Content-Type", "text/plain"}, bearer...)
	if r := call(t, ts, "POST", api.PurgePath("t"), `{"state":"dead"}`, plain...); r.status != 415 || r.errorCode(t) != api.CodeMediaType {
		t.Fatalf("purge with a text/plain body: %d %s; want 415", r.status, r.body)
	}
}

func TestPreview(t *testing.T) {
	long := strings.Repeat("a", queue.PreviewLen-1) + "é" // é is 2 bytes: the cut splits it
	for _, c := range []struct {
		name      string
		payload   string
		size      int
		want      string
		truncated bool
	}{
		{"empty", "", 0, "", false},
		{"whole", `{"a":1}`, 7, `{"a":1}`, false},
		{"invalid UTF-8 replaced", "a\xffb", 3, "a\uFFFDb", false},
		{"cut by the engine", strings.Repeat("b", queue.PreviewLen), 1000, strings.Repeat("b", queue.PreviewLen), true},
		{"cut here", long, len(long), strings.Repeat("a", queue.PreviewLen-1), true},
		{"cut splitting a character", long[:queue.PreviewLen], len(long), strings.Repeat("a", queue.PreviewLen-1), true},
	} {
		got, truncated := previewOf([]byte(c.payload), c.size)
		if got != c.want || truncated != c.truncated {
			t.Errorf("%s: previewOf = %q, %v; want %q, %v", c.name, got, truncated, c.want, c.truncated)
		}
	}
}

func TestWireBoundsAreTheQueues(t *testing.T) {
	if api.MaxPage != queue.MaxPage || api.PreviewLen != queue.PreviewLen {
		t.Fatalf("api.MaxPage, api.PreviewLen = %d, %d; queue's are %d, %d", api.MaxPage, api.PreviewLen, queue.MaxPage, queue.PreviewLen)
	}
	for _, s := range []string{api.StateScheduled, api.StateDue, api.StateLeased, api.StateDead} {
		if !queue.State(s).Valid() {
			t.Errorf("api state %q is not a queue.State", s)
		}
	}
}

func TestTopicRates(t *testing.T) {
	var r rates
	t0 := time.Unix(1_700_000_000, 0)
	info := func(name string, puts, dels, acks uint64) queue.TopicInfo {
		return queue.TopicInfo{Topic: name, Puts: puts, Deliveries: dels, Acks: acks}
	}
	if got := r.sample(t0, []queue.TopicInfo{info("a", 100, 0, 0)}); got[0] != (api.Rate{}) {
		t.Fatalf("first sample: %+v; want zero", got[0])
	}
	// Sampled every second for two minutes at 10 puts, 5 deliveries and 2 acks a second: the rate
	// is over the last minute only.
	var got []api.Rate
	for i := 1; i <= 120; i++ {
		puts := uint64(1300 + 10*(i-60))
		if i <= 60 {
			puts = uint64(100 + 20*i) // twice as fast in the first minute
		}
		got = r.sample(t0.Add(time.Duration(i)*time.Second), []queue.TopicInfo{info("a", puts, uint64(5*i), uint64(2*i))})
	}
	if got[0] != (api.Rate{Puts: 10, Deliveries: 5, Acks: 2}) {
		t.Fatalf("rate after two minutes: %+v; want 10 puts, 5 deliveries, 2 acks a second", got[0])
	}
	if n := r.topics["a"].n; n != rateSamples {
		t.Fatalf("%d samples kept; want at most %d", n, rateSamples)
	}
	// Asked rarely: the rate is over the time since the last ask.
	got = r.sample(t0.Add(300*time.Second), []queue.TopicInfo{info("a", 1900+180*3, 600+180, 240+180)})
	if got[0].Puts != 3 || got[0].Deliveries != 1 || got[0].Acks != 1 {
		t.Fatalf("rate asked after three minutes: %+v; want 3, 1, 1", got[0])
	}
	// The engine restarted its counts: no rate until there is a new sample.
	got = r.sample(t0.Add(302*time.Second), []queue.TopicInfo{info("a", 3, 0, 0), info("b", 1, 1, 1)})
	if got[0] != (api.Rate{}) || got[1] != (api.Rate{}) {
		t.Fatalf("rates after a restart of the counts and of a new topic: %+v; want zero", got)
	}
	got = r.sample(t0.Add(304*time.Second), []queue.TopicInfo{info("a", 7, 2, 0), info("b", 1, 1, 1)})
	if got[0] != (api.Rate{Puts: 2, Deliveries: 1}) {
		t.Fatalf("rate after the restart: %+v; want 2 puts and 1 delivery a second", got[0])
	}
	// A topic that vanished is forgotten.
	r.sample(t0.Add(306*time.Second), []queue.TopicInfo{info("b", 1, 1, 1)})
	if _, ok := r.topics["a"]; ok || len(r.topics) != 1 {
		t.Fatalf("samples kept of %d topics after a vanished: %v", len(r.topics), r.topics)
	}
}

// TestTopicsRateFromTheEngine checks that GET /v1/topics reports the rate of a topic's puts from
// the engine's counts, sampled across requests.
func TestTopicsRateFromTheEngine(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	x, _ := newAdminServer(t, withClock(clock))
	x.ok(201, "POST", api.PutPath("r"), `{}`, nil)
	var topics api.TopicsResponse
	x.ok(200, "GET", api.PathTopics, "", &topics)
	if topics.Topics[0].Rate.Puts != 0 {
		t.Fatalf("rate at the first sample: %+v", topics.Topics[0])
	}
	for range 20 {
		x.ok(201, "POST", api.PutPath("r"), `{"delay":"1h"}`, nil)
	}
	now = now.Add(10 * time.Second)
	x.ok(200, "GET", api.PathTopics, "", &topics)
	if got := topics.Topics[0].Rate.Puts; got != 2 {
		t.Fatalf("rate of 20 puts in 10 s: %v; want 2", got)
	}
}
