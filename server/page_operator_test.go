package server

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/testwait"
)

// The status page as an operator tried it (issue 23): each test here failed on the page before.

// jsTimeCell is the expression of the text of the time cell of message id in the browser.
func jsTimeCell(id string) string {
	return fmt.Sprintf(`(((document.querySelector('#messages tr[data-id=%q]') || {cells: []}).cells[2] || {}).textContent || "")`, id)
}

// TestPageDetailInView opens a message of a full page of 50: its detail, drawn below the page,
// must be on screen, not 50 rows further down.
func TestPageDetailInView(t *testing.T) {
	p := newPageQueue(t)
	var batch strings.Builder
	batch.WriteString(`{"messages":[`)
	for i := range 60 {
		if i > 0 {
			batch.WriteByte(',')
		}
		fmt.Fprintf(&batch, `{"id":"m-%02d","delay":"%dm","payload":{"n":%d}}`, i, 10+i, i)
	}
	batch.WriteString(`]}`)
	if r := p.call(t, "POST", api.BatchPath("orders"), batch.String()); r.status != 201 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	b := newBrowser(t, 1200, 900, "")
	b.open(p.ts.URL + "/")
	b.waitFor("the topics table", jsCell("orders", "scheduled")+` === "60"`)
	b.click(`#topics-table tr[data-topic="orders"] button.link`)
	b.waitFor("the first page", jsRowIDs+`.split(",").length === 50`)
	b.click(`#messages tr[data-id="m-00"] td.id`)
	b.waitFor("the message's detail", `!document.getElementById("detail").hidden && document.getElementById("detail-payload").textContent.includes("\"n\": 0")`)
	// Scrolling may be smooth: wait for the detail to come on screen.
	b.waitFor("the detail on screen", `(r => r.top >= 0 && r.top < innerHeight - 40)(document.getElementById("detail").getBoundingClientRect())`)
}

// TestPageTimeColumn checks the browser's time column by tab: due for scheduled and due messages,
// "lease ends" for leased ones, and "died" for dead letters, with when they died (as tock peek
// has them; the page said "due", with the time the letter was last due).
func TestPageTimeColumn(t *testing.T) {
	p := newPageQueue(t)
	p.put(t, "orders", "later", `1`, "1h")
	p.kill(t, "orders", "gone", `2`)
	p.put(t, "orders", "held", `3`, "0s")
	if got := ids(p.receive(t, "orders", "2s")); len(got) != 1 || got[0] != "held" {
		t.Fatalf("receive: %v", got)
	}
	b := newBrowser(t, 1200, 900, "")
	b.open(p.ts.URL + "/")
	b.waitFor("the topics table", jsCell("orders", "dead")+` === "1"`)
	b.click(`#topics-table tr[data-topic="orders"] button.link`)
	jsHead := `document.getElementById("b-time-head").textContent`
	for _, tc := range []struct{ state, id, head string }{
		{"scheduled", "later", "due"}, {"leased", "held", "lease ends"}, {"dead", "gone", "died"},
	} {
		b.click(fmt.Sprintf(`#tabs button[data-state=%q]`, tc.state))
		b.waitFor(tc.state+" messages", jsRowIDs+fmt.Sprintf(` === %q`, tc.id))
		if head := b.text(jsHead); head != tc.head {
			t.Errorf("the %s tab's time column is %q; want %q", tc.state, head, tc.head)
		}
		cell := b.text(jsTimeCell(tc.id))
		switch tc.state {
		case "scheduled":
			if !strings.HasPrefix(cell, "in 59m") {
				t.Errorf("a message due in an hour shows %q", cell)
			}
		case "leased":
			if !strings.HasPrefix(cell, "in ") {
				t.Errorf("a lease of 30 s shows %q; want when it ends", cell)
			}
		case "dead":
			if !strings.HasSuffix(cell, " ago") {
				t.Errorf("a dead letter shows %q; want how long ago it died", cell)
			}
		}
	}
}

// TestPageScheduledTimes checks that a scheduled message due within seconds shows how
// long, not "now", that the time keeps moving while the page is left alone, and that once the
// message's time has passed while it is still listed as scheduled the row says so ("due,
// waiting") rather than "now"; the refreshed page then has it under due.
func TestPageScheduledTimes(t *testing.T) {
	p := newPageQueue(t)
	p.put(t, "orders", "later", `2`, "1h")
	b := newBrowser(t, 1200, 900, "")
	b.open(p.ts.URL + "/")
	b.waitFor("the topics table", jsCell("orders", "scheduled")+` === "1"`)
	// Put once the page is up, so that it is still scheduled when shown on a slow machine.
	p.put(t, "orders", "soon", `1`, "8s")
	b.click(`#topics-table tr[data-topic="orders"] button.link`)
	b.waitFor("the scheduled messages", jsRowIDs+` === "soon,later"`)
	if cell := b.text(jsTimeCell("soon")); !regexp.MustCompile(`^in [0-8]\.[0-9]s$`).MatchString(cell) {
		t.Errorf("a message due within 8 s shows %q; want the time to a tenth of a second", cell)
	}
	b.waitFor("the passed time, said honestly", jsTimeCell("soon")+`.startsWith("due, waiting · ") && `+jsTimeCell("soon")+`.endsWith(" ago")`)
	// The engine's lateness is not what this test checks: a minute bounds a bug, not a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testwait.Until(t, ctx, "the engine to make the message due", func() bool { return p.topic(t, "orders").Due == 1 })
	b.click("#b-refresh")
	b.waitFor("the scheduled tab without it", jsRowIDs+` === "later"`)
	b.click(`#tabs button[data-state="due"]`)
	b.waitFor("it, due", jsRowIDs+` === "soon"`)
	if cell := b.text(jsTimeCell("soon")); !strings.HasSuffix(cell, " ago") || strings.HasPrefix(cell, "due, waiting") {
		t.Errorf("the due message shows %q", cell)
	}
}

// TestPageRateScales floods the throughput chart with puts beside a few deliveries and acks:
// hiding puts in the legend scales the chart to the others.
func TestPageRateScales(t *testing.T) {
	p := newPageQueue(t)
	var batch strings.Builder
	batch.WriteString(`{"messages":[`)
	for i := range 5000 {
		if i > 0 {
			batch.WriteByte(',')
		}
		batch.WriteString(`{"delay":"1h"}`)
	}
	batch.WriteString(`]}`)
	b := newBrowser(t, 1200, 900, "")
	b.open(p.ts.URL + "/")
	b.waitFor("the charts", `document.getElementById("rate").dataset.top !== undefined`)
	if r := p.call(t, "POST", api.BatchPath("flood"), batch.String()); r.status != 201 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	p.put(t, "few", "a", `1`, "0s")
	p.put(t, "few", "b", `2`, "0s")
	for _, m := range p.receive(t, "few", "2s") {
		p.call(t, "POST", api.PathAck, `{"receipts":["`+m.Receipt+`"]}`)
	}
	jsTop := `Number(document.getElementById("rate").dataset.top)`
	b.waitFor("the flood on the chart", jsTop+` >= 500`)
	b.click(`#rate-legend button[data-series="puts"]`)
	b.waitFor("the chart scaled to deliveries and acks", jsTop+` > 0 && `+jsTop+` <= 5`)
	if pressed := b.text(`document.querySelector('#rate-legend button[data-series="puts"]').getAttribute("aria-pressed")`); pressed != "false" {
		t.Errorf("the puts button says aria-pressed=%q once hidden", pressed)
	}
	b.click(`#rate-legend button[data-series="puts"]`)
	b.waitFor("the flood back", jsTop+` >= 500`)
}

// TestPageViewInURL opens the page on a URL naming a topic, a tab and a message, and checks that
// the view opens; and that moving through the browser keeps the URL naming the view.
func TestPageViewInURL(t *testing.T) {
	p := newPageQueue(t)
	p.put(t, "orders", "s1", `{"sku":"tea"}`, "1h")
	p.kill(t, "orders", "d1", `{"order":7}`)
	b := newBrowser(t, 1200, 900, "")
	b.open(p.ts.URL + "/#topic=orders&state=dead&message=d1")
	b.waitFor("the dead letter, opened", `!document.getElementById("browser").hidden && document.getElementById("b-topic").textContent === "orders" &&
		document.querySelector('#tabs button[data-state="dead"]').className === "on" && !document.getElementById("detail").hidden &&
		document.getElementById("detail-fields").textContent.includes("d1")`)
	b.waitFor("its row", jsRowIDs+` === "d1"`)
	b.click(`#tabs button[data-state="scheduled"]`)
	b.waitFor("the tab in the URL", `location.hash === "#topic=orders&state=scheduled"`)
	b.waitFor("the scheduled message", jsRowIDs+` === "s1"`)
	b.click(`#messages tr[data-id="s1"] td.id`)
	b.waitFor("the message in the URL", `location.hash === "#topic=orders&state=scheduled&message=s1"`)
	b.click(`#detail-actions button.close`)
	b.waitFor("the message out of the URL", `location.hash === "#topic=orders&state=scheduled"`)
	b.click("#b-close")
	b.waitFor("the view out of the URL", `location.hash === ""`)
}

// TestPageNarrow opens the page 420 px wide, a phone's width: nothing overflows sideways, the
// charts and the tables with their topic open included (a table scrolls inside its section).
func TestPageNarrow(t *testing.T) {
	p := newPageQueue(t)
	p.put(t, "a-topic-with-a-long-name", "a-message-with-a-long-id", `{"payload":"long enough to need room"}`, "1h")
	b := newBrowser(t, 420, 900, "")
	b.open(p.ts.URL + "/")
	b.waitFor("the charts", `document.getElementById("t-scheduled").textContent !== "–"`)
	b.waitFor("the topics table", jsCell("a-topic-with-a-long-name", "scheduled")+` === "1"`)
	b.click(`#topics-table tr[data-topic="a-topic-with-a-long-name"] button.link`)
	b.waitFor("the message", jsRowIDs+` === "a-message-with-a-long-id"`)
	var got struct {
		Page, Width int
		Wide        []string
	}
	if err := json.Unmarshal([]byte(b.text(`JSON.stringify({Page: document.documentElement.scrollWidth, Width: innerWidth,
		Wide: [...document.querySelectorAll("canvas, section, .tile, header")].filter(e => e.getBoundingClientRect().right > innerWidth + 0.5).map(e => e.id || e.className || e.tagName)})`)), &got); err != nil {
		t.Fatal(err)
	}
	if got.Page > got.Width || len(got.Wide) > 0 {
		t.Errorf("at 420 px the page is %d px wide in a window of %d; wider than the window: %q", got.Page, got.Width, got.Wide)
	}
}

// TestPageUptime checks that the page says how long tockd has run in a person's units (it said
// "up 813 s").
func TestPageUptime(t *testing.T) {
	q, err := delayq.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The server's clock stands still at its start plus up: its uptime is exactly up, however long
	// the browser takes to ask, which a running clock plus a skew left to chance.
	var up atomic.Int64
	var srv atomic.Pointer[Server]
	p := servePage(t, q, withClock(func() time.Time {
		if s := srv.Load(); s != nil {
			return s.started.Add(time.Duration(up.Load()))
		}
		return time.Now()
	}))
	srv.Store(p.h.Load())
	b := newBrowser(t, 1200, 900, "")
	b.open(p.ts.URL + "/")
	for _, tc := range []struct {
		up   time.Duration
		want string // a regular expression of the connection line
	}{
		{813 * time.Second, `up 13m3[3-9]s · `}, {2*time.Hour + 5*time.Minute + 7*time.Second, `up 2h5m · `},
		{3*24*time.Hour + 4*time.Hour + 30*time.Minute, `up 3d4h · `},
	} {
		up.Store(int64(tc.up))
		b.waitFor(tc.want, `/`+tc.want+`/.test(document.getElementById("conn").textContent)`)
	}
}
