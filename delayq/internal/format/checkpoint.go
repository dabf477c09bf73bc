package format

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// # Checkpoint files
//
// A checkpoint file starts with a header, then edits (edit.go) follow each other:
//
//	file:  magic "tockckp1", version uint32, then edits
//	edit:  length uint32 (of the body), CRC-32C uint32 (of the body), body
//
// A last edit cut short (a crash while appending it) is not damage: the file ends at the edit
// before. Versions 1 to 3 held one snapshot instead (snapshot.go).

// CheckpointMagic starts every checkpoint file.
const CheckpointMagic = "tockckp1"

const (
	checkpointHeader = 12
	editHeader       = 8
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
func AppendEdit(b []byte, ed *Edit) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, editHeader)...)
	b, err := appendEdit(b, ed)
	if err != nil {
		return b[:start], err
	}
	body := b[start+editHeader:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(body, castagnoli))
	return b, nil
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
	switch v := cf.Version; {
	case v >= 1 && v <= 3:
		s, err := DecodeSnapshot(b)
		cf.Snapshot = s
		return cf, err
	case v < 4 || v > 6:
		return CheckpointFile{}, &Error{Offset: 8, Reason: fmt.Sprintf("unsupported checkpoint version %d", v)}
	}
	off := checkpointHeader
	for off < len(b) {
		if len(b)-off < editHeader {
			break // a last edit cut short
		}
		n := int(binary.LittleEndian.Uint32(b[off:]))
		if n > len(b)-off-editHeader {
			break // a last edit cut short
		}
		body := b[off+editHeader : off+editHeader+n]
		if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[off+4:]) {
			return cf, &Error{Offset: int64(off), Reason: "checkpoint edit fails its checksum"}
		}
		ed, err := decodeEdit(body, cf.Version)
		if err == nil {
			err = apply(ed)
		}
		if err != nil {
			return cf, &Error{Offset: int64(off), Reason: err.Error()}
		}
		off += editHeader + n
		if cf.FirstEnd == 0 {
			cf.FirstEnd = int64(off)
		}
		cf.End = int64(off)
	}
	if cf.End == 0 {
		return cf, &Error{Offset: checkpointHeader, Reason: "checkpoint holds no edit"}
	}
	return cf, nil
}
