package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/tockwheel/tock/delayq"
)

const checkUsage = `  check    DIR                        verify a closed queue directory offline; exit 1 on damage
  check    -redis URL [-redis-prefix P]  verify a deployment in Redis (pauses each shard's writes while read)`

// checkCommand verifies a queue directory offline, as bbolt check does for bbolt: every segment,
// the checkpoint, every list of the disk wheel. It prints each damaged place (file, offset) and
// what it held, and exits 1 on damage, 0 when the directory is sound.
func checkCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: tock check DIR | -redis URL [-redis-prefix P]\n\n%s\n", checkUsage)
	}
	redisFlags := addCheckRedisFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK // help asked for
		}
		return exitUsage
	}
	if redisFlags.given(fs) {
		return checkRedis(ctx, fs, redisFlags, stdout, stderr)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	dir := fs.Arg(0)
	rep, err := delayq.Check(dir)
	if err != nil {
		fmt.Fprintf(stderr, "tock check: %v\n", err)
		if errors.Is(err, delayq.ErrLocked) {
			fmt.Fprintln(stderr, "tock check: a queue has the directory open; stop it first")
		}
		return exitFailed
	}
	for _, d := range rep.Damage {
		fmt.Fprintf(stdout, "damaged: %s at offset %d", d.File, d.Offset)
		if d.Size > 0 {
			fmt.Fprintf(stdout, " (%d bytes)", d.Size)
		}
		fmt.Fprintf(stdout, ": %s\n", d.Reason)
		for _, h := range d.Held {
			fmt.Fprintf(stdout, "  held: %s\n", h)
		}
	}
	if t := rep.TornTail; t != nil {
		fmt.Fprintf(stdout, "torn write: %s at offset %d (%d bytes): %s; Open cuts it\n", t.File, t.Offset, t.Size, t.Reason)
	}
	verdict := "ok"
	if len(rep.Damage) > 0 {
		verdict = fmt.Sprintf("%d damaged %s", len(rep.Damage), plural(len(rep.Damage), "place", "places"))
	}
	fmt.Fprintf(stdout, "%s: %s; %d segments, %d records, %d lists, %d messages pending; checkpoint %s\n",
		dir, verdict, rep.Segments, rep.Records, rep.Lists, rep.Pending, strings.TrimSpace(rep.Checkpoint))
	if len(rep.Damage) > 0 {
		return exitFailed
	}
	return exitOK
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
