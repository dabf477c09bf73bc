package wal

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// syncedFiles are the operating system's files, remembering for each how many of its bytes the
// last successful Datasync covered: what a power loss would keep.
type syncedFiles struct {
	OSFiles
	mu     sync.Mutex
	synced map[string]int64
}

type trackedFile struct {
	File
	fs      *syncedFiles
	path    string
	written int64 // touched by one commit at a time, as the log writes
}

func (fs *syncedFiles) track(path string, f File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return &trackedFile{File: f, fs: fs, path: path}, nil
}

func (fs *syncedFiles) Create(path string) (File, error) {
	f, err := fs.OSFiles.Create(path)
	return fs.track(path, f, err)
}

func (fs *syncedFiles) Append(path string) (File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	f, err := fs.OSFiles.Append(path)
	if err != nil {
		return nil, err
	}
	// What Open finds in the file is taken as synced: only this log's own writes are tracked.
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.synced == nil {
		fs.synced = map[string]int64{}
	}
	fs.synced[path] = fi.Size()
	return &trackedFile{File: f, fs: fs, path: path, written: fi.Size()}, nil
}

func (f *trackedFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.written += int64(n)
	return n, err
}

func (f *trackedFile) Datasync() error {
	if err := f.File.Datasync(); err != nil {
		return err
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.fs.synced == nil {
		f.fs.synced = map[string]int64{}
	}
	f.fs.synced[f.path] = f.written
	return nil
}

// durable reports whether every byte before end is covered by a Datasync of its segment's file.
func (fs *syncedFiles) durable(dir string, end Pos) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.synced[segmentPath(dir, end.Segment())] >= int64(end.Offset())
}

func appendAwaited(l *Log, r *testRecord) (Pos, Pos, error) {
	return l.AppendAwaited(testType, false, r.body())
}

// TestWaitDurableCommitsItself checks the leader commit: frames appended with AppendAwaited are
// not written until someone waits for them, and the wait writes and syncs them in one commit.
func TestWaitDurableCommitsItself(t *testing.T) {
	dir := t.TempDir()
	fs := &syncedFiles{}
	l := openLog(t, dir, Options{Files: fs})
	defer l.Close()
	var end Pos
	for i := range 10 {
		_, e, err := appendAwaited(l, put(i))
		if err != nil {
			t.Fatal(err)
		}
		end = e
	}
	if w, n := l.WrittenEnd(), l.SyncStats().Count; w >= end || n != 0 {
		t.Fatalf("before any wait: written to %v of %v, %d syncs; want nothing written", w, end, n)
	}
	if err := l.WaitDurable(end); err != nil {
		t.Fatal(err)
	}
	if !fs.durable(dir, end) {
		t.Fatalf("WaitDurable(%v) returned before a sync covered it", end)
	}
	if n := l.SyncStats().Count; n != 1 {
		t.Fatalf("%d syncs for 10 frames and one wait, want 1", n)
	}
}

// TestLeaderCommitNeverEarly appends from many goroutines, some waiting for their frames (led or
// not), some not, over several segments, and checks that no wait returns before a sync of the
// file covers its frames, and that every frame is in the log after Close.
func TestLeaderCommitNeverEarly(t *testing.T) {
	dir := t.TempDir()
	fs := &syncedFiles{}
	l := openLog(t, dir, Options{SegmentSize: 4096, Files: fs})
	const goroutines, each = 16, 100
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				r := put(g*each + i)
				var end Pos
				var err error
				switch g % 4 {
				case 0, 1: // a put's way in delayq
					_, end, err = appendAwaited(l, r)
				default:
					_, end, err = appendRec(l, r)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if g%4 == 3 {
					continue // nobody waits: the flusher writes it
				}
				if err := l.WaitDurable(end); err != nil {
					t.Error(err)
					return
				}
				if !fs.durable(dir, end) {
					t.Errorf("WaitDurable(%v) returned before a sync covered it", end)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Options{SegmentSize: 4096})
	defer l.Close()
	seen := map[string]bool{}
	if err := l.Scan(MakePos(1, 0), 0, func(_ Pos, f Frame) error {
		seen[decodeRec(f).id] = true
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	for i := range goroutines * each {
		if id := fmt.Sprint("m", i); !seen[id] {
			t.Fatalf("%s is not in the log after Close", id)
		}
	}
}

// TestAwaitedFramesWrittenAtClose checks that frames appended with AppendAwaited that nobody
// waits for are written and synced by Close.
func TestAwaitedFramesWrittenAtClose(t *testing.T) {
	dir := t.TempDir()
	fs := &syncedFiles{}
	l := openLog(t, dir, Options{Files: fs})
	pos, end, err := appendAwaited(l, put(7))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !fs.durable(dir, end) {
		t.Fatalf("Close returned before a sync covered the frame at %v", pos)
	}
	l = openLog(t, dir, Options{})
	defer l.Close()
	if r, err := readRec(l.NewReader(), pos); err != nil || r.id != "m7" {
		t.Fatalf("after Close and Open: %+v, %v", r, err)
	}
}
