package redistest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill redis-server if the test process dies without cleaning up
// (a panic, a test timeout, kill -9), so no server outlives its test. The signal is tied to the
// thread that starts the process, which the Go runtime keeps for the life of the process unless a
// goroutine locked to it (runtime.LockOSThread) exits.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
