package tock

import (
	"sync"
	"sync/atomic"
)

// An executor runs the callbacks of fired timers. Drivers hand it one batch per tick.
type executor interface {
	// execute runs or schedules every callback in fs and reports whether the caller may reuse fs.
	execute(fs []func()) (reusable bool)
}

// inline runs callbacks on the driver goroutine.
type inline struct{ w *Wheel }

func (e inline) execute(fs []func()) bool {
	e.w.runAll(fs)
	clear(fs)
	return true
}

// perGoroutine runs each callback in a new goroutine.
type perGoroutine struct{ w *Wheel }

func (e perGoroutine) execute(fs []func()) bool {
	for _, f := range fs {
		go e.w.runOne(f)
	}
	clear(fs)
	return true
}

// pool runs callbacks on at most max goroutines, started on demand.
//
// Batches wait in a queue, oldest first. Workers claim callbacks from the oldest batch one at a time
// with an atomic counter, so any number of workers can share a batch and a callback that blocks
// holds up nothing but its own worker. Each new batch starts a worker, up to max: a worker already
// running may be blocked in a callback, and nothing short of a supervisor could tell. A worker exits
// when no batch has unclaimed callbacks, so workers live about as long as a tick's callbacks take.
type pool struct {
	w   *Wheel
	max int

	mu      sync.Mutex
	queue   []*batch // batches that may have unclaimed callbacks, oldest first
	workers int
}

type batch struct {
	fs   []func()
	next atomic.Int64 // index of the next unclaimed callback
}

func (p *pool) execute(fs []func()) bool {
	b := &batch{fs: fs}
	p.mu.Lock()
	p.queue = append(p.queue, b)
	start := p.workers < p.max
	if start {
		p.workers++
	}
	p.mu.Unlock()
	if start {
		go p.work()
	}
	return false
}

func (p *pool) work() {
	returned := false
	defer func() {
		if !returned {
			p.abandoned()
		}
	}()
	for {
		p.mu.Lock()
		for len(p.queue) > 0 && p.queue[0].next.Load() >= int64(len(p.queue[0].fs)) {
			p.queue[0] = nil
			p.queue = p.queue[1:]
		}
		if len(p.queue) == 0 {
			p.queue = nil // let the drained backing array go
			p.workers--
			p.mu.Unlock()
			returned = true
			return
		}
		b := p.queue[0]
		p.mu.Unlock()
		for !p.drain(b) {
		}
	}
}

// abandoned replaces a worker that ended without returning: a callback called runtime.Goexit.
func (p *pool) abandoned() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		p.workers--
		return
	}
	go p.work()
}

// drain runs unclaimed callbacks of b until none is left, and reports true then. It returns false
// after a callback panicked, having reported the panic; the caller calls it again for the rest.
func (p *pool) drain(b *batch) (done bool) {
	defer p.w.recoverPanic()
	for {
		j := b.next.Add(1) - 1
		if j >= int64(len(b.fs)) {
			return true
		}
		f := b.fs[j]
		b.fs[j] = nil
		f()
	}
}

// runAll runs fs in order on the calling goroutine, recovering and reporting any panic and going on
// with the next callback.
func (w *Wheel) runAll(fs []func()) {
	for len(fs) > 0 {
		fs = w.runUntilPanic(fs)
	}
}

// runUntilPanic runs fs in order and returns the callbacks after the first that panicked (the
// panic reported), or nothing when all returned. One deferred recover serves the whole batch. A
// callback that calls runtime.Goexit ends this goroutine, so the callbacks after it are handed to
// a new one.
func (w *Wheel) runUntilPanic(fs []func()) (rest []func()) {
	i, finished := 0, false
	defer func() {
		if finished {
			return
		}
		if r := recover(); r != nil {
			w.reportPanic(r)
			rest = fs[i+1:]
			return
		}
		go w.runAll(fs[i+1:])
	}()
	for ; i < len(fs); i++ {
		fs[i]()
	}
	finished = true
	return nil
}

// runOne runs f, recovering and reporting a panic.
func (w *Wheel) runOne(f func()) {
	defer w.recoverPanic()
	f()
}

// recoverPanic is deferred around callbacks: it reports a panic and lets the goroutine go on.
func (w *Wheel) recoverPanic() {
	if r := recover(); r != nil {
		w.reportPanic(r)
	}
}
