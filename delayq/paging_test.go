package delayq

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/queue"
)

// TestPagingKeepsMemoryFlat pages through the scheduled messages of one topic, a page at a time,
// and checks that the process's memory stays flat: the heap in use while paging stays within a
// bound that does not grow with the number of messages, beside the memory of the queue at rest. It
// logs the heap and the RSS at rest, at their highest while paging, and after. The default is
// 20,000 messages; the figure of the README is taken with a million:
//
//	DELAYQ_PAGING_MESSAGES=1000000 go test ./delayq -run TestPagingKeepsMemoryFlat -v
func TestPagingKeepsMemoryFlat(t *testing.T) {
	n := 20_000
	if s := os.Getenv("DELAYQ_PAGING_MESSAGES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	ctx := context.Background()
	q := open(t, t.TempDir(), WithNoSync(), WithLogger(quiet))
	start := time.Now().Add(time.Hour)
	payload := bytes.Repeat([]byte("p"), 100)
	const batch = 1000
	putStart := time.Now()
	for i := 0; i < n; i += batch {
		ms := make([]Message, 0, batch)
		for j := i; j < min(i+batch, n); j++ {
			// Spread over 20 hours of one-second slots, in an order that is not the due order.
			at := start.Add(time.Duration(j*7919%n) * (20 * time.Hour / time.Duration(n)))
			ms = append(ms, Message{Topic: "t", Payload: payload, DeliverAt: at})
		}
		if _, err := q.PutBatch(ctx, ms); err != nil {
			t.Fatal(err)
		}
	}
	putTook := time.Since(putStart)
	if err := q.checkpoint(); err != nil {
		t.Fatal(err)
	}

	runtime.GC()
	rest := memNow()
	peak := rest
	pageStart := time.Now()
	got, pages := 0, 0
	var last time.Time
	cursor := ""
	for {
		page, next, err := q.Messages(ctx, "t", queue.Scheduled, cursor, queue.MaxPage)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page {
			if m.DeliverAt.Before(last) {
				t.Fatalf("message %d due %v after one due %v", got, m.DeliverAt, last)
			}
			last = m.DeliverAt
		}
		got += len(page)
		pages++
		peak = peak.max(memNow())
		if next == "" {
			break
		}
		cursor = next
	}
	pageTook := time.Since(pageStart)
	runtime.GC()
	after := memNow()
	if got != n {
		t.Fatalf("paged through %d messages; want %d", got, n)
	}
	t.Logf("%d messages put in %v; paged through in %d pages of up to %d in %v (%v a page)",
		n, putTook.Round(time.Millisecond), pages, queue.MaxPage, pageTook.Round(time.Millisecond), (pageTook / time.Duration(pages)).Round(time.Microsecond))
	t.Logf("heap in use: %s at rest, %s at most while paging, %s after; RSS: %s, %s, %s",
		mib(rest.heap), mib(peak.heap), mib(after.heap), mib(rest.rss), mib(peak.rss), mib(after.rss))
	// A page holds at most MaxPage previews; reading a list keeps one record at a time. The rest
	// is garbage the collector has not taken yet, which GOGC bounds by the live heap.
	if grew := peak.heap - rest.heap; grew > 64<<20 {
		t.Fatalf("the heap grew by %s while paging", mib(grew))
	}
}

type memSample struct{ heap, rss uint64 }

// memNow returns the heap in use and the process's resident set size (0 where /proc is not).
func memNow() memSample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := memSample{heap: ms.HeapInuse}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
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
