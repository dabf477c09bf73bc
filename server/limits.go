package server

import (
	"fmt"
	"time"

	"github.com/tockwheel/tock/queue"
)

// Limits bounds what one request may ask for and how long it may take to
// arrive. The zero value of a field means its default; a negative value is
// refused (see [Limits.Validate]).
type Limits struct {
	// MaxPayload is the largest payload of one message, in bytes of compact
	// JSON: whitespace outside strings is not counted (default 1 MiB). A
	// larger one is refused with 413. The request body of a put may hold
	// up to MaxPayload plus 64 KiB, for the other fields and whitespace.
	MaxPayload int64
	// MaxBatch is the most messages one batch may hold (default 10000). A
	// batch body may hold up to 16 times MaxPayload plus 64 KiB, and at most
	// 256 MiB.
	MaxBatch int
	// MaxReceive is the most messages one receive may return (default 1000).
	MaxReceive int
	// MaxWait is the longest long poll a receive may ask for (default 20s).
	MaxWait time.Duration
	// MaxVisibility is the longest lease a receive may ask for (default 12h).
	MaxVisibility time.Duration
	// DefaultVisibility is the lease when a receive names none (default
	// 30s). It must not exceed MaxVisibility.
	DefaultVisibility time.Duration
	// BodyTimeout bounds the time a request body may take to arrive, from
	// the moment the server starts reading it (default 30s). A body still
	// incomplete then is answered with 408 and its connection closed, so a
	// client that sends a byte now and then cannot hold a connection. A
	// request answered before its body was read to its end (refused before
	// routing, or cut short by an error) is answered at once and closes its
	// connection, at the latest BodyTimeout after the server began to serve
	// it. The time to read the request's headers is
	// [ConnLimits.HeaderTimeout] under [Server.Serve].
	BodyTimeout time.Duration
}

// Validate reports the first field of l that is negative, or a
// DefaultVisibility above MaxVisibility once defaults are applied. [New]
// panics with this error for the limits of [WithLimits]; a program that
// reads limits from its configuration calls Validate first.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxPayload", l.MaxPayload},
		{"MaxBatch", int64(l.MaxBatch)},
		{"MaxReceive", int64(l.MaxReceive)},
		{"MaxWait", int64(l.MaxWait)},
		{"MaxVisibility", int64(l.MaxVisibility)},
		{"DefaultVisibility", int64(l.DefaultVisibility)},
		{"BodyTimeout", int64(l.BodyTimeout)},
	} {
		if f.v < 0 {
			return fmt.Errorf("server: Limits.%s is negative (%d); zero means the default", f.name, f.v)
		}
	}
	if d := l.withDefaults(); d.DefaultVisibility > d.MaxVisibility {
		return fmt.Errorf("server: Limits.DefaultVisibility %v exceeds MaxVisibility %v", d.DefaultVisibility, d.MaxVisibility)
	}
	return nil
}

func (l Limits) withDefaults() Limits {
	if l.MaxPayload <= 0 {
		l.MaxPayload = 1 << 20
	}
	if l.MaxBatch <= 0 {
		l.MaxBatch = 10000
	}
	if l.MaxReceive <= 0 {
		l.MaxReceive = 1000
	}
	if l.MaxWait <= 0 {
		l.MaxWait = 20 * time.Second
	}
	if l.MaxVisibility <= 0 {
		l.MaxVisibility = 12 * time.Hour
	}
	if l.DefaultVisibility <= 0 {
		l.DefaultVisibility = 30 * time.Second
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = 30 * time.Second
	}
	return l
}

// bodySlack is the room a request body has beyond its payloads: the other
// fields and whitespace, and the headers escaped as JSON may escape them
// (six bytes for one, as \u003c).
const bodySlack = 64<<10 + 6*queue.MaxHeadersSize

// bodyLimit is the largest request body a single put may send.
func (l Limits) bodyLimit() int64 { return l.MaxPayload + bodySlack }

// batchBodyLimit bounds a batch body; each message is still held to
// MaxPayload on its own.
func (l Limits) batchBodyLimit() int64 {
	const max = 256 << 20
	if n := l.MaxPayload * 16; n < max {
		return n + bodySlack
	}
	return max
}
