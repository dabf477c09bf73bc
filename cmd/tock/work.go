package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/worker"
)

// workCommand runs a command once per message of a topic, through package worker on the client's
// engine: the lease is extended while the command runs, exit 0 acks, any other exit nacks with
// the command's last line of stderr as the reason, after the worker's backoff.
func workCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("work", "[flags] TOPIC -- COMMAND [ARGS...]", stderr)
	concurrency := qc.fs.Int("concurrency", 1, "run up to `n` commands at once")
	vis := duration(qc.fs, "visibility", 30*time.Second, "lease each message for this long, extended every third of it while its command runs")
	grace := duration(qc.fs, "shutdown-timeout", 30*time.Second, "on SIGINT or SIGTERM, let running commands finish for this long, then stop them and hand their messages back")
	pos, code, ok := qc.parse(args, 2, 1<<16)
	if !ok {
		return code
	}
	topic, argv := pos[0], pos[1:]
	switch {
	case *concurrency < 1 || *concurrency > worker.MaxConcurrency:
		fmt.Fprintf(stderr, "tock work: --concurrency %d: want 1 to %d\n", *concurrency, worker.MaxConcurrency)
		return exitUsage
	case *vis < time.Second:
		fmt.Fprintf(stderr, "tock work: --visibility %v: want at least 1s\n", *vis)
		return exitUsage
	case *grace < 0:
		fmt.Fprintln(stderr, "tock work: --shutdown-timeout must not be negative")
		return exitUsage
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		fmt.Fprintf(stderr, "tock work: %v\n", err)
		return exitUsage
	}
	c, code, ok := qc.client()
	if !ok {
		return code
	}
	if err := c.Healthy(ctx); err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	engine := c.Engine()
	defer engine.Close()
	out := &lockedWriter{w: stdout}
	errw := &lockedWriter{w: stderr}
	logger := slog.New(slog.NewTextHandler(errw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w := worker.New(engine, worker.WithConcurrency(*concurrency), worker.WithVisibility(*vis),
		worker.WithShutdownTimeout(*grace), worker.WithMaxReceive(*concurrency), worker.WithLogger(logger))
	w.Handle(topic, &commandHandler{argv: argv, stdout: out, stderr: errw})
	fmt.Fprintf(errw, "tock work: running %s for each message of %q (%d at a time); Ctrl-C stops\n", argv[0], topic, *concurrency)
	if err := w.Run(ctx); err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	return exitOK
}

// A commandHandler runs a command per message.
type commandHandler struct {
	argv           []string
	stdout, stderr io.Writer
}

// Handle runs the command with the payload on its stdin and the message's ID, topic, attempt and
// receipt in its environment. Its stdout and stderr go to the worker's; the last line it wrote to
// stderr is the reason of a failure. When ctx ends (the lease was lost, or the shutdown timeout
// passed) the command gets SIGTERM, and SIGKILL 10 seconds later.
func (h *commandHandler) Handle(ctx context.Context, d queue.Delivery) error {
	cmd := exec.CommandContext(ctx, h.argv[0], h.argv[1:]...)
	cmd.Stdin = bytes.NewReader(d.Payload)
	cmd.Env = append(os.Environ(),
		"TOCK_ID="+d.ID,
		"TOCK_TOPIC="+d.Topic,
		"TOCK_ATTEMPT="+strconv.Itoa(d.Attempt),
		"TOCK_RECEIPT="+d.Receipt,
	)
	last := &lastLine{w: h.stderr}
	cmd.Stdout, cmd.Stderr = h.stdout, last
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if line := last.String(); line != "" && errors.As(err, &ee) {
		return fmt.Errorf("%s", line)
	}
	return err
}

// lastLine passes what is written to w and keeps the last line that is not blank, cut to
// queue.MaxReason bytes.
type lastLine struct {
	w    io.Writer
	mu   sync.Mutex
	cur  []byte // the line being written
	last string
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	for _, c := range p {
		if c == '\n' {
			if s := string(bytes.TrimSpace(l.cur)); s != "" {
				l.last = s
			}
			l.cur = l.cur[:0]
			continue
		}
		if len(l.cur) < queue.MaxReason {
			l.cur = append(l.cur, c)
		}
	}
	l.mu.Unlock()
	return l.w.Write(p)
}

// String returns the last line that is not blank, the unfinished one included.
func (l *lastLine) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := string(bytes.TrimSpace(l.cur)); s != "" {
		return s
	}
	return l.last
}

// lockedWriter serialises the writes of concurrent commands.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
