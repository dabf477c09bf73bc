package delayq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// The checkpoint file holds the state the log alone would take long to rebuild: the disk wheel's
// list heads, the segment pins, the messages in memory (by position: their payloads stay in the
// log), and the chosen IDs of messages in the disk wheel. It describes exactly the records before
// its replay position; recovery loads it and replays the log from there.
//
// It is written after everything before the replay position is durable, to a temporary file that
// is synced, renamed over the old checkpoint, and made durable by syncing the directory, so a
// crash leaves either the old checkpoint or the new one. All integers are little endian:
//
//	0   8  magic "tockckp1"
//	8   4  version (3; version 1 lacks the due counts of heads, and versions 1 and 2 count
//	       cancelled messages among those in the disk wheel: Open recounts both from the lists)
//	12  8  replay position: the log position recovery replays from
//	20  8  slot length in nanoseconds (fixed when the queue is created)
//	28  4  slots in the disk wheel (horizon / slot, fixed when the queue is created)
//	32  8  loaded: the newest slot moved to memory
//	40  8  messages in the disk wheel, not counting cancelled ones
//	48  4  heads, 4 pins, 4 entries, 4 user IDs: the counts of the sections that follow
//	       heads:    slot int64, head uint64, due int64            (non-empty lists only;
//	                 due: the list's messages due in its own slot, for DueCounts)
//	       pins:     segment uint32, count int64
//	       entries:  pos uint64, origin uint64, deliverAt int64, attempt uint32,
//	                 topicLen uint16 and topic (0: the topic in the record at pos)
//	       user IDs: slot int64, idLen uint16 and id
//	end 4  CRC-32C of everything before it
const (
	checkpointName    = "checkpoint"
	checkpointMagic   = "tockckp1"
	checkpointVersion = 3
	checkpointFixed   = 64
)

// A checkpoint is the decoded checkpoint file.
type checkpoint struct {
	version     uint32
	replay      wal.Pos
	slotNs      int64
	slots       int
	loaded      int64
	diskPending int64
	lists       []slotList // the non-empty lists
	hasDue      bool       // lists carry their due counts (not in version 1)
	pins        pins
	entries     []ckEntry
	userIDs     map[string]idLoc
}

// A ckEntry is a message in memory, as the checkpoint keeps it.
type ckEntry struct {
	pos, origin wal.Pos
	deliverAt   int64
	attempt     uint32
	topic       string // set only when it differs from the record's (a dead letter)
}

// snapshotLocked copies the state a checkpoint with replay position end keeps.
func (q *Queue) snapshotLocked(end wal.Pos) *checkpoint {
	w := &q.disk
	ck := &checkpoint{
		replay:      end,
		slotNs:      w.slotNs,
		slots:       len(w.lists),
		loaded:      w.loaded,
		diskPending: w.pending,
		hasDue:      true,
		pins:        maps.Clone(q.pins),
		entries:     make([]ckEntry, 0, len(q.mem.byOrigin)),
		userIDs:     maps.Clone(w.ids),
	}
	for _, l := range w.lists {
		if l.head != 0 {
			ck.lists = append(ck.lists, l)
		}
	}
	for _, e := range q.mem.byOrigin {
		ce := ckEntry{pos: e.pos, origin: e.origin, deliverAt: e.deliverAt, attempt: e.attempt}
		if e.topicChanged {
			ce.topic = e.topic
		}
		ck.entries = append(ck.entries, ce)
	}
	return ck
}

func (ck *checkpoint) encode() []byte {
	le := binary.LittleEndian
	b := make([]byte, 0, checkpointFixed+len(ck.lists)*24+len(ck.pins)*12+len(ck.entries)*40)
	b = append(b, checkpointMagic...)
	b = le.AppendUint32(b, checkpointVersion)
	b = le.AppendUint64(b, uint64(ck.replay))
	b = le.AppendUint64(b, uint64(ck.slotNs))
	b = le.AppendUint32(b, uint32(ck.slots))
	b = le.AppendUint64(b, uint64(ck.loaded))
	b = le.AppendUint64(b, uint64(ck.diskPending))
	b = le.AppendUint32(b, uint32(len(ck.lists)))
	b = le.AppendUint32(b, uint32(len(ck.pins)))
	b = le.AppendUint32(b, uint32(len(ck.entries)))
	b = le.AppendUint32(b, uint32(len(ck.userIDs)))
	for _, l := range ck.lists {
		b = le.AppendUint64(b, uint64(l.slot))
		b = le.AppendUint64(b, uint64(l.head))
		b = le.AppendUint64(b, uint64(l.due))
	}
	for _, seg := range slices.Sorted(mapKeys(ck.pins)) {
		b = le.AppendUint32(b, seg)
		b = le.AppendUint64(b, uint64(ck.pins[seg]))
	}
	for _, e := range ck.entries {
		b = le.AppendUint64(b, uint64(e.pos))
		b = le.AppendUint64(b, uint64(e.origin))
		b = le.AppendUint64(b, uint64(e.deliverAt))
		b = le.AppendUint32(b, e.attempt)
		b = le.AppendUint16(b, uint16(len(e.topic)))
		b = append(b, e.topic...)
	}
	for id, loc := range ck.userIDs {
		b = le.AppendUint64(b, uint64(loc.slot))
		b = le.AppendUint16(b, uint16(len(id)))
		b = append(b, id...)
	}
	return le.AppendUint32(b, crc32.Checksum(b, crcTable))
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// decodeCheckpoint decodes a checkpoint file's contents. Damage gives a *wal.CorruptError naming
// path and the offset where decoding failed.
func decodeCheckpoint(path string, b []byte) (*checkpoint, error) {
	bad := func(off int, format string, args ...any) error {
		return &wal.CorruptError{File: path, Offset: int64(off), Reason: fmt.Sprintf(format, args...)}
	}
	if len(b) < checkpointFixed+4 {
		return nil, bad(len(b), "checkpoint of %d bytes is too short", len(b))
	}
	if string(b[:8]) != checkpointMagic {
		return nil, bad(0, "bad checkpoint magic %q", b[:8])
	}
	body := b[:len(b)-4]
	if want, got := binary.LittleEndian.Uint32(b[len(b)-4:]), crc32.Checksum(body, crcTable); want != got {
		return nil, bad(len(b)-4, "checkpoint checksum mismatch: stored %08x, computed %08x", want, got)
	}
	d := ckDecoder{b: body, off: 8}
	version := d.u32()
	if version < 1 || version > checkpointVersion {
		return nil, bad(8, "unsupported checkpoint version %d", version)
	}
	headSize := 16
	if version >= 2 {
		headSize = 24
	}
	ck := &checkpoint{
		version:     version,
		replay:      wal.Pos(d.u64()),
		slotNs:      int64(d.u64()),
		slots:       int(d.u32()),
		loaded:      int64(d.u64()),
		diskPending: int64(d.u64()),
	}
	nh, np, ne, nu := int(d.u32()), int(d.u32()), int(d.u32()), int(d.u32())
	if ck.slotNs < int64(time.Millisecond) || ck.slots < 1 || ck.slots > 1<<24 {
		return nil, bad(20, "slot length %d ns or %d slots out of range", ck.slotNs, ck.slots)
	}
	// Each section entry takes at least 10 bytes, so counts beyond the data are damage, caught
	// before they size an allocation.
	if rest := len(body) - d.off; nh > rest/headSize || np > rest/12 || ne > rest/30 || nu > rest/10 || nh > ck.slots {
		return nil, bad(48, "section counts %d/%d/%d/%d exceed the data", nh, np, ne, nu)
	}
	ck.lists = make([]slotList, nh)
	ck.hasDue = version >= 2
	for i := range ck.lists {
		ck.lists[i] = slotList{slot: int64(d.u64()), head: wal.Pos(d.u64())}
		if version >= 2 {
			ck.lists[i].due = int64(d.u64())
		}
	}
	ck.pins = make(pins, np)
	for range np {
		seg := d.u32()
		ck.pins[seg] = int64(d.u64())
	}
	ck.entries = make([]ckEntry, ne)
	for i := range ck.entries {
		ck.entries[i] = ckEntry{pos: wal.Pos(d.u64()), origin: wal.Pos(d.u64()), deliverAt: int64(d.u64()), attempt: d.u32(), topic: d.str()}
	}
	ck.userIDs = make(map[string]idLoc, nu)
	for range nu {
		slot := int64(d.u64())
		ck.userIDs[d.str()] = idLoc{slot: slot}
	}
	if d.bad {
		return nil, bad(d.off, "checkpoint cut short")
	}
	if d.off != len(body) {
		return nil, bad(d.off, "%d stray bytes in checkpoint", len(body)-d.off)
	}
	return ck, nil
}

type ckDecoder struct {
	b   []byte
	off int
	bad bool
}

func (d *ckDecoder) take(n int) []byte {
	if d.bad || len(d.b)-d.off < n {
		d.bad = true
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *ckDecoder) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (d *ckDecoder) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (d *ckDecoder) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (d *ckDecoder) str() string { return string(d.take(int(d.u16()))) }

// readCheckpoint reads dir's checkpoint; it returns an error matching os.ErrNotExist when there
// is none.
func readCheckpoint(dir string) (*checkpoint, error) {
	path := filepath.Join(dir, checkpointName)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return decodeCheckpoint(path, b)
}

// writeCheckpoint replaces dir's checkpoint with ck atomically and durably.
func writeCheckpoint(dir string, ck *checkpoint) error {
	path := filepath.Join(dir, checkpointName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
	_, err = f.Write(ck.encode())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = wal.SyncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
	return nil
}

// checkpoint writes a checkpoint of the current state, once the log it describes is durable, and
// then deletes the segments nothing needs any more.
func (q *Queue) checkpoint() error {
	q.ckptMu.Lock()
	defer q.ckptMu.Unlock()
	q.mu.Lock()
	if q.err != nil {
		err := q.err
		q.mu.Unlock()
		return err
	}
	end := q.log.End()
	if end == q.ckptPos {
		q.mu.Unlock()
		return nil
	}
	ck := q.snapshotLocked(end)
	q.mu.Unlock()
	if err := q.log.WaitDurable(end); err != nil {
		return err
	}
	if err := writeCheckpoint(q.dir, ck); err != nil {
		return err
	}
	q.mu.Lock()
	q.ckptPos = end
	q.mu.Unlock()
	return q.retain(end, ck.pins)
}

// every calls fn every interval until Close or until fn fails. A failure other than the queue or
// its log closing fails the queue, as a failed write does.
func (q *Queue) every(interval time.Duration, fn func() error) {
	defer q.bg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-q.closed:
			return
		case <-t.C:
		}
		if err := fn(); err != nil {
			if !errors.Is(err, ErrClosed) && !errors.Is(err, wal.ErrClosed) {
				q.mu.Lock()
				q.failLocked(err)
				q.mu.Unlock()
			}
			return
		}
	}
}
