package tock_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/tockwheel/tock"
)

func ExampleWheel_WithTimeout() {
	w := tock.New()
	defer w.Stop()

	ctx, cancel := w.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel() // releases the timer if the work finishes first

	select {
	case <-time.After(time.Second):
		fmt.Println("overslept")
	case <-ctx.Done():
		fmt.Println(ctx.Err())
	}
	// Output: context deadline exceeded
}

// A server that puts a deadline on every request shares one wheel among all of them.
func ExampleWheel_WithTimeout_server() {
	w := tock.New()
	http.HandleFunc("/search", func(rw http.ResponseWriter, r *http.Request) {
		ctx, cancel := w.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend.internal/search?"+r.URL.RawQuery, nil)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusGatewayTimeout)
			return
		}
		defer resp.Body.Close()
		rw.WriteHeader(resp.StatusCode)
	})
}

func ExampleWheel_WithDeadline() {
	w := tock.New()
	defer w.Stop()

	parent, cancelParent := context.WithCancel(context.Background())
	ctx, cancel := w.WithDeadline(parent, time.Now().Add(time.Hour))
	defer cancel()

	cancelParent() // the parent's cancellation reaches the wheel context
	<-ctx.Done()
	fmt.Println(ctx.Err())
	// Output: context canceled
}
