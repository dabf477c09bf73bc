package delayq

import (
	"fmt"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
)

// The loader moves each slot's list into memory a preload ahead of the slot's start. Loading slot
// a, as one step under mu: read the list (most of it without mu, see lockList), append an Advance
// record with it, which takes the list out of the wheel and puts its messages due in a into memory
// (see takeList), and append a copy of each message due later, threaded into a later list. An empty
// list is passed without a record.

// runLoader loads each slot a preload ahead of its start, and a large slot earlier still (see
// loadLead), until Close.
func (q *Queue) runLoader() {
	defer q.bg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		q.mu.Lock()
		next := q.disk.loaded + 1
		at := q.disk.slotStart(next) - int64(q.cfg.preload) - int64(loadLead(q.disk.peek(next).n))
		q.mu.Unlock()
		if wait := time.Duration(at - time.Now().UnixNano()); wait > 0 {
			// Waking at least once a slot reads the slot's count again: puts made meanwhile
			// can make it one to load earlier.
			t.Reset(min(wait, q.cfg.slot))
			select {
			case <-t.C:
			case <-q.closed:
				return
			}
			continue
		}
		if q.cfg.beforeLoad != nil {
			q.cfg.beforeLoad()
		}
		if err := q.load(next); err != nil {
			q.mu.Lock()
			q.failLocked(err)
			q.mu.Unlock()
			return
		}
		select {
		case <-q.closed:
			return
		default:
		}
	}
}

// load moves slot a (which must be loaded+1) from the disk wheel into memory.
func (q *Queue) load(a int64) error {
	recs, ok, err := q.lockList(newRecordReader(q.log), a, 0, func() bool { return q.disk.loaded == a-1 })
	defer q.mu.Unlock()
	if !ok {
		return fmt.Errorf("delayq: internal error: loading slot %d after %d", a, q.disk.loaded)
	}
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		q.disk.detach(a)
		q.disk.loaded = a
		return nil
	}
	if _, err := q.commitLocked(&format.Record{Kind: format.KindAdvance, Slot: a}, recs); err != nil {
		return err
	}
	return q.payMovingLocked()
}

// loadLead is how much earlier than its preload the loader starts on a slot of n messages: the
// time loading them may take on a busy machine. Loading takes a few microseconds a message on an
// idle machine (reading its record, and making its entry under mu), but a slot of 100,000 took 2.4
// to 4 s on a 2-core machine at load average 20, longer than the default preload of two slots:
// the burst was due before its messages were in memory, and all of it was late. loadPerMessage
// covers such a machine; the lead is at most maxLoadLead, since the messages of a slot loaded
// early wait in memory.
func loadLead(n int64) time.Duration {
	return time.Duration(min(max(n, 0), int64(maxLoadLead/loadPerMessage))) * loadPerMessage
}

const (
	loadPerMessage = 20 * time.Microsecond
	maxLoadLead    = 30 * time.Second
)
