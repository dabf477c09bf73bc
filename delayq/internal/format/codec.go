package format

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// An encoder appends little-endian fields to b, or, with count set, only counts their bytes, so
// that one function per schema gives both a value's encoding and its size.
type encoder struct {
	b     []byte
	count bool
	n     int
}

func (e *encoder) u8(v byte) {
	if e.count {
		e.n++
		return
	}
	e.b = append(e.b, v)
}

func (e *encoder) u16(v uint16) {
	if e.count {
		e.n += 2
		return
	}
	e.b = binary.LittleEndian.AppendUint16(e.b, v)
}

func (e *encoder) u32(v uint32) {
	if e.count {
		e.n += 4
		return
	}
	e.b = binary.LittleEndian.AppendUint32(e.b, v)
}

func (e *encoder) u64(v uint64) {
	if e.count {
		e.n += 8
		return
	}
	e.b = binary.LittleEndian.AppendUint64(e.b, v)
}

func (e *encoder) i64(v int64)   { e.u64(uint64(v)) }
func (e *encoder) pos(p wal.Pos) { e.u64(uint64(p)) }

// name writes a string of at most MaxName bytes: its length (uint16), then its bytes. The caller
// has checked the length.
func (e *encoder) name(s string) {
	e.u16(uint16(len(s)))
	if e.count {
		e.n += len(s)
		return
	}
	e.b = append(e.b, s...)
}

// headers writes a Put's headers, checked by checkHeaders: their count, then each key and value
// as names, in the order of the keys.
func (e *encoder) headers(h map[string]string) {
	e.u16(uint16(len(h)))
	if e.count {
		for k, v := range h {
			e.n += 4 + len(k) + len(v)
		}
		return
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		e.name(k)
		e.name(h[k])
	}
}

// rest writes p as the last field, whose length is what is left of the body.
func (e *encoder) rest(p []byte) {
	if e.count {
		e.n += len(p)
		return
	}
	e.b = append(e.b, p...)
}

// A decoder reads little-endian fields from b, and remembers running out (bad) instead of
// panicking: after that, every field reads as zero. Without keep, names and the rest are skipped
// rather than copied, so that checking a body costs no allocation.
type decoder struct {
	b    []byte
	off  int
	bad  bool
	keep bool
}

func (d *decoder) take(n int) []byte {
	if d.bad || n < 0 || len(d.b)-d.off < n {
		d.bad = true
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *decoder) u8() byte {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) i64() int64   { return int64(d.u64()) }
func (d *decoder) pos() wal.Pos { return wal.Pos(d.u64()) }

// name reads what encoder.name writes; "" without keep.
func (d *decoder) name() string {
	p := d.take(int(d.u16()))
	if !d.keep {
		return ""
	}
	return string(p)
}

// nameLen reads a name and returns its length, for checks that do not keep it.
func (d *decoder) nameLen() int { return len(d.take(int(d.u16()))) }

// headers reads what encoder.headers writes: the headers (nil without keep), the bytes of their
// keys and values, and why they are malformed ("" when they are not, or when the body ran out,
// which sets bad).
func (d *decoder) headers() (h map[string]string, size int, why string) {
	n := int(d.u16())
	if n == 0 || n > MaxHeaders {
		return nil, 0, fmt.Sprintf("%d headers: 1 to %d", n, MaxHeaders)
	}
	if d.keep {
		h = make(map[string]string, n)
	}
	var prev []byte
	for i := range n {
		k := d.take(int(d.u16()))
		v := d.take(int(d.u16()))
		if d.bad {
			return nil, 0, ""
		}
		if len(k) == 0 {
			return nil, 0, fmt.Sprintf("header %d has an empty key", i)
		}
		if i > 0 && bytes.Compare(prev, k) >= 0 {
			return nil, 0, fmt.Sprintf("header %d: key %.64q is not after %.64q", i, k, prev)
		}
		prev = k
		size += len(k) + len(v)
		if d.keep {
			h[string(k)] = string(v)
		}
	}
	return h, size, ""
}

// rest reads the rest of the body: a copy with keep (nil when empty), else nil.
func (d *decoder) rest() []byte {
	p := d.take(len(d.b) - d.off)
	if !d.keep || d.bad {
		return nil
	}
	return append([]byte(nil), p...)
}

// more reports whether bytes are left: an optional field at the end of a body is present.
func (d *decoder) more() bool { return !d.bad && d.off < len(d.b) }

// left returns the number of bytes not read yet.
func (d *decoder) left() int { return len(d.b) - d.off }
