package server

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redisq"
)

var pageScreenshotOut = flag.String("page-screenshot", "", "also write the screenshot of the status page open on a topic to this `file`")

// A browser drives one tab of a headless Chromium as a person would: it
// clicks what a person clicks and waits for what a person would see.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string // the console's errors, reported when the test ends
}

// newBrowser opens a tab of the package's Chromium for the test. When token is not empty, the
// browser answers the status page's password prompt with it, as a person who types the token would;
// without it, it answers no prompt.
func newBrowser(t *testing.T, width, height int, token string) *browser {
	t.Helper()
	ctx := newTab(t, width, height)
	if token != "" {
		// The Fetch domain pauses every request so that it can report the
		// server's challenge; continue them all, and answer the challenge.
		paused := chromedp.Events(ctx, fetch.RequestPaused)
		challenged := chromedp.Events(ctx, fetch.AuthRequired)
		go func() {
			for ev, err := range paused {
				if err != nil {
					return
				}
				_, _ = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
			}
		}()
		go func() {
			for ev, err := range challenged {
				if err != nil {
					return
				}
				_, _ = chromedp.Call(ctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID,
					AuthChallengeResponse: &fetch.AuthChallengeResponse{
						Response: fetch.AuthChallengeResponseResponseProvideCredentials, Username: "ops", Password: token}})
			}
		}()
		handle := true
		if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: &handle}); err != nil {
			t.Fatalf("Fetch.enable: %v", err)
		}
	}
	b := &browser{t: t, ctx: ctx}
	// Collect what a person would see in the console: exceptions, and
	// errors other than failed requests (those are the API's answers, which
	// the page shows itself), such as a script or style the policy blocked.
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	entries := chromedp.Events(ctx, cdplog.EntryAdded)
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			b.problem((&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
		}
	}()
	go func() {
		for ev, err := range entries {
			if err != nil {
				return
			}
			if ev.Entry.Level == cdplog.EntryLevelError && ev.Entry.Source != cdplog.EntrySourceNetwork {
				b.problem(string(ev.Entry.Source) + ": " + ev.Entry.Text)
			}
		}
	}()
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("Log.enable: %v", err)
	}
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, p := range b.problems {
			t.Errorf("browser console: %s", p)
		}
	})
	return b
}

func (b *browser) problem(s string) {
	b.mu.Lock()
	b.problems = append(b.problems, s)
	b.mu.Unlock()
}

// do runs actions, failing the test after 15 seconds.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\npage: %s", what, err, b.text("document.body.innerText"))
	}
}

func (b *browser) open(url string) { b.t.Helper(); b.do("open "+url, chromedp.Navigate(url)) }

// click clicks the element of the CSS selector sel with the mouse, once it is visible, failing the
// test after 15 seconds. The page replaces some rows as it refreshes them (the topics table every
// 2 s); one replaced between being found and being clicked is gone for the browser ("Could not find
// node with given id") and the mouse was not pressed, so click finds the element again and clicks
// that, as a person would click the row now on screen.
func (b *browser) click(sel string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	for {
		err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		if err == nil {
			return
		}
		if !nodeReplaced(err) || ctx.Err() != nil {
			b.t.Fatalf("click %s: %v\npage: %s", sel, err, b.text("document.body.innerText"))
		}
	}
}

// nodeReplaced reports whether err is the browser's answer about a node that left the document.
func nodeReplaced(err error) bool {
	var e *cdproto.Error
	return errors.As(err, &e) && strings.Contains(strings.ToLower(e.Message), "node with given id")
}

// waitFor waits until the JavaScript expression is true.
func (b *browser) waitFor(what, expr string) {
	b.t.Helper()
	b.do("wait for "+what+" ("+expr+")", chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(10*time.Second),
		chromedp.WithPollingInterval(20*time.Millisecond)))
}

// text evaluates a JavaScript expression to a string.
func (b *browser) text(expr string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		return fmt.Sprintf("(%s: %v)", expr, err)
	}
	return s
}

// JavaScript expressions on the page.
const (
	jsRowIDs    = `[...document.querySelectorAll("#messages tbody tr[data-id]")].map(r => r.dataset.id).join(",")`
	jsError     = `document.getElementById("error").hidden ? "" : document.getElementById("error-text").textContent`
	jsPausedOn  = `!document.getElementById("b-paused").hidden`
	jsDialog    = `document.getElementById("confirm").open`
	jsDialogTxt = `document.getElementById("confirm-text").textContent`
)

// jsCell is the expression of the text of a topic's count cell in the
// topics table: scheduled, due, leased or dead.
func jsCell(topic, k string) string {
	return fmt.Sprintf(`(document.querySelector('#topics-table tr[data-topic=%q] td.%s') || {}).textContent`, topic, k)
}

// pageQueue is a server on a real engine whose messages die after two
// attempts, serving the handler in h (so that a test can swap the server,
// keeping the queue).
type pageQueue struct {
	q  queue.Engine
	h  atomic.Pointer[Server]
	ts *httptest.Server
	// auth is the header of the API calls the test makes itself.
	auth []string
}

// newPageQueue serves a delayq queue.
func newPageQueue(t *testing.T, opts ...Option) *pageQueue {
	t.Helper()
	q, err := delayq.Open(t.TempDir(), delayq.WithMaxAttempts(2))
	if err != nil {
		t.Fatal(err)
	}
	return servePage(t, q, opts...)
}

// newPageQueueRedis serves a redisq queue on a redis-server of its own.
func newPageQueueRedis(t *testing.T, opts ...Option) *pageQueue {
	t.Helper()
	return servePage(t, openRedisq(t, redistest.Start(t).Addr, redisq.WithMaxAttempts(2)), opts...)
}

// servePage serves q, which it closes when the test ends.
func servePage(t *testing.T, q queue.Engine, opts ...Option) *pageQueue {
	t.Cleanup(func() {
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	})
	p := &pageQueue{q: q}
	p.h.Store(New(q, opts...))
	p.ts = newHTTPTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.h.Load().ServeHTTP(w, r) }))
	return p
}

func (p *pageQueue) call(t *testing.T, method, path, body string) result {
	t.Helper()
	return call(t, p.ts, method, path, body, p.auth...)
}

// put puts a message with a chosen ID, due after delay.
func (p *pageQueue) put(t *testing.T, topic, id, payload, delay string) {
	t.Helper()
	r := p.call(t, "POST", api.PutPath(topic), fmt.Sprintf(`{"id":%q,"payload":%s,"delay":%q}`, id, payload, delay))
	if r.status != 201 {
		t.Fatalf("put %s: %d %s", id, r.status, r.body)
	}
}

// receive receives the messages of topic that arrive within wait.
func (p *pageQueue) receive(t *testing.T, topic, wait string) []api.Delivery {
	t.Helper()
	r := p.call(t, "POST", api.ReceivePath(topic), fmt.Sprintf(`{"max":100,"wait":%q}`, wait))
	var got api.ReceiveResponse
	r.json(t, &got)
	if r.status != 200 {
		t.Fatalf("receive: %d %s", r.status, r.body)
	}
	return got.Messages
}

// receiveN receives n messages of topic, failing the test when they do
// not come within a few seconds or more come.
func (p *pageQueue) receiveN(t *testing.T, topic string, n int) []string {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(5 * time.Second); len(got) < n && time.Now().Before(deadline); {
		got = append(got, ids(p.receive(t, topic, "1s"))...)
	}
	if len(got) == n {
		got = append(got, ids(p.receive(t, topic, "0s"))...)
	}
	return got
}

// kill puts a message due now on topic and nacks it until it dies.
func (p *pageQueue) kill(t *testing.T, topic, id, payload string) {
	t.Helper()
	p.put(t, topic, id, payload, "0s")
	for range 2 {
		ms := p.receive(t, topic, "2s")
		if len(ms) != 1 || ms[0].ID != id {
			t.Fatalf("receive for the dead letter: %+v", ms)
		}
		if r := p.call(t, "POST", api.PathNack, `{"receipt":"`+ms[0].Receipt+`","delay":"0s"}`); r.status/100 != 2 {
			t.Fatalf("nack: %d %s", r.status, r.body)
		}
	}
}

// topic returns what GET /v1/topics says of name.
func (p *pageQueue) topic(t *testing.T, name string) api.Topic {
	t.Helper()
	var v api.TopicsResponse
	p.call(t, "GET", api.PathTopics, "").json(t, &v)
	for _, tp := range v.Topics {
		if tp.Topic == name {
			return tp
		}
	}
	return api.Topic{Topic: name}
}

func ids(ms []api.Delivery) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

// TestPageOperatesQueue drives the status page in headless Chromium over a
// real server on each engine as an operator would: open a topic
// from the topics table, page through its scheduled messages, look at one
// and cancel it, deliver one now, find a dead letter and requeue it (and
// see a consumer get it), requeue a selected one and then all, pause the
// topic (and see a receive wait), and purge its scheduled messages through
// the confirmation dialog.
func TestPageOperatesQueue(t *testing.T) {
	t.Run("delayq", func(t *testing.T) { pageOperatesQueue(t, newPageQueue(t)) })
	t.Run("redisq", func(t *testing.T) { pageOperatesQueue(t, newPageQueueRedis(t)) })
}

func pageOperatesQueue(t *testing.T, p *pageQueue) {
	for i := 1; i <= 5; i++ {
		p.put(t, "orders", fmt.Sprintf("s%d", i), fmt.Sprintf(`{"n":%d,"sku":"tea"}`, i), fmt.Sprintf("%dh", i))
	}
	p.put(t, "emails", "e1", `"hello"`, "1h")
	p.put(t, "emails", "e2", `"again"`, "2h")
	for i := 1; i <= 4; i++ {
		p.kill(t, "orders", fmt.Sprintf("d%d", i), fmt.Sprintf(`{"order":%d}`, 6+i))
	}

	b := newBrowser(t, 1400, 1000, "")
	b.open(p.ts.URL + "/?limit=2")
	b.waitFor("the topics table", jsCell("orders", "dead")+` === "4" && `+jsCell("orders", "scheduled")+` === "5"`)
	b.click(`#topics-table tr[data-topic="orders"] button.link`)

	// Scheduled messages in due-time order, two a page, forwards and back.
	b.waitFor("the first page", jsRowIDs+` === "s1,s2"`)
	b.click("#b-next")
	b.waitFor("the second page", jsRowIDs+` === "s3,s4"`)
	b.click("#b-next")
	b.waitFor("the last page", jsRowIDs+` === "s5" && document.getElementById("b-next").disabled`)
	b.click("#b-prev")
	b.waitFor("the second page again", jsRowIDs+` === "s3,s4"`)
	b.click("#b-prev")
	b.waitFor("the first page again", jsRowIDs+` === "s1,s2" && document.getElementById("b-prev").disabled`)

	// A row opens the whole message.
	b.click(`#messages tr[data-id="s2"] td.id`)
	b.waitFor("the message", `document.getElementById("detail-payload").textContent.includes('"sku": "tea"')`)

	// Cancel from the message's view, through the dialog.
	b.click(`#detail-actions button.cancel`)
	b.waitFor("the dialog", jsDialog)
	if txt := b.text(jsDialogTxt); !strings.Contains(txt, "s2") || !strings.Contains(txt, "orders") {
		t.Errorf("cancel dialog says %q; want the message and its topic", txt)
	}
	b.click("#confirm-ok")
	b.waitFor("s2 to go", jsRowIDs+` === "s1,s3" && document.getElementById("detail").hidden`)
	if r := p.call(t, "GET", api.MessagePath("s2"), ""); r.status != 404 {
		t.Fatalf("s2 cancelled from the page: GET answers %d %s", r.status, r.body)
	}

	// Deliver now.
	b.click(`#messages tr[data-id="s1"] button.deliver`)
	b.waitFor("s1 to leave the scheduled messages", jsRowIDs+` === "s3,s4"`)
	var s1 api.MessageInfo
	p.call(t, "GET", api.MessagePath("s1"), "").json(t, &s1)
	if s1.State != api.StateDue {
		t.Fatalf("s1 delivered now is %q, want due", s1.State)
	}

	// The dead letter, requeued from the dead tab, reaches a consumer.
	b.click(`#tabs button[data-state="dead"]`)
	b.waitFor("the dead letters", jsRowIDs+` === "d1,d2"`)
	if got := b.text(`document.querySelector('#messages tr[data-id="d1"]').innerText`); !strings.Contains(got, "nack") ||
		!strings.Contains(got, `{"order":7}`) {
		t.Errorf("dead letter row %q lacks its last failure or payload", got)
	}
	b.click(`#messages tr[data-id="d1"] button.requeue`)
	b.waitFor("d1 to leave the dead tab", jsRowIDs+` === "d2,d3"`)
	if e := b.text(jsError); e != "" {
		t.Fatalf("page shows error %q", e)
	}
	// s1, delivered now, and d1.
	if got := strings.Join(p.receiveN(t, "orders", 2), ","); got != "s1,d1" && got != "d1,s1" {
		t.Fatalf("after requeue of d1 a consumer received %v, want s1 and d1", got)
	}

	// Requeue the selected ones, then all that are left, through the dialog.
	b.click(`#messages tr[data-id="d3"] input`)
	b.waitFor("the selection", `document.getElementById("b-requeue-selected").textContent === "requeue selected (1)"`)
	b.click("#b-requeue-selected")
	b.waitFor("d3 to leave the dead tab", jsRowIDs+` === "d2,d4"`)
	if got := strings.Join(p.receiveN(t, "orders", 1), ","); got != "d3" {
		t.Fatalf("after requeue of the selected d3 a consumer received %v", got)
	}
	b.click("#b-requeue-all")
	b.waitFor("the dialog", jsDialog)
	if txt := b.text(jsDialogTxt); !strings.Contains(txt, "orders") || !strings.Contains(txt, "2 dead letters") {
		t.Errorf("requeue-all dialog says %q; want the topic and the count", txt)
	}
	b.click("#confirm-ok")
	b.waitFor("the dead tab to empty", jsRowIDs+` === "" && document.querySelector("#messages tr.empty") !== null`)
	if got := strings.Join(p.receiveN(t, "orders", 2), ","); got != "d2,d4" && got != "d4,d2" {
		t.Fatalf("after requeue of all a consumer received %v, want d2 and d4", got)
	}

	// Pause: the badge shows and a receive waits; resume delivers.
	b.click("#b-pause")
	b.waitFor("the paused badge", jsPausedOn+` && document.querySelector('#topics-table tr[data-topic="orders"] .badge') !== null`)
	if !p.topic(t, "orders").Paused {
		t.Fatal("orders is not paused after the page paused it")
	}
	p.put(t, "orders", "p1", "1", "0s")
	if got := p.receive(t, "orders", "300ms"); len(got) != 0 {
		t.Fatalf("receive on the paused topic got %v", ids(got))
	}
	b.click("#b-pause")
	b.waitFor("the badge to go", `!(`+jsPausedOn+`)`)
	if got := ids(p.receive(t, "orders", "2s")); strings.Join(got, ",") != "p1" {
		t.Fatalf("receive after resume got %v, want p1", got)
	}

	// Purge scheduled: cancelling the dialog removes nothing; accepting it
	// removes the four scheduled messages it names.
	b.click(`#tabs button[data-state="scheduled"]`)
	b.waitFor("the scheduled tab", jsRowIDs+` === "s3,s4"`)
	b.click("#b-purge")
	b.waitFor("the dialog", jsDialog)
	if txt := b.text(jsDialogTxt); !strings.Contains(txt, "orders") || !strings.Contains(txt, "3 scheduled messages") {
		t.Errorf("purge dialog says %q; want the topic, the state and the count", txt)
	}
	b.click("#confirm-cancel")
	b.waitFor("the dialog to close", `!`+jsDialog)
	if n := p.topic(t, "orders").Scheduled; n != 3 {
		t.Fatalf("after a cancelled purge %d scheduled, want 3", n)
	}
	b.click("#b-purge")
	b.waitFor("the dialog", jsDialog)
	b.click("#confirm-ok")
	b.waitFor("the scheduled count to reach zero", jsCell("orders", "scheduled")+` === "0" && `+jsRowIDs+` === ""`)
	if tp := p.topic(t, "orders"); tp.Scheduled != 0 {
		t.Fatalf("after the purge orders has %d scheduled", tp.Scheduled)
	}
	if tp := p.topic(t, "emails"); tp.Scheduled != 2 {
		t.Fatalf("the purge of orders left emails %d scheduled, want 2", tp.Scheduled)
	}
	if e := b.text(jsError); e != "" {
		t.Fatalf("page shows error %q", e)
	}
}

// TestPageToken checks the page's actions under a token: the page opened
// with the token (typed at the browser's prompt) pauses a topic; once the
// server wants another token, the page's resume is refused, the page says
// why, and the topic stays paused.
func TestPageToken(t *testing.T) {
	p := newPageQueue(t, WithToken("s3cret"))
	p.auth = []string{"Authorization", "Bearer s3cret"}
	p.put(t, "orders", "s1", "1", "1h")

	b := newBrowser(t, 1200, 900, "s3cret")
	b.open(p.ts.URL + "/")
	b.waitFor("the topics table", jsCell("orders", "scheduled")+` === "1"`)
	// A refresh updates the row in place: a button rebuilt under a pressed mouse loses the click.
	b.do("mark the pause button", chromedp.Evaluate[chromedp.Void](
		`window.marked = document.querySelector('#topics-table tr[data-topic="orders"] button.pause')`))
	p.put(t, "orders", "s2", "2", "1h")
	b.waitFor("the refreshed count", jsCell("orders", "scheduled")+` === "2"`)
	if kept := b.text(`String(window.marked.isConnected)`); kept != "true" {
		t.Fatal("a refresh of the topics table replaced the row's pause button")
	}
	b.click(`#topics-table tr[data-topic="orders"] button.pause`)
	b.waitFor("the paused badge", `document.querySelector('#topics-table tr[data-topic="orders"] .badge') !== null`)
	if !p.topic(t, "orders").Paused {
		t.Fatal("the page with the token did not pause orders")
	}

	// The same queue served with another token: the page's token is now wrong.
	p.h.Store(New(p.q, WithToken("rotated")))
	p.auth = []string{"Authorization", "Bearer rotated"}
	b.click(`#topics-table tr[data-topic="orders"] button.pause`)
	b.waitFor("the error", jsError+`.includes("token")`)
	if !p.topic(t, "orders").Paused {
		t.Fatal("the page without the token resumed orders")
	}
	t.Logf("the page says: %s", b.text(jsError))
}

// TestPageShowsDeadLettersOnce checks that the topics table shows a dead letter once, as a dead
// letter of the topic it died on: the engines also count it as a due message of the dead-letter
// topic, which the table showed as a second row whose oldest due grew like a stuck backlog (issue
// 22). A dead-letter topic that holds messages of its own is shown with those only.
func TestPageShowsDeadLettersOnce(t *testing.T) {
	t.Run("delayq", func(t *testing.T) { pageShowsDeadLettersOnce(t, newPageQueue(t)) })
	t.Run("redisq", func(t *testing.T) { pageShowsDeadLettersOnce(t, newPageQueueRedis(t)) })
}

func pageShowsDeadLettersOnce(t *testing.T, p *pageQueue) {
	for i := range 3 {
		p.kill(t, "payments", fmt.Sprintf("pay-%d", i), `{"error":"card declined"}`)
	}
	p.put(t, "emails", "e1", `"hello"`, "1h")
	if tp := p.topic(t, "payments.dead"); tp.Due != 3 {
		t.Fatalf("the engine counts %d due messages on payments.dead, not the 3 dead letters: the test's premise is gone", tp.Due)
	}
	jsRows := `[...document.querySelectorAll("#topics-table tbody tr")].map(r => r.dataset.topic).join(",")`

	b := newBrowser(t, 1200, 900, "")
	b.open(p.ts.URL + "/")
	// One refresh draws the whole table: once payments shows its dead letters, the rows are those
	// of that same answer.
	b.waitFor("the topics table", jsCell("payments", "dead")+` === "3" && `+jsCell("emails", "scheduled")+` === "1"`)
	if rows := b.text(jsRows); rows != "emails,payments" {
		t.Fatalf("topics table rows %q; want emails,payments (the dead letters once, as payments's)", rows)
	}

	// A message of payments.dead's own is shown there, without the dead letters.
	p.put(t, "payments.dead", "own", `"mine"`, "1h")
	b.waitFor("the dead-letter topic's own message", jsCell("payments.dead", "scheduled")+` === "1"`)
	if rows := b.text(jsRows); rows != "emails,payments,payments.dead" {
		t.Fatalf("topics table rows %q; want emails,payments,payments.dead", rows)
	}
	due := b.text(jsCell("payments.dead", "due"))
	wait := b.text(`document.querySelector('#topics-table tr[data-topic="payments.dead"] td.wait').textContent`)
	if due != "0" || wait != "–" {
		t.Fatalf("payments.dead shows due %q, oldest due waits %q; want 0 and –: its due messages are the dead letters of payments", due, wait)
	}
	if e := b.text(jsError); e != "" {
		t.Fatalf("page shows error %q", e)
	}
}

// TestPageWithoutAdmin opens the page on an engine that cannot be
// operated: the page says so where the topics would be, and stops asking.
func TestPageWithoutAdmin(t *testing.T) {
	ts := newHTTPTestServer(t, New(plainEngine{openEngine(t)}))
	b := newBrowser(t, 1200, 900, "")
	b.open(ts.URL + "/")
	b.waitFor("the note", `document.getElementById("topics-note").textContent.includes("queue.Admin") &&
		document.getElementById("topics-table").hidden`)
	b.waitFor("the charts", `document.getElementById("t-scheduled").textContent !== "–"`)
}

// TestPageScreenshot takes the picture of the status page open on a topic
// for the README: several topics, one paused, dead letters with their
// failures, and a message opened. With -page-screenshot FILE it writes it.
func TestPageScreenshot(t *testing.T) {
	p := newPageQueue(t)
	var batch strings.Builder
	batch.WriteString(`{"messages":[`)
	for i := range 400 {
		if i > 0 {
			batch.WriteByte(',')
		}
		fmt.Fprintf(&batch, `{"id":"inv-%04d","delay":"%ds","payload":{"invoice":%d,"customer":"c-%03d","amount":%d.%02d,"currency":"EUR"}}`,
			i, 30+i*9, 7000+i, i*37%1000, 10+i*13%900, i%100)
	}
	batch.WriteString(`]}`)
	if r := p.call(t, "POST", api.BatchPath("invoices"), batch.String()); r.status != 201 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	for i := range 3 {
		p.kill(t, "invoices", fmt.Sprintf("inv-dead-%d", i), fmt.Sprintf(`{"invoice":%d,"error":"card declined"}`, 6990+i))
	}
	p.put(t, "emails", "welcome-ada", `{"to":"ada@example.com","template":"welcome"}`, "90s")
	p.put(t, "emails", "digest-1", `{"to":"grace@example.com","template":"digest"}`, "0s")
	p.put(t, "reports", "nightly", `{"report":"nightly"}`, "20m")
	if r := p.call(t, "POST", api.PausePath("reports"), ""); r.status != 200 {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}

	b := newBrowser(t, 1400, 1000, "")
	b.open(p.ts.URL + "/?limit=8")
	b.waitFor("the topics table", jsCell("invoices", "dead")+` === "3"`)
	b.click(`#topics-table tr[data-topic="invoices"] button.link`)
	b.waitFor("the first page", jsRowIDs+` === "inv-0000,inv-0001,inv-0002,inv-0003,inv-0004,inv-0005,inv-0006,inv-0007"`)
	b.click(`#tabs button[data-state="dead"]`)
	b.waitFor("the dead letters", jsRowIDs+`.split(",").length === 3`)
	b.click(`#messages tr[data-id="inv-dead-1"] input`)
	b.click(`#messages tr[data-id="inv-dead-1"] td.id`)
	b.waitFor("the message", `!document.getElementById("detail").hidden`)
	// Traffic while the page watches, for the rates.
	for range 3 {
		var emails strings.Builder
		emails.WriteString(`{"messages":[`)
		for i := range 40 {
			if i > 0 {
				emails.WriteByte(',')
			}
			fmt.Fprintf(&emails, `{"payload":{"to":"user%d@example.com","template":"reminder"}}`, i)
		}
		emails.WriteString(`]}`)
		p.call(t, "POST", api.BatchPath("emails"), emails.String())
		for _, m := range p.receive(t, "emails", "1s") {
			p.call(t, "POST", api.PathAck, `{"receipts":["`+m.Receipt+`"]}`)
		}
	}
	b.waitFor("the rates", `(document.querySelector('#topics-table tr[data-topic="emails"] td.rate-puts') || {}).textContent !== "0"`)
	// Let the charts draw, then look from the top of the browser section.
	b.waitFor("the wheel", `document.getElementById("t-scheduled").textContent !== "–"`)
	b.do("scroll", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, document.getElementById("topics").offsetTop - 16)`))

	shot, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if *pageScreenshotOut != "" {
		if err := os.WriteFile(*pageScreenshotOut, shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var rows struct {
		Topics, Messages int
	}
	if err := json.Unmarshal([]byte(b.text(`JSON.stringify({Topics: document.querySelectorAll("#topics-table tbody tr").length,
		Messages: document.querySelectorAll("#messages tbody tr[data-id]").length})`)), &rows); err != nil {
		t.Fatal(err)
	}
	if rows.Topics < 3 || rows.Messages != 3 {
		t.Errorf("the page shows %d topics and %d messages, want at least 3 and 3", rows.Topics, rows.Messages)
	}
}
