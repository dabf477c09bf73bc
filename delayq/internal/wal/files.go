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

// OSFiles are the operating system's files.
type OSFiles struct{}

func (OSFiles) Create(path string) (File, error) {
	return openFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND)
}

func (OSFiles) Append(path string) (File, error) { return openFile(path, os.O_WRONLY|os.O_APPEND) }

func (OSFiles) SyncDir(dir string) error { return SyncDir(dir) }

func openFile(path string, flag int) (File, error) {
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

type osFile struct{ *os.File }

func (f osFile) Datasync() error { return fdatasync(f.File) }
