//go:build !unix

package delayq

import (
	"fmt"
	"os"
)

// lockDir opens path. Outside Unix there is no flock: keeping two queues off one directory is up
// to the caller.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("delayq: %w", err)
	}
	return f, nil
}

func unlockDir(f *os.File) error { return f.Close() }

// shareDir does nothing outside Unix, where there is no flock.
func shareDir(string) (*os.File, error) { return nil, nil }
