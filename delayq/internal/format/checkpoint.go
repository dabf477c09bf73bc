package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// # Checkpoint files
//
// A checkpoint file starts with a header, then its edits (edit.go) follow each other:
//
//	file:  magic "tockckp1", version uint32, then edits
//	edit:  the frames of the log (package wal): one frame of type 1 holding the edit's body, or,
//	       for a body larger than a frame, a group of such frames (the group bit set on all but
//	       the last) whose bodies, one after the other, are the edit's
//
// A last edit cut short (a crash while appending it: a frame cut short or missing from its group,
// or zeros where it was to be) is not damage: the file ends at the edit before. Versions 4 to 6
// framed an edit with its length and a CRC-32C of its body, both uint32, instead; versions 1 to 3
// held one snapshot (snapshot.go).

// CheckpointMagic starts every checkpoint file.
const CheckpointMagic = "tockckp1"

const (
	checkpointHeader = 12
	editHeaderV6     = 8
	// frameEdit is the type of the frames of edits.
	frameEdit = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// An Error says where in a file's bytes they stopped making sense, and why.
type Error struct {
	Offset int64
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("delayq: malformed data at offset %d: %s", e.Offset, e.Reason)
}

// AppendCheckpointHeader appends the header of a checkpoint file of the current version to b.
func AppendCheckpointHeader(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(append(b, CheckpointMagic...), CheckpointVersion)
}

// AppendEdit appends ed, framed, in the current version, to b. It returns an error, and b
// unchanged, for an edit with a name over MaxName.
func AppendEdit(b []byte, ed *Edit) ([]byte, error) { return appendEditFrames(b, ed, wal.MaxBody) }

// appendEditFrames is AppendEdit with frames of at most max bytes of body.
func appendEditFrames(b []byte, ed *Edit, max int) ([]byte, error) {
	body, err := appendEdit(nil, ed)
	if err != nil {
		return b, err
	}
	for {
		n := min(len(body), max)
		if b, err = wal.AppendFrame(b, frameEdit, n < len(body), body[:n]); err != nil {
			return b, err
		}
		if body = body[n:]; len(body) == 0 {
			return b, nil
		}
	}
}

// verifyEditFrame is the check of the frames of a checkpoint.
func verifyEditFrame(typ byte, _ []byte) error {
	if typ != frameEdit {
		return fmt.Errorf("frame of type %d in a checkpoint", typ)
	}
	return nil
}

// A CheckpointFile is what DecodeCheckpoint found in a checkpoint file.
type CheckpointFile struct {
	Version uint32
	// Snapshot is the state of a file of versions 1 to 3, which held one; nil from version 4 on.
	Snapshot *Snapshot
	// End is where the last whole edit ends (a last edit cut short is not counted), FirstEnd
	// where the first does; both 0 for a snapshot.
	End, FirstEnd int64
}

// DecodeCheckpoint decodes the checkpoint file b, of any version: the snapshot of versions 1 to 3,
// or, from version 4 on, each edit in order, passed to apply. A last edit cut short is ignored.
// Damage, and an error from apply, give an *Error naming the offset of the edit.
func DecodeCheckpoint(b []byte, apply func(*Edit) error) (CheckpointFile, error) {
	if len(b) < checkpointHeader || string(b[:8]) != CheckpointMagic {
		return CheckpointFile{}, &Error{Reason: "not a checkpoint (bad magic)"}
	}
	cf := CheckpointFile{Version: binary.LittleEndian.Uint32(b[8:])}
	edit := func(off int64, body []byte) error {
		ed, err := decodeEdit(body, cf.Version)
		if err == nil {
			err = apply(ed)
		}
		if err != nil {
			return &Error{Offset: off, Reason: err.Error()}
		}
		return nil
	}
	var err error
	switch v := cf.Version; {
	case v >= 1 && v <= 3:
		cf.Snapshot, err = DecodeSnapshot(b)
		return cf, err
	case v >= 4 && v <= 6:
		err = decodeEditsV6(b, &cf, edit)
	case v >= 7 && v <= CheckpointVersion:
		err = decodeEdits(b, &cf, edit)
	default:
		return CheckpointFile{}, &Error{Offset: 8, Reason: fmt.Sprintf("unsupported checkpoint version %d", v)}
	}
	if err == nil && cf.End == 0 {
		err = &Error{Offset: checkpointHeader, Reason: "checkpoint holds no edit"}
	}
	return cf, err
}

// decodeEdits passes the edits of a file of the current version to edit, noting where they end.
func decodeEdits(b []byte, cf *CheckpointFile, edit func(off int64, body []byte) error) error {
	var group []byte // the bodies of the frames of the edit begun at start
	start := int64(-1)
	_, err := wal.ReadFrames("", checkpointHeader, b[checkpointHeader:], verifyEditFrame, func(off int64, f wal.Frame) error {
		if start < 0 {
			start, group = off, group[:0]
		}
		group = append(group, f.Body...)
		if f.More {
			return nil
		}
		if err := edit(start, group); err != nil {
			return err
		}
		cf.End = off + int64(wal.FrameSize(len(f.Body)))
		if cf.FirstEnd == 0 {
			cf.FirstEnd = cf.End
		}
		start = -1
		return nil
	})
	var ce *wal.CorruptError
	if errors.As(err, &ce) {
		return &Error{Offset: ce.Offset, Reason: ce.Reason}
	}
	// A group cut short ends the file like a frame cut short: cf.End is where its edit began.
	return err
}

// decodeEditsV6 passes the edits of a file of versions 4 to 6 to edit, noting where they end.
func decodeEditsV6(b []byte, cf *CheckpointFile, edit func(off int64, body []byte) error) error {
	off := checkpointHeader
	for off < len(b) {
		if len(b)-off < editHeaderV6 {
			break // a last edit cut short
		}
		n := int(binary.LittleEndian.Uint32(b[off:]))
		if n > len(b)-off-editHeaderV6 {
			break // a last edit cut short
		}
		body := b[off+editHeaderV6 : off+editHeaderV6+n]
		if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[off+4:]) {
			return &Error{Offset: int64(off), Reason: "checkpoint edit fails its checksum"}
		}
		if err := edit(int64(off), body); err != nil {
			return err
		}
		off += editHeaderV6 + n
		if cf.FirstEnd == 0 {
			cf.FirstEnd = int64(off)
		}
		cf.End = int64(off)
	}
	return nil
}
