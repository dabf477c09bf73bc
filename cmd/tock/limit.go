package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/tockwheel/tock/queue"
)

// The commands of delivery limits.

func limitCommands() map[string]queueCommand {
	return map[string]queueCommand{"limit": limitCommand, "limits": limitsCommand}
}

const limitUsage = `  limit    [flags] TOPIC              limit a topic's deliveries, for every consumer:
                                      --rate N (a second) [--burst B], --concurrency N, or --off
  limits   [flags]                    list the topics' delivery limits`

func limitCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("limit", "[flags] TOPIC (--rate N [--burst B] | --concurrency N | --off)", stderr)
	rate := qc.fs.Float64("rate", 0, "at most `n` deliveries a second")
	burst := qc.fs.Int("burst", 0, "let `b` deliveries through at once (default: a tenth of a second of the rate)")
	conc := qc.fs.Int("concurrency", 0, "at most `n` messages leased at once")
	off := qc.fs.Bool("off", false, "remove the topic's limit")
	pos, code, ok := qc.parse(args, 1, 1)
	if !ok {
		return code
	}
	l := queue.Limit{Rate: *rate, Burst: *burst, Concurrency: *conc}
	switch {
	case *off && !l.IsZero():
		fmt.Fprintln(stderr, "tock limit: --off removes the limit: give no --rate, --burst or --concurrency with it")
		return exitUsage
	case !*off && l.IsZero():
		fmt.Fprintln(stderr, "tock limit: give --rate, --concurrency or both (or --off to remove the limit)")
		return exitUsage
	}
	if _, err := l.Check(); err != nil {
		fmt.Fprintf(stderr, "tock limit: %v\n", err)
		return exitUsage
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	got, err := c.SetLimit(ctx, pos[0], l)
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	if *off {
		fmt.Fprintf(stdout, "%s: no limit\n", pos[0])
		return exitOK
	}
	fmt.Fprintf(stdout, "%s: %s\n", pos[0], describeLimit(got.Rate, got.Burst, got.Concurrency))
	return exitOK
}

// describeLimit says a limit in words.
func describeLimit(rate float64, burst, conc int) string {
	s := ""
	if rate > 0 {
		s = fmt.Sprintf("at most %s deliveries a second (burst %d)", strconv.FormatFloat(rate, 'f', -1, 64), burst)
	}
	if conc > 0 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("at most %d leased at once", conc)
	}
	return s
}

func limitsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("limits", "[flags]", stderr)
	asJSON := qc.fs.Bool("json", false, "print JSON lines")
	if _, code, ok := qc.parse(args, 0, 0); !ok {
		return code
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	ls, err := c.Limits(ctx)
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	if *asJSON {
		return writeLines(stderr, "limits", jsonLines(stdout, ls...))
	}
	if len(ls) == 0 {
		fmt.Fprintln(stderr, "tock limits: no topic has a limit")
		return exitOK
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "TOPIC\tRATE/S\tBURST\tCONCURRENCY")
	for _, l := range ls {
		r, b, n := "-", "-", "-"
		if l.Rate > 0 {
			r, b = strconv.FormatFloat(l.Rate, 'f', -1, 64), strconv.Itoa(l.Burst)
		}
		if l.Concurrency > 0 {
			n = strconv.Itoa(l.Concurrency)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Topic, r, b, n)
	}
	return writeLines(stderr, "limits", tw.Flush())
}
