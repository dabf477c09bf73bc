// Command tock is tock's command line: it measures the timing wheel beside the Go runtime's timers
// (tock bench), and talks to a tockd server (put, cancel, receive, stats), consumes from it (work,
// ack, nack, extend), and operates its queue (topics, peek, message, deliver, requeue, purge,
// pause, resume).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/tockwheel/tock/internal/buildinfo"
)

const usage = `usage: tock COMMAND [flags] [args]

  version                             print tock's version (module, VCS revision, Go version)
  bench    [flags]                    measure the tock wheel beside time.AfterFunc
` + checkUsage + "\n" + queueUsage + "\n\n" + leaseUsage + "\n\n" + adminUsage + "\n" + limitUsage + "\n\n" + scheduleUsage

// A command runs one subcommand with its arguments (after the name) and returns the process's exit
// code.
type command func(ctx context.Context, args []string, stdout, stderr io.Writer) int

func commands() map[string]command {
	cmds := map[string]command{"bench": benchCommand, "check": checkCommand, "version": versionCommand}
	for name, run := range queueCommands() {
		cmds[name] = command(run)
	}
	for name, run := range adminCommands() {
		cmds[name] = command(run)
	}
	for name, run := range leaseCommands() {
		cmds[name] = command(run)
	}
	for name, run := range limitCommands() {
		cmds[name] = command(run)
	}
	for name, run := range scheduleCommands() {
		cmds[name] = command(run)
	}
	return cmds
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Fprintln(os.Stderr, usage)
		if len(os.Args) < 2 {
			os.Exit(exitUsage)
		}
		return
	}
	run, ok := commands()[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "tock: unknown command %q\n\n%s\n", os.Args[1], usage)
		os.Exit(exitUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[2:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// versionCommand prints the build of tock: tock version.
func versionCommand(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "\n\nPrint tock's version: module, VCS revision, Go version and platform.", stderr)
	rest, err := parseArgs(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "tock version: unexpected argument %q\n", rest[0])
		return exitUsage
	}
	fmt.Fprintln(stdout, buildinfo.Read().String("tock"))
	return exitOK
}
