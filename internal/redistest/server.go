// Package redistest starts a real redis-server for a test.
//
// Each [Start] runs its own redis-server process on a free loopback port with its working directory
// in the test's temporary directory, without persistence, and stops it when the test ends. A test can
// [Server.Stop] and [Server.Restart] the server to simulate a crash and a restart of Redis: the
// address stays the same and, as there is no persistence, every key is gone after a restart.
//
// When redis-server is not on PATH, Start fails the test if the environment variable CI is set, and
// skips it with a message saying how to install Redis otherwise. A Server is safe for concurrent use.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Binary is the name of the program Start runs, looked up on PATH.
const Binary = "redis-server"

// readyLine is what redis-server logs once it accepts connections.
const readyLine = "Ready to accept connections"

// startTimeout bounds how long Start waits for the ready line; a healthy redis-server needs a few
// milliseconds, so reaching it means something is wrong, not that the machine is slow.
const startTimeout = 20 * time.Second

// Server is one redis-server process owned by a test.
type Server struct {
	// Addr is host:port of the server; it does not change across Restart.
	Addr string

	t     testing.TB
	bin   string
	dir   string
	port  int
	extra []string // the caller's arguments, so that Restart starts the same configuration

	mu struct {
		sync.Mutex
		proc *exec.Cmd     // nil while stopped
		done chan struct{} // closed when proc has been waited for
	}
}

// Start starts a redis-server on a free loopback port and registers its stop with t.Cleanup. Extra
// arguments are passed to redis-server after the defaults (e.g. "--maxmemory", "10mb"). It returns nil
// only after calling t.Skip, which is when redis-server is missing outside CI.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := lookPath()
	if err != nil {
		const how = "install it (Debian: apt-get install redis-server) or put it on PATH"
		if os.Getenv("CI") != "" {
			t.Fatalf("redistest: %s not found and CI is set: %s", Binary, how)
		} else {
			t.Skipf("redistest: skipping: %s not found: %s", Binary, how)
		}
		return nil
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), extra: args}
	t.Cleanup(s.Stop)
	// A port found free can be taken by someone else before redis-server binds it; try a few.
	for attempt := 0; ; attempt++ {
		s.port, err = freePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		err = s.start()
		if err == nil {
			return s
		}
		if attempt == 4 {
			t.Fatalf("redistest: %v", err)
		}
	}
}

// Stop kills the server with SIGKILL, as a crash would, and waits for it to exit. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.mu.proc == nil {
		return
	}
	_ = s.mu.proc.Process.Kill()
	<-s.mu.done
	s.mu.proc = nil
}

// Restart stops the server if it runs and starts it again on the same address with the arguments
// given to Start. All data is lost. It fails the test if the server does not come back.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	s.stopLocked()
	s.mu.Unlock()
	var err error
	// The old listening socket is closed once the process has exited; redis-server binds with
	// SO_REUSEADDR, so the same port is available at once.
	if err = s.start(); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

// Running reports whether the server process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.proc != nil
}

func (s *Server) start() error {
	argv := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", "",
		"--enable-debug-command", "local",
	}
	argv = append(argv, s.extra...)
	cmd := exec.Command(s.bin, argv...)
	cmd.Dir = s.dir
	dieWithParent(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	ready := make(chan struct{})
	logTail := make(chan string, 1)
	go func() {
		// Read the log until redis-server says it is ready, then keep draining it so that the
		// process never blocks on a full pipe.
		var tail []string
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			if !signalled {
				tail = append(tail, line)
				if strings.Contains(line, readyLine) {
					signalled = true
					close(ready)
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		logTail <- strings.Join(tail, "\n")
	}()
	done := make(chan struct{})
	waitErr := make(chan error, 1)
	go func() {
		waitErr <- cmd.Wait()
		close(done)
	}()
	timeout := time.NewTimer(startTimeout)
	defer timeout.Stop()
	select {
	case <-ready:
		s.mu.Lock()
		s.mu.proc, s.mu.done = cmd, done
		s.mu.Unlock()
		return nil
	case <-done:
		return fmt.Errorf("%s exited before accepting connections (%v):\n%s", s.bin, <-waitErr, <-logTail)
	case <-timeout.C:
		_ = cmd.Process.Kill()
		<-done
		return errors.New(Binary + " did not become ready in time:\n" + <-logTail)
	}
}

func lookPath() (string, error) { return exec.LookPath(Binary) }

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
