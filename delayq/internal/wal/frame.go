package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// # Frame
//
// Every frame is one record of the content the log carries; frames follow each other with no
// padding. All integers are little endian.
//
//	offset  size  field
//	0       4     crc     CRC-32C (Castagnoli) of bytes [4, 8+length): the length, type and body,
//	                      so a damaged length is caught as surely as a damaged body
//	4       4     length  number of bytes after this field: 1 (type) + len(body); at least 1
//	8       1     type    the content's type of the body in the low 7 bits, 1 to 127, which the log
//	                      does not interpret; 0 is never written, so a run of zero bytes (a
//	                      preallocated or half-written page) never decodes. The high bit (0x80)
//	                      says that the frame is not the last of an atomic group: see below.
//	9       n     body    the content's bytes
//
// # Atomic groups
//
// Frames appended as a group (Log.Reserve, then Append with more set on all but the last) are
// written into one segment, one after the other, each with the high bit of its type set except
// the last. Open treats a group without its last frame at the end of the log as a torn write and
// cuts all of it, so a group is in the log whole or not at all. Elsewhere the bit means nothing:
// readers take the frames of a group one by one. The bit was added after the other fields: logs
// holding it cannot be read by versions of delayq older than it.
//
// # The end of the log
//
// The log is written a commit at a time: one write of every frame appended since the last, then
// one fdatasync, and the next commit's write begins only once that sync has returned (commit.go).
// A segment is synced whole before the next one is created. So after a power loss at most one
// commit is not durable, and it is at the end of the last segment; no frame of it was
// acknowledged. A segment file is written ahead of its frames with zeros (files.go), which are
// synced with the commit that wrote them, so the unsynced commit was written over zeros, or past
// the file's end. A disk writes a sector (512 bytes, or a multiple) whole or not at all, and the
// page cache writes a file's pages back in any order: each sector of that commit holds either what
// the commit wrote there or what was there before, zeros or nothing. Its frames can then be cut
// short by the file's end, be zeros, be followed by zeros where their next sector was lost, or
// be valid after a lost sector. What a disk does not do to synced data is write zeros into it,
// or cut it off: damage of those shapes is taken for a lost write, any other for corruption. (With
// NoSync commits are not synced and no zeros are written ahead: a power loss can take any part
// of the last segment written since it began or Open opened it, leaving the same shapes.)
//
// So Open (repair.go) ends the log at the first damage in the last segment past what the
// checkpoint covers, from which on every damage is one a lost write explains: the file ends
// inside its frame with no valid frame after it, or a sector that its frame reaches into holds
// only zeros from the frame's start or the sector's start to the sector's end (or the file's).
// The damage and everything after it, valid frames included, is cut: those frames are of the
// commit that was lost, and keeping them while frames before them are gone would keep half of
// a group, or a record that refers back to one that is gone. A zero-filled header drops the
// segment whole (the header is the first write to a segment). Damage of any other shape, and any
// damage before what a checkpoint covers, is corruption: reported, left in place, read past.
//
// What this cannot tell apart, without the synced end recorded in the frames: synced frames that
// a failing disk turns to zeros, at the end of the log past the last checkpoint, are cut as a lost
// write (with a warning naming them); and a flipped bit in the length of the last frame, making
// it run into the zeros after it or past the file's end, is taken for a frame whose end was lost.
//
// These constants are frozen: changing one makes existing logs unreadable.
const (
	// HeaderSize is the size of a frame's crc and length fields.
	HeaderSize = 8
	// maxLength bounds a frame's length field (its type and body), so that a damaged length
	// cannot make a reader allocate gigabytes: 16 MiB and 256 KiB.
	maxLength = 1<<24 + 1<<18
	// MaxBody is the largest body a frame holds.
	MaxBody = maxLength - 1
	// moreBit is the bit of a frame's type byte that says more frames of its group follow.
	moreBit = 0x80
)

// MaxType is the largest type a frame can carry; types are from 1 to MaxType.
const MaxType = moreBit - 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// A Frame is one frame read back: its type, its group bit and its body. Body is only valid until
// the next read of the Reader, scan or call that returned it; copy what must outlive that.
type Frame struct {
	Type byte
	// More reports that the frame is not the last of an atomic group.
	More bool
	Body []byte
}

// FrameSize returns the size of the frame of a body of n bytes.
func FrameSize(n int) int { return HeaderSize + 1 + n }

// AppendFrame appends the frame of body, of content type typ, to b; more sets the group bit. It
// returns an error, and b unchanged, for a type out of [1, MaxType] or a body over MaxBody.
func AppendFrame(b []byte, typ byte, more bool, body []byte) ([]byte, error) {
	if typ == 0 || typ > MaxType {
		return b, fmt.Errorf("delayq: frame type %d out of range", typ)
	}
	if len(body) > MaxBody {
		return b, fmt.Errorf("delayq: frame body of %d bytes over %d", len(body), MaxBody)
	}
	start := len(b)
	t := typ
	if more {
		t |= moreBit
	}
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0, t)
	binary.LittleEndian.PutUint32(b[start+4:], uint32(1+len(body)))
	b = append(b, body...)
	binary.LittleEndian.PutUint32(b[start:], crc32.Checksum(b[start+4:], castagnoli))
	return b, nil
}

// frameError describes why bytes are not a valid frame. truncated means the bytes ended before
// the frame did, which at the end of the last segment is a torn tail rather than corruption.
type frameError struct {
	msg       string
	truncated bool
}

func (e *frameError) Error() string { return e.msg }

// frameLen validates a frame header and returns the frame's total size.
func frameLen(hdr []byte) (int, error) {
	if len(hdr) < HeaderSize {
		return 0, &frameError{msg: "frame header cut short", truncated: true}
	}
	n := binary.LittleEndian.Uint32(hdr[4:])
	if n == 0 || n > maxLength {
		return 0, &frameError{msg: fmt.Sprintf("frame length %d out of range", n)}
	}
	return HeaderSize + int(n), nil
}

// sizeAt returns the size of the frame whose header starts b, or 0 when b is too short for a
// header or its length is out of range: frameLen without building an error, for resyncs, which
// call it at every byte of damage (a mebibyte of zeros ahead of the frames, after a crash).
func sizeAt(b []byte) int {
	if len(b) < HeaderSize {
		return 0
	}
	n := binary.LittleEndian.Uint32(b[4:])
	if n == 0 || n > maxLength {
		return 0
	}
	return HeaderSize + int(n)
}

// A Verifier says whether a frame's body is well formed for its type: the content's own check,
// which the log applies, beside the checksum, to tell a valid frame from damage (Options.Verify).
// It must not keep body.
type Verifier func(typ byte, body []byte) error

// checkFrame checks that b is exactly one frame, its checksum, its type and, with verify, its
// body, and returns it; Body aliases b.
func checkFrame(b []byte, verify Verifier) (Frame, error) {
	n, err := frameLen(b)
	if err != nil {
		return Frame{}, err
	}
	if len(b) < n {
		return Frame{}, &frameError{msg: fmt.Sprintf("frame of %d bytes cut short at %d", n, len(b)), truncated: true}
	}
	if len(b) > n {
		return Frame{}, &frameError{msg: fmt.Sprintf("%d bytes after a frame of %d", len(b)-n, n)}
	}
	if want, got := binary.LittleEndian.Uint32(b), crc32.Checksum(b[4:n], castagnoli); want != got {
		return Frame{}, &frameError{msg: fmt.Sprintf("checksum mismatch: stored %08x, computed %08x", want, got)}
	}
	f := Frame{Type: b[8] &^ moreBit, More: b[8]&moreBit != 0, Body: b[HeaderSize+1 : n]}
	if f.Type == 0 {
		return Frame{}, &frameError{msg: "frame of type 0"}
	}
	if verify != nil {
		if err := verify(f.Type, f.Body); err != nil {
			return Frame{}, &frameError{msg: err.Error()}
		}
	}
	return f, nil
}

// DecodeFrame checks that b holds exactly one valid frame (see checkFrame) and returns it. Body
// aliases b. Bad input gives an error, never a panic.
func DecodeFrame(b []byte, verify Verifier) (Frame, error) { return checkFrame(b, verify) }

// UncheckedFrame returns the frame b starts with without checking its checksum, for saying what
// damaged bytes seem to hold; ok is false when b does not hold a whole frame of a nonzero type.
func UncheckedFrame(b []byte) (f Frame, ok bool) {
	n, err := frameLen(b)
	if err != nil || n > len(b) || b[8]&^moreBit == 0 {
		return Frame{}, false
	}
	return Frame{Type: b[8] &^ moreBit, More: b[8]&moreBit != 0, Body: b[HeaderSize+1 : n]}, true
}

// ReadFrames calls fn for each frame of b, frames following each other from its start, in order,
// with its offset: base plus its offset in b. b is what a file holds from base on; file names it
// for errors. It returns where the frames end. A torn tail (bytes after the last valid frame that
// hold no complete frame, such as a frame cut short or zeros, with no valid frame after them) ends
// the frames without an error, as a write cut short by a crash leaves them; any other damage is an
// error, a *CorruptError naming file and offset. An error from fn is returned as it is.
func ReadFrames(file string, base int64, b []byte, verify Verifier, fn func(off int64, f Frame) error) (int64, error) {
	off := 0
	for off < len(b) {
		n, err := frameLen(b[off:])
		complete := err == nil && n <= len(b)-off
		var f Frame
		if complete {
			f, err = checkFrame(b[off:off+n], verify)
		} else if err == nil {
			err = &frameError{msg: fmt.Sprintf("frame of %d bytes cut short at %d", n, len(b)-off), truncated: true}
		}
		if err != nil {
			if !complete && !validFrameAfter(b, off+1, verify) {
				return base + int64(off), nil // a torn tail
			}
			return base + int64(off), &CorruptError{File: file, Offset: base + int64(off), Reason: err.Error(), Size: int64(len(b) - off)}
		}
		if err := fn(base+int64(off), f); err != nil {
			return base + int64(off), err
		}
		off += n
	}
	return base + int64(len(b)), nil
}

// validFrameAfter reports whether a valid frame starts anywhere in b at or after from. It checks
// a candidate's type and content before its checksum, the costly part.
func validFrameAfter(b []byte, from int, verify Verifier) bool {
	for i := from; i+HeaderSize < len(b); i++ {
		n := sizeAt(b[i:])
		if n == 0 || n > len(b)-i {
			continue
		}
		typ := b[i+8] &^ moreBit
		if typ == 0 || verify != nil && verify(typ, b[i+HeaderSize+1:i+n]) != nil {
			continue
		}
		if binary.LittleEndian.Uint32(b[i:]) == crc32.Checksum(b[i+4:i+n], castagnoli) {
			return true
		}
	}
	return false
}
