package disktest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Small mounts a tmpfs of size bytes on a new directory for the test, unmounted when the test
// ends, and returns the directory. Mounting needs root (CAP_SYS_ADMIN), which containers may
// refuse: the test is then skipped, saying why, except in CI (CI set, as .ci/run sets it), where
// a test that did not happen fails.
func Small(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		msg := fmt.Sprintf("cannot mount a %d-byte tmpfs to fill (%v): this test needs root, or CAP_SYS_ADMIN, to run", size, err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// FillTo appends to the file path until the disk it is on has at most room bytes free, or none
// at all (ENOSPC), and returns how many bytes it wrote. It reports its errors with t.Error, so
// that it may run outside the test's goroutine.
func FillTo(t testing.TB, path string, room int64) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer f.Close()
	buf := make([]byte, 4096)
	var n int64
	for {
		var st syscall.Statfs_t
		if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
			t.Error(err)
			return n
		}
		free := int64(st.Bavail) * st.Bsize
		if free <= room {
			return n
		}
		m, err := f.Write(buf[:min(int64(len(buf)), free-room)])
		n += int64(m)
		if errors.Is(err, syscall.ENOSPC) {
			return n
		}
		if err != nil {
			t.Error(err)
			return n
		}
	}
}
