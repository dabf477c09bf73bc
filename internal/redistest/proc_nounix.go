//go:build !unix

package redistest

import (
	"errors"
	"os"
)

var errNoSignals = errors.New("pausing a process needs SIGSTOP, which this platform lacks")

func signalStop(*os.Process) error { return errNoSignals }
func signalCont(*os.Process) error { return errNoSignals }
