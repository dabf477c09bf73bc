package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/internal/timerbench"
)

// A scenario is one benchmark run twice, on tock and on the runtime's timers. The figures it
// prints are the benchmark's own: ns/op and allocs/op, or the extra metric named by unit.
type scenario struct {
	name    string
	unit    string // the metric compared; "" for ns/op
	lower   bool   // whether lower is better for unit (always for ns/op)
	tock    func(b *testing.B)
	runtime func(b *testing.B)
}

func scenarios(quick bool) []scenario {
	big, huge, burst := 1_000_000, 5_000_000, 1_000_000
	if quick {
		big, huge, burst = 100_000, 500_000, 100_000
	}
	pair := func(name, unit string, lower bool,
		t func(*testing.B, timerbench.Scheduler[tock.Timer]),
		r func(*testing.B, timerbench.Scheduler[*time.Timer])) scenario {
		return scenario{name, unit, lower,
			func(b *testing.B) { t(b, timerbench.NewTock()) },
			func(b *testing.B) { r(b, timerbench.NewRuntime()) }}
	}
	// Memory goes first: the runtime frees stopped timers lazily, so a live-heap reading taken
	// after other scenarios would miss the runtime's cost.
	return []scenario{
		{
			name: fmt.Sprintf("bytes per pending timer (%s pending)", timerbench.Count(big)), unit: "B/pending", lower: true,
			tock:    func(b *testing.B) { timerbench.Memory(b, timerbench.NewTock, big) },
			runtime: func(b *testing.B) { timerbench.Memory(b, timerbench.NewRuntime, big) },
		},
		pair("AfterFunc+Stop, 0 pending", "", true,
			func(b *testing.B, s timerbench.Scheduler[tock.Timer]) { timerbench.AfterFuncStop(b, s, 0) },
			func(b *testing.B, s timerbench.Scheduler[*time.Timer]) { timerbench.AfterFuncStop(b, s, 0) }),
		pair(fmt.Sprintf("AfterFunc+Stop, %s pending", timerbench.Count(big)), "", true,
			func(b *testing.B, s timerbench.Scheduler[tock.Timer]) { timerbench.AfterFuncStop(b, s, big) },
			func(b *testing.B, s timerbench.Scheduler[*time.Timer]) { timerbench.AfterFuncStop(b, s, big) }),
		pair(fmt.Sprintf("AfterFunc+Stop, %s pending", timerbench.Count(huge)), "", true,
			func(b *testing.B, s timerbench.Scheduler[tock.Timer]) { timerbench.AfterFuncStop(b, s, huge) },
			func(b *testing.B, s timerbench.Scheduler[*time.Timer]) { timerbench.AfterFuncStop(b, s, huge) }),
		pair(fmt.Sprintf("AfterFunc+Stop, %s pending, %d goroutines", timerbench.Count(big), runtime.GOMAXPROCS(0)), "", true,
			func(b *testing.B, s timerbench.Scheduler[tock.Timer]) { timerbench.AfterFuncStopParallel(b, s, big) },
			func(b *testing.B, s timerbench.Scheduler[*time.Timer]) { timerbench.AfterFuncStopParallel(b, s, big) }),
		pair(fmt.Sprintf("Reset, %s pending", timerbench.Count(big)), "", true,
			func(b *testing.B, s timerbench.Scheduler[tock.Timer]) { timerbench.Reset(b, s, big) },
			func(b *testing.B, s timerbench.Scheduler[*time.Timer]) { timerbench.Reset(b, s, big) }),
		{
			name: fmt.Sprintf("%s due within 100ms: first AfterFunc to last callback", timerbench.Count(burst)), unit: "ms-to-all-done", lower: true,
			tock:    func(b *testing.B) { timerbench.Burst(b, timerbench.NewTock, burst, 100*time.Millisecond) },
			runtime: func(b *testing.B) { timerbench.Burst(b, timerbench.NewRuntime, burst, 100*time.Millisecond) },
		},
		pair(fmt.Sprintf("lateness p99 with %s pending", timerbench.Count(big)), "p99-late-ms", true,
			func(b *testing.B, s timerbench.Scheduler[tock.Timer]) {
				timerbench.Lateness(b, s, big, 20_000, 2*time.Second)
			},
			func(b *testing.B, s timerbench.Scheduler[*time.Timer]) {
				timerbench.Lateness(b, s, big, 20_000, 2*time.Second)
			}),
	}
}

func benchCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "a tenth of the timers in each scenario, for a run of seconds")
	run := fs.String("run", "", "only the scenarios whose name matches this `regexp`")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: tock bench [-quick] [-run regexp]\n\n"+
			"Runs each scenario on a tock wheel and on the Go runtime's timers (time.AfterFunc),\n"+
			"one after the other in this process, and prints both with their ratio.")
		fs.PrintDefaults()
	}
	if _, err := parseArgs(fs, args); err != nil {
		return parseExit(err)
	}
	match, err := regexp.Compile(*run)
	if err != nil {
		fmt.Fprintf(stderr, "tock bench: -run: %v\n", err)
		return exitUsage
	}
	var chosen []scenario
	for _, s := range scenarios(*quick) {
		if match.MatchString(s.name) {
			chosen = append(chosen, s)
		}
	}
	if len(chosen) == 0 {
		fmt.Fprintf(stderr, "tock bench: no scenario matches %q\n", *run)
		return exitUsage
	}

	fmt.Fprintf(stdout, "tock bench: %s, GOMAXPROCS=%d; each figure is beside time.AfterFunc's from the same run\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\ttock\ttime.AfterFunc\ttock advantage\t")
	for i, s := range chosen {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(stderr, "[%d/%d] %s: tock...", i+1, len(chosen), s.name)
		t := testing.Benchmark(s.tock)
		fmt.Fprintf(stderr, " time.AfterFunc...")
		r := testing.Benchmark(s.runtime)
		fmt.Fprintln(stderr, " done")
		tv, rv := figure(t, s.unit), figure(r, s.unit)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", s.name, show(t, s.unit, tv), show(r, s.unit, rv), ratio(tv, rv, s.lower))
	}
	tw.Flush()
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "tock bench: interrupted")
		return exitFailed
	}
	return exitOK
}

func figure(r testing.BenchmarkResult, unit string) float64 {
	if unit == "" {
		return float64(r.T.Nanoseconds()) / float64(r.N)
	}
	return r.Extra[unit]
}

func show(r testing.BenchmarkResult, unit string, v float64) string {
	switch unit {
	case "":
		return fmt.Sprintf("%.1f ns/op, %d allocs", v, r.AllocsPerOp())
	case "p99-late-ms":
		return fmt.Sprintf("%.2f ms (early: %.0f)", v, r.Extra["early"])
	case "ms-to-all-done":
		return fmt.Sprintf("%.0f ms", v)
	case "B/pending":
		return fmt.Sprintf("%.1f B", v)
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}

func ratio(tockValue, runtimeValue float64, lower bool) string {
	if tockValue <= 0 || runtimeValue <= 0 {
		return "-"
	}
	if lower {
		return fmt.Sprintf("%.1fx", runtimeValue/tockValue)
	}
	return fmt.Sprintf("%.1fx", tockValue/runtimeValue)
}
