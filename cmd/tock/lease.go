package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tockwheel/tock/queue"
)

// The commands that consume: work a topic, and end or extend the leases that tock receive
// --no-ack printed.

// leaseCommands returns the consuming subcommands, by name.
func leaseCommands() map[string]queueCommand {
	return map[string]queueCommand{
		"work":   workCommand,
		"ack":    ackCommand,
		"nack":   nackCommand,
		"extend": extendCommand,
	}
}

const leaseUsage = `  work     [flags] TOPIC -- COMMAND [ARGS...]
                                      run COMMAND once per message of TOPIC: payload on stdin,
                                      TOCK_ID, TOCK_TOPIC, TOCK_ATTEMPT in its environment; exit 0
                                      acks, any other nacks with stderr's last line as the reason
  ack      [flags] RECEIPT...         end leases for good (receipts of tock receive --no-ack)
  nack     [flags] RECEIPT            hand a message back (--delay, --reason, --dead)
  extend   [flags] RECEIPT --for D    hold a lease D from now`

// Exit code of ack, nack and extend for a receipt of no current lease.
const exitStale = 4

func ackCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("ack", "[flags] RECEIPT...", stderr)
	pos, code, ok := qc.parse(args, 1, 1<<20)
	if !ok {
		return code
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	err := c.Ack(ctx, pos...)
	var ae *queue.AckError
	if errors.As(err, &ae) {
		for _, f := range ae.Failed {
			fmt.Fprintf(stderr, "tock ack: not acked, unknown or stale (its lease ran out and it was delivered again, or it was never a receipt): %.60s\n", f.Receipt)
		}
		fmt.Fprintf(stdout, "acked %d of %d\n", len(pos)-len(ae.Failed), len(pos))
		return exitStale
	}
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	fmt.Fprintf(stdout, "acked %d\n", len(pos))
	return exitOK
}

func nackCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("nack", "[flags] RECEIPT", stderr)
	delay := duration(qc.fs, "delay", 0, "due again after this `duration` (default: at once)")
	reason := qc.fs.String("reason", "", "why the delivery failed, kept as the message's last failure")
	dead := qc.fs.Bool("dead", false, "fail the message for good: to its dead-letter topic at once")
	pos, code, ok := qc.parse(args, 1, 1)
	if !ok {
		return code
	}
	switch {
	case *delay < 0:
		fmt.Fprintln(stderr, "tock nack: --delay must not be negative")
		return exitUsage
	case *dead && *delay != 0:
		fmt.Fprintln(stderr, "tock nack: --dead sends the message to the dead letters at once: give no --delay")
		return exitUsage
	case len(*reason) > queue.MaxReason:
		fmt.Fprintf(stderr, "tock nack: --reason of %d bytes: the longest is %d\n", len(*reason), queue.MaxReason)
		return exitUsage
	}
	opts := []queue.NackOption{queue.WithReason(*reason)}
	if *dead {
		opts = append(opts, queue.WithDeadLetter())
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	if err := c.Nack(ctx, pos[0], *delay, opts...); err != nil {
		return leaseFailed("nack", stderr, qc.conn.server, err)
	}
	switch {
	case *dead:
		fmt.Fprintln(stdout, "nacked: moved to the dead letters")
	case *delay > 0:
		fmt.Fprintf(stdout, "nacked: due again in %v\n", *delay)
	default:
		fmt.Fprintln(stdout, "nacked: due again now")
	}
	return exitOK
}

func extendCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("extend", "[flags] RECEIPT --for DURATION", stderr)
	forD := duration(qc.fs, "for", 0, "the lease ends this `duration` from now, such as 5m (required)")
	pos, code, ok := qc.parse(args, 1, 1)
	if !ok {
		return code
	}
	if *forD <= 0 {
		fmt.Fprintln(stderr, "tock extend: give --for, a positive duration such as 30s or 5m: how long from now the lease lasts")
		return exitUsage
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	if err := c.Extend(ctx, pos[0], *forD); err != nil {
		return leaseFailed("extend", stderr, qc.conn.server, err)
	}
	fmt.Fprintf(stdout, "extended: the lease ends at %s\n", time.Now().Add(*forD).Format(time.RFC3339))
	return exitOK
}

// leaseFailed reports an error of nack or extend: a receipt of no current lease in words, with
// its own exit code, anything else as fail does.
func leaseFailed(name string, stderr io.Writer, server string, err error) int {
	if errors.Is(err, queue.ErrUnknownReceipt) {
		fmt.Fprintf(stderr, "tock %s: no current lease has this receipt: its lease ran out (the message is due again, or was delivered to another consumer), it was acked or nacked, or it was never a receipt\n", name)
		return exitStale
	}
	return fail(stderr, server, err)
}
