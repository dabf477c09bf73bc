package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/queue"
	"golang.org/x/term"
)

// The operator's commands: they inspect a topic's messages without consuming them and act on
// them, through the admin routes of the API. Each prints a table for a person, or with --json
// JSON Lines for a program: one JSON object a line, of the API's types (a topic of
// GET /v1/topics, a message of a page, the answer of an action), so that a script reads them
// with a loop or jq without waiting for the end.

const adminUsage = `  topics   [flags]                    list the topics with their counts and rates
  peek     [flags] TOPIC              list a topic's messages without consuming them
                                      (--state scheduled|due|leased|dead, --limit N, --all)
  message  [flags] ID                 print a waiting message with its whole payload
  deliver  [flags] ID                 make a scheduled message due now
  requeue  [flags] TOPIC [ID...]      send dead letters back onto their topic (--all: every one)
  purge    [flags] TOPIC --state S    remove a topic's scheduled, due or dead messages
                                      (asks first on a terminal; --yes to skip)
  pause    [flags] TOPIC              stop deliveries of a topic (puts go on; --new for a topic not yet used)
  resume   [flags] TOPIC              start them again

The operator's commands print tables; with --json, JSON Lines (one object a line).`

// adminCommands returns the operator's subcommands, by name.
func adminCommands() map[string]queueCommand {
	return map[string]queueCommand{
		"topics":  topicsCommand,
		"peek":    peekCommand,
		"message": messageCommand,
		"deliver": deliverCommand,
		"requeue": requeueCommand,
		"purge": func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
			return purge(ctx, args, os.Stdin, isTerminal(os.Stdin), stdout, stderr)
		},
		"pause": func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
			return pauseCommand(ctx, "pause", args, stdout, stderr)
		},
		"resume": func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
			return pauseCommand(ctx, "resume", args, stdout, stderr)
		},
	}
}

// isTerminal reports whether f is a terminal, where a person can answer a question. Being a
// character device is not enough: /dev/null is one.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// terminalWidth is the width tables fit previews to: $COLUMNS, or 100.
func terminalWidth() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 100
}

// jsonLines writes each value as one line of JSON.
func jsonLines[T any](w io.Writer, vs ...T) error {
	enc := json.NewEncoder(w)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return nil
}

// ago says when t is from now in words a person reads at a glance: "in 3m12s", "4s ago", "now";
// "-" for the zero time.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	switch {
	case d > -time.Second && d < time.Second:
		return "now"
	case d > 0:
		return "in " + humanDuration(d)
	default:
		return humanDuration(-d) + " ago"
	}
}

// humanDuration is d to the second below an hour, to the minute below a day, and in days and
// hours beyond: "3m12s", "5h7m", "3d4h".
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	}
}

// shorten cuts s to at most n characters, ending it with "…" when cut, and shows control
// characters (a newline of a payload) as spaces so that a row stays one line.
func shorten(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// rate prints a rate per second with a precision that suits it.
func rate(r float64) string {
	switch {
	case r == 0:
		return "0"
	case r < 10:
		return strconv.FormatFloat(r, 'f', 1, 64)
	default:
		return strconv.FormatFloat(r, 'f', 0, 64)
	}
}

// connected returns the client of qc and a context bounded by its timeout; ok false with the exit
// code when the flags name no usable server.
func (qc *queueCall) connected(ctx context.Context) (*client.Client, context.Context, context.CancelFunc, int, bool) {
	c, code, ok := qc.client()
	if !ok {
		return nil, nil, nil, code, false
	}
	ctx, cancel := context.WithTimeout(ctx, qc.conn.timeout)
	return c, ctx, cancel, exitOK, true
}

func topicsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("topics", "[flags]", stderr)
	asJSON := qc.fs.Bool("json", false, "print JSON Lines: one topic a line")
	if _, code, ok := qc.parse(args, 0, 0); !ok {
		return code
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	ts, err := c.Topics(ctx)
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	if *asJSON {
		return writeLines(stderr, "topics", jsonLines(stdout, ts...))
	}
	if len(ts) == 0 {
		fmt.Fprintln(stderr, "tock topics: no topic holds a message")
		return exitOK
	}
	now := time.Now()
	tw := newTable(stdout)
	fmt.Fprintln(tw, "TOPIC\tSCHEDULED\tDUE\tLEASED\tDEAD\tOLDEST DUE\tPUTS/S\tDELIVERIES/S\tACKS/S\tPAUSED")
	deadOf := deadLettersOnce(ts)
	for _, t := range ts {
		if n, ok := deadOf[t.Topic]; ok {
			// The dead letters waiting on a dead-letter topic are shown once, as the DEAD of the
			// topic they died on, not also as a backlog of due messages here.
			t.Due = max(t.Due-n, 0)
			if t.Due == 0 {
				t.OldestDue = time.Time{}
			}
			if t.Scheduled == 0 && t.Due == 0 && t.Leased == 0 && t.Dead == 0 && !t.Paused {
				continue
			}
		}
		paused := ""
		if t.Paused {
			paused = "paused"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", t.Topic, t.Scheduled, t.Due, t.Leased, t.Dead,
			ago(t.OldestDue, now), rate(t.Rate.Puts), rate(t.Rate.Deliveries), rate(t.Rate.Acks), paused)
	}
	return writeLines(stderr, "topics", tw.Flush())
}

// newTable returns a writer of an aligned table on w, as text/tabwriter writes it (columns two
// spaces apart) but without spaces at the ends of lines, which an empty last cell would leave.
// Nothing reaches w before Flush.
func newTable(w io.Writer) *aligned {
	a := &aligned{out: w}
	a.tw = tabwriter.NewWriter(&a.buf, 0, 0, 2, ' ', 0)
	return a
}

type aligned struct {
	tw  *tabwriter.Writer
	buf bytes.Buffer
	out io.Writer
}

func (a *aligned) Write(p []byte) (int, error) { return a.tw.Write(p) }

// Flush writes the rows written since the last Flush, aligned.
func (a *aligned) Flush() error {
	if err := a.tw.Flush(); err != nil {
		return err
	}
	var b bytes.Buffer
	for l := range bytes.Lines(a.buf.Bytes()) {
		b.Write(bytes.TrimRight(l, " \n"))
		b.WriteByte('\n')
	}
	a.buf.Reset()
	_, err := a.out.Write(b.Bytes())
	return err
}

// writeLines returns the exit code of a command whose output ended with err.
func writeLines(stderr io.Writer, name string, err error) int {
	if err != nil {
		fmt.Fprintf(stderr, "tock %s: %v\n", name, err)
		return exitFailed
	}
	return exitOK
}

func peekCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("peek", "[flags] TOPIC", stderr)
	state := qc.fs.String("state", "scheduled", "the `state` to list: scheduled, due, leased or dead")
	limit := qc.fs.Int("limit", 20, "list at most `n` messages (a page of them with --all)")
	all := qc.fs.Bool("all", false, "list every message, a page of --limit at a time")
	cursor := qc.fs.String("cursor", "", "start at this `cursor`, the one a previous peek printed")
	asJSON := qc.fs.Bool("json", false, "print JSON Lines: one message a line")
	pos, code, ok := qc.parse(args, 1, 1)
	if !ok {
		return code
	}
	if !queue.State(*state).Valid() {
		fmt.Fprintf(stderr, "tock peek: --state %q: use scheduled, due, leased or dead\n", *state)
		return exitUsage
	}
	if *limit < 1 || *limit > api.MaxPage {
		fmt.Fprintf(stderr, "tock peek: --limit must be from 1 to %d\n", api.MaxPage)
		return exitUsage
	}
	c, code, ok := qc.client()
	if !ok {
		return code
	}
	topic, st := pos[0], queue.State(*state)
	var t *table
	if !*asJSON {
		t = newMessageTable(stdout, st)
	}
	next := *cursor
	for {
		// Each page has the whole timeout: --all may walk millions of messages.
		pctx, cancel := context.WithTimeout(ctx, qc.conn.timeout)
		page, n, err := c.Messages(pctx, topic, st, next, *limit)
		cancel()
		if err != nil {
			return fail(stderr, qc.conn.server, err)
		}
		if *asJSON {
			err = jsonLines(stdout, page...)
		} else {
			err = t.messages(page, time.Now())
		}
		if err != nil {
			return writeLines(stderr, "peek", err)
		}
		next = n
		if next == "" || !*all {
			break
		}
	}
	if t != nil && t.rows == 0 {
		fmt.Fprintf(stderr, "tock peek: no %s messages on %q\n", st, topic)
	}
	if next != "" {
		fmt.Fprintf(stderr, "tock peek: more: --cursor %s (or --all)\n", next)
	}
	return exitOK
}

// A table prints messages as aligned rows, the preview fitted to the terminal. Rows are aligned
// within each page, so that --all prints as it goes with bounded memory.
type table struct {
	w     io.Writer
	state queue.State
	width int
	rows  int
}

func newMessageTable(w io.Writer, state queue.State) *table {
	return &table{w: w, state: state, width: terminalWidth()}
}

func (t *table) messages(ms []api.MessageInfo, now time.Time) error {
	if len(ms) == 0 {
		return nil
	}
	timeHead := "DUE"
	switch t.state {
	case queue.Leased:
		timeHead = "LEASE ENDS"
	case queue.Dead:
		timeHead = "DIED"
	}
	head := []string{"ID", timeHead, "ATTEMPTS", "LAST FAILURE", "SIZE"}
	rows := make([][]string, len(ms))
	for i, m := range ms {
		when := m.DeliverAt
		switch t.state {
		case queue.Leased:
			when = m.LeaseDeadline
		case queue.Dead:
			when = m.FailedAt
		}
		failure := m.LastFailure
		if m.Reason != "" {
			failure += ": " + strconv.Quote(m.Reason)
		}
		if failure != "" && !m.FailedAt.IsZero() && t.state != queue.Dead {
			failure += " " + ago(m.FailedAt, now)
		}
		if failure == "" {
			failure = "-"
		}
		rows[i] = []string{m.ID, ago(when, now), strconv.Itoa(m.Attempts), failure, strconv.Itoa(m.Size)}
	}
	// The preview gets what the other columns leave of the width, and at least 16 characters.
	used := 0
	for c := range head {
		w := utf8.RuneCountInString(head[c])
		for _, r := range rows {
			w = max(w, utf8.RuneCountInString(r[c]))
		}
		used += w + 2
	}
	room := max(t.width-used, 16)
	tw := newTable(t.w)
	if t.rows == 0 {
		fmt.Fprintln(tw, strings.Join(head, "\t")+"\tPREVIEW")
	}
	for i, m := range ms {
		preview := m.Preview
		if m.Truncated {
			preview += "…"
		}
		fmt.Fprintln(tw, strings.Join(rows[i], "\t")+"\t"+shorten(preview, room))
	}
	t.rows += len(ms)
	return tw.Flush()
}

func messageCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("message", "[flags] ID", stderr)
	asJSON := qc.fs.Bool("json", false, "print the message as one line of JSON")
	pos, code, ok := qc.parse(args, 1, 1)
	if !ok {
		return code
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	m, err := c.Message(ctx, pos[0])
	if errors.Is(err, queue.ErrNotFound) {
		fmt.Fprintf(stderr, "tock message: no waiting message %q (already done, cancelled, or never put)\n", pos[0])
		return exitNotFound
	}
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	if *asJSON {
		return writeLines(stderr, "message", jsonLines(stdout, m))
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\ntopic\t%s\nstate\t%s\n", m.ID, m.Topic, m.State)
	fmt.Fprintf(tw, "due\t%s (%s)\n", m.DeliverAt.Local().Format(time.RFC3339), ago(m.DeliverAt, now))
	fmt.Fprintf(tw, "attempts\t%d\n", m.Attempts)
	if m.LastFailure != "" {
		fmt.Fprintf(tw, "last failure\t%s (%s)\n", m.LastFailure, ago(m.FailedAt, now))
	}
	if m.Reason != "" {
		fmt.Fprintf(tw, "reason\t%s\n", strconv.Quote(m.Reason))
	}
	if !m.LeaseDeadline.IsZero() {
		fmt.Fprintf(tw, "lease ends\t%s (%s)\n", m.LeaseDeadline.Local().Format(time.RFC3339), ago(m.LeaseDeadline, now))
	}
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		fmt.Fprintf(tw, "header %s\t%s\n", k, strconv.Quote(m.Headers[k]))
	}
	fmt.Fprintf(tw, "size\t%d bytes\n", m.Size)
	if err := tw.Flush(); err != nil {
		return writeLines(stderr, "message", err)
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, m.Payload, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(m.Payload)
	}
	_, err = fmt.Fprintf(stdout, "payload:\n%s\n", pretty.String())
	return writeLines(stderr, "message", err)
}

func deliverCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("deliver", "[flags] ID", stderr)
	asJSON := qc.fs.Bool("json", false, "print the answer as one line of JSON")
	pos, code, ok := qc.parse(args, 1, 1)
	if !ok {
		return code
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	ok, err := c.DeliverNow(ctx, pos[0])
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	if !ok {
		fmt.Fprintf(stderr, "tock deliver: no scheduled message %q (due already, leased, a dead letter, or not waiting)\n", pos[0])
		return exitNotFound
	}
	if *asJSON {
		return writeLines(stderr, "deliver", jsonLines(stdout, api.MovedResponse{Moved: 1}))
	}
	fmt.Fprintf(stdout, "%s is due now\n", pos[0])
	return exitOK
}

func requeueCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("requeue", "[flags] TOPIC [ID...]", stderr)
	all := qc.fs.Bool("all", false, "requeue every dead letter of the topic")
	asJSON := qc.fs.Bool("json", false, "print the answer as one line of JSON")
	pos, code, ok := qc.parse(args, 1, 1<<20)
	if !ok {
		return code
	}
	topic, ids := pos[0], pos[1:]
	if *all == (len(ids) > 0) {
		fmt.Fprintln(stderr, "tock requeue: name the dead letters to requeue, or give --all for every one (not both)")
		return exitUsage
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	// Each named ID must be a dead letter that died on the topic; the others are named, not
	// silently counted out.
	var notDead []string
	if len(ids) > 0 {
		keep := ids[:0:0]
		for _, id := range ids {
			m, err := c.Message(ctx, id)
			switch {
			case errors.Is(err, queue.ErrNotFound):
				notDead = append(notDead, fmt.Sprintf("%s (no waiting message)", id))
			case err != nil:
				return fail(stderr, qc.conn.server, err)
			case queue.State(m.State) != queue.Dead:
				notDead = append(notDead, fmt.Sprintf("%s (%s, not a dead letter)", id, m.State))
			case m.Topic != topic:
				notDead = append(notDead, fmt.Sprintf("%s (a dead letter of %s)", id, m.Topic))
			default:
				keep = append(keep, id)
			}
		}
		ids = keep
	}
	moved := 0
	if *all {
		n, err := c.RequeueAll(ctx, topic)
		if err != nil {
			return fail(stderr, qc.conn.server, err)
		}
		moved = n
	}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), api.MaxPage)]
		ids = ids[len(chunk):]
		n, err := c.Requeue(ctx, topic, chunk...)
		if err != nil {
			if moved > 0 {
				fmt.Fprintf(stderr, "tock requeue: %d requeued before the error\n", moved)
			}
			return fail(stderr, qc.conn.server, err)
		}
		moved += n
	}
	if len(notDead) > 0 {
		fmt.Fprintf(stderr, "tock requeue: not requeued: %s\n", strings.Join(notDead, ", "))
	}
	if *asJSON {
		if err := jsonLines(stdout, api.MovedResponse{Moved: moved}); err != nil {
			return writeLines(stderr, "requeue", err)
		}
	} else {
		fmt.Fprintf(stdout, "requeued %d dead letter(s) onto %s\n", moved, topic)
	}
	if len(notDead) > 0 {
		return exitNotFound
	}
	return exitOK
}

// purge is the purge command, which asks the person at stdin, a terminal when terminal is set,
// to confirm.
func purge(ctx context.Context, args []string, stdin io.Reader, terminal bool, stdout, stderr io.Writer) int {
	qc := newQueueCall("purge", "[flags] TOPIC --state scheduled|due|dead", stderr)
	state := qc.fs.String("state", "", "the `state` whose messages to remove: scheduled, due or dead (required)")
	yes := qc.fs.Bool("yes", false, "do not ask for confirmation")
	asJSON := qc.fs.Bool("json", false, "print the answer as one line of JSON")
	pos, code, ok := qc.parse(args, 1, 1)
	if !ok {
		return code
	}
	st := queue.State(*state)
	if st != queue.Scheduled && st != queue.Due && st != queue.Dead {
		fmt.Fprintf(stderr, "tock purge: --state %q: give scheduled, due or dead\n", *state)
		return exitUsage
	}
	topic := pos[0]
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	if !*yes {
		if !terminal {
			fmt.Fprintln(stderr, "tock purge: not on a terminal, so nobody can confirm: give --yes to purge")
			return exitUsage
		}
		count := "every"
		if ts, err := c.Topics(ctx); err == nil {
			n := int64(0)
			for _, t := range ts {
				if t.Topic == topic {
					n = map[queue.State]int64{queue.Scheduled: t.Scheduled, queue.Due: t.Due, queue.Dead: t.Dead}[st]
				}
			}
			if n == 0 {
				fmt.Fprintf(stderr, "tock purge: no %s messages on %q; nothing to remove\n", st, topic)
				return exitOK
			}
			count = strconv.FormatInt(n, 10)
		}
		fmt.Fprintf(stderr, "Remove %s %s message(s) of %q for good? Type yes to go on: ", count, st, topic)
		answer, _ := bufio.NewReader(stdin).ReadString('\n')
		if strings.TrimSpace(strings.ToLower(answer)) != "yes" {
			fmt.Fprintln(stderr, "tock purge: not confirmed; nothing removed")
			return exitFailed
		}
	}
	n, err := c.Purge(ctx, topic, st)
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	if *asJSON {
		return writeLines(stderr, "purge", jsonLines(stdout, api.PurgeResponse{Removed: n}))
	}
	fmt.Fprintf(stdout, "removed %d %s message(s) of %s\n", n, st, topic)
	return exitOK
}

// pauseCommand is the pause command, or resume's when name is "resume".
func pauseCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall(name, "[flags] TOPIC", stderr)
	asJSON := qc.fs.Bool("json", false, "print the answer as one line of JSON")
	var isNew *bool
	if name == "pause" {
		isNew = qc.fs.Bool("new", false, "pause a topic no message was put on yet (ahead of its first)")
	}
	pos, code, ok := qc.parse(args, 1, 1)
	if !ok {
		return code
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	topic, paused := pos[0], name == "pause"
	if paused && !*isNew {
		// A mistyped name would otherwise make a paused topic of its own, silently.
		ts, err := c.Topics(ctx)
		if err != nil {
			return fail(stderr, qc.conn.server, err)
		}
		if !slices.ContainsFunc(ts, func(t api.Topic) bool { return t.Topic == topic }) {
			fmt.Fprintf(stderr, "tock pause: no topic %q (no message was ever put on it); check the name, or give --new to pause it ahead of its first message\n", topic)
			return exitNotFound
		}
	}
	var err error
	if paused {
		err = c.Pause(ctx, topic)
	} else {
		err = c.Resume(ctx, topic)
	}
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	if *asJSON {
		return writeLines(stderr, name, jsonLines(stdout, api.PauseResponse{Topic: topic, Paused: paused}))
	}
	if paused {
		fmt.Fprintf(stdout, "paused %s: receives wait until tock resume %s; puts go on\n", topic, topic)
	} else {
		fmt.Fprintf(stdout, "resumed %s\n", topic)
	}
	return exitOK
}

// deadLettersOnce returns, for each dead-letter topic of ts (a topic's name and
// queue.DeadLetterSuffix, as the engines name them by default), how many of its due messages are
// the dead letters its topic counts as Dead: the engines count a waiting dead letter both as Dead
// of the topic it died on and as a due message of its dead-letter topic.
func deadLettersOnce(ts []api.Topic) map[string]int64 {
	names := make(map[string]bool, len(ts))
	for _, t := range ts {
		names[t.Topic] = true
	}
	out := make(map[string]int64)
	for _, t := range ts {
		if d := t.Topic + queue.DeadLetterSuffix; t.Dead > 0 && names[d] {
			out[d] += t.Dead
		}
	}
	return out
}
