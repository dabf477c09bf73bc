//go:build !linux

package wal

import "os"

// fdatasync flushes f to stable storage. Outside Linux it is a full fsync.
func fdatasync(f *os.File) error { return f.Sync() }

// freeBytes cannot tell outside Linux: zeros are written ahead where the file system takes them.
func freeBytes(*os.File) (int64, bool) { return 0, false }
