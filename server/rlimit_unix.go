//go:build unix

package server

import "syscall"

// openFilesLimit returns the process's limit of open files, which the Go
// runtime raises to the hard limit at start, or 0 if it is unknown.
func openFilesLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return int(r.Cur)
}
