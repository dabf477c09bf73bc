package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/queue"
)

// Exit codes of the queue subcommands.
const (
	exitOK       = 0
	exitFailed   = 1 // the server refused or could not be reached
	exitUsage    = 2 // bad flags or arguments
	exitNotFound = 3 // cancel: no such pending message
)

// A queueCommand runs one subcommand with its arguments (after the name)
// and returns the process's exit code.
type queueCommand func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// queueCommands returns the subcommands that talk to a tockd server, by name.
func queueCommands() map[string]queueCommand {
	return map[string]queueCommand{
		"put":     putCommand,
		"cancel":  cancelCommand,
		"receive": receiveCommand,
		"stats":   statsCommand,
	}
}

const queueUsage = `  put      [flags] TOPIC [PAYLOAD|-]  schedule a message (payload: JSON, else a string, --string always
                                      a string; text that looks like JSON and is not is refused; - reads stdin)
  cancel   [flags] ID                 cancel a waiting message
  receive  [flags] TOPIC              print due messages as JSON lines and ack them
  stats    [flags]                    print the server's counts

Every queue command takes --server (env TOCK_SERVER, default http://127.0.0.1:7070)
and --token (env TOCK_TOKEN).`

// connFlags are the flags every queue command shares.
type connFlags struct {
	server, token string
	timeout       time.Duration
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", envOr("TOCK_SERVER", "http://127.0.0.1:7070"), "tockd `URL` (env TOCK_SERVER)")
	fs.StringVar(&c.token, "token", os.Getenv("TOCK_TOKEN"), "bearer `token` (env TOCK_TOKEN)")
	durationVar(fs, &c.timeout, "timeout", 30*time.Second, "give up after this `duration`")
}

func (c *connFlags) client() (*client.Client, error) {
	s := c.server
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	return client.New(s, client.WithToken(c.token))
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// parseArgs parses flags wherever they appear among the arguments, so that
// "tock put jobs --delay 10s" works as well as "tock put --delay 10s jobs".
// Arguments after "--" are never flags.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if len(args) > 0 && args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil // Parse took the "--" that ended the flags
		}
		args = rest
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseExit returns the exit code for an error of parseArgs: asking for help (-h) is no mistake.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// newFlagSet returns the flag set of a command. A flag given a bad value gets its error and one
// line saying how to see the flags, not the whole list; -h prints the list.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: tock %s %s\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// durationFlag is a flag of a duration whose error says what a duration looks like, as the
// server's do: "30" alone is not one.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return fmt.Errorf("%q has no unit: give one, such as %ss, %sm or %sh", s, s, s, s)
		}
		return fmt.Errorf("%q is not a duration: use a number and a unit, such as 250ms, 10s, 5m or 1h30m", s)
	}
	*f.d = d
	return nil
}

// durationVar defines a duration flag with a durationFlag's errors.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(durationFlag{p}, name, usage)
}

// duration defines a duration flag with a durationFlag's errors and returns its value.
func duration(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	durationVar(fs, p, name, value, usage)
	return p
}

// A queueCall is what the queue commands share: a flag set with the connection flags, parsed
// with the positional arguments checked.
type queueCall struct {
	name   string
	fs     *flag.FlagSet
	conn   connFlags
	stderr io.Writer
}

func newQueueCall(name, usage string, stderr io.Writer) *queueCall {
	qc := &queueCall{name: name, fs: newFlagSet(name, usage, stderr), stderr: stderr}
	qc.conn.register(qc.fs)
	return qc
}

// parse parses args and checks that they hold between min and max positional arguments. When
// they do not, it reports false with the exit code to return. A bad flag value gets its error and
// a line saying how to list the flags, not the whole list.
func (qc *queueCall) parse(args []string, min, max int) (pos []string, code int, ok bool) {
	usage := qc.fs.Usage
	help := slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "--h" })
	qc.fs.Usage = func() {
		if help {
			usage()
		}
	}
	pos, err := parseArgs(qc.fs, args)
	qc.fs.Usage = usage
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(qc.stderr, "tock %s -h lists the flags\n", qc.name)
		}
		return nil, parseExit(err), false
	}
	if len(pos) < min || len(pos) > max {
		qc.fs.Usage()
		return nil, exitUsage, false
	}
	return pos, exitOK, true
}

// client returns the client of the server the flags name, or false with the exit code to return.
func (qc *queueCall) client() (*client.Client, int, bool) {
	c, err := qc.conn.client()
	if err != nil {
		fmt.Fprintf(qc.stderr, "tock %s: %v\n", qc.name, err)
		return nil, exitUsage, false
	}
	return c, exitOK, true
}

// fail prints err in words a person can act on and returns the exit code.
func fail(stderr io.Writer, server string, err error) int {
	var opErr *net.OpError
	var ae *queue.AckError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		fmt.Fprintf(stderr, "tock: cannot reach tockd at %s: connection refused (is it running? start it with: go run ./cmd/tockd)\n", server)
	case errors.As(err, &opErr):
		fmt.Fprintf(stderr, "tock: cannot reach tockd at %s: %v\n", server, opErr.Err)
	case errors.Is(err, client.ErrUnauthorized):
		fmt.Fprintln(stderr, "tock: the server wants a token: pass --token or set TOCK_TOKEN")
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "tock: no answer from %s in time (raise --timeout)\n", server)
	case errors.As(err, &ae):
		fmt.Fprintf(stderr, "tock: %d receipt(s) not acked, unknown or stale (their leases ran out): those messages will be delivered again\n", len(ae.Failed))
	default:
		var ce *client.Error
		if errors.As(err, &ce) {
			fmt.Fprintf(stderr, "tock: %s (HTTP %d)\n", ce.Message, ce.StatusCode)
		} else {
			fmt.Fprintf(stderr, "tock: %v\n", err)
		}
	}
	return exitFailed
}

func putCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("put", "[flags] TOPIC [PAYLOAD|-]", stderr)
	id := qc.fs.String("id", "", "message `id` (default: the server picks one)")
	delay := duration(qc.fs, "delay", 0, "deliver after this `duration`, such as 10s or 1h30m")
	asString := qc.fs.Bool("string", false, "send PAYLOAD as a JSON string whatever it looks like")
	at := qc.fs.String("at", "", "deliver at this RFC 3339 `time` instead")
	var headers map[string]string
	qc.fs.Func("header", "add the header `key=value` to the message (repeat for more)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("%q is not key=value", s)
		}
		if _, dup := headers[k]; dup {
			return fmt.Errorf("header %q given twice", k)
		}
		if headers == nil {
			headers = make(map[string]string)
		}
		headers[k] = v
		return nil
	})
	pos, code, ok := qc.parse(args, 1, 2)
	if !ok {
		return code
	}
	if err := queue.CheckHeaders(headers); err != nil {
		fmt.Fprintf(stderr, "tock put: --header: %v\n", err)
		return exitUsage
	}
	m := client.Message{ID: *id, Delay: *delay, Headers: headers}
	if *at != "" {
		if *delay != 0 {
			fmt.Fprintln(stderr, "tock put: give --delay or --at, not both")
			return exitUsage
		}
		t, err := time.Parse(time.RFC3339Nano, *at)
		if err != nil {
			fmt.Fprintf(stderr, "tock put: --at %q is not an RFC 3339 time such as 2030-01-02T15:04:05Z\n", *at)
			return exitUsage
		}
		m.DeliverAt = t
	}
	if *delay < 0 {
		fmt.Fprintln(stderr, "tock put: --delay must not be negative")
		return exitUsage
	}
	if len(pos) == 2 {
		raw := []byte(pos[1])
		if pos[1] == "-" {
			var err error
			if raw, err = io.ReadAll(os.Stdin); err != nil {
				fmt.Fprintf(stderr, "tock put: reading stdin: %v\n", err)
				return exitFailed
			}
		}
		payload, err := payloadArg(raw, *asString)
		if err != nil {
			fmt.Fprintf(stderr, "tock put: %v\n", err)
			return exitUsage
		}
		m.Payload = payload
	}
	c, code, ok := qc.client()
	if !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, qc.conn.timeout)
	defer cancel()
	res, err := c.Put(ctx, pos[0], m)
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	fmt.Fprintf(stdout, "%s\t%s\n", res.ID, res.DeliverAt.Format(time.RFC3339Nano))
	return exitOK
}

// payloadArg returns raw as a JSON payload: as it is when it is JSON, else as a JSON string, so
// "tock put jobs hello" needs no quoting. Text that looks like JSON (it starts with '{', '[' or
// '"') and is not is refused, saying where it breaks, unless asString: broken JSON stored as a
// string is a mistake found only by the consumer. With asString the text is always a string.
func payloadArg(raw []byte, asString bool) (json.RawMessage, error) {
	s := strings.TrimSpace(string(raw))
	if !asString && s != "" && json.Valid([]byte(s)) {
		return json.RawMessage(s), nil
	}
	if !asString && s != "" && strings.ContainsRune("{[\"", rune(s[0])) {
		var v any
		err := json.Unmarshal([]byte(s), &v)
		var se *json.SyntaxError
		where := ""
		if errors.As(err, &se) {
			where = fmt.Sprintf(" at byte %d", se.Offset)
		}
		return nil, fmt.Errorf("the payload looks like JSON but is not (%v%s); fix it, or give --string to send it as a string", err, where)
	}
	b, _ := json.Marshal(strings.TrimSuffix(string(raw), "\n"))
	return b, nil
}

func cancelCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("cancel", "[flags] ID", stderr)
	pos, code, ok := qc.parse(args, 1, 1)
	if !ok {
		return code
	}
	c, code, ok := qc.client()
	if !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, qc.conn.timeout)
	defer cancel()
	ok, err := c.Cancel(ctx, pos[0])
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	if !ok {
		fmt.Fprintf(stderr, "tock cancel: no pending message %q (already delivered, cancelled, or never put)\n", pos[0])
		return exitNotFound
	}
	fmt.Fprintf(stdout, "cancelled %s\n", pos[0])
	return exitOK
}

func receiveCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("receive", "[flags] TOPIC", stderr)
	maxN := qc.fs.Int("max", 10, "receive at most `n` messages")
	wait := duration(qc.fs, "wait", 5*time.Second, "wait up to this `duration` for a message to fall due")
	vis := duration(qc.fs, "visibility", 30*time.Second, "lease the messages for this `duration`")
	noAck := qc.fs.Bool("no-ack", false, "leave the messages leased: they are due again after --visibility")
	pos, code, ok := qc.parse(args, 1, 1)
	if !ok {
		return code
	}
	if *maxN < 1 || *wait < 0 || *vis <= 0 {
		fmt.Fprintln(stderr, "tock receive: --max and --visibility must be positive, --wait not negative")
		return exitUsage
	}
	c, code, ok := qc.client()
	if !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, qc.conn.timeout+*wait)
	defer cancel()
	ds, err := c.Receive(ctx, pos[0], client.ReceiveOptions{Max: *maxN, Wait: *wait, Visibility: *vis})
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	enc := json.NewEncoder(stdout)
	receipts := make([]string, len(ds))
	for i, d := range ds {
		receipts[i] = d.Receipt
		if err := enc.Encode(d); err != nil {
			fmt.Fprintf(stderr, "tock receive: %v\n", err)
			return exitFailed
		}
	}
	if len(ds) == 0 {
		if t, ok := topicInfo(ctx, c, pos[0]); ok && t.Paused {
			fmt.Fprintf(stderr, "tock receive: %q is paused: its %d due message(s) wait until tock resume %s\n", pos[0], t.Due, pos[0])
			return exitOK
		}
		fmt.Fprintf(stderr, "tock receive: nothing due on %q within %v\n", pos[0], *wait)
		return exitOK
	}
	if *noAck {
		return exitOK
	}
	if err := c.Ack(ctx, receipts...); err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	return exitOK
}

func statsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("stats", "[flags]", stderr)
	asJSON := qc.fs.Bool("json", false, "print the raw JSON")
	if _, code, ok := qc.parse(args, 0, 0); !ok {
		return code
	}
	c, code, ok := qc.client()
	if !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, qc.conn.timeout)
	defer cancel()
	st, err := c.Stats(ctx)
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
		return exitOK
	}
	fmt.Fprintf(stdout, "scheduled   %d\ndue         %d\nleased      %d\n", st.Scheduled, st.Due, st.Leased)
	fmt.Fprintf(stdout, "puts        %d\ndeliveries  %d\nacks        %d\nnacks       %d\ncancels     %d\n",
		st.Puts, st.Deliveries, st.Acks, st.Nacks, st.Cancels)
	if st.Lateness.Count > 0 {
		fmt.Fprintf(stdout, "lateness    p50 %v  p90 %v  p99 %v  (%d deliveries, last minute)\n",
			seconds(st.Lateness.P50), seconds(st.Lateness.P90), seconds(st.Lateness.P99), st.Lateness.Count)
	}
	fmt.Fprintf(stdout, "uptime      %v\n", seconds(st.UptimeSeconds).Round(time.Second))
	return exitOK
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// topicInfo returns what the server's topics say of topic, if it can tell (an engine without the
// admin routes cannot).
func topicInfo(ctx context.Context, c *client.Client, topic string) (client.Topic, bool) {
	ts, err := c.Topics(ctx)
	if err != nil {
		return client.Topic{}, false
	}
	for _, t := range ts {
		if t.Topic == topic {
			return t, true
		}
	}
	return client.Topic{}, false
}
