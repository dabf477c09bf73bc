//go:build !linux

package wal

import (
	"fmt"
	"os"
)

// fdatasync flushes f to stable storage. Outside Linux it is a full fsync.
func fdatasync(f *os.File) error { return f.Sync() }

// syncDir makes the creation, renaming or removal of files in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("wal: syncing %s: %w", dir, err)
	}
	return nil
}

// SyncDir makes the creation, renaming or removal of files in dir durable.
func SyncDir(dir string) error { return syncDir(dir) }
