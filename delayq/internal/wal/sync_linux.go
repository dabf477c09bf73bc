package wal

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data, and the metadata needed to read it back, to stable storage.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

// freeBytes returns the bytes free to f's owner on f's file system, and false when it cannot
// tell.
func freeBytes(f *os.File) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Fstatfs(int(f.Fd()), &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * st.Bsize, true
}
