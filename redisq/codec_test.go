package redisq

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func testSigner() signer { return newSigner([]byte("0123456789abcdef0123456789abcdef")) }

func TestReceiptsVerifyAsIssued(t *testing.T) {
	g := testSigner()
	for _, id := range []string{"a", "order-7", newID(5, 1_700_000_000, 1_700_000_000_000), "with\x00bytes\xff", strings.Repeat("x", MaxID)} {
		tok := newToken()
		rc := g.issue(5, tok, id)
		got, ok := g.verify(rc, 16)
		if !ok || got.shard != 5 || got.token != tok || got.id != id {
			t.Fatalf("verify(issue(5, %q, %q)) = %+v, %v", tok, id, got, ok)
		}
	}
}

// TestReceiptsRefuseEveryChange changes each byte of a receipt to every other character of the
// alphabets involved and truncates and extends it: none verifies.
func TestReceiptsRefuseEveryChange(t *testing.T) {
	g := testSigner()
	rc := g.issue(3, newToken(), "order-7")
	alphabet := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/=."
	for i := range len(rc) {
		for _, c := range []byte(alphabet) {
			if c == rc[i] {
				continue
			}
			forged := rc[:i] + string(c) + rc[i+1:]
			if _, ok := g.verify(forged, 16); ok {
				t.Fatalf("forged receipt %q (from %q) verified", forged, rc)
			}
		}
	}
	for _, forged := range []string{"", rc[:receiptHead-1], rc[:receiptHead], rc + "x", rc[:len(rc)-1]} {
		if _, ok := g.verify(forged, 16); ok {
			t.Errorf("receipt %q verified", forged)
		}
	}
	other := newSigner([]byte("another secret of thirty-two by"))
	if _, ok := other.verify(rc, 16); ok {
		t.Error("a receipt verified under another deployment's secret")
	}
	if _, ok := g.verify(g.issue(20, newToken(), "x"), 16); ok {
		t.Error("a receipt naming shard 20 of 16 verified")
	}
}

func FuzzVerifyReceipt(f *testing.F) {
	g := testSigner()
	f.Add(g.issue(1, newToken(), "id"))
	f.Add("")
	f.Add(strings.Repeat("A", receiptHead) + "id")
	f.Fuzz(func(t *testing.T, s string) {
		r, ok := g.verify(s, 16)
		if ok && g.issue(r.shard, r.token, r.id) != s {
			t.Fatalf("verify accepted %q, which is not issue(%d, %q, %q)", s, r.shard, r.token, r.id)
		}
	})
}

func TestDecodeRecord(t *testing.T) {
	rec, err := decodeRecord("1700000000123,,2,tok,3.abc,nonce,,,0,5;topicpay;load")
	if err != nil || rec.due != 1700000000123 || rec.att != 2 || rec.tok != "tok" || rec.topic != "topic" ||
		!bytes.Equal(rec.payload, []byte("pay;load")) || rec.origin != "" || rec.failWhy != 0 {
		t.Fatalf("decodeRecord = %+v, %v", rec, err)
	}
	dead, err := decodeRecord("1700000000999,1700000000000,1,,,,x1700000000500,1700000000900.3,1,3;tt.dpay")
	if why, at := dead.failure(); err != nil || dead.origin != "t" || dead.topic != "t.d" || string(dead.payload) != "pay" ||
		dead.diedAt != 1700000000900 || dead.diedAtt != 3 || why != "lease expired" || at.UnixMilli() != 1700000000500 {
		t.Fatalf("decodeRecord of a dead letter = %+v, %v", dead, err)
	}
	h, err := decodeRecord(`1,,0,,,,,,1,1,26;ot{"k":"v","traceparent":""}pay`)
	if err != nil || h.origin != "o" || h.topic != "t" || string(h.payload) != "pay" || len(h.headers) != 2 || h.headers["k"] != "v" {
		t.Fatalf("decodeRecord of a message with headers = %+v, %v", h, err)
	}
	for _, bad := range []string{
		`1,,0,,,,,,0,1,0;t`,             // headers of no length
		`1,,0,,,,,,0,1,9;t{"k":"v"`,     // headers past the end
		`1,,0,,,,,,0,1,5;t{"k":`,        // headers not JSON
		`1,,0,,,,,,0,1,2;t{}`,           // no headers
		`1,,0,,,,,,0,1,10;t{"k k":"v"}`, // a key the engine refuses
		`1,,0,,,,,,0,1,x;t{}`,           // length
		`1,,0,,,,,,0,1,7;t["a","b"]`,    // not an object
		`1,,0,,,,,,0,1,9;t{"k":1}`,      // not a string
		`1,,0,,,,,,0,1,9,9;t{"k":"v"}`,  // a field more
	} {
		if _, err := decodeRecord(bad); err == nil {
			t.Errorf("decodeRecord(%q) accepted it", bad)
		}
	}
	for _, bad := range []string{
		"",
		"1,,0,,,,,,0,1",                     // no body
		"1,,0,,,,,0,1;t",                    // a field short
		"1,,0,,,,,,,0,1;t",                  // a field more
		"x,,0,,,,,,0,1;t",                   // due
		"1,,x,,,,,,0,1;t",                   // attempts
		"1,,0,,,,,,0,9;short",               // topic past the end
		"1,,0,,,,,,0,-1;t",                  // negative length
		"1,,0,,,,,,5,1;tt",                  // origin and topic past the end
		"1,,0,,,,q5,,0,1;t",                 // failure of an unknown kind
		"1,,0,,,,n,,0,1;t",                  // failure without a time
		"1,,0,,,,,5.1,0,1;t",                // died without an origin
		"1,,0,,,,,5,1,1;ot",                 // died without attempts
		"1,,0,,,,,x.1,1,1;ot",               // died at no time
		"1,,0,,,,,,9999999999999999999,1;t", // length overflow
	} {
		if _, err := decodeRecord(bad); err == nil {
			t.Errorf("decodeRecord(%q) accepted it", bad)
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add("1700000000123,-5,2,tok,,n,,,0,5;topicpayload")
	f.Add("1700000000999,1700000000000,1,,,,x1700000000500,1700000000900.3,1,3;tt.dpay")
	f.Add("1,,0,,,,,,0,0;")
	f.Add(`1,,0,,,,,,1,1,26;ot{"k":"v","traceparent":""}pay`)
	f.Fuzz(func(t *testing.T, s string) {
		rec, err := decodeRecord(s)
		if err == nil && len(rec.origin)+len(rec.topic)+len(rec.payload) > len(s) {
			t.Fatalf("decodeRecord(%q) = %+v: longer than its input", s, rec)
		}
	})
}

// TestDecodeCursorRefusesScoresPastTheBounds checks that a cursor is refused when its score has
// more digits than the wheels' chunk bounds: 2^63-1 reached the list script as a number Lua
// formats as a negative one, which found the first chunk, so that the page listed messages before
// the cursor.
func TestDecodeCursorRefusesScoresPastTheBounds(t *testing.T) {
	for _, ms := range []int64{maxCursorMs + 1, math.MaxInt64} {
		if p, ok := decodeCursor(position{ms: ms, id: "x"}.encode()); ok {
			t.Errorf("decodeCursor of a score of %d = %+v; want it refused", ms, p)
		}
	}
	for _, p := range []position{{0, ""}, {1_700_000_000_123, "a\x00\xff"}, {maxCursorMs, strings.Repeat("i", MaxID)}} {
		if got, ok := decodeCursor(p.encode()); !ok || got != p {
			t.Errorf("decodeCursor(%q) = %+v, %v; want %+v", p.encode(), got, ok, p)
		}
	}
}

func FuzzDecodeCursor(f *testing.F) {
	f.Add(position{ms: 1_700_000_000_123, id: "order-7"}.encode())
	f.Add("1.9223372036854775807.eA")
	f.Add("1.-1.")
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := decodeCursor(s)
		if !ok {
			return
		}
		if p.ms < 0 || p.ms > maxCursorMs || len(p.id) > MaxID || p.encode() != s {
			t.Fatalf("decodeCursor(%q) = %+v, which encodes as %q", s, p, p.encode())
		}
	})
}

func TestParseEvent(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want event
	}{
		{"o abc", event{kind: 'o', owner: "abc"}},
		{"o -", event{kind: 'o'}},
		{"m 7 1700000000 - - -", event{kind: 'm', ver: 7, wsec: 1700000000, wcount: -1, lms: -1}},
		{"n 8 - 0 1700000000123 own", event{kind: 'n', ver: 8, wsec: -1, wcount: 0, lms: 1700000000123, owner: "own"}},
		{"m 9 - - - - 1700000000500 1:t 1700000000600 7:a b:c d", event{kind: 'm', ver: 9, wsec: -1, wcount: -1, lms: -1,
			heads: []topicHead{{1700000000500, "t"}, {1700000000600, "a b:c d"}}}},
	} {
		got, ok := parseEvent(tc.in)
		if !ok || got.kind != tc.want.kind || got.ver != tc.want.ver || got.wsec != tc.want.wsec ||
			got.wcount != tc.want.wcount || got.lms != tc.want.lms || got.owner != tc.want.owner ||
			len(got.heads) != len(tc.want.heads) {
			t.Fatalf("parseEvent(%q) = %+v, %v; want %+v", tc.in, got, ok, tc.want)
		}
		for i := range got.heads {
			if got.heads[i] != tc.want.heads[i] {
				t.Fatalf("parseEvent(%q) heads = %+v; want %+v", tc.in, got.heads, tc.want.heads)
			}
		}
	}
	for _, bad := range []string{"", "x 1", "m", "m 1 2 3", "m x - - - -", "m 1 - - - - 5 9:t", "m 1 - - - - 5 t", "m 1 - - - - x 1:t"} {
		if _, ok := parseEvent(bad); ok {
			t.Errorf("parseEvent(%q) accepted it", bad)
		}
	}
}

func FuzzParseEvent(f *testing.F) {
	f.Add("m 9 - - - - 1700000000500 1:t 1700000000600 7:a b:c d")
	f.Add("n 8 - 0 1700000000123 own")
	f.Add("o -")
	f.Fuzz(func(t *testing.T, s string) {
		e, ok := parseEvent(s)
		if !ok {
			return
		}
		n := 0
		for _, h := range e.heads {
			n += len(h.topic)
		}
		if n > len(s) {
			t.Fatalf("parseEvent(%q) returned %d bytes of topics", s, n)
		}
	})
}

// BenchmarkReceipt issues a receipt and verifies it, as a delivery and its ack do.
func BenchmarkReceipt(b *testing.B) {
	g := testSigner()
	tok, id := newToken(), "s123@2026-11-28T01:37:59Z"
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := g.verify(g.issue(5, tok, id), 16); !ok {
			b.Fatal("a receipt issued did not verify")
		}
	}
}
