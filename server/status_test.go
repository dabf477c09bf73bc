package server

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/png"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/internal/redistest"
)

var screenshotOut = flag.String("screenshot", "", "also write the status page screenshot to this `file`")

// TestStatusPageScreenshot loads the status page in headless Chromium over
// a real server with a real queue, on each engine, and checks the
// screenshot shows the page drawn with data: the wheel's spokes, the
// throughput and lateness lines, not a blank or unstyled page. The
// screenshot of -screenshot is the embedded engine's.
func TestStatusPageScreenshot(t *testing.T) {
	chromium(t)
	t.Run("delayq", func(t *testing.T) {
		var skew atomic.Int64
		ts, _ := newTestServer(t, withClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }))
		statusPageScreenshot(t, ts, &skew, *screenshotOut)
	})
	t.Run("redisq", func(t *testing.T) {
		q := openRedisq(t, redistest.Start(t).Addr)
		t.Cleanup(func() { q.Close() })
		var skew atomic.Int64
		ts := newHTTPTestServer(t, New(q, withClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })))
		statusPageScreenshot(t, ts, &skew, "")
	})
}

// statusPageScreenshot is TestStatusPageScreenshot on the server of ts,
// whose clock runs skew ahead. It writes the screenshot to out unless out
// is empty.
func statusPageScreenshot(t *testing.T, ts *httptest.Server, skew *atomic.Int64, out string) {

	// Messages over the next hour with a burst ten minutes out, and some
	// due now that are received, for throughput and lateness.
	rng := rand.New(rand.NewPCG(1, 2))
	var batch bytes.Buffer
	batch.WriteString(`{"messages":[`)
	for i := range 3000 {
		if i > 0 {
			batch.WriteByte(',')
		}
		d := time.Duration(rng.Int64N(int64(time.Hour)))
		if i%3 == 0 {
			d = 10*time.Minute + time.Duration(rng.Int64N(int64(20*time.Second)))
		}
		fmt.Fprintf(&batch, `{"delay":%q,"payload":%d}`, d.String(), i)
	}
	batch.WriteString(`]}`)
	if r := call(t, ts, "POST", "/v1/topics/shot/batch", batch.String()); r.status != 201 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	for range 20 {
		call(t, ts, "POST", "/v1/topics/now/batch", `{"messages":[{},{},{},{},{}]}`)
		r := call(t, ts, "POST", "/v1/topics/now/receive", `{"max":5,"wait":"1s"}`)
		var got struct {
			Messages []struct {
				Receipt string `json:"receipt"`
			} `json:"messages"`
		}
		r.json(t, &got)
		for _, m := range got.Messages {
			call(t, ts, "POST", "/v1/ack", `{"receipts":["`+m.Receipt+`"]}`)
		}
	}

	// The page charts whole seconds before now: look from two seconds on
	// so that the activity above is on the charts.
	skew.Store(int64(2 * time.Second))

	// Look once the page has fetched the stats and drawn them: it draws the
	// charts as it writes the counts, in one step.
	tab := newTab(t, 1400, 860)
	ctx, cancel := context.WithTimeout(tab, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/"),
		chromedp.Poll[chromedp.Void](`document.getElementById("t-scheduled").textContent !== "–"`,
			chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	data, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if out != "" {
		if err := os.WriteFile(out, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	b := img.Bounds()
	if b.Dx() < 1000 || b.Dy() < 600 {
		t.Fatalf("screenshot is %v", b)
	}
	colors := map[[3]uint8]int{}
	near := func(c [3]uint8, r, g, bl int) bool {
		return abs(int(c[0])-r) < 40 && abs(int(c[1])-g) < 40 && abs(int(c[2])-bl) < 40
	}
	var spokes, puts, background int
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := rgb(img, x, y)
			colors[c]++
			switch {
			case int(c[0]) > 120 && int(c[0])-int(c[1]) > 30 && int(c[1])-int(c[2]) > 40:
				spokes++ // orange, blended or not: the wheel's spokes (and the p50 line)
			case near(c, 0x4f, 0xc3, 0xf7):
				puts++ // the puts/s line
			case c == [3]uint8{0x0f, 0x14, 0x20}:
				background++
			}
		}
	}
	total := b.Dx() * b.Dy()
	t.Logf("screenshot %v: %d colours, %d spoke pixels, %d puts-line pixels, %.0f%% background",
		b, len(colors), spokes, puts, 100*float64(background)/float64(total))
	switch {
	case len(colors) < 50:
		t.Errorf("only %d colours: the page did not render", len(colors))
	case background < total/8:
		t.Errorf("background covers %d of %d pixels: the stylesheet did not apply", background, total)
	case spokes < 2000:
		t.Errorf("%d pixels of the wheel's colour: the wheel was not drawn with data", spokes)
	case puts < 100:
		t.Errorf("%d pixels of the puts line: the throughput chart was not drawn", puts)
	}
}

func rgb(img image.Image, x, y int) [3]uint8 {
	r, g, b, _ := img.At(x, y).RGBA()
	return [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// The stats the page polls must decode as the page expects.
func TestStatsShape(t *testing.T) {
	ts, _ := newTestServer(t)
	r := call(t, ts, "GET", "/v1/stats?history=30&forecast=60", "")
	var m map[string]json.RawMessage
	r.json(t, &m)
	for _, k := range []string{"scheduled", "due", "leased", "lateness", "queue_lateness", "history", "forecast", "uptime_seconds", "time"} {
		if _, ok := m[k]; !ok {
			t.Errorf("stats lack %q: %s", k, r.body)
		}
	}
	var st api.Stats
	r.json(t, &st)
	if len(st.History.Puts) != 30 || len(st.Forecast.Due) != 60 {
		t.Errorf("history %d seconds, forecast %d; want 30 and 60", len(st.History.Puts), len(st.Forecast.Due))
	}
}

// TestAxisTicksAreNice runs the status page's tick functions in headless
// Chromium. The charts labelled an idle axis "1, 1, 1, 0, 0" (quarters of
// 1.1, rounded) and a busy one "4678, 3508": labels are now steps of 1, 2
// or 5 times a power of ten.
func TestAxisTicksAreNice(t *testing.T) {
	var fns strings.Builder
	for _, name := range []string{"niceStep", "linearTicks", "countLabel", "logTicks"} {
		_, rest, ok := strings.Cut(string(statusPage), "\nfunction "+name+"(")
		body, _, ok2 := strings.Cut(rest, "\n}\n")
		if !ok || !ok2 {
			t.Fatalf("status.html has no function %s", name)
		}
		fns.WriteString("function " + name + "(" + body + "\n}\n")
	}
	harness := `<!doctype html><html><body><pre id="out"></pre><script>` + fns.String() + `
const his = [0, 1, 3, 0.3, 7, 99, 4678, 12345, 2.5e6];
document.getElementById("out").textContent = JSON.stringify({
  linear: his.map(h => linearTicks(h).map(t => t.label)),
  log: logTicks(1e-5, 100).map(t => t.label),
});
</script></body></html>`
	page := filepath.Join(t.TempDir(), "ticks.html")
	if err := os.WriteFile(page, []byte(harness), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(newTab(t, 800, 600), 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+page)); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("out").textContent`))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	var got struct {
		Linear [][]string `json:"linear"`
		Log    []string   `json:"log"`
	}
	if err := json.Unmarshal([]byte(text), &got); err != nil {
		t.Fatalf("harness output %q: %v", text, err)
	}
	want := [][]string{
		{"0", "0.5", "1.0"},
		{"0", "0.5", "1.0"},
		{"0", "1", "2", "3"},
		{"0", "0.1", "0.2", "0.3"},
		{"0", "2", "4", "6", "8"},
		{"0", "50", "100"},
		{"0", "2k", "4k", "6k"},
		{"0", "5k", "10k", "15k"},
		{"0", "1M", "2M", "3M"},
	}
	if fmt.Sprint(got.Linear) != fmt.Sprint(want) {
		t.Errorf("linear ticks\n got %v\nwant %v", got.Linear, want)
	}
	if w := []string{"10 µs", "100 µs", "1 ms", "10 ms", "100 ms", "1 s", "10 s", "100 s"}; fmt.Sprint(got.Log) != fmt.Sprint(w) {
		t.Errorf("log ticks %v, want %v", got.Log, w)
	}
}

// TestStatusPageHeaders checks the status page's security headers: a
// policy that runs only the page's own script and style (by hash, no
// 'unsafe-inline'), no framing, no referrer, no sniffing.
func TestStatusPageHeaders(t *testing.T) {
	ts, _ := newTestServer(t)
	r := call(t, ts, "GET", "/", "")
	csp := r.header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'sha256-", "style-src 'sha256-", "frame-ancestors 'none'",
		"connect-src 'self'", "form-action 'none'", "base-uri 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy %q allows unsafe sources", csp)
	}
	for name, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
		"Referrer-Policy": "no-referrer", "Cross-Origin-Opener-Policy": "same-origin"} {
		if got := r.header.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if strings.Contains(string(r.body), ` style="`) {
		t.Errorf("the page has inline style attributes, which its policy blocks")
	}
}
