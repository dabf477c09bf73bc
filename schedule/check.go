package schedule

import (
	"fmt"
	"time"

	"github.com/tockwheel/tock/queue"
)

// Check checks every field of s but the payload, whose limit is the engine's, and returns its
// spec parsed with start as the anchor of an "@every" spec. Its errors match [queue.ErrInvalid]
// and begin with the field at fault, as the HTTP API names it: name, topic, spec, time_zone,
// misfire or overlap.
func Check(s queue.Schedule, start time.Time) (*Spec, error) {
	if err := CheckName(s.Name); err != nil {
		return nil, err
	}
	if s.Topic == "" {
		return nil, fmt.Errorf("topic: empty: %w", queue.ErrInvalid)
	}
	switch s.Misfire {
	case "", queue.MisfireOnce, queue.MisfireSkip, queue.MisfireAll:
	default:
		return nil, fmt.Errorf("misfire %q: want once, skip or all: %w", s.Misfire, queue.ErrInvalid)
	}
	switch s.Overlap {
	case "", queue.OverlapAllow, queue.OverlapSkip:
	default:
		return nil, fmt.Errorf("overlap %q: want allow or skip: %w", s.Overlap, queue.ErrInvalid)
	}
	return Parse(s.Spec, s.TimeZone, start)
}

// CheckName checks a schedule's name: 1 to queue.MaxScheduleName bytes of ASCII letters, digits
// and "-_.:". Its errors match [queue.ErrInvalid] and begin with "name".
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("name: empty: %w", queue.ErrInvalid)
	case len(name) > queue.MaxScheduleName:
		return fmt.Errorf("name: %d bytes, over %d: %w", len(name), queue.MaxScheduleName, queue.ErrInvalid)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return fmt.Errorf("name %.40q: byte %q at %d; want letters, digits and -_.: only: %w", name, c, i, queue.ErrInvalid)
		}
	}
	return nil
}

// Normalize returns s with its empty policies and zone spelled out: misfire once, overlap allow,
// time zone UTC.
func Normalize(s queue.Schedule) queue.Schedule {
	if s.Misfire == "" {
		s.Misfire = queue.MisfireOnce
	}
	if s.Overlap == "" {
		s.Overlap = queue.OverlapAllow
	}
	if s.TimeZone == "" {
		s.TimeZone = "UTC"
	}
	return s
}
