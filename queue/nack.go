package queue

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// How a Nack says why a delivery failed, and that a message is failed for good.
//
// The contract keeps one [Engine] interface, which delayq, redisq and the Go client all
// implement, and Nack's options are per-call options in the manner of docs/conventions.md: a
// caller that only retries writes Nack(ctx, receipt, delay) as before, and one that knows more
// adds [WithReason] and [WithDeadLetter]. An engine turns the options into a [NackOptions] with
// [NackOptionsOf], which is where the rules live (the bound on a reason, its encoding), so that
// every engine refuses the same reasons, with ErrInvalid, before it changes anything.

// MaxReason is the longest reason a Nack may give, in bytes.
const MaxReason = 1024

// A NackOption adds to a Nack what the consumer knows of the failure.
type NackOption func(*NackOptions)

// NackOptions is what a Nack's options ask for.
type NackOptions struct {
	// Reason says why the delivery failed, in the consumer's words: empty when not given.
	Reason string
	// DeadLetter moves the message to its dead-letter topic at once, whatever its attempts.
	DeadLetter bool
}

// WithReason gives the reason a delivery failed, kept as the message's last failure: the
// engines report it as [MessageInfo].Reason until the message fails again, is requeued, or is
// done. reason must be valid UTF-8 of at most [MaxReason] bytes ([CutReason] makes any text one).
// An empty reason is no reason.
func WithReason(reason string) NackOption {
	return func(o *NackOptions) { o.Reason = reason }
}

// WithDeadLetter fails the message for good: it moves to its topic's dead-letter topic at once,
// whatever its attempts, and Nack's delay is not used. A message nacked so on a dead-letter topic
// has nowhere further to go: it is due again there after the engine's longest backoff, as when
// it fails the maximum number of times there.
func WithDeadLetter() NackOption {
	return func(o *NackOptions) { o.DeadLetter = true }
}

// NackOptionsOf applies opts, skipping nil ones, and checks the result: a reason that is not
// valid UTF-8, or longer than MaxReason bytes, is refused with an error matching ErrInvalid.
func NackOptionsOf(opts []NackOption) (NackOptions, error) {
	var o NackOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	switch {
	case len(o.Reason) > MaxReason:
		return o, fmt.Errorf("nack reason of %d bytes: the longest is %d (see queue.CutReason): %w", len(o.Reason), MaxReason, ErrInvalid)
	case !utf8.ValidString(o.Reason):
		return o, fmt.Errorf("nack reason %.40q is not valid UTF-8: %w", o.Reason, ErrInvalid)
	}
	return o, nil
}

// CutReason returns s as a reason a Nack takes: surrounding white space trimmed, invalid UTF-8
// replaced by U+FFFD, and cut at a character boundary to at most MaxReason bytes, the last three
// of them "..." when it was cut. Workers use it to give an error's text as a reason.
func CutReason(s string) string {
	s = strings.ToValidUTF8(strings.TrimSpace(s), "\uFFFD")
	if len(s) <= MaxReason {
		return s
	}
	cut := MaxReason - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
