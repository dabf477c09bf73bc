package retry

import (
	"context"
	"fmt"
	"time"

	"github.com/tockwheel/tock"
)

// Do calls op until it succeeds, waiting between attempts on the wheel of [WithWheel] (or on the
// Go runtime's timers without one), and returns nil once it has. It stops and returns:
//   - the error itself when op returns an error wrapped with [Permanent];
//   - an error wrapping [ErrGaveUp] and op's last error when attempts or time run out
//     ([WithMaxAttempts], [WithMaxElapsed]) or the wheel refuses to time the wait;
//   - an error wrapping [context.Cause](ctx) and op's last error when ctx is done, which Do notices
//     before the first attempt (op is then not called), after each attempt and while it waits;
//   - an error wrapping [ErrInvalidOption] if op is nil or an option is invalid, at once, before
//     the first attempt.
//
// The first attempt runs at once, on the calling goroutine, as do the rest; a panic in op is not
// recovered. Each attempt gets ctx, or a context derived from it per [WithAttemptTimeout]. Options
// for queues only ([WithMaxPending], [WithWorkers], [WithOnOverflow]) are ignored, though an invalid
// value of one is reported all the same.
func Do(ctx context.Context, op func(context.Context) error, opts ...Option) error {
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	if op == nil {
		return fmt.Errorf("%w: nil operation", ErrInvalidOption)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("retry: %w before the first attempt", context.Cause(ctx))
	}
	w := cfg.wheel // nil: a nil wheel's WithTimeout and wait use runtime timers
	start := time.Now()
	var wake chan struct{}
	var signal func()
	for n := 1; ; n++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if cfg.attemptTimeout > 0 {
			actx, cancel = w.WithTimeout(ctx, cfg.attemptTimeout)
		}
		err := op(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("retry: %w after %d attempts: %w", context.Cause(ctx), n, err)
		}
		delay, giveUp := cfg.next(n, n, err, time.Since(start))
		if giveUp != nil {
			return cfg.gaveUp(n, giveUp)
		}
		if cfg.onFailure != nil {
			cfg.onFailure("", n, err, delay)
		}
		if wake == nil {
			wake = make(chan struct{}, 1)
			signal = func() { wake <- struct{}{} }
		}
		stop, serr := afterFunc(w, delay, signal)
		if serr != nil {
			return cfg.gaveUp(n, fmt.Errorf("%w after %d attempts (the wheel refused to time the wait: %w): %w", ErrGaveUp, n, serr, err))
		}
		select {
		case <-wake:
		case <-ctx.Done():
			stop()
			return fmt.Errorf("retry: %w after %d attempts: %w", context.Cause(ctx), n, err)
		}
	}
}

// afterFunc calls f after d on w, or on a runtime timer if w is nil, and returns the function that
// stops it.
func afterFunc(w *tock.Wheel, d time.Duration, f func()) (stop func() bool, err error) {
	if w == nil {
		return time.AfterFunc(d, f).Stop, nil
	}
	t, err := w.AfterFunc(d, f)
	return t.Stop, err
}

// gaveUp calls the give-up hook and returns err.
func (c *config) gaveUp(attempts int, err error) error {
	if c.onGiveUp != nil {
		c.onGiveUp("", attempts, err)
	}
	return err
}
