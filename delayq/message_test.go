package delayq

import (
	"encoding/binary"
	"math/rand/v2"
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

// parseIDByPackage is parseID as the base32 package spells it: decode, then encode again to
// check that the spelling is the one makeID writes.
func parseIDByPackage(id string) (int64, wal.Pos, bool) {
	if len(id) != generatedIDLen {
		return 0, 0, false
	}
	var b [16]byte
	if n, err := idEncoding.Decode(b[:], []byte(id)); err != nil || n != 16 || idEncoding.EncodeToString(b[:]) != id {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(b[:8])), wal.Pos(binary.BigEndian.Uint64(b[8:])), true
}

// parseID decides as the base32 package does: generated IDs of random and extreme values, each
// with every character changed to each other byte.
func TestParseIDAsPackage(t *testing.T) {
	rnd := rand.New(rand.NewPCG(testSeed(t), 0))
	check := func(id string) {
		at, p, ok := parseID(id)
		wat, wp, wok := parseIDByPackage(id)
		if at != wat || p != wp || ok != wok {
			t.Fatalf("parseID(%q) = %d, %v, %v; the base32 package: %d, %v, %v", id, at, p, ok, wat, wp, wok)
		}
	}
	ids := []string{makeID(0, 0), makeID(-1, wal.Pos(1<<64-1)), makeID(1<<63-1, 1), makeID(-1<<63, wal.MakePos(1, 16))}
	for range 200 {
		ids = append(ids, makeID(int64(rnd.Uint64()), wal.Pos(rnd.Uint64())))
	}
	for _, id := range ids {
		check(id)
		for i := range id {
			for c := range 256 {
				check(id[:i] + string([]byte{byte(c)}) + id[i+1:])
			}
		}
		check(id[1:])
		check(id + "0")
	}
}
