package queue

import (
	"fmt"
	"unicode/utf8"
)

// Bounds of a message's headers ([Message.Headers]), which every engine enforces.
const (
	// MaxHeaders is the most headers a message carries.
	MaxHeaders = 64
	// MaxHeaderKey is the longest header key, in bytes.
	MaxHeaderKey = 128
	// MaxHeadersSize bounds the bytes of a message's header keys and values together. They count
	// in the engine's payload limit too: a payload and its headers together fit in it.
	MaxHeadersSize = 16 << 10
)

// HeadersSize returns the bytes h takes, as counted in the bounds: the lengths of its keys and
// values.
func HeadersSize(h map[string]string) int {
	n := 0
	for k, v := range h {
		n += len(k) + len(v)
	}
	return n
}

// CheckHeaders returns nil when h is a valid set of headers, and otherwise an error matching
// [ErrInvalid] that names the first header found at fault (maps have no order), or
// [ErrTooLarge] when h is over [MaxHeaders] or [MaxHeadersSize]. A key is 1 to [MaxHeaderKey]
// bytes of the characters an HTTP header's name may hold (letters, digits and
// !#$%&'*+-.^_`|~); keys are case-sensitive. A value is valid UTF-8 without control characters
// other than tab, and may be empty. A nil or empty h is valid: no headers.
func CheckHeaders(h map[string]string) error {
	if len(h) > MaxHeaders {
		return fmt.Errorf("%d headers, over %d: %w", len(h), MaxHeaders, ErrTooLarge)
	}
	if n := HeadersSize(h); n > MaxHeadersSize {
		return fmt.Errorf("headers of %d bytes, over %d: %w", n, MaxHeadersSize, ErrTooLarge)
	}
	for k, v := range h {
		if err := checkHeaderKey(k); err != nil {
			return err
		}
		if err := checkHeaderValue(k, v); err != nil {
			return err
		}
	}
	return nil
}

func checkHeaderKey(k string) error {
	if k == "" || len(k) > MaxHeaderKey {
		return fmt.Errorf("header key of %d bytes: use 1 to %d: %w", len(k), MaxHeaderKey, ErrInvalid)
	}
	for i := 0; i < len(k); i++ {
		if !isTokenChar(k[i]) {
			return fmt.Errorf("header key %.64q: byte %d (%q) is not a letter, a digit or one of !#$%%&'*+-.^_`|~: %w", k, i, k[i], ErrInvalid)
		}
	}
	return nil
}

func checkHeaderValue(k, v string) error {
	if !utf8.ValidString(v) {
		return fmt.Errorf("header %q: the value is not valid UTF-8: %w", k, ErrInvalid)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return fmt.Errorf("header %q: the value holds a control character (%q at byte %d): %w", k, c, i, ErrInvalid)
		}
	}
	return nil
}

// isTokenChar reports whether c may be in an HTTP field name (RFC 9110's tchar).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
