// Package redistest starts real redis-server processes for tests: a single server ([Start]) or a
// Redis Cluster of masters and replicas ([StartCluster]).
//
// Each server is its own redis-server process on free loopback ports with its working directory in
// the test's temporary directory, without persistence unless asked for, and is killed when the test
// ends (by t.Cleanup, whether the test passed or not, and by the kernel should the test process die
// first). A test can crash a server with [Server.Stop] (SIGKILL), freeze it with [Server.Pause]
// (SIGSTOP) and [Server.Resume], and start it again with [Server.Restart]: the address stays the
// same and, without persistence, every key is gone after a restart.
//
// When redis-server is not on PATH, Start and StartCluster fail the test if the environment
// variable CI is set, and skip it with a message saying how to install Redis otherwise. Servers and
// clusters are safe for concurrent use; the methods that fail the test must be called from the
// test's goroutine, as [testing.T.FailNow] requires.
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

	t       testing.TB
	bin     string
	dir     string
	port    int
	busPort int      // the cluster bus port of a cluster node; 0 for a server outside a cluster
	extra   []string // the caller's arguments, so that Restart starts the same configuration

	mu struct {
		sync.Mutex
		proc   *exec.Cmd     // nil while stopped
		done   chan struct{} // closed when proc has been waited for
		paused bool          // stopped with SIGSTOP and not resumed
	}
}

// Start starts a redis-server on a free loopback port and registers its stop with t.Cleanup. Extra
// arguments are passed to redis-server after the defaults (e.g. "--maxmemory", "10mb"). It returns nil
// only after calling t.Skip, which is when redis-server is missing outside CI.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, ok := binary(t)
	if !ok {
		return nil
	}
	s, err := startServer(t, bin, false, args)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return s
}

// binary returns the path of redis-server, or skips or fails the test if there is none.
func binary(t testing.TB) (string, bool) {
	t.Helper()
	bin, err := lookPath()
	if err == nil {
		return bin, true
	}
	const how = "install it (Debian: apt-get install redis-server) or put it on PATH"
	if os.Getenv("CI") != "" {
		t.Fatalf("redistest: %s not found and CI is set: %s", Binary, how)
	} else {
		t.Skipf("redistest: skipping: %s not found: %s", Binary, how)
	}
	return "", false
}

// startServer starts a server and registers its stop with t.Cleanup. It does not fail the test, so
// that several servers can be started at once from goroutines of their own.
func startServer(t testing.TB, bin string, cluster bool, args []string) (*Server, error) {
	s := &Server{t: t, bin: bin, dir: t.TempDir(), extra: args}
	t.Cleanup(s.Stop)
	// A port found free can be taken by someone else before redis-server binds it; try a few.
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
		if cluster {
			if s.busPort, err = freePort(); err != nil {
				return nil, err
			}
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	return nil, err
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
	// SIGKILL ends a process stopped by Pause as well.
	_ = s.mu.proc.Process.Kill()
	<-s.mu.done
	s.mu.proc = nil
	s.mu.paused = false
}

// Pause freezes the server with SIGSTOP, as a long garbage-collection pause, a stalled VM or a
// debugger would: connections stay open and the kernel keeps accepting and buffering what clients
// send, but the server neither answers nor sends anything, replication and cluster messages
// included, until Resume. Pausing a paused or stopped server does nothing.
func (s *Server) Pause() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.proc == nil || s.mu.paused {
		return
	}
	if err := signalStop(s.mu.proc.Process); err != nil {
		s.t.Fatalf("redistest: pause %s: %v", s.Addr, err)
	}
	s.mu.paused = true
}

// Resume lets a paused server run again (SIGCONT). Resuming a server that is not paused does
// nothing.
func (s *Server) Resume() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.proc == nil || !s.mu.paused {
		return
	}
	if err := signalCont(s.mu.proc.Process); err != nil {
		s.t.Fatalf("redistest: resume %s: %v", s.Addr, err)
	}
	s.mu.paused = false
}

// Paused reports whether the server is paused.
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.paused
}

// Restart stops the server if it runs and starts it again on the same address with the arguments
// given to Start. Without persistence all data is lost; a cluster node keeps its node ID and
// rejoins its cluster. It fails the test if the server does not come back.
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
	if s.busPort != 0 {
		argv = append(argv,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(s.busPort))
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
