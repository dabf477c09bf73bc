package server

import (
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/contract"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redisq"
)

// TestForecastAfterRestart puts messages over the next hour through one
// server, cancels some, restarts the server and its queue on the same
// storage, and checks that the forecast of /v1/stats counts exactly the
// scheduled messages second by second: the wheel is the queue's, not what a
// server process saw put since it started. It runs on both engines: the
// status page's wheel is drawn from this forecast.
func TestForecastAfterRestart(t *testing.T) {
	t.Run("delayq", func(t *testing.T) {
		dir := t.TempDir()
		forecastAfterRestart(t, func() queue.Engine {
			q, err := delayq.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			return q
		})
	})
	t.Run("redisq", func(t *testing.T) {
		s := redistest.Start(t)
		prefix := newRedisPrefix()
		forecastAfterRestart(t, func() queue.Engine { return openRedisq(t, s.Addr, redisq.WithPrefix(prefix)) })
	})
}

// forecastAfterRestart is TestForecastAfterRestart on the engines open
// opens, each on the same storage.
func forecastAfterRestart(t *testing.T, open func() queue.Engine) {
	serve := func() (*httptest.Server, func()) {
		e := open()
		ts := httptest.NewServer(contract.Handler(t, New(e)))
		return ts, func() {
			ts.Close()
			if err := e.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	ts, stop := serve()

	// Due 20 s to an hour ahead, at a quarter past whole seconds, so that
	// the test may take up to 20 s and every message still falls in the
	// forecast's hour at a known second.
	base := time.Now().Truncate(time.Second).Add(20*time.Second + 250*time.Millisecond)
	due := map[int64]int{} // Unix second -> messages
	var batch strings.Builder
	batch.WriteString(`{"messages":[`)
	const n = 2000
	at := make([]time.Time, n)
	for i := range n {
		if i > 0 {
			batch.WriteByte(',')
		}
		at[i] = base.Add(time.Duration(i*i%3500) * time.Second)
		fmt.Fprintf(&batch, `{"deliver_at":%q}`, at[i].Format(time.RFC3339Nano))
	}
	batch.WriteString(`]}`)
	r := call(t, ts, "POST", "/v1/topics/f/batch", batch.String())
	if r.status != 201 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	var put struct {
		IDs []string `json:"ids"`
	}
	r.json(t, &put)
	for i, id := range put.IDs {
		if i%10 == 0 {
			if r := call(t, ts, "DELETE", "/v1/messages/"+id, ""); r.status != 204 {
				t.Fatalf("cancel %s: %d %s", id, r.status, r.body)
			}
			continue
		}
		due[at[i].Unix()]++
	}
	stop()

	ts, stop = serve()
	defer stop()
	r = call(t, ts, "GET", "/v1/stats", "")
	var st api.Stats
	r.json(t, &st)
	if st.Scheduled != int64(n-n/10) {
		t.Errorf("stats after a restart: %d scheduled, want %d", st.Scheduled, n-n/10)
	}
	want := make([]int, forecastSeconds)
	for sec, c := range due {
		i := sec - st.Forecast.Start
		if i < 0 || i >= forecastSeconds {
			t.Fatalf("a message due at %d falls outside the forecast from %d: the test took too long", sec, st.Forecast.Start)
		}
		want[i] = c
	}
	if !slices.Equal(st.Forecast.Due, want) {
		got, exp := 0, 0
		for i := range want {
			got += st.Forecast.Due[i]
			exp += want[i]
		}
		t.Fatalf("forecast after a restart counts %d messages, want %d; first difference at second %d",
			got, exp, firstDiff(st.Forecast.Due, want))
	}
}

func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
