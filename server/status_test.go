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
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

var screenshotOut = flag.String("screenshot", "", "also write the status page screenshot to this `file`")

// chromium returns the path of a Chromium or Chrome binary. Outside CI a
// test without one is skipped; in CI (CI set) it fails, so a CI image that
// lost the package cannot pass silently.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed; CI must install the Debian package chromium")
	}
	t.Skip("chromium is not installed (Debian package chromium)")
	return ""
}

// TestStatusPageScreenshot loads the status page in headless Chromium over
// a real server with a real queue, and checks the screenshot shows the
// page drawn with data: the wheel's spokes, the throughput and lateness
// lines, not a blank or unstyled page.
func TestStatusPageScreenshot(t *testing.T) {
	bin := chromium(t)
	var skew atomic.Int64
	ts, _ := newTestServer(t, withClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }))

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

	dir := t.TempDir()
	shot := filepath.Join(dir, "status.png")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars",
		"--user-data-dir="+filepath.Join(dir, "profile"),
		"--window-size=1400,860",
		// Let the page's first fetch of /v1/stats and its drawing run.
		"--virtual-time-budget=3000",
		"--screenshot="+shot,
		ts.URL+"/")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	data, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if *screenshotOut != "" {
		if err := os.WriteFile(*screenshotOut, data, 0o644); err != nil {
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
	case background < total/5:
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
	for _, k := range []string{"pending", "due", "leased", "lateness", "history", "forecast", "uptime_seconds", "time"} {
		if _, ok := m[k]; !ok {
			t.Errorf("stats lack %q: %s", k, r.body)
		}
	}
	var st Stats
	r.json(t, &st)
	if len(st.History.Puts) != 30 || len(st.Forecast.Due) != 60 {
		t.Errorf("history %d seconds, forecast %d; want 30 and 60", len(st.History.Puts), len(st.Forecast.Due))
	}
}
