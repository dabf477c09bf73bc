package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/contract"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/server"
)

// TestPagingMemory pages through the scheduled messages of one topic through the HTTP API, a page
// of 1,000 at a time, as the CLI's peek --all and the status page do, and checks that the
// server's memory stays flat: the heap in use while paging stays within a bound that does not
// grow with the number of messages, beside the memory of the server at rest with them. The
// server, its queue and the client share the process, so the figures include the client's pages.
// As the anchor it pages through the queue directly (queue.Admin.Messages) in the same run, and
// logs both: heap and RSS at rest, at their highest while paging, and after, and the time per
// page. The default is 20,000 messages; the README's figure is taken with a million:
//
//	TOCK_PAGING_MESSAGES=1000000 go test ./server -run TestPagingMemory -v
func TestPagingMemory(t *testing.T) {
	n := 20_000
	if s := os.Getenv("TOCK_PAGING_MESSAGES"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("TOCK_PAGING_MESSAGES=%q: want a positive number", s)
		}
	}
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync(), delayq.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	start := time.Now().Add(time.Hour)
	payload := []byte(`"` + strings.Repeat("p", 98) + `"`)
	const batch = 1000
	for i := 0; i < n; i += batch {
		ms := make([]queue.Message, 0, batch)
		for j := i; j < min(i+batch, n); j++ {
			// Spread over 20 hours of one-second slots, in an order that is not the due order.
			at := start.Add(time.Duration(j*7919%n) * (20 * time.Hour / time.Duration(n)))
			ms = append(ms, queue.Message{Topic: "t", Payload: payload, DeliverAt: at})
		}
		if _, err := q.PutBatch(ctx, ms); err != nil {
			t.Fatal(err)
		}
	}
	ts := httptest.NewServer(contract.Handler(t, server.New(q, server.WithLogger(quiet))))
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}

	direct := pageThrough(t, n, func(cursor string) ([]time.Time, string, error) {
		page, next, err := q.Messages(ctx, "t", queue.Scheduled, cursor, queue.MaxPage)
		at := make([]time.Time, len(page))
		for i, m := range page {
			at[i] = m.DeliverAt
		}
		return at, next, err
	})
	overHTTP := pageThrough(t, n, func(cursor string) ([]time.Time, string, error) {
		page, next, err := c.Messages(ctx, "t", queue.Scheduled, cursor, queue.MaxPage)
		at := make([]time.Time, len(page))
		for i, m := range page {
			at[i] = m.DeliverAt
		}
		return at, next, err
	})
	t.Logf("%d scheduled messages of one topic, %d pages of up to %d", n, overHTTP.pages, queue.MaxPage)
	for _, r := range []struct {
		name string
		p    paging
	}{{"over HTTP", overHTTP}, {"queue directly (anchor)", direct}} {
		t.Logf("%-24s %v a page (%v in all); heap in use %s at rest, %s at most while paging, %s after; RSS %s, %s, %s",
			r.name, r.p.perPage().Round(time.Microsecond), r.p.took.Round(time.Millisecond),
			mib(r.p.rest.heap), mib(r.p.peak.heap), mib(r.p.after.heap), mib(r.p.rest.rss), mib(r.p.peak.rss), mib(r.p.after.rss))
	}
	t.Logf("over HTTP / directly: %.1fx the time a page", float64(overHTTP.perPage())/float64(direct.perPage()))
	// A page holds at most MaxPage messages: its answer is about 300 KB of JSON, read and decoded
	// once. The rest is garbage the collector has not taken yet, a quarter of the live heap (see
	// pageThrough).
	if grew := overHTTP.peak.heap - min(overHTTP.rest.heap, overHTTP.peak.heap); grew > 64<<20 {
		t.Fatalf("the heap grew by %s while paging over HTTP", mib(grew))
	}
}

// paging is what one pass through every page measured.
type paging struct {
	pages             int
	took              time.Duration
	rest, peak, after memSample
}

func (p paging) perPage() time.Duration { return p.took / time.Duration(p.pages) }

// pageThrough reads every page with page, checking that the n messages come in due order, and
// measures the memory before, during and after.
//
// It runs with the collector's target a quarter over the live heap (GOGC=25), not twice it: the
// heap in use then measures what paging holds, not how far the garbage of earlier pages got
// before a collection, which on a busy machine (the collector's workers short of CPU) went past
// the bound with nothing held (66.8 MiB over HTTP, at load 30).
func pageThrough(t *testing.T, n int, page func(cursor string) ([]time.Time, string, error)) paging {
	t.Helper()
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	runtime.GC()
	p := paging{rest: memNow()}
	p.peak = p.rest
	got := 0
	var last time.Time
	cursor := ""
	begin := time.Now()
	for {
		at, next, err := page(cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range at {
			if a.Before(last) {
				t.Fatalf("message %d due %v after one due %v", got, a, last)
			}
			last = a
		}
		got += len(at)
		p.pages++
		p.peak = p.peak.max(memNow())
		if next == "" {
			break
		}
		cursor = next
	}
	p.took = time.Since(begin)
	runtime.GC()
	p.after = memNow()
	if got != n {
		t.Fatalf("paged through %d messages; want %d", got, n)
	}
	return p
}

type memSample struct{ heap, rss uint64 }

// memNow returns the heap in use and the process's resident set size (0 where /proc is not).
func memNow() memSample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := memSample{heap: ms.HeapInuse}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				s.rss = kb << 10
			}
		}
	}
	return s
}

func (s memSample) max(o memSample) memSample {
	return memSample{max(s.heap, o.heap), max(s.rss, o.rss)}
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
