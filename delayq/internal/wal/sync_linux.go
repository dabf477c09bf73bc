package wal

import (
	"fmt"
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
