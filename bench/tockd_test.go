package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
)

// The tockd benchmarks run tockd as users do, a process of its own built from this tree (or
// binaries named with -tockd.bin, to measure two builds side by side in one run), talking to it
// with package client over loopback, beside the engine it serves called directly and, for puts,
// asynq on a redis-server that fsyncs every write. Besides rates and latencies they report the CPU
// time per message of the tockd process (tockd-µs/msg) and of this one (client-µs/msg: the client,
// or for a direct run the engine), which the machine's other load moves far less than rates.
var (
	tockdBins    = flag.String("tockd.bin", "", "tockd binaries to run side by side, as name=path,name=path (default: one built from this tree, named tip)")
	tockdBurst   = flag.Int("tockd.burst", 100_000, "messages due within one second in BenchmarkTockdBurst")
	tockdClients = flag.String("tockd.client", "default", "client configurations to run side by side, comma-separated: "+
		"default (client.New's), http1-pool2 (net/http's default transport: 2 idle connections kept), http1 (256 kept), h2c (HTTP/2 without TLS), coalesceN (client.WithCoalescing(N))")
)

// tockdClientOptions returns the client options of a configuration of -tockd.client.
func tockdClientOptions(b *testing.B, name string) []client.Option {
	switch name {
	case "default":
		return nil
	case "http1-pool2":
		return []client.Option{client.WithHTTPClient(&http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()})}
	case "http1":
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 256
		return []client.Option{client.WithHTTPClient(&http.Client{Transport: t})}
	case "h2c":
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Protocols = new(http.Protocols)
		t.Protocols.SetUnencryptedHTTP2(true)
		return []client.Option{client.WithHTTPClient(&http.Client{Transport: t})}
	}
	if n, ok := strings.CutPrefix(name, "coalesce"); ok {
		k, err := strconv.Atoi(n)
		if err == nil {
			return []client.Option{client.WithCoalescing(k)}
		}
	}
	b.Fatalf("-tockd.client: no configuration %q", name)
	return nil
}

// tockdRuns calls run for each tockd binary and client configuration, in a sub-benchmark named
// prefix+"tockd="+binary, with "/client="+configuration when several are given.
func tockdRuns(b *testing.B, prefix string, run func(b *testing.B, bin string, opts []client.Option)) {
	clients := strings.Split(*tockdClients, ",")
	for _, bin := range tockdBinaries(b) {
		for _, cl := range clients {
			name := prefix + "tockd=" + bin.name
			if len(clients) > 1 {
				name += "/client=" + cl
			}
			b.Run(name, func(b *testing.B) { run(b, bin.path, tockdClientOptions(b, cl)) })
		}
	}
}

// tockdPayload is a 100-byte JSON payload (a string), the size the other put benchmarks use.
var tockdPayload = []byte(`"` + strings.Repeat("x", 98) + `"`)

// tockdBinary is a tockd to run: its name in the benchmark's and its path.
type tockdBinary struct{ name, path string }

var tockdBuild struct {
	once sync.Once
	bins []tockdBinary
	err  error
}

// tockdBinaries returns the tockd binaries of -tockd.bin, or builds one from this tree.
func tockdBinaries(b *testing.B) []tockdBinary {
	tockdBuild.once.Do(func() {
		if *tockdBins != "" {
			for _, nv := range strings.Split(*tockdBins, ",") {
				name, path, ok := strings.Cut(nv, "=")
				if !ok {
					tockdBuild.err = fmt.Errorf("-tockd.bin: %q is not name=path", nv)
					return
				}
				tockdBuild.bins = append(tockdBuild.bins, tockdBinary{name, path})
			}
			return
		}
		dir, err := os.MkdirTemp("", "tockd-bench-")
		if err != nil {
			tockdBuild.err = err
			return
		}
		path := filepath.Join(dir, "tockd")
		// Built in tock's own module (the parent directory), with its dependencies.
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", path, "./cmd/tockd")
		cmd.Dir = ".."
		out, err := cmd.CombinedOutput()
		if err != nil {
			tockdBuild.err = fmt.Errorf("go build tockd: %v\n%s", err, out)
			return
		}
		tockdBuild.bins = []tockdBinary{{"tip", path}}
	})
	if tockdBuild.err != nil {
		b.Fatal(tockdBuild.err)
	}
	return tockdBuild.bins
}

var tockdListening = regexp.MustCompile(`msg="tockd listening" addr=(\S+)`)

// A tockdProcess is a running tockd.
type tockdProcess struct {
	url    string
	pid    int
	exited <-chan struct{} // closed when the process has exited (its stderr closed)
}

// kill kills p with SIGKILL and waits until it has exited.
func (p *tockdProcess) kill(b *testing.B) {
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
		b.Fatal(err)
	}
	<-p.exited
}

// startTockd starts bin on a free loopback port with args and waits until it listens; it is
// killed when the benchmark ends.
func startTockd(b *testing.B, bin string, args ...string) *tockdProcess {
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var log strings.Builder
	addr := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := tockdListening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
	})
	select {
	case a := <-addr:
		return &tockdProcess{url: "http://" + a, pid: cmd.Process.Pid, exited: done}
	case <-done:
	case <-time.After(30 * time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	b.Fatalf("tockd did not start listening:\n%s", log.String())
	return nil
}

// cpu returns the CPU time the process has used, user and system, at the kernel's tick (10 ms).
func (p *tockdProcess) cpu(b *testing.B) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses: utime and stime are the 12th and
	// 13th of them, in ticks of 1/100 s (USER_HZ).
	rest := string(data[strings.LastIndexByte(string(data), ')')+2:])
	f := strings.Fields(rest)
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// selfCPU returns the CPU time this process has used, user and system.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPerMessage returns a function that reports the CPU time per message spent since by this
// process (client-µs/msg) and by tockd p when not nil (tockd-µs/msg), how many messages tockd's
// requests that write carried on average (msgs/req): a request costs tockd and the client more
// than the messages it carries, so the CPU per message follows it; and, for the embedded engine,
// how long its fdatasyncs took on average (fsync-ms), the larger part of a put's round trip.
func cpuPerMessage(b *testing.B, p *tockdProcess) func(n int) {
	self := selfCPU(b)
	var server time.Duration
	var writes, syncs, synced float64
	if p != nil {
		server = p.cpu(b)
		writes = p.writes(b)
		syncs, synced = p.fsyncs(b)
	}
	return func(n int) {
		b.ReportMetric(float64((selfCPU(b)-self).Microseconds())/float64(n), "client-µs/msg")
		if p != nil {
			b.ReportMetric(float64((p.cpu(b)-server).Microseconds())/float64(n), "tockd-µs/msg")
			b.ReportMetric(float64(n)/(p.writes(b)-writes), "msgs/req")
			if count, sum := p.fsyncs(b); count > syncs {
				b.ReportMetric((sum-synced)/(count-syncs)*1000, "fsync-ms")
			}
		}
	}
}

var fsyncMetric = regexp.MustCompile(`(?m)^tock_fsync_duration_seconds_(count|sum) (\S+)$`)

// fsyncs returns how many fdatasyncs tockd p's embedded engine has made and the seconds they
// took, as its /metrics says (none for an engine without them).
func (p *tockdProcess) fsyncs(b *testing.B) (count, seconds float64) {
	for _, m := range fsyncMetric.FindAllSubmatch(p.get(b, "/metrics"), -1) {
		v, err := strconv.ParseFloat(string(m[2]), 64)
		if err != nil {
			b.Fatal(err)
		}
		if string(m[1]) == "count" {
			count = v
		} else {
			seconds = v
		}
	}
	return count, seconds
}

var engineWrites = regexp.MustCompile(`(?m)^tock_store_write_duration_seconds_count\{op="[^"]*"\} (\S+)$`)

// writes returns how many writes tockd p has asked of its engine (puts, batches, acks...), one
// per request that writes, as its /metrics says.
func (p *tockdProcess) writes(b *testing.B) float64 {
	var n float64
	for _, m := range engineWrites.FindAllSubmatch(p.get(b, "/metrics"), -1) {
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			b.Fatal(err)
		}
		n += v
	}
	return n
}

// newTockdClient returns a client of p.
func newTockdClient(b *testing.B, p *tockdProcess, opts []client.Option) *client.Client {
	c, err := client.New(p.url, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// putLoad calls put b.N times from 32 goroutines, each waiting for its call, and reports the
// rate (puts/s) and the latency of a call (p50-ms, p99-ms).
func putLoad(b *testing.B, put func() error) {
	const producers = 32
	var next atomic.Int64
	lat := make([][]time.Duration, producers)
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range producers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := put(); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "puts/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op") // puts/s says it
}

// BenchmarkTockdPut puts 100-byte messages due in an hour from 32 producers, each waiting for its
// durable put: through tockd over loopback HTTP with package client, beside the engine tockd
// serves called directly (delayq; redisq on a redis-server with appendfsync always) and asynq's
// scheduled tasks on a redis-server with appendfsync always.
//
//	cd bench && go test -run '^$' -bench TockdPut -benchtime 50000x -count 3
func BenchmarkTockdPut(b *testing.B) {
	ctx := context.Background()
	fsyncAlways := []string{"--appendonly", "yes", "--appendfsync", "always"}
	b.Run("engine=delayq/direct", func(b *testing.B) {
		q, err := delayq.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		report := cpuPerMessage(b, nil)
		putLoad(b, func() error {
			_, err := q.Put(ctx, queue.Message{Topic: "bench", Payload: tockdPayload, DeliverAt: time.Now().Add(time.Hour)})
			return err
		})
		report(b.N)
	})
	tockdRuns(b, "engine=delayq/", func(b *testing.B, bin string, opts []client.Option) {
		p := startTockd(b, bin, "-data", b.TempDir())
		c := newTockdClient(b, p, opts)
		report := cpuPerMessage(b, p)
		putLoad(b, func() error {
			_, err := c.Put(ctx, "bench", client.Message{Payload: tockdPayload, Delay: time.Hour})
			return err
		})
		report(b.N)
	})
	b.Run("asynq-appendfsync-always", func(b *testing.B) {
		srv, _ := redisServer(b, fsyncAlways...)
		if srv == nil {
			return
		}
		ac := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr, PoolSize: 64})
		defer ac.Close()
		report := cpuPerMessage(b, nil)
		defer redisCPU(b, srv.Addr)()
		putLoad(b, func() error {
			_, err := ac.Enqueue(asynq.NewTask("bench", tockdPayload), asynq.ProcessIn(time.Hour))
			return err
		})
		report(b.N)
	})
	b.Run("engine=redisq/direct", func(b *testing.B) {
		srv, rdb := redisServer(b, fsyncAlways...)
		if srv == nil {
			return
		}
		q := openRedisq(b, rdb)
		report := cpuPerMessage(b, nil)
		defer redisCPU(b, srv.Addr)()
		putLoad(b, func() error {
			_, err := q.Put(ctx, queue.Message{Topic: "bench", Payload: tockdPayload, DeliverAt: time.Now().Add(time.Hour)})
			return err
		})
		report(b.N)
	})
	tockdRuns(b, "engine=redisq/", func(b *testing.B, bin string, opts []client.Option) {
		srv, _ := redisServer(b, fsyncAlways...)
		if srv == nil {
			return
		}
		p := startTockd(b, bin, "-redis", "redis://"+srv.Addr)
		c := newTockdClient(b, p, opts)
		report := cpuPerMessage(b, p)
		defer redisCPU(b, srv.Addr)()
		putLoad(b, func() error {
			_, err := c.Put(ctx, "bench", client.Message{Payload: tockdPayload, Delay: time.Hour})
			return err
		})
		report(b.N)
	})
}

// A burstConsumer receives up to 100 due messages of topic "t", waiting up to wait, and acks them.
type burstConsumer struct {
	receive func(ctx context.Context, wait time.Duration) ([]burstDelivery, error)
	ack     func(ctx context.Context, receipts []string) error
}

type burstDelivery struct {
	receipt   string
	deliverAt time.Time
}

// burst puts -tockd.burst messages due evenly within one second through putBatch, in batches of
// 1,000 from 4 goroutines, then lets 8 consumers receive and ack them, 100 at a time. It reports
// when the last was received, in seconds after the second began (s-to-deliver-all), how late
// messages were from their due times (p50-late-ms, p99-late-ms, max-late-ms) and how many came
// early; and how a consumer's round splits, over the rounds begun after the second began: the
// time in a Receive that returned messages (recv-ms; it waits while none is due) and in the Ack
// after it (ack-ms), and the messages a Receive returned (msgs/recv). The due second begins lead
// after the puts begin, time for every put to return.
func burst(b *testing.B, p *tockdProcess, lead time.Duration, putBatch func(ctx context.Context, at []time.Time) error, c burstConsumer) {
	n := *tockdBurst
	ctx := context.Background()
	for b.Loop() {
		second := time.Now().Truncate(time.Second).Add(lead)
		if err := inParallel((n+999)/1000, 4, func(k int) error {
			at := make([]time.Time, 0, 1000)
			for i := k * 1000; i < min(n, (k+1)*1000); i++ {
				at = append(at, second.Add(time.Duration(i)*time.Second/time.Duration(n)))
			}
			return putBatch(ctx, at)
		}); err != nil {
			b.Fatal(err)
		}
		if time.Now().After(second) {
			b.Fatalf("the puts ended %v after the due second began", time.Since(second))
		}
		report := cpuPerMessage(b, p)
		var got, early atomic.Int64
		var last atomic.Int64
		late := make([][]time.Duration, 8)
		var inReceive, inAck, rounds, received atomic.Int64 // of the rounds begun in or after the second
		var consumers sync.WaitGroup
		deadline := second.Add(60 * time.Second)
		for w := range 8 {
			consumers.Go(func() {
				for got.Load() < int64(n) && time.Now().Before(deadline) {
					begun := time.Now()
					ds, err := c.receive(ctx, 2*time.Second)
					if err != nil {
						b.Error(err)
						return
					}
					if len(ds) == 0 {
						continue
					}
					now := time.Now()
					receipts := make([]string, len(ds))
					for i, d := range ds {
						receipts[i] = d.receipt
						l := now.Sub(d.deliverAt)
						if l < 0 {
							early.Add(1)
						}
						late[w] = append(late[w], l)
					}
					acking := time.Now()
					if err := c.ack(ctx, receipts); err != nil {
						b.Error(err)
						return
					}
					if begun.After(second) {
						inReceive.Add(int64(acking.Sub(begun)))
						inAck.Add(int64(time.Since(acking)))
						rounds.Add(1)
						received.Add(int64(len(ds)))
					}
					got.Add(int64(len(ds)))
					last.Store(now.UnixNano())
				}
			})
		}
		consumers.Wait()
		if got.Load() < int64(n) {
			b.Fatalf("%d of %d delivered in 60 s", got.Load(), n)
		}
		report(n)
		all := slices.Concat(late...)
		slices.Sort(all)
		b.ReportMetric(time.Unix(0, last.Load()).Sub(second).Seconds(), "s-to-deliver-all")
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-late-ms")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-late-ms")
		b.ReportMetric(float64(all[len(all)-1].Microseconds())/1000, "max-late-ms")
		b.ReportMetric(float64(early.Load()), "early")
		if r := float64(rounds.Load()); r > 0 {
			b.ReportMetric(float64(inReceive.Load())/r/1e6, "recv-ms")
			b.ReportMetric(float64(inAck.Load())/r/1e6, "ack-ms")
			b.ReportMetric(float64(received.Load())/r, "msgs/recv")
		}
	}
}

// Leads of the burst: time for its puts to return before the due second begins. delayq takes
// 100,000 puts in well under a second on a quiet machine, but through tockd at load average 30
// they took over 5 s; Redis takes several times as long.
func delayqLead() time.Duration { return 5*time.Second + time.Duration(*tockdBurst/20000)*time.Second }
func redisLead() time.Duration  { return 5*time.Second + time.Duration(*tockdBurst/5000)*time.Second }

// engineBurst runs burst on an engine called directly.
func engineBurst(b *testing.B, q queue.Engine, lead time.Duration) {
	burst(b, nil, lead, func(ctx context.Context, at []time.Time) error {
		ms := make([]queue.Message, len(at))
		for i := range at {
			ms[i] = queue.Message{Topic: "t", Payload: tockdPayload, DeliverAt: at[i]}
		}
		_, err := q.PutBatch(ctx, ms)
		return err
	}, burstConsumer{
		receive: func(ctx context.Context, wait time.Duration) ([]burstDelivery, error) {
			rctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			ds, err := q.Receive(rctx, "t", 100, time.Minute)
			if err != nil && rctx.Err() != nil && ctx.Err() == nil {
				err = nil
			}
			out := make([]burstDelivery, len(ds))
			for i, d := range ds {
				out[i] = burstDelivery{d.Receipt, d.DeliverAt}
			}
			return out, err
		},
		ack: func(ctx context.Context, receipts []string) error { return q.Ack(ctx, receipts...) },
	})
}

// tockdBurstRun runs burst through tockd p.
func tockdBurstRun(b *testing.B, p *tockdProcess, lead time.Duration, opts []client.Option) {
	c := newTockdClient(b, p, opts)
	burst(b, p, lead, func(ctx context.Context, at []time.Time) error {
		ms := make([]client.Message, len(at))
		for i := range at {
			ms[i] = client.Message{Payload: tockdPayload, DeliverAt: at[i]}
		}
		_, err := c.PutBatch(ctx, "t", ms)
		return err
	}, burstConsumer{
		receive: func(ctx context.Context, wait time.Duration) ([]burstDelivery, error) {
			ds, err := c.Receive(ctx, "t", client.ReceiveOptions{Max: 100, Wait: wait, Visibility: time.Minute})
			out := make([]burstDelivery, len(ds))
			for i, d := range ds {
				out[i] = burstDelivery{d.Receipt, d.DeliverAt}
			}
			return out, err
		},
		ack: func(ctx context.Context, receipts []string) error { return c.Ack(ctx, receipts...) },
	})
}

// BenchmarkTockdBurst puts -tockd.burst messages due evenly within one second and measures when 8
// consumers receiving 100 at a time (and acking them) have them all: through tockd over loopback
// HTTP beside the engine it serves called directly (delayq; redisq on a redis-server without
// persistence).
//
//	cd bench && go test -run '^$' -bench TockdBurst -benchtime 1x -count 3
func BenchmarkTockdBurst(b *testing.B) {
	b.Run("engine=delayq/direct", func(b *testing.B) {
		q, err := delayq.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		engineBurst(b, q, delayqLead())
	})
	tockdRuns(b, "engine=delayq/", func(b *testing.B, bin string, opts []client.Option) {
		tockdBurstRun(b, startTockd(b, bin, "-data", b.TempDir()), delayqLead(), opts)
	})
	b.Run("engine=redisq/direct", func(b *testing.B) {
		srv, rdb := redisServer(b)
		if srv == nil {
			return
		}
		engineBurst(b, openRedisq(b, rdb), redisLead())
	})
	tockdRuns(b, "engine=redisq/", func(b *testing.B, bin string, opts []client.Option) {
		srv, _ := redisServer(b)
		if srv == nil {
			return
		}
		tockdBurstRun(b, startTockd(b, bin, "-redis", "redis://"+srv.Addr), redisLead(), opts)
	})
}

var tockdPending = flag.Int("tockd.pending", 200_000, "messages put and left pending in BenchmarkTockdPending")

// BenchmarkTockdPending measures what the request path must not make worse besides single puts
// and bursts, each tockd of -tockd.bin in the same run (to set the build before a change beside
// the one after it): batches of 1,000 100-byte messages due in an hour, put from 4 goroutines
// until -tockd.pending are pending (batch-msgs/s, and tockd's CPU time per message,
// tockd-µs/msg); tockd's memory per pending message, its heap in use (heap-B/msg, as its
// /metrics says, garbage not yet collected included) and its resident set (rss-B/msg), each
// over what it was before the puts; and the status page's cost with them pending: what the page
// asks for every second (GET /v1/stats?history=300) and every other second (GET /v1/topics),
// asked 1,000 times in a row (page-ms a round, page-tockd-µs a round).
//
//	cd bench && go test -run '^$' -bench TockdPending -benchtime 1x -count 3 -tockd.bin before=PATH,after=PATH
func BenchmarkTockdPending(b *testing.B) {
	tockdRuns(b, "engine=delayq/", func(b *testing.B, bin string, opts []client.Option) {
		ctx := context.Background()
		p := startTockd(b, bin, "-data", b.TempDir())
		c := newTockdClient(b, p, opts)
		n := *tockdPending
		for b.Loop() {
			heap0, rss0 := p.memory(b)
			cpu0 := p.cpu(b)
			var next atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for range 4 {
				wg.Go(func() {
					ms := make([]client.Message, 1000)
					for i := range ms {
						ms[i] = client.Message{Payload: tockdPayload, Delay: time.Hour}
					}
					for {
						first := int(next.Add(1000)) - 1000
						if first >= n {
							return
						}
						if _, err := c.PutBatch(ctx, "bench", ms[:min(1000, n-first)]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			if b.Failed() {
				b.FailNow()
			}
			b.ReportMetric(float64(n)/elapsed.Seconds(), "batch-msgs/s")
			b.ReportMetric(float64((p.cpu(b)-cpu0).Microseconds())/float64(n), "tockd-µs/msg")
			heap, rss := p.memory(b)
			b.ReportMetric(float64(heap-heap0)/float64(n), "heap-B/msg")
			b.ReportMetric(float64(rss-rss0)/float64(n), "rss-B/msg")

			const rounds = 1000
			cpu0 = p.cpu(b)
			start = time.Now()
			for range rounds {
				for _, path := range []string{"/v1/stats?history=300", "/v1/topics"} {
					p.get(b, path)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/rounds, "page-ms")
			b.ReportMetric(float64((p.cpu(b)-cpu0).Microseconds())/rounds, "page-tockd-µs")
		}
		b.ReportMetric(0, "ns/op") // the figures above say it
	})
}

// get asks p for path and reads the whole answer, which must be 200.
func (p *tockdProcess) get(b *testing.B, path string) []byte {
	resp, err := http.Get(p.url + path)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %v %s %s", path, err, resp.Status, data)
	}
	return data
}

var heapInUse = regexp.MustCompile(`(?m)^go_memstats_heap_inuse_bytes (\S+)$`)

// memory returns p's heap in use, as its /metrics says, and its resident set, in bytes.
func (p *tockdProcess) memory(b *testing.B) (heap, rss int64) {
	m := heapInUse.FindSubmatch(p.get(b, "/metrics"))
	if m == nil {
		b.Fatal("tockd's /metrics has no go_memstats_heap_inuse_bytes")
	}
	h, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		b.Fatal(err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return int64(h), kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/pid/status")
	return 0, 0
}
