// Command tockd serves a durable delay queue over HTTP: the JSON API of
// package server, Prometheus metrics at /metrics and a live status page at
// /, in front of one of two engines: by default the embedded delayq engine
// with its store in a directory, or with -redis the redisq engine on a
// Redis server, Sentinel or Cluster, which any number of tockd processes
// can serve together.
//
// Usage:
//
//	tockd [-addr 127.0.0.1:7070] [-data ./tock-data] [-token T] [flags]
//	tockd -redis redis://host:6379 [-redis-prefix tock] [flags]
//	tockd -redis host1:6379,host2:6379,host3:6379 [flags]
//
// -addr, -data, -redis and -token default to the environment variables
// TOCK_ADDR, TOCK_DATA, TOCK_REDIS and TOCK_TOKEN; tockd -h lists every
// flag.
//
// # Redis
//
// -redis takes a redis://, rediss:// (TLS) or unix:// URL of one server, in
// the form go-redis's ParseURL reads; host:port addresses of a Redis
// Cluster's nodes separated by commas (or a redis:// URL with addr=
// parameters, as ParseClusterURL reads); or a redis-sentinel:// (or
// rediss-sentinel://) URL of the Sentinels with the master's name in a
// master_name parameter, as ParseFailoverURL reads with scheme redis://.
// -redis-prefix names the deployment, -redis-shards fixes its shard count
// when tockd creates it, and -redis-replicas and -redis-replica-timeout set
// how many replicas must have each write before it is acknowledged. Every
// process serving a deployment should be given the same -max-attempts. What
// an acknowledged write survives is Redis's: see package redisq's doc.
//
// tockd exits 1 with one line saying why when the engine cannot be opened:
// Redis unreachable, a deployment whose shard count differs from
// -redis-shards, a directory it cannot use. Once serving, /readyz answers
// 503 while Redis is unreachable, and for good (restart tockd) once Redis
// forgot the deployment and another process made it anew with another
// shard count; a deployment Redis forgot is otherwise written again or
// adopted, and logged at level ERROR (see package redisq's doc, Durability).
//
// # A full disk
//
// When a write or sync of the embedded engine's directory fails (a full
// disk, a quota, an I/O error), every call fails with 503 "unavailable",
// those in flight too, and /readyz answers 503: tockd logs the outage at
// level ERROR, closes the queue and opens its directory again by itself
// once a test write of 256 KiB there succeeds, trying after 100 ms and then
// twice as long each time, up to every 5 s. The queue serves again, with
// every acknowledged message (durable means fsynced before acknowledged; a
// call that failed was not acknowledged), and tockd logs the outage's end
// with its length. tock_store_unavailable is 1 during an outage,
// tock_store_outages_total counts them and
// tock_store_unavailable_seconds_total adds up their length. Leases end at
// a reopen, as at a restart.
//
// # Exposing tockd
//
// By default tockd listens on 127.0.0.1 and needs no token: only programs on
// the same machine reach it, and it refuses what a web page could make a
// browser send there (cross-origin requests, bodies that are not JSON, a
// host name other than localhost, which DNS rebinding would give). To serve
// other machines, set a token (-token or TOCK_TOKEN, at least 16 random
// characters) and TLS: -tls-cert and -tls-key (PEM files, loaded at start),
// or a TLS-terminating reverse proxy in front (give it -allow-host with the
// name it forwards if it is on the same machine and forwards that Host).
// Without TLS the token crosses the network in clear.
//
// Slow and idle clients are bounded: request headers must arrive within
// -header-timeout, a body within -body-timeout, an idle connection is
// closed after -idle-timeout, and at most -max-conns connections are open
// at once (by default what the open-files limit allows, up to 10,000).
// At the limit, a new connection takes the place of the one idle longest,
// or else of the one slowest to send its request; only when every
// connection is busy serving a request is it turned away with a 503.
//
// # Traces
//
// When the standard OpenTelemetry environment names an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), tockd
// makes a span of every request, a child of the trace context the request
// carries ("traceparent": the Go client sends its caller's), and exports the
// spans over OTLP/HTTP (http/protobuf) to it; the other OTEL_EXPORTER_OTLP_*,
// OTEL_TRACES_SAMPLER, OTEL_BSP_*, OTEL_SERVICE_NAME (by default "tockd") and
// OTEL_RESOURCE_ATTRIBUTES variables apply as the OpenTelemetry SDK reads
// them. OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turns tracing
// off; another exporter or protocol is refused at start. Without an
// endpoint tockd makes no span and looks at no trace context.
//
// On SIGTERM or SIGINT tockd stops accepting connections, ends long polls at
// once, lets other requests finish for up to -shutdown-timeout and then
// closes the connections still open, closes the queue (delayq flushes and
// checkpoints it; redisq gives up the shards this process looked after) and
// exits 0. A second signal during that exits at once.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	// Schedules name IANA time zones: embedded, they work on a machine without a zone database.
	_ "time/tzdata"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/buildinfo"
	"github.com/tockwheel/tock/redisq"
	"github.com/tockwheel/tock/server"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	addr, data, token string
	redis             redisConfig
	logLevel          slog.Level
	noSync            bool
	maxAttempts       int
	limits            server.Limits
	conns             server.ConnLimits
	shutdownTimeout   time.Duration
	tlsCert, tlsKey   string
	origins, hosts    listFlag
	metricsTopics     int
	version           bool // print the build and exit
	healthcheck       bool // ask the tockd at -addr for /healthz and exit
}

// listFlag is a flag that may be given several times, each time with one
// value or several separated by commas.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*f = append(*f, s)
		}
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// minTokenLen is the shortest token tockd takes without a warning: 16 random characters, as the
// package doc advises.
const minTokenLen = 16

// maxPayloadLimit bounds -max-payload: the embedded engine's limit, the
// smaller of the two engines'.
const maxPayloadLimit = delayq.MaxPayloadLimit

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("tockd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", envOr("TOCK_ADDR", "127.0.0.1:7070"), "listen on this `address` (env TOCK_ADDR)")
	fs.StringVar(&c.data, "data", envOr("TOCK_DATA", "./tock-data"), "keep the queue in this `directory` (env TOCK_DATA)")
	fs.StringVar(&c.redis.target, "redis", os.Getenv("TOCK_REDIS"), "serve the queue kept in this Redis `deployment` instead of -data: a redis:// or rediss:// URL, "+
		"host:port addresses of a Cluster separated by commas, or redis-sentinel://host:port?master_name=NAME (env TOCK_REDIS)")
	fs.StringVar(&c.redis.prefix, "redis-prefix", redisq.DefaultPrefix, "with -redis: the deployment's `name`, the prefix of its keys")
	fs.IntVar(&c.redis.shards, "redis-shards", 0, fmt.Sprintf("with -redis: shards of a deployment tockd creates (0: %d); if given, an existing deployment's must match", redisq.DefaultShards))
	fs.IntVar(&c.redis.replicas, "redis-replicas", -1, "with -redis: replicas each write waits for (WAIT); -1: one where the master has replicas, 0: none")
	fs.DurationVar(&c.redis.replicaTimeout, "redis-replica-timeout", redisq.DefaultReplicaWait, "with -redis-replicas above 0: how long a write waits for them (503 after)")
	fs.StringVar(&c.token, "token", os.Getenv("TOCK_TOKEN"), "require this bearer `token` on every route but /healthz and /openapi.json (env TOCK_TOKEN)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate `file` (chain included); needs -tls-key")
	fs.StringVar(&c.tlsKey, "tls-key", "", "the PEM private key `file` of -tls-cert")
	fs.Var(&c.origins, "allow-origin", "let browser pages from this `origin` (https://app.example) call the API; repeatable")
	fs.Var(&c.hosts, "allow-host", "answer to this host `name` on a loopback address too (a reverse proxy's); repeatable, * for any")
	fs.BoolVar(&c.noSync, "nosync", false, "skip fsync: faster, but a crash can lose the last puts and acks")
	fs.IntVar(&c.maxAttempts, "max-attempts", delayq.DefaultMaxAttempts, "deliveries before a message moves to TOPIC.dead (0: never)")
	fs.Int64Var(&c.limits.MaxPayload, "max-payload", 1<<20, fmt.Sprintf("largest payload in `bytes` of compact JSON (at most %d MiB)", maxPayloadLimit>>20))
	fs.IntVar(&c.limits.MaxBatch, "max-batch", 10000, "most messages in one batch")
	fs.DurationVar(&c.limits.MaxWait, "max-wait", 20*time.Second, "longest long poll a receive may ask for")
	fs.DurationVar(&c.limits.DefaultVisibility, "visibility", 30*time.Second, "lease of a receive that names none")
	fs.DurationVar(&c.limits.BodyTimeout, "body-timeout", 30*time.Second, "a request body must arrive within this `duration` (408 after)")
	fs.DurationVar(&c.conns.HeaderTimeout, "header-timeout", 10*time.Second, "request headers must arrive within this `duration`")
	fs.DurationVar(&c.conns.IdleTimeout, "idle-timeout", time.Minute, "close a connection idle between requests for this `duration`")
	fs.IntVar(&c.conns.MaxConns, "max-conns", server.DefaultMaxConns(), "most connections open at once; at the limit the idlest or slowest makes room")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 5*time.Second, "on SIGTERM, let requests in flight finish for this long, then close them")
	fs.IntVar(&c.metricsTopics, "metrics-topics", server.DefaultMetricsTopics, "label at most this many topics by name in /metrics; the others count as topic=\"other\"")
	fs.BoolVar(&c.version, "version", false, "print tockd's version (module, VCS revision, Go version) and exit")
	fs.BoolVar(&c.healthcheck, "healthcheck", false, "ask the tockd serving at -addr (on loopback when it listens on every address) for /healthz; "+
		"exit 0 if it answers 200, 1 otherwise (a container's HEALTHCHECK, with no curl in the image)")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log `level`: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("tockd: unexpected argument %q", fs.Arg(0))
	}
	if c.version || c.healthcheck {
		return c, nil // neither opens the engine
	}
	if err := checkEngineFlags(fs, &c); err != nil {
		return c, err
	}
	if c.limits.MaxPayload < 1 || c.limits.MaxPayload > maxPayloadLimit {
		return c, fmt.Errorf("tockd: -max-payload %d is outside 1 to %d MiB", c.limits.MaxPayload, maxPayloadLimit>>20)
	}
	if err := c.limits.Validate(); err != nil {
		return c, fmt.Errorf("tockd: %v", strings.TrimPrefix(err.Error(), "server: "))
	}
	for name, d := range map[string]time.Duration{"-header-timeout": c.conns.HeaderTimeout, "-idle-timeout": c.conns.IdleTimeout,
		"-shutdown-timeout": c.shutdownTimeout, "-body-timeout": c.limits.BodyTimeout} {
		if d <= 0 {
			return c, fmt.Errorf("tockd: %s %v must be positive", name, d)
		}
	}
	if c.metricsTopics < 0 {
		return c, fmt.Errorf("tockd: -metrics-topics %d must be 0 or more", c.metricsTopics)
	}
	if c.conns.MaxConns < 1 {
		return c, fmt.Errorf("tockd: -max-conns %d must be positive", c.conns.MaxConns)
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return c, errors.New("tockd: give -tls-cert and -tls-key together")
	}
	for _, o := range c.origins {
		// The check server.WithAllowedOrigins makes, so that a bad flag is
		// a usage error rather than a panic.
		if err := http.NewCrossOriginProtection().AddTrustedOrigin(o); err != nil {
			return c, fmt.Errorf("tockd: -allow-origin %q: want scheme://host[:port]: %v", o, err)
		}
	}
	for _, h := range c.hosts {
		if strings.ContainsAny(h, "/ \t") {
			return c, fmt.Errorf("tockd: -allow-host %q is not a host name", h)
		}
	}
	return c, nil
}

// run is tockd's main; it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	switch {
	case c.version:
		fmt.Fprintln(stdout, buildinfo.Read().String("tockd"))
		return 0
	case c.healthcheck:
		if err := healthcheck(c); err != nil {
			fmt.Fprintln(stderr, "tockd: healthcheck:", err)
			return 1
		}
		return 0
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.logLevel}))

	var tlsConfig *tls.Config
	if c.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			log.Error("cannot load the TLS certificate", "cert", c.tlsCert, "key", c.tlsKey, "err", err)
			return 1
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	// One wheel for everything: the server's long polls and the engine's timers.
	wheel := tock.New()
	defer wheel.Stop()

	q, release, err := openEngine(ctx, c, log, wheel)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	defer release()

	tp, stopTracing, err := tracing(ctx, os.Getenv)
	if err != nil {
		log.Error("cannot trace: " + err.Error())
		_ = q.Close()
		return 1
	}
	if tp != nil {
		defer func() {
			// Spans still batched go out, for up to the shutdown timeout.
			sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
			defer cancel()
			if err := stopTracing(sctx); err != nil {
				log.Warn("flushing the last spans", "err", err)
			}
		}()
		log.Info("tracing requests to the OTLP endpoint of the environment")
	}

	tcp, err := net.Listen("tcp", c.addr)
	if err != nil {
		log.Error("cannot listen", "addr", c.addr, "err", err)
		_ = q.Close()
		return 1
	}
	srv := server.New(q,
		server.WithToken(c.token), server.WithLimits(c.limits), server.WithConnLimits(c.conns), server.WithTLS(tlsConfig),
		server.WithLogger(log), server.WithWheel(wheel), server.WithMetricsTopics(c.metricsTopics), server.WithTracerProvider(tp),
		server.WithAllowedOrigins(c.origins...), server.WithAllowedHosts(c.hosts...))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tcp) }()
	scheme := "http"
	if tlsConfig != nil {
		scheme = "https"
	}
	if c.token != "" && len(c.token) < minTokenLen {
		log.Warn(fmt.Sprintf("the token is %d characters: a guessable one protects nothing; use at least %d random characters",
			len(c.token), minTokenLen), "min", minTokenLen)
	}
	if !isLoopback(tcp.Addr()) {
		if c.token == "" {
			log.Warn("serving without a token on a non-loopback address; set -token or TOCK_TOKEN")
		}
		if tlsConfig == nil {
			log.Warn("serving plain HTTP on a non-loopback address: put a TLS proxy in front, or set -tls-cert and -tls-key")
		}
	}
	log.Info("tockd listening", "addr", tcp.Addr().String(), "url", scheme+"://"+tcp.Addr().String()+"/", "max_conns", c.conns.MaxConns)

	code := 0
	select {
	case err := <-served:
		log.Error("server failed", "err", err)
		code = 1
	case <-ctx.Done():
		log.Info("shutting down: finishing requests in flight", "timeout", c.shutdownTimeout)
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// The queue is closed under any handler still running: its calls
		// fail with ErrClosed.
		log.Warn("requests still in flight at the shutdown timeout", "err", err)
	}
	if err := q.Close(); err != nil {
		log.Error("closing the queue", "err", err)
		return 1
	}
	st := srv.ConnStats()
	log.Info("queue closed; bye", "conns_shed", st.Shed, "conns_refused", st.Refused)
	return code
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
