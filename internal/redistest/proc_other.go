//go:build !linux

package redistest

import "os/exec"

// dieWithParent does nothing where the kernel offers no parent-death signal: a test process that
// dies without cleaning up leaves its redis-server running.
func dieWithParent(*exec.Cmd) {}
