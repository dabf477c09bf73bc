// Command tockd serves a durable delay queue over HTTP: the delayq engine
// with its store in a directory, the JSON API of package server, Prometheus
// metrics at /metrics and a live status page at /.
//
// Usage:
//
//	tockd [-addr 127.0.0.1:7070] [-data ./tock-data] [-token T] [flags]
//
// -addr, -data and -token default to the environment variables TOCK_ADDR,
// TOCK_DATA and TOCK_TOKEN. On SIGTERM or SIGINT tockd stops accepting
// connections, lets requests in flight finish (ending long polls at once),
// closes the queue, which flushes and checkpoints it, and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/server"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

type config struct {
	addr, data, token string
	logLevel          slog.Level
	noSync            bool
	maxAttempts       int
	limits            server.Limits
	shutdownTimeout   time.Duration
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("tockd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", envOr("TOCK_ADDR", "127.0.0.1:7070"), "listen on this `address` (env TOCK_ADDR)")
	fs.StringVar(&c.data, "data", envOr("TOCK_DATA", "./tock-data"), "keep the queue in this `directory` (env TOCK_DATA)")
	fs.StringVar(&c.token, "token", os.Getenv("TOCK_TOKEN"), "require this bearer `token` on every route but /healthz (env TOCK_TOKEN)")
	fs.BoolVar(&c.noSync, "nosync", false, "skip fsync: faster, but a crash can lose the last puts and acks")
	fs.IntVar(&c.maxAttempts, "max-attempts", delayq.DefaultMaxAttempts, "deliveries before a message moves to TOPIC.dead (0: never)")
	fs.Int64Var(&c.limits.MaxPayload, "max-payload", 1<<20, "largest payload in `bytes` (at most 16 MiB)")
	fs.IntVar(&c.limits.MaxBatch, "max-batch", 10000, "most messages in one batch")
	fs.DurationVar(&c.limits.MaxWait, "max-wait", 20*time.Second, "longest long poll a receive may ask for")
	fs.DurationVar(&c.limits.DefaultVisibility, "visibility", 30*time.Second, "lease of a receive that names none")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM, wait this long for requests in flight")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log `level`: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("tockd: unexpected argument %q", fs.Arg(0))
	}
	if c.limits.MaxPayload < 1 || c.limits.MaxPayload > 16<<20 {
		return c, fmt.Errorf("tockd: -max-payload %d is outside 1 to 16 MiB", c.limits.MaxPayload)
	}
	return c, nil
}

// run is tockd's main; it returns the exit code.
func run(args []string, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.logLevel}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	opened := time.Now()
	opts := []delayq.Option{
		delayq.WithMaxPayload(int(c.limits.MaxPayload)),
		delayq.WithMaxAttempts(c.maxAttempts),
		delayq.WithLogger(log),
	}
	if c.noSync {
		opts = append(opts, delayq.WithNoSync())
	}
	q, err := delayq.Open(c.data, opts...)
	if err != nil {
		log.Error("cannot open the queue", "data", c.data, "err", err)
		return 1
	}
	log.Info("queue open", "data", c.data, "took", time.Since(opened).Round(time.Millisecond))

	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		log.Error("cannot listen", "addr", c.addr, "err", err)
		_ = q.Close()
		return 1
	}
	srv := server.New(server.QueueStore(q), server.WithToken(c.token), server.WithLimits(c.limits), server.WithLogger(log))
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	if c.token == "" && !isLoopback(ln.Addr()) {
		log.Warn("serving without a token on a non-loopback address; set -token or TOCK_TOKEN")
	}
	log.Info("tockd listening", "addr", ln.Addr().String(), "url", "http://"+ln.Addr().String()+"/")

	code := 0
	select {
	case err := <-served:
		log.Error("server failed", "err", err)
		code = 1
	case <-ctx.Done():
		log.Info("shutting down: finishing requests in flight")
	}
	stop()
	srv.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Error("requests still in flight at the shutdown timeout; closing them", "err", err)
		_ = hs.Close()
		code = 1
	}
	if err := q.Close(); err != nil {
		log.Error("closing the queue", "err", err)
		return 1
	}
	log.Info("queue closed; bye")
	return code
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
