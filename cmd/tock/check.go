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

const checkUsage = `  check    [-strict] DIR              verify a closed queue directory offline; exit 1 on damage not reported
                                      before (-strict: on any damage, accounted for or harmless too)
  check    -redis URL [-redis-prefix P]  verify a deployment in Redis (pauses each shard's writes while read)`

// checkCommand verifies a queue directory offline, as bbolt check does for bbolt: every file Open
// reads, read as Open reads it (see delayq.Check). It prints each damaged place (file, offset) and
// what it held, and exits 1 on damage Open has not reported yet, 0 when there is none: damage an
// Open reported before and recorded as accounted for, and damage to nothing the queue needs, are
// listed and counted, and fail only with -strict.
func checkCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: tock check [-strict] DIR | -redis URL [-redis-prefix P]\n\n%s\n", checkUsage)
	}
	strict := fs.Bool("strict", false, "exit 1 on any damage: accounted for before, or to nothing needed, too")
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
	printDamage := func(what string, ds []delayq.Damage) {
		for _, d := range ds {
			fmt.Fprintf(stdout, "%s: %s at offset %d", what, d.File, d.Offset)
			if d.Size > 0 {
				fmt.Fprintf(stdout, " (%d bytes)", d.Size)
			}
			fmt.Fprintf(stdout, ": %s\n", d.Reason)
			for _, h := range d.Held {
				fmt.Fprintf(stdout, "  held: %s\n", h)
			}
		}
	}
	printDamage("damaged", rep.Damage)
	printDamage("damaged, accounted for earlier", rep.Accounted)
	printDamage("damaged, nothing needed there", rep.Unneeded)
	if t := rep.TornTail; t != nil {
		fmt.Fprintf(stdout, "torn write: %s at offset %d (%d bytes): %s; Open cuts it\n", t.File, t.Offset, t.Size, t.Reason)
	}
	verdict := "ok"
	if len(rep.Damage) > 0 {
		verdict = fmt.Sprintf("%d damaged %s", len(rep.Damage), plural(len(rep.Damage), "place", "places"))
	}
	if n := len(rep.Accounted); n > 0 {
		verdict += fmt.Sprintf(", %d damaged %s accounted for earlier", n, plural(n, "place", "places"))
	}
	if n := len(rep.Unneeded); n > 0 {
		verdict += fmt.Sprintf(", %d damaged %s holding nothing needed", n, plural(n, "place", "places"))
	}
	for _, name := range rep.Unplannable {
		fmt.Fprintf(stdout, "unplannable: schedule %q: its spec's time zone is not in this program's database; a queue opened here keeps it but cannot fire it\n", name)
	}
	fmt.Fprintf(stdout, "%s: %s; %d segments, %d records, %d lists, %d messages pending, %d %s; checkpoint %s\n",
		dir, verdict, rep.Segments, rep.Records, rep.Lists, rep.Pending, rep.Schedules, plural(rep.Schedules, "schedule", "schedules"),
		strings.TrimSpace(rep.Checkpoint))
	if len(rep.Damage) > 0 || *strict && len(rep.Accounted)+len(rep.Unneeded) > 0 {
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
