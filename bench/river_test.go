package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// postgresBin is where Debian's postgresql package puts initdb and pg_ctl.
const postgresBin = "/usr/lib/postgresql/15/bin"

// postgres starts a PostgreSQL cluster of its own for b, with Debian's defaults (fsync and
// synchronous commits on), and returns its DSN; it skips b when PostgreSQL is not installed
// (apt-get install postgresql). The server runs as the user postgres, as initdb refuses root.
func postgres(b *testing.B) string {
	initdb, pgctl := filepath.Join(postgresBin, "initdb"), filepath.Join(postgresBin, "pg_ctl")
	if _, err := os.Stat(initdb); err != nil {
		b.Skip("no PostgreSQL (apt-get install postgresql)")
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		b.Skip("no user postgres")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "bench-pg")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, gid); err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	data := filepath.Join(dir, "data")
	run := func(args ...string) {
		cmd := exec.Command("runuser", append([]string{"-u", "postgres", "--"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run(initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
	run(pgctl, "-D", data, "-w", "-l", filepath.Join(dir, "log"), "-o",
		fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200", port, dir), "start")
	b.Cleanup(func() { run(pgctl, "-D", data, "-m", "fast", "-w", "stop") })
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

// noopArgs is the job River runs: a payload of 100 bytes.
type noopArgs struct {
	Payload string `json:"p"`
}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done func()
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.done()
	return nil
}

// riverHandleAll inserts n jobs of 100 bytes into a fresh River schema, then runs a River client
// with 64 workers on the default queue until every job is completed, and returns the rate.
func riverHandleAll(b *testing.B, dsn string, n int) float64 {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP SCHEMA public CASCADE; CREATE SCHEMA public"); err != nil {
		b.Fatal(err)
	}
	drv := riverpgxv5.New(pool)
	m, err := rivermigrate.New(drv, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	var handled atomic.Int64
	done := make(chan struct{})
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{done: func() {
		if handled.Add(1) == int64(n) {
			close(done)
		}
	}})
	c, err := river.NewClient(drv, &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 64}},
		Workers: workers,
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i += 1000 {
		ps := make([]river.InsertManyParams, min(1000, n-i))
		for j := range ps {
			ps[j] = river.InsertManyParams{Args: noopArgs{Payload: string(workerPayload)}}
		}
		if _, err := c.InsertMany(ctx, ps); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("River handled %d of %d in 10 minutes", handled.Load(), n)
	}
	took := time.Since(start)
	stop, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Stop(stop); err != nil {
		b.Fatal(err)
	}
	return float64(n) / took.Seconds()
}
