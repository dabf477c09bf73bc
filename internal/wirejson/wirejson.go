// Package wirejson reads the JSON of tock's HTTP API quickly: the bodies that the API's own
// encoders write (package api's AppendJSON methods), and what clients commonly send. A [Reader]
// understands objects, arrays, strings, integers and any value taken whole, checked as strictly
// as encoding/json checks it; it reports false on anything it does not handle (a string with
// escapes where a decoded string is wanted, a key it was not asked about, nesting deeper than
// [MaxDepth]), and on anything invalid. Its callers then decode the same bytes again with
// encoding/json, which decides every case the Reader left, errors included: the Reader is a
// shortcut, never a second definition of what a body means.
//
// Soundness is the one promise: what a Reader accepts, encoding/json accepts and decodes the
// same way. It may turn down valid JSON.
package wirejson

import (
	"unicode/utf8"
)

// A status is what a check of a value found.
type status uint8

const (
	valid   status = iota
	invalid        // not JSON, or more than the Reader takes
	short          // valid so far, but the data ends before the value does
)

// MaxDepth is the deepest nesting of arrays and objects [Reader.Value] takes; deeper values are
// turned down (encoding/json's limit is 10,000).
const MaxDepth = 64

// A Reader reads one JSON document from a byte slice, token by token. Every method skips the
// whitespace before what it reads. Its zero value reads an empty document. A Reader is not safe
// for concurrent use.
type Reader struct {
	data []byte
	pos  int
}

// NewReader returns a Reader of data.
func NewReader(data []byte) Reader { return Reader{data: data} }

func (r *Reader) skipSpace() {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// Byte reports whether the next token is the delimiter c ('{', '}', '[', ']', ':' or ','), and
// if so consumes it.
func (r *Reader) Byte(c byte) bool {
	r.skipSpace()
	if r.pos < len(r.data) && r.data[r.pos] == c {
		r.pos++
		return true
	}
	return false
}

// Peek returns the first byte of the next token, or 0 at the end.
func (r *Reader) Peek() byte {
	r.skipSpace()
	if r.pos < len(r.data) {
		return r.data[r.pos]
	}
	return 0
}

// End reports whether nothing but whitespace is left.
func (r *Reader) End() bool {
	r.skipSpace()
	return r.pos == len(r.data)
}

// String reads a string that has no escapes and holds valid UTF-8 and no control characters, and
// returns its contents, which alias the Reader's data. It reports false for any other token.
func (r *Reader) String() ([]byte, bool) {
	r.skipSpace()
	if r.pos >= len(r.data) || r.data[r.pos] != '"' {
		return nil, false
	}
	start := r.pos + 1
	ascii := true
	for i := start; i < len(r.data); i++ {
		switch c := r.data[i]; {
		case c == '"':
			s := r.data[start:i]
			if !ascii && !utf8.Valid(s) {
				return nil, false // encoding/json would replace the bad bytes
			}
			r.pos = i + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// Key reads an object's key and the colon after it, as String does.
func (r *Reader) Key() ([]byte, bool) {
	k, ok := r.String()
	return k, ok && r.Byte(':')
}

// Object reads an object, handing each key to field, which reads the key's value and returns
// the key's number from 0 to 7, or -1 for a key it does not know or a value it cannot read. It
// reports false for a key met twice (encoding/json keeps the last), and for anything field turns
// down.
func (r *Reader) Object(field func(key []byte) int) bool {
	if !r.Byte('{') {
		return false
	}
	if r.Byte('}') {
		return true
	}
	var seen uint8
	for {
		k, ok := r.Key()
		if !ok {
			return false
		}
		n := field(k)
		if n < 0 || n > 7 || seen&(1<<n) != 0 {
			return false
		}
		seen |= 1 << n
		if !r.Byte(',') {
			return r.Byte('}')
		}
	}
}

// StringMap reads an object whose keys and values are strings, each as String reads it, into a
// new map, as encoding/json decodes one into a map[string]string. It reports false for a key met
// twice (encoding/json keeps the last) and for any value that is not such a string.
func (r *Reader) StringMap() (map[string]string, bool) {
	if !r.Byte('{') {
		return nil, false
	}
	m := map[string]string{}
	if r.Byte('}') {
		return m, true
	}
	for {
		k, ok := r.Key()
		if !ok {
			return nil, false
		}
		v, ok := r.String()
		if _, dup := m[string(k)]; !ok || dup {
			return nil, false
		}
		m[string(k)] = string(v)
		if !r.Byte(',') {
			return m, r.Byte('}')
		}
	}
}

// Array reads an array, each element with elem, which reports whether it could.
func (r *Reader) Array(elem func() bool) bool {
	if !r.Byte('[') {
		return false
	}
	if r.Byte(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if !r.Byte(',') {
			return r.Byte(']')
		}
	}
}

// Field is the number Object's field function returns for a value read as field n, or -1 when
// ok is false.
func Field(ok bool, n int) int {
	if !ok {
		return -1
	}
	return n
}

// Bool reads true or false (not null, which encoding/json takes as leaving a bool as it is).
func (r *Reader) Bool() (v, ok bool) {
	r.skipSpace()
	for _, lit := range [...]string{"false", "true"} {
		if end, _, st := literal(r.data, r.pos, lit); st == valid {
			r.pos = end
			return lit == "true", true
		}
	}
	return false, false
}

// Int reads an integer that fits in an int, written without a fraction or an exponent.
func (r *Reader) Int() (int, bool) {
	r.skipSpace()
	i, neg := r.pos, false
	if i < len(r.data) && r.data[i] == '-' {
		neg, i = true, i+1
	}
	start := i
	n := 0
	for ; i < len(r.data) && '0' <= r.data[i] && r.data[i] <= '9'; i++ {
		if i-start >= 18 {
			return 0, false // may overflow; encoding/json decides
		}
		n = n*10 + int(r.data[i]-'0')
	}
	if i == start || (r.data[start] == '0' && i-start > 1) {
		return 0, false
	}
	if i < len(r.data) {
		switch r.data[i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	r.pos = i
	if neg {
		n = -n
	}
	return n, true
}

// Value reads any JSON value and returns its bytes, which alias the Reader's data, and whether
// they are compact: no whitespace outside its strings.
func (r *Reader) Value() (raw []byte, compact bool, ok bool) {
	r.skipSpace()
	start := r.pos
	end, compact, st := value(r.data, r.pos, 0)
	if st != valid {
		return nil, false, false
	}
	r.pos = end
	return r.data[start:end], compact, true
}

// Valid reports whether data is one JSON value, with whitespace around it or not, as
// encoding/json's Valid would, and whether the value is compact: false, false for anything the
// Reader turns down.
func Valid(data []byte) (ok, compact bool) {
	r := NewReader(data)
	if _, compact, ok = r.Value(); !ok || !r.End() {
		return false, false
	}
	return true, compact
}

// Prefix reports whether data can begin a JSON document: it is, or it is cut short of, one value
// with whitespace around it or not. It is false as soon as data holds a byte that no JSON
// document can have there (as encoding/json's Decoder fails as soon as it reads one), and for
// anything the Reader turns down.
func Prefix(data []byte) bool {
	r := NewReader(data)
	r.skipSpace()
	if r.pos == len(data) {
		return true
	}
	end, _, st := value(data, r.pos, 0)
	switch st {
	case short:
		return true
	case valid:
		r.pos = end
		return r.End()
	}
	return false
}

// value checks the JSON value at data[i:], nested in depth arrays and objects, and returns the
// index after it.
func value(data []byte, i, depth int) (end int, compact bool, st status) {
	if i >= len(data) {
		return 0, false, short
	}
	switch c := data[i]; {
	case c == '"':
		end, st = stringEnd(data, i)
		return end, true, st
	case c == '{' || c == '[':
		return composite(data, i, depth)
	case c == '-' || '0' <= c && c <= '9':
		end, st = numberEnd(data, i)
		return end, true, st
	case c == 't':
		return literal(data, i, "true")
	case c == 'f':
		return literal(data, i, "false")
	case c == 'n':
		return literal(data, i, "null")
	}
	return 0, false, invalid
}

func literal(data []byte, i int, lit string) (int, bool, status) {
	n := min(len(data)-i, len(lit))
	switch {
	case string(data[i:i+n]) != lit[:n]:
		return 0, false, invalid
	case n < len(lit):
		return 0, false, short
	}
	return i + len(lit), true, valid
}

// composite checks the object or array at data[i].
func composite(data []byte, i, depth int) (end int, compact bool, st status) {
	if depth >= MaxDepth {
		return 0, false, invalid
	}
	closing := byte(']')
	object := data[i] == '{'
	if object {
		closing = '}'
	}
	compact = true
	i++
	space := func() {
		for i < len(data) {
			switch data[i] {
			case ' ', '\t', '\n', '\r':
				i++
				compact = false
				continue
			}
			return
		}
	}
	space()
	if i < len(data) && data[i] == closing {
		return i + 1, compact, valid
	}
	for {
		if object {
			if i >= len(data) {
				return 0, false, short
			}
			if data[i] != '"' {
				return 0, false, invalid
			}
			if i, st = stringEnd(data, i); st != valid {
				return 0, false, st
			}
			space()
			if i >= len(data) {
				return 0, false, short
			}
			if data[i] != ':' {
				return 0, false, invalid
			}
			i++
			space()
		}
		var c bool
		if i, c, st = value(data, i, depth+1); st != valid {
			return 0, false, st
		}
		compact = compact && c
		space()
		if i >= len(data) {
			return 0, false, short
		}
		switch data[i] {
		case ',':
			i++
			space()
		case closing:
			return i + 1, compact, valid
		default:
			return 0, false, invalid
		}
	}
}

// stringEnd checks the string at data[i], a quote, and returns the index after its closing
// quote. Like encoding/json it takes any byte from 0x20 up, valid UTF-8 or not, and the escapes
// of RFC 8259.
func stringEnd(data []byte, i int) (int, status) {
	for i++; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return i + 1, valid
		case c < 0x20:
			return 0, invalid
		case c == '\\':
			i++
			if i >= len(data) {
				return 0, short
			}
			switch data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for j := i + 1; j < i+5; j++ {
					if j >= len(data) {
						return 0, short
					}
					if h := data[j]; !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return 0, invalid
					}
				}
				i += 4
			default:
				return 0, invalid
			}
		}
	}
	return 0, short
}

// numberEnd checks the number at data[i] and returns the index after it. A number that data
// cuts short where it needs another digit ("-", "1.", "1e") is short.
func numberEnd(data []byte, i int) (int, status) {
	digits := func() status {
		start := i
		for i < len(data) && '0' <= data[i] && data[i] <= '9' {
			i++
		}
		switch {
		case i > start:
			return valid
		case i == len(data):
			return short
		}
		return invalid
	}
	if data[i] == '-' {
		i++
	}
	if i < len(data) && data[i] == '0' {
		i++
	} else if st := digits(); st != valid {
		return 0, st
	}
	if i < len(data) && data[i] == '.' {
		i++
		if st := digits(); st != valid {
			return 0, st
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if st := digits(); st != valid {
			return 0, st
		}
	}
	return i, valid
}
