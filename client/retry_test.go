package client

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2030, 1, 2, 15, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":      0,
		"0":     0,
		"-5":    0,
		"soon":  0,
		"7":     7 * time.Second,
		"86400": MaxRetryAfter,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}
