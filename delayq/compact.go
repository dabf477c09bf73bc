package delayq

import (
	"errors"
	"io/fs"
	"slices"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// Compaction: retention deletes a segment only when nothing in it is needed, so a segment written
// while messages with many different delays were put is kept until the last of them is done:
// with delays spread evenly, disk use is about twice the live data. Compaction moves the messages
// still waiting in the disk wheel out of old, mostly dead segments, so that retention can delete
// them.
//
// The unit of moving is a disk-wheel list: its records are threaded backwards through the log, so
// a record in the middle of a list cannot be dropped on its own. Relocating list L, as one step
// under mu (the list is read before, without mu, as the loader does):
//  1. append a Relocate record naming L;
//  2. detach L: empty its head, release its records' pins, and keep the messages still pending in
//     it (cancelled Puts and duplicate copies are dropped, as a load would);
//  3. append a copy of each of them, threaded into L again: a Put record that keeps the message's
//     origin (its first record), so its ID, receipts and the Acks that name it stay valid.
//
// Recovery replays a Relocate record as it replays an Advance record: it reads L's list from the
// head it had (its records are still on disk: the checkpoint recovery starts from pins them, and
// retention keeps what the last checkpoint pins), detaches it in the same way and expects the
// copies to follow; copies a crash kept out of the log are appended at the end of recovery,
// exactly like rolled copies. So a message is never lost (its old record stays until a checkpoint
// covers its copy), never delivered twice because of a move (the old record is no longer in any
// list), and a cancelled message is never copied.
//
// Only lists after loaded+1 are relocated: the loader reads list loaded+1 without mu, and nobody
// else changes loaded. Messages already in memory (due, leased, or in the near window) keep their
// records where they are; they are done soon, or are the consumers' backlog.
//
// Policy: every checkpoint interval, the compactor estimates how much of each closed segment is
// live: its pins (records needed) times the average size of the records in it that can be pinned.
// Segments whose estimate is under the configured fraction are the round's targets; the compactor
// reads them once to find the lists with records in them, and relocates each such list that still
// has a record in a target. A segment is a target once: the lists it pins then are relocated, and
// what pins it afterwards is in memory or in the next slots, done soon. The bytes read and written
// are paced to the configured rate, and a list larger than maxRelocate is left alone, so that the
// step under mu stays short.

// Defaults of compaction.
const (
	// DefaultCompactLive is the live fraction under which a segment is compacted.
	DefaultCompactLive = 0.5
	// DefaultCompactRate bounds the bytes compaction reads and writes per second.
	DefaultCompactRate = 8 << 20
)

// maxRelocate bounds the size of the records one relocation copies while holding mu.
const maxRelocate = 4 << 20

// WithCompaction sets when segments are compacted: a segment (other than the one being appended
// to) whose live records are estimated to fill less than the fraction live of it has the messages
// that wait on disk in it written again at the head of the log, so that it can be deleted at the
// next checkpoint (default 0.5). The estimate is the number of records still needed times the
// average size of the messages in the segment. Compaction runs in the background every checkpoint
// interval; moving a message costs a read of its slot's list and a write of its record again,
// paced to rate bytes per second (default 8 MiB/s), and shares the log's syncs with Puts. With the
// default, delays spread evenly over some period keep disk use near 1.5 times the live data, each
// message being written about 1.5 times on average. live <= 0 turns compaction off; rate <= 0
// keeps the default rate.
func WithCompaction(live float64, rate int64) Option {
	return func(c *config) {
		c.compactLive = live
		if rate > 0 {
			c.compactRate = rate
		}
	}
}

// A compactor is the compacting goroutine's own state.
type compactor struct {
	// counted holds, for closed segments, the number and bytes of their records that can be pinned
	// (Puts and threaded Cancels). Closed segments do not change, so each is read once for this.
	counted map[uint32]segCount
	// done holds the segments that have been a round's target.
	done map[uint32]bool
	// debt is the bytes read or written not yet paid for by pacing.
	debt int64
}

func newCompactor() *compactor {
	return &compactor{counted: make(map[uint32]segCount), done: make(map[uint32]bool)}
}

type segCount struct {
	n, bytes int64
	closed   time.Time // when the compactor first saw the segment closed
}

// compactPatience: a segment whose waiting messages are all due within 1/compactPatience of its
// age is left to empty by itself, since moving them would cost a write and save little.
const compactPatience = 4

// compactRound is one round of the background compactor; it checkpoints after a round that
// relocated something, so that retention deletes the segments it freed now, not an interval later.
func (q *Queue) compactRound(c *compactor) error {
	moved, err := q.compact(c, q.cfg.compactLive)
	if err == nil && moved > 0 {
		err = q.checkpoint()
	}
	return err
}

// compact runs one round: it finds the target segments, those estimated less than live live, and
// relocates the lists that have records in them. It returns the number of lists relocated.
func (q *Queue) compact(c *compactor, live float64) (int, error) {
	targets, err := q.compactTargets(c, live)
	if err != nil || len(targets) == 0 {
		return 0, err
	}
	targets, lists, err := q.listsIn(c, targets)
	if err != nil || len(targets) == 0 {
		return 0, err
	}
	isTarget := func(p wal.Pos) bool {
		_, ok := slices.BinarySearch(targets, p.Segment())
		return ok
	}
	r := newRecordReader(q.log)
	moved := 0
	for _, list := range lists {
		n, ok, err := q.relocate(r, list, isTarget)
		if err != nil {
			return moved, err
		}
		if ok {
			moved++
		}
		if err := q.pace(c, n); err != nil {
			return moved, err
		}
	}
	for _, seg := range targets {
		c.done[seg] = true
	}
	return moved, nil
}

// compactTargets returns, in order, the closed segments not yet compacted whose estimated live
// fraction is under live.
func (q *Queue) compactTargets(c *compactor, live float64) ([]uint32, error) {
	segs, sizes := q.log.Segments()
	written := q.log.WrittenEnd().Segment()
	present := make(map[uint32]bool, len(segs))
	var targets []uint32
	for i, seg := range segs {
		present[seg] = true
		if seg >= written || c.done[seg] {
			continue
		}
		q.mu.Lock()
		pins := q.pins[seg]
		q.mu.Unlock()
		if pins == 0 {
			continue // nothing in it is needed: retention deletes it, unread
		}
		cnt, ok := c.counted[seg]
		if !ok {
			var err error
			if cnt, err = q.countSegment(seg); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue // deleted meanwhile
				}
				return nil, err
			}
			cnt.closed = time.Now()
			c.counted[seg] = cnt
			if err := q.pace(c, sizes[i]); err != nil {
				return nil, err
			}
		}
		if cnt.n == 0 {
			continue // retention deletes it at the next checkpoint
		}
		if est := float64(pins) * float64(cnt.bytes) / float64(cnt.n); est < live*float64(sizes[i]) {
			targets = append(targets, seg)
		}
	}
	for seg := range c.counted {
		if !present[seg] {
			delete(c.counted, seg)
			delete(c.done, seg)
		}
	}
	return targets, nil
}

// errStopScan ends a scan of the log early.
var errStopScan = errors.New("delayq: stop scan")

// scanSegment calls fn for each valid record of the closed segment seg. Damage met is reported
// and skipped: what a damaged record held is lost to compaction as it is to the loader, and the
// rest of the segment is still compacted.
func (q *Queue) scanSegment(seg uint32, fn func(wal.Pos, *format.Record)) error {
	err := scanRecords(q.log, wal.MakePos(seg, wal.SegmentHeader), wal.MakePos(seg+1, 0), func(p wal.Pos, rec *format.Record) error {
		if p.Segment() != seg {
			return errStopScan
		}
		fn(p, rec)
		return nil
	}, func(ce *wal.CorruptError) error {
		q.damaged(ce)
		return nil
	})
	if errors.Is(err, errStopScan) {
		return nil
	}
	return err
}

// countSegment counts the records of seg that can be pinned: Puts, and threaded Cancels and Purges.
func (q *Queue) countSegment(seg uint32) (segCount, error) {
	var c segCount
	err := q.scanSegment(seg, func(_ wal.Pos, rec *format.Record) {
		if rec.Kind == format.KindPut || rec.Threaded && rec.Kind.Threads() {
			c.n++
			c.bytes += int64(frameSize(rec))
		}
	})
	return c, err
}

// listsIn reads the target segments and returns those worth compacting, with the lists not
// loaded yet that their records are threaded into, in order (at most as many as the wheel has
// slots). A segment whose waiting messages are all due soon compared with its age is dropped: it
// empties by itself. One with no records in lists still waiting is marked done.
func (q *Queue) listsIn(c *compactor, targets []uint32) ([]uint32, []int64, error) {
	q.mu.Lock()
	loaded := q.disk.loaded
	q.mu.Unlock()
	now := time.Now()
	lists := make(map[int64]bool)
	var keep []uint32
	for _, seg := range targets {
		var last int64 // latest DeliverAt of a Put in a list not loaded
		segLists := make(map[int64]bool)
		err := q.scanSegment(seg, func(_ wal.Pos, rec *format.Record) {
			if rec.Threaded && rec.ListSlot > loaded+1 {
				segLists[rec.ListSlot] = true
				if rec.Kind == format.KindPut {
					last = max(last, rec.DeliverAt)
				}
			}
		})
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if len(segLists) == 0 {
			c.done[seg] = true
			continue
		}
		age := now.Sub(c.counted[seg].closed)
		if time.Duration(last-now.UnixNano()) < age/compactPatience {
			continue
		}
		keep = append(keep, seg)
		for l := range segLists {
			lists[l] = true
		}
	}
	return keep, slices.Sorted(mapKeys(lists)), nil
}

// relocate moves the list of slot list to the head of the log if it still has a record for which
// old reports true, as the comment at the top of this file describes. It returns the bytes it read
// and wrote, and whether it relocated the list.
func (q *Queue) relocate(r *recordReader, list int64, old func(wal.Pos) bool) (int64, bool, error) {
	recs, ok, err := q.lockList(r, list, 0, func() bool { return q.usableLocked() == nil && list > q.disk.loaded+1 })
	defer q.mu.Unlock()
	if !ok {
		return 0, false, q.usableLocked() // loaded meanwhile: its records may be gone already
	}
	if err != nil {
		return 0, false, err
	}
	var size int64
	hasOld := false
	for _, lr := range recs {
		rec := lr.rec.record(list)
		size += int64(frameSize(&rec))
		hasOld = hasOld || old(lr.pos)
	}
	if !hasOld || size > maxRelocate {
		return size, false, nil
	}
	if _, err := q.commitLocked(&format.Record{Kind: format.KindRelocate, Slot: list}, recs); err != nil {
		return size, false, err
	}
	for _, e := range q.moving {
		size += int64(len(e.payload))
	}
	if err := q.payMovingLocked(); err != nil {
		return size, false, err
	}
	return size, true, nil
}

// pace sleeps as long as moving n more bytes at the compaction rate takes, in steps of at least
// 10ms, and returns ErrClosed if the queue closes meanwhile.
func (q *Queue) pace(c *compactor, n int64) error {
	c.debt += n
	d := time.Duration(float64(c.debt) / float64(q.cfg.compactRate) * float64(time.Second))
	if d < 10*time.Millisecond {
		return nil
	}
	c.debt = 0
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-q.closed:
		return errClosed
	}
}
