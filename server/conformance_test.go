package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/contract"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/queue/queuetest"
	"github.com/tockwheel/tock/redisq"
	"github.com/tockwheel/tock/server"
)

// The conformance suite of package queue, end to end: against an engine made
// of the Go client talking over HTTP to a Server in front of each engine,
// which proves that the HTTP API keeps the contract. (delayq and redisq run
// the suite against the engines themselves.)

// openDelayq opens a delayq queue configured as queuetest requires, with
// payloads up to maxPayload bytes.
func openDelayq(t *testing.T, maxPayload int) *delayq.Queue {
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync(),
		delayq.WithMaxAttempts(queuetest.MaxAttempts),
		delayq.WithBackoff(queuetest.Backoff, 4*queuetest.Backoff),
		delayq.WithMaxPayload(maxPayload))
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestHTTPConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) queue.Engine {
		// Payloads travel as JSON strings (see client.Engine), so the server's
		// limit is queuetest's plus the two quotes.
		return serveOverHTTP(t, openDelayq(t, queuetest.MaxPayload+2), queuetest.MaxPayload+2)
	})
}

// TestHTTPConformanceRedis is TestHTTPConformance with the server in front
// of the redisq engine on a real redis-server.
func TestHTTPConformanceRedis(t *testing.T) {
	s := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { rdb.Close() })
	var prefixes atomic.Int64
	queuetest.Run(t, func(t *testing.T) queue.Engine {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		q, err := redisq.Open(ctx, rdb, redisq.WithPrefix(fmt.Sprintf("http%d", prefixes.Add(1))),
			redisq.WithMaxAttempts(queuetest.MaxAttempts),
			redisq.WithBackoff(queuetest.Backoff, 4*queuetest.Backoff),
			redisq.WithMaxPayload(queuetest.MaxPayload+2))
		if err != nil {
			t.Fatal(err)
		}
		return serveOverHTTP(t, q, queuetest.MaxPayload+2)
	})
}

// serveOverHTTP serves e with a Server whose payloads may have up to
// maxPayload bytes, and returns an engine made of a client of it. The
// server and e are closed when the test ends.
func serveOverHTTP(t *testing.T, e queue.Engine, maxPayload int64) queue.Engine {
	ts := httptest.NewServer(contract.Handler(t, server.New(e,
		server.WithLimits(server.Limits{MaxPayload: maxPayload}),
		server.WithLogger(slog.New(slog.DiscardHandler)))))
	t.Cleanup(func() {
		ts.Close()
		e.Close()
	})
	c, err := client.New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	ce := c.Engine()
	_, admin := e.(queue.Admin)
	_, limiter := e.(queue.Limiter)
	_, scheduler := e.(queue.Scheduler)
	// The client's engine has every method; what the test sees has those of e only.
	switch {
	case admin && limiter && scheduler:
		return struct {
			httpAdminLimiter
			httpScheduler
		}{httpAdminLimiter{httpAdmin{Engine: ce, c: c}, ce}, httpScheduler{c}}
	case admin && scheduler:
		return struct {
			httpAdmin
			httpScheduler
		}{httpAdmin{Engine: ce, c: c}, httpScheduler{c}}
	case admin && limiter:
		return httpAdminLimiter{httpAdmin{Engine: ce, c: c}, ce}
	case admin:
		return httpAdmin{Engine: ce, c: c}
	case limiter:
		return ce
	}
	return struct{ queue.Engine }{ce}
}

// httpAdminLimiter is an httpAdmin whose engine is a queue.Limiter too.
type httpAdminLimiter struct {
	httpAdmin
	l queue.Limiter
}

func (e httpAdminLimiter) SetLimit(ctx context.Context, topic string, l queue.Limit) error {
	return e.l.SetLimit(ctx, topic, l)
}

func (e httpAdminLimiter) Limits(ctx context.Context) ([]queue.TopicLimit, error) {
	return e.l.Limits(ctx)
}
