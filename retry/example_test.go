package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/retry"
)

func ExampleQueue() {
	done := make(chan struct{})
	q := retry.New(
		retry.WithBackoff(retry.Constant(10*time.Millisecond)),
		retry.WithMaxAttempts(5),
		retry.WithOnFailure(func(key string, attempt int, err error, next time.Duration) {
			fmt.Printf("%s: attempt %d failed: %v; next in %v\n", key, attempt, err, next)
		}),
		retry.WithOnGiveUp(func(key string, attempts int, err error) {
			fmt.Printf("%s: gave up: %v\n", key, err)
		}))
	defer q.Close()

	// The first call failed; the queue retries it in the background.
	calls := 0
	register := func(ctx context.Context) error {
		if calls++; calls < 3 {
			return errors.New("registry unavailable")
		}
		fmt.Println("registered")
		close(done)
		return nil
	}
	if err := q.Add("register:svc-a", register); err != nil {
		fmt.Println(err)
	}
	<-done
	// Output:
	// register:svc-a: attempt 1 failed: registry unavailable; next in 10ms
	// register:svc-a: attempt 2 failed: registry unavailable; next in 10ms
	// registered
}

// A program runs all of tock on one wheel: here a retry queue and the deadlines of requests.
func ExampleWithWheel() {
	w := tock.New()
	defer w.Stop()

	q := retry.New(retry.WithWheel(w), retry.WithAttemptTimeout(time.Second))
	defer q.Close() // does not stop w

	done := make(chan struct{})
	q.Add("warm-cache", func(ctx context.Context) error {
		defer close(done)
		_, hasDeadline := ctx.Deadline() // a deadline on w
		fmt.Println("attempt with a deadline:", hasDeadline)
		return nil
	})
	<-done
	// Output: attempt with a deadline: true
}

func ExampleDo() {
	w := tock.New()
	defer w.Stop()

	calls := 0
	err := retry.Do(context.Background(), func(ctx context.Context) error {
		if calls++; calls < 3 {
			return errors.New("connection refused")
		}
		return nil
	}, retry.WithWheel(w), retry.WithBackoff(retry.Exponential(time.Millisecond, 10*time.Millisecond)))
	fmt.Println(calls, err)
	// Output: 3 <nil>
}

func ExamplePermanent() {
	w := tock.New()
	defer w.Stop()

	errNotFound := errors.New("no such user")
	calls := 0
	err := retry.Do(context.Background(), func(ctx context.Context) error {
		calls++
		return retry.Permanent(errNotFound) // retrying will not help
	}, retry.WithWheel(w))
	fmt.Println(calls, err, errors.Is(err, errNotFound))
	// Output: 1 no such user true
}

func ExampleDo_giveUp() {
	w := tock.New()
	defer w.Stop()

	err := retry.Do(context.Background(), func(ctx context.Context) error {
		return errors.New("timeout")
	}, retry.WithWheel(w), retry.WithBackoff(retry.Constant(time.Millisecond)), retry.WithMaxAttempts(3))
	fmt.Println(err)
	fmt.Println(errors.Is(err, retry.ErrGaveUp))
	// Output:
	// retry: gave up after 3 attempts: timeout
	// true
}
