package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/tockwheel/tock/queue"
)

// FuzzPayloadRoundTrip checks that a payload an Engine sends comes back byte for byte: whatever
// EncodePayload makes of valid UTF-8 (or compact JSON) is one JSON value, as compact as the
// server keeps it, and DecodePayload gives the bytes back; anything else is refused with
// ErrInvalid.
func FuzzPayloadRoundTrip(f *testing.F) {
	for _, s := range []string{"", "hello", `{"n":1}`, `{ "n": 1 }`, `"quoted"`, "null", "1", "1.50", "[1,2]", "true",
		"\xff", "<a&b>", "line\nbreak", `"`, "\u2028"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		v, err := EncodePayload(p)
		if err != nil {
			if !errors.Is(err, queue.ErrInvalid) || utf8.Valid(p) {
				t.Fatalf("EncodePayload(%q): %v", p, err)
			}
			return
		}
		if len(p) == 0 {
			if v != nil {
				t.Fatalf("EncodePayload of nothing: %q", v)
			}
			return
		}
		var c bytes.Buffer
		if !json.Valid(v) || json.Compact(&c, v) != nil || !bytes.Equal(c.Bytes(), v) {
			t.Fatalf("EncodePayload(%q) = %q: not one compact JSON value", p, v)
		}
		back, err := DecodePayload(v)
		if err != nil || !bytes.Equal(back, p) {
			t.Fatalf("EncodePayload(%q) = %q, decoded as %q, %v", p, v, back, err)
		}
	})
}
