package wal

import "os"

// Files is how the log creates, writes and syncs the segment files it appends to: the operating
// system's files by default. A test gives files whose writes or syncs fail as those of a full or
// failing disk do (ENOSPC, EIO), at the moment it chooses, so that what the log and its users do
// then can be checked without filling a disk. Reading, and Open's cuts of a torn write, use the
// files directly.
type Files interface {
	// Create creates the file at path for appending; it fails if the file exists.
	Create(path string) (File, error)
	// Append opens the existing file at path for appending.
	Append(path string) (File, error)
	// SyncDir makes the creation of files in dir durable.
	SyncDir(dir string) error
}

// A File is a segment file open for appending.
type File interface {
	// Write appends p; like os.File's, it writes all of p or returns an error, and may have
	// written part of p when it fails.
	Write(p []byte) (int, error)
	// Datasync makes what was written durable (fdatasync).
	Datasync() error
	Close() error
}

// OSFiles are the operating system's files. A segment file is written ahead of its frames with
// zeros, a mebibyte at a time (see osFile), and cut back to its frames when it is closed. Open's
// default OSFiles write no zeros past the log's segment size, where no frame goes (but a frame
// larger than a segment, alone in its own), and none with NoSync: they only spare fdatasync the
// file's size, and cost a write of their own.
type OSFiles struct {
	segmentSize int64 // 0: no bound
	noZeros     bool
}

func (fs OSFiles) Create(path string) (File, error) {
	return fs.openFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
}

func (fs OSFiles) Append(path string) (File, error) { return fs.openFile(path, os.O_WRONLY) }

func (OSFiles) SyncDir(dir string) error { return SyncDir(dir) }

func (fs OSFiles) openFile(path string, flag int) (File, error) {
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &osFile{File: f, off: fi.Size(), size: fi.Size(), bound: fs.segmentSize, full: fs.noZeros}, nil
}

// preallocStep is how far ahead of its frames an osFile writes zeros, each time its frames come
// within preallocLow of the end of the zeros written before.
const (
	preallocStep = 1 << 20
	preallocLow  = 64 << 10
)

// zeros is what an osFile writes ahead of its frames. It is never written to.
var zeros [preallocStep]byte

// An osFile is a segment file written at the end of its frames, off, with zeros written ahead of
// them up to size. fdatasync must write a file's size when it has changed (on ext4, a commit of
// its journal: more writes to the disk, each waited for): frames written over zeros that were
// synced before do not change it, and so a commit's sync waits for the frames alone (tockd's
// fdatasyncs under 32 producers' puts took a third less time; see the README). The zeros are
// written, not fallocated: ext4 keeps fallocated blocks as unwritten extents, and writing into
// one changes the extent, which the sync must write too.
//
// Zeros after the last frame never decode as a frame (see frame.go): Open takes them for a torn
// write and cuts them, as it does a frame cut short. Close cuts them first, so that only a file
// left by a crash ends in zeros. An osFile is used by one goroutine at a time, as a Log's commits
// are.
type osFile struct {
	*os.File
	off   int64 // where the next write goes: the end of what was written
	size  int64 // the file's size: off, and the zeros written after it
	bound int64 // no zeros are written past it; 0: no bound
	full  bool  // no zeros are written: writing them failed (a full disk), or NoSync
}

// Write writes p at the end of what was written, and zeros ahead of it when it comes within
// preallocLow of their end. Only p's error is returned: zeros not written only cost the speed of
// the syncs.
func (f *osFile) Write(p []byte) (int, error) {
	n, err := f.File.WriteAt(p, f.off)
	f.off += int64(n)
	f.size = max(f.size, f.off)
	if err == nil && !f.full && f.off+preallocLow > f.size {
		f.prealloc()
	}
	return n, err
}

// preallocFree is the free space under which an osFile writes no zeros ahead: on a disk about to
// fill they would be the space freed when the stopped queue's files close, and a tockd waiting for
// room would take that for the disk's return, and fill it again.
const preallocFree = 64 << 20

// prealloc writes zeros from the end of the file to preallocStep after the end of what was
// written, or to the bound, unless the file system has less than preallocFree free. When writing
// them fails, it cuts the file back to what was written and stops.
func (f *osFile) prealloc() {
	end := f.off + preallocStep
	if f.bound > 0 {
		end = min(end, f.bound)
	}
	if end <= f.size {
		return
	}
	if free, ok := freeBytes(f.File); ok && free < preallocFree {
		return
	}
	if _, err := f.File.WriteAt(zeros[:end-f.size], f.size); err != nil {
		f.full = true
		if f.File.Truncate(f.off) == nil {
			f.size = f.off
		}
		return
	}
	f.size = end
}

func (f *osFile) Datasync() error { return fdatasync(f.File) }

// Close cuts the zeros after what was written, syncs the cut and closes the file.
func (f *osFile) Close() error {
	if f.size > f.off {
		if err := f.File.Truncate(f.off); err != nil {
			f.File.Close()
			return err
		}
		if err := fdatasync(f.File); err != nil {
			f.File.Close()
			return err
		}
	}
	return f.File.Close()
}
