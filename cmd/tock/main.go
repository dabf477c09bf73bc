// Command tock is the command line of tock. This minimal dispatcher runs the
// queue subcommands; the lead's main.go replaces it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintf(os.Stderr, "usage: tock COMMAND [flags] [args]\n\n%s\n", queueUsage)
		os.Exit(exitUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if run, ok := queueCommands()[os.Args[1]]; ok {
		code := run(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	fmt.Fprintf(os.Stderr, "tock: unknown command %q\n\n%s\n", os.Args[1], queueUsage)
	os.Exit(exitUsage)
}
