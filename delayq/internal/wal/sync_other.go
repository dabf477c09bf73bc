//go:build !linux

package wal

import "os"

// fdatasync flushes f to stable storage. Outside Linux it is a full fsync.
func fdatasync(f *os.File) error { return f.Sync() }
