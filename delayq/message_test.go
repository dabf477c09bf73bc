package delayq

import (
	"testing"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// A generated ID parses back to what it encodes; a spelling that decodes to the same bytes but is
// not the one Put generates (the 26th character holds 2 unused bits) is a chosen ID, not a
// generated one.
func TestParseIDCanonical(t *testing.T) {
	pos := wal.MakePos(7, 1234)
	id := makeID(42, pos)
	if at, p, ok := parseID(id); !ok || at != 42 || p != pos || !isGenerated(id, pos) {
		t.Fatalf("parseID(%q) = %d, %v, %v; want 42, %v, true", id, at, p, ok, pos)
	}
	last, refused := id[len(id)-1], 0
	for _, c := range "0123456789abcdefghijklmnopqrstuv" {
		if byte(c) == last {
			continue
		}
		other := id[:len(id)-1] + string(c)
		var b [16]byte
		if n, err := idEncoding.Decode(b[:], []byte(other)); err != nil || n != 16 {
			continue
		}
		at, p, ok := parseID(other)
		if ok && makeID(at, p) != other {
			t.Errorf("parseID(%q) accepted a spelling Put never generates (%q)", other, makeID(at, p))
		}
		if !ok {
			refused++
		}
	}
	// The last character carries 3 bits of the ID and 2 unused: of the 31 other characters, 7
	// spell other generated IDs and 24 set unused bits.
	if refused != 24 {
		t.Errorf("%d spellings of the last character refused, want 24", refused)
	}
	if _, _, ok := parseID("not-an-id-of-twenty-six-ch"); ok {
		t.Error("parseID accepted an ID that is not base32")
	}
}
