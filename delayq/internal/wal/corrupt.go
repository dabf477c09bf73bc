package wal

import (
	"errors"
	"fmt"
)

// ErrCorrupt is matched (with errors.Is) by every error about damaged data: a frame that fails its
// checksum or its content's check, bytes that hold no frame, a segment file gone.
var ErrCorrupt = errors.New("delayq: corrupt data")

// ErrMissing is matched by the error of a read from a segment file that is gone. Such an error
// matches ErrCorrupt too: a frame that something still refers to is gone.
var ErrMissing = errors.New("delayq: segment file missing")

// A CorruptError says where damaged data was found. It matches ErrCorrupt, and ErrMissing for a
// segment file that is gone.
type CorruptError struct {
	File   string
	Offset int64
	Reason string
	// Size is the number of damaged bytes: from Offset to the next valid frame or the end of the
	// data. 0 when the damage was met reading one frame by position.
	Size int64

	// lost: a write lost by a power loss explains the damage (see "The end of the log" in
	// frame.go): the file ends inside the frame at Offset with no valid frame after it, or a
	// sector the frame reaches into holds only zeros from the frame's start or its own. Open
	// cuts the last segment at the first such damage past what a checkpoint covers when all the
	// damage after it is such too.
	lost bool
	// torn: lost, and no valid frame follows (a header cut short, a length that runs past the
	// end, zeros to the end, a frame ending in zeros). At the end of the log, beyond what a
	// checkpoint covers, that is a write cut short by a crash, not corruption.
	torn bool
	// missing: the whole segment file is gone (Offset is 0).
	missing bool
}

func (e *CorruptError) Error() string {
	if e.missing {
		return "delayq: corrupt data: segment file " + e.File + " is missing"
	}
	return fmt.Sprintf("delayq: corrupt data in %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Is reports whether target is ErrCorrupt, or ErrMissing for a segment file that is gone.
func (e *CorruptError) Is(target error) bool {
	return target == ErrCorrupt || e.missing && target == ErrMissing
}

// Torn reports whether the damage is what a write lost by a power loss leaves, with nothing valid
// after it (a frame cut short, zeros, a frame ending in a sector of zeros), rather than data
// that is present and wrong (see IsTornTail, and "The end of the log" in frame.go).
func (e *CorruptError) Torn() bool { return e.torn }

// NewCorruptError returns the damage of the content at offset off of file: bytes that frame
// correctly but that the content cannot use (a record in the wrong place, say).
func NewCorruptError(file string, off int64, reason string) *CorruptError {
	return &CorruptError{File: file, Offset: off, Reason: reason}
}

func missingSegment(dir string, seg uint32) *CorruptError {
	return &CorruptError{File: segmentPath(dir, seg), Reason: "segment file missing", missing: true}
}

// IsTornTail reports whether err is about what a write lost by a power loss leaves, with nothing
// valid after it, rather than data that is present and wrong (see CorruptError.Torn).
func IsTornTail(err error) bool {
	var ce *CorruptError
	return errors.As(err, &ce) && ce.torn
}

// corruptAt returns err, met reading the frame at off of the file at path, as a CorruptError
// when it is about the bytes, else wrapped.
func corruptAt(path string, off int64, err error) error {
	var fe *frameError
	if errors.As(err, &fe) {
		return &CorruptError{File: path, Offset: off, Reason: fe.msg, torn: fe.truncated}
	}
	return fmt.Errorf("delayq: reading %s at offset %d: %w", path, off, err)
}
