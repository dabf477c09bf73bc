package format

import (
	"encoding/binary"

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
