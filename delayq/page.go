package delayq

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/queue"
)

// Paging through a topic's messages without loading its backlog. Each state has an order and a
// key that follows it, unique per message: scheduled messages by (due time, origin), due ones by
// the order they became ready (their seq, valid while the queue is open), leased ones by (lease
// deadline, origin), dead letters by (time of their last failure, origin). A cursor is the last
// key of a page; the next page holds the messages with greater keys, wherever they are now, so a
// cursor stays valid however the topic changes.
//
// Messages in memory are found through their topic (its ready list, timed list and dead letters),
// in time proportional to the topic's messages in memory. Scheduled messages in the disk wheel are
// read a slot at a time, in due order: the lists' counts by topic tell which slots hold any of the
// topic's messages (for slots beyond the horizon, which lists may hold them, up to what slot), and
// each such slot's list is read record by record, without the queue's lock, keeping only the
// page's best candidates. Memory is a page's worth however large the topic; time is the slots
// walked and the lists read.

// A pageKey orders the messages of one state.
type pageKey struct {
	a int64
	b uint64
}

func (k pageKey) compare(o pageKey) int {
	if c := cmp.Compare(k.a, o.a); c != 0 {
		return c
	}
	return cmp.Compare(k.b, o.b)
}

// A cursor is 30 characters of unpadded base64url of 22 bytes, big endian: a version (1), the
// state's code, the key, and the number of the Open it was made under (see Queue.opened).
const cursorBytes = 22

var stateCodes = map[queue.State]byte{queue.Scheduled: 1, queue.Due: 2, queue.Leased: 3, queue.Dead: 4}

func (q *Queue) makeCursor(state queue.State, k pageKey) string {
	var b [cursorBytes]byte
	b[0], b[1] = 1, stateCodes[state]
	binary.BigEndian.PutUint64(b[2:], uint64(k.a))
	binary.BigEndian.PutUint64(b[10:], k.b)
	binary.BigEndian.PutUint32(b[18:], q.opened)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// parseCursor returns the key a cursor of state holds and the Open it was made under.
func parseCursor(s string, state queue.State) (pageKey, uint32, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != cursorBytes || b[0] != 1 || b[1] != stateCodes[state] {
		return pageKey{}, 0, fmt.Errorf("delayq: %.40q is not a cursor of %s messages: %w", s, state, ErrInvalid)
	}
	return pageKey{int64(binary.BigEndian.Uint64(b[2:])), binary.BigEndian.Uint64(b[10:])}, binary.BigEndian.Uint32(b[18:]), nil
}

// Messages returns up to limit messages of topic in state, from cursor on ("" for the first page),
// and the cursor of the next page ("" when there is none), as [queue.Admin] says: scheduled
// messages by due time, due ones in the order Receive leases them, leased ones by lease deadline,
// dead letters (listed under the topic they died on) by the time of their last failure. Payloads
// are cut to queue.PreviewLen bytes. limit must be from 1 to queue.MaxPage, and cursor one that
// Messages returned for the same state (ErrInvalid otherwise).
//
// Scheduled messages of the disk wheel are read a slot's list at a time, without holding the
// queue's lock and keeping only a page's worth in memory, so paging through millions costs memory
// for one page; a page costs reading the lists of the slots it covers. Messages due beyond the
// horizon (see [WithHorizon]) wait in the lists of earlier slots: a page of them reads the lists
// that may hold them once per horizon of due time it covers. The order of due messages holds while
// the queue is open: a cursor of due messages from before a restart starts again from the first.
func (q *Queue) Messages(ctx context.Context, topic string, state queue.State, cursor string, limit int) ([]queue.MessageInfo, string, error) {
	if !state.Valid() {
		return nil, "", fmt.Errorf("delayq: state %q: %w", state, ErrInvalid)
	}
	if limit < 1 || limit > queue.MaxPage {
		return nil, "", fmt.Errorf("delayq: page of %d messages, not from 1 to %d: %w", limit, queue.MaxPage, ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, "", fmt.Errorf("delayq: %w", err)
	}
	from, first := pageKey{a: -1 << 63}, true
	if cursor != "" {
		k, opened, err := parseCursor(cursor, state)
		if err != nil {
			return nil, "", err
		}
		if state != queue.Due || opened == q.opened {
			from, first = k, false
		}
	}
	// One more than the page, to know whether there is a next page.
	p := &pager{after: from, first: first, size: limit + 1}
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return nil, "", err
	}
	t := q.mem.topics[topic]
	if t != nil {
		q.pageMemLocked(p, t, state)
	}
	q.mu.Unlock()
	if state == queue.Scheduled && t != nil {
		if err := q.pageDisk(ctx, p, topic); err != nil {
			return nil, "", err
		}
	}
	items := p.sorted()
	next := ""
	if len(items) > limit {
		items = items[:limit]
		next = q.makeCursor(state, items[limit-1].key)
	}
	out := make([]queue.MessageInfo, len(items))
	for i, it := range items {
		out[i] = it.info
	}
	return out, next, nil
}

// pageMemLocked offers p the messages of topic t in state that are in memory.
func (q *Queue) pageMemLocked(p *pager, t *topicState, state queue.State) {
	switch state {
	case queue.Scheduled, queue.Leased:
		st := waiting
		if state == queue.Leased {
			st = leased
		}
		for e := t.timed; e != nil; e = e.tnext {
			if e.st != st {
				continue
			}
			k := pageKey{e.deliverAt, uint64(e.origin)}
			if st == leased {
				k.a = e.bucket.key
			}
			if p.wants(k) {
				p.offer(k, q.infoLocked(e, state, true))
			}
		}
	case queue.Due:
		// The ready list is in the order of seq: the page is the first entries after the cursor.
		for e := t.head; e != nil && !p.full(); e = e.next {
			if k := (pageKey{int64(e.seq), 0}); p.wants(k) {
				p.offer(k, q.infoLocked(e, state, true))
			}
		}
	case queue.Dead:
		for e := range t.dead {
			if e.st == leased {
				continue
			}
			if k := (pageKey{e.failedAt, uint64(e.origin)}); p.wants(k) {
				p.offer(k, q.infoLocked(e, state, true))
			}
		}
	}
}

// slotScan bounds the slots pageDisk looks at under one hold of the lock.
const slotScan = 1 << 16

// pageDisk offers p the scheduled messages of topic waiting in the disk wheel, a slot at a time in
// due order from the cursor's, until no later slot can hold a message the page wants.
func (q *Queue) pageDisk(ctx context.Context, p *pager, topic string) error {
	r := newRecordReader(q.log)
	q.mu.Lock()
	w := &q.disk
	slot := w.loaded + 1
	if !p.first {
		slot = max(slot, w.slotOf(p.after.a))
	}
	last := q.lastSlotLocked(topic)
	q.mu.Unlock()
	for slot <= last {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("delayq: %w", err)
		}
		// Under the lock, find the next slot that may hold a message of the topic.
		q.mu.Lock()
		if err := q.usableLocked(); err != nil {
			q.mu.Unlock()
			return err
		}
		t := q.mem.topics[topic]
		if t == nil {
			q.mu.Unlock()
			return nil // no message of the topic is left
		}
		var head, first wal.Pos
		var list int64
		for n := 0; slot <= last && n < slotScan; n, slot = n+1, slot+1 {
			if p.full() && w.slotStart(slot) > p.worst().a {
				slot = last + 1 // the page is as good as any later slot can make it
				break
			}
			if slot <= w.loaded {
				continue // loaded since: its messages are in memory, not on this page
			}
			list = w.listFor(slot)
			l := w.peek(list)
			lt := l.find(t)
			// By the counts, unless a Cancel or Purge took some of the topic's messages there:
			// damage to it would bring them back, which only reading the list tells.
			if lt == nil || list != slot && lt.last < slot ||
				!lt.taken && (list == slot && lt.due <= 0 || list != slot && lt.n <= lt.due) {
				continue
			}
			head, first = l.head, l.first
			break
		}
		q.mu.Unlock()
		if head == 0 {
			continue
		}
		if err := q.pageList(r, p, topic, list, slot, head, first); err != nil {
			return err
		}
		slot++
	}
	return nil
}

// lastSlotLocked returns a slot at or after the one the latest message of topic in the disk wheel
// is due in, or loaded when it has none there.
func (q *Queue) lastSlotLocked(topic string) int64 {
	w := &q.disk
	last := w.loaded
	t := q.mem.topics[topic]
	if t == nil || t.lists == 0 {
		return last
	}
	for _, l := range w.lists {
		if l.head == 0 {
			continue
		}
		if lt := l.find(t); lt != nil {
			last = max(last, lt.last)
		}
	}
	return last
}

// pageList reads the list of slot list, whose head and first record were head and first, and
// offers p the messages of topic in it that are due in slot. It reads without mu: records before
// head do not change. It reads past damage as every reader of a list does (walkChain), so the page
// shows what Receive will deliver; the loader, which reads under mu, reports the damage.
func (q *Queue) pageList(r *recordReader, p *pager, topic string, list, slot int64, head, first wal.Pos) error {
	var v listView
	_, err := q.walkChain(r, list, head, first, 0, 0, func(error) {}, func(lr *listRecord) {
		rec := &lr.rec
		if v.pending(lr.pos, rec) && rec.Topic == topic && q.disk.slotOf(rec.DeliverAt) == slot {
			if k := (pageKey{rec.DeliverAt, uint64(originOf(rec.Origin, lr.pos))}); p.wants(k) {
				p.offer(k, diskInfo(rec, lr.pos, true))
			}
		}
	})
	if err != nil {
		return fmt.Errorf("delayq: reading the list of slot %d: %w", list, err)
	}
	return nil
}

// A pager keeps the best size messages offered whose keys are after a cursor's: a max-heap on
// the key, so that its worst is dropped when a better one comes.
type pager struct {
	after pageKey
	first bool // no cursor: every key is after
	size  int
	items []pageItem
}

type pageItem struct {
	key  pageKey
	info queue.MessageInfo
}

func (p *pager) full() bool { return len(p.items) >= p.size }

// worst returns the greatest key kept; the pager must not be empty.
func (p *pager) worst() pageKey { return p.items[0].key }

// wants reports whether a message of key k would be kept.
func (p *pager) wants(k pageKey) bool {
	if !p.first && k.compare(p.after) <= 0 {
		return false
	}
	return !p.full() || k.compare(p.worst()) < 0
}

// offer keeps a message p wants.
func (p *pager) offer(k pageKey, info queue.MessageInfo) {
	heap.Push(p, pageItem{k, info})
	if len(p.items) > p.size {
		heap.Pop(p)
	}
}

// sorted returns the messages kept, in key order.
func (p *pager) sorted() []pageItem {
	return slices.SortedFunc(slices.Values(p.items), func(a, b pageItem) int { return a.key.compare(b.key) })
}

func (p *pager) Len() int           { return len(p.items) }
func (p *pager) Less(i, j int) bool { return p.items[i].key.compare(p.items[j].key) > 0 }
func (p *pager) Swap(i, j int)      { p.items[i], p.items[j] = p.items[j], p.items[i] }
func (p *pager) Push(x any)         { p.items = append(p.items, x.(pageItem)) }
func (p *pager) Pop() any {
	x := p.items[len(p.items)-1]
	p.items = p.items[:len(p.items)-1]
	return x
}
