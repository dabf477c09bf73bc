//go:build !linux

package diskbench

import "os"

// fdatasync is a full fsync outside Linux, as delayq's log does there.
func fdatasync(f *os.File) error { return f.Sync() }
