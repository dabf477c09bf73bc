package server

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkConnLimiter measures requests per second over loopback to a
// handler that does nothing, from 32 keep-alive clients, through a plain
// listener (the anchor) and through the connLimiter of Serve: the limiter's cost
// per request at its most visible, with no queue behind it.
//
//	go test ./server -run '^$' -bench ConnLimiter -count 5
func BenchmarkConnLimiter(b *testing.B) {
	for _, limited := range []bool{false, true} {
		name := "plain"
		if limited {
			name = "limiter"
		}
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
			hs := &http.Server{Handler: h}
			var l net.Listener = ln
			if limited {
				cl := newConnLimiter(1000, nil, slog.New(slog.DiscardHandler))
				hs.Handler, hs.ConnState, hs.ConnContext, l = cl.handler(h), cl.connState, cl.connContext, limitedListener{ln, cl}
			}
			go hs.Serve(l)
			defer hs.Close()
			const clients = 32
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
			url := "http://" + ln.Addr().String() + "/"
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						resp, err := hc.Post(url, "application/json", nil)
						if err != nil {
							b.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}
