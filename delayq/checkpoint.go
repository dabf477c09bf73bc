package delayq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// The checkpoint holds the state the log alone would take long to rebuild: the disk wheel's lists
// with their counts per topic, the segment pins, the messages in memory (by position: their
// payloads stay in the log), the chosen IDs of messages in the disk wheel, and the paused topics.
// It describes exactly the records before its replay position; recovery loads it and replays the
// log from there.
//
// Its cost follows what changed: the file is a log of edits. Each checkpoint appends one edit
// holding what changed since the one before (the lists touched, the entries and chosen IDs added
// or removed, all the pins and paused topics, which are few) and syncs it; the queue's lock is held
// only to take the changes, which the queue journals as they happen (diskWheel.dirty and idOps,
// deliveryIndex.ops). When the edits outgrow the state they describe, the file is rewritten as one
// full edit, merged from the file itself, without the lock: to a temporary file that is synced,
// renamed over the old one, and made durable by syncing the directory. An edit is written only
// after everything before its replay position is durable. All integers are little endian:
//
//	file:  magic "tockckp1", version uint32 (5), then edits
//	edit:  length uint32 (of the body), CRC-32C uint32 (of the body), body
//	body:  0  1  flags: bit 0 full (the state is this edit alone; the first edit of a file is full)
//	       1  8  replay position: the log position recovery replays from
//	       9  8  slot length in nanoseconds (fixed when the queue is created)
//	       17 4  slots in the disk wheel (horizon / slot, fixed when the queue is created)
//	       21 8  loaded: the newest slot moved to memory
//	       29 8  messages in the disk wheel, not counting cancelled ones
//	       37 4×8 the counts of the sections that follow:
//	          names:     nameLen uint16 and name: the topics the lists and paused sections name,
//	                     by their index in this section (names are the edit's own)
//	          paused:    name uint32 (all of them: they replace the edit before's)
//	          lists:     index uint32, slot int64, head, first uint64, due, n int64, topics uint32,
//	                     then per topic: name uint32, n, due, last int64 (a list that is empty has
//	                     head 0; see slotList and listTopic)
//	          pins:      segment uint32, count int64 (all of them: they replace the edit before's)
//	          entries:   origin, pos uint64, deliverAt int64, attempt uint32, failure uint8,
//	                     failedAt int64, topicLen uint16 and topic (0: the topic in the record at
//	                     pos)
//	          removed entries: origin uint64 (applied before the entries held)
//	          IDs:       slot int64, pos uint64, idLen uint16 and id
//	          removed IDs: idLen uint16 and id
//
// Recovery applies the edits in order. A last edit cut short (a crash while appending it) is
// ignored: the one before describes a state the log still holds all of, since retention follows
// an edit only once it is durable. Any other damage makes the checkpoint unusable, and the state is
// rebuilt from the log.
//
// Version 4 had no names, paused topics, list topics or n, nor the failure of entries (see
// applyEdit); versions 1 to 3 were one full snapshot per file (see decodeV3). Open reads them,
// reads every list once to learn what they lack (the counts of each list by topic; for versions up
// to 3 the first record of each list and the record of each chosen ID, and for versions 1 and 2
// the due counts), and writes the state as version 5.
const (
	checkpointName    = "checkpoint"
	checkpointMagic   = "tockckp1"
	checkpointVersion = 5
	editHeader        = 8
)

// A checkpoint is the state a checkpoint file describes, decoded and merged.
type checkpoint struct {
	version uint32
	replay  wal.Pos
	slotNs  int64
	slots   int
	loaded  int64
	pending int64
	lists   []slotList // by wheel index, without their topics
	// topics holds the counts by topic of the lists that have any, by wheel index (version 5).
	topics map[int][]ckListTopic
	paused []string
	hasDue bool // lists carry their due counts (not in version 1)
	// end is where the last valid edit ends, and full the size of the first (version 4 on).
	end, full int64
	pins      pins
	entries   map[wal.Pos]ckEntry // by origin
	ids       map[string]idLoc
}

// A ckListTopic is a listTopic as the checkpoint keeps it.
type ckListTopic struct {
	name         string
	n, due, last int64
}

// A ckEntry is a message in memory, as the checkpoint keeps it.
type ckEntry struct {
	pos, origin wal.Pos
	deliverAt   int64
	attempt     uint32
	failure     uint8
	failedAt    int64
	topic       string // set only when it differs from the record's (a dead letter)
}

// An edit is one edit of the checkpoint file: a full state, or the changes since the edit before.
type edit struct {
	full    bool
	replay  wal.Pos
	slotNs  int64
	slots   int
	loaded  int64
	pending int64
	lists   []indexedList
	paused  []string
	pins    pins
	entries []entryOp
	ids     []idOp
}

type indexedList struct {
	i      int
	l      slotList // its topics nil: they are in topics
	topics []ckListTopic
}

// indexed returns the list at wheel index i as an edit holds it: a copy, its topics by name.
func indexed(i int, l slotList) indexedList {
	il := indexedList{i: i, l: l}
	il.l.topics = nil
	for _, lt := range l.topics {
		il.topics = append(il.topics, ckListTopic{name: lt.t.name, n: lt.n, due: lt.due, last: lt.last})
	}
	return il
}

// fullEditLocked returns the whole state as an edit with replay position end. It copies all of
// the state: only Open uses it, for a new or migrated queue, with nothing else running.
func (q *Queue) fullEditLocked(end wal.Pos) *edit {
	ed := q.editHeaderLocked(end)
	ed.full = true
	for i, l := range q.disk.lists {
		if l.head != 0 {
			ed.lists = append(ed.lists, indexed(i, l))
		}
	}
	q.mem.takeOps()
	for _, e := range q.mem.byOrigin {
		q.mem.changed(e, false)
	}
	ed.entries = q.mem.takeOps()
	ed.ids = make([]idOp, 0, len(q.disk.ids))
	for id, loc := range q.disk.ids {
		ed.ids = append(ed.ids, idOp{id: id, loc: loc})
	}
	q.disk.idOps = nil
	clear(q.disk.dirty)
	return ed
}

// changesLocked returns the changes since the last checkpoint as an edit with replay position end,
// and starts journaling the next. It copies the lists changed, the pins and the paused topics; the
// entries and IDs changed are taken whole from the journal.
func (q *Queue) changesLocked(end wal.Pos) *edit {
	ed := q.editHeaderLocked(end)
	w := &q.disk
	for wi, word := range w.dirty {
		for word != 0 {
			b := wi*64 + trailingZeros(word)
			word &= word - 1
			ed.lists = append(ed.lists, indexed(b, w.lists[b]))
		}
	}
	clear(w.dirty)
	ed.entries = q.mem.takeOps()
	ed.ids, w.idOps = w.idOps, nil
	return ed
}

func (q *Queue) editHeaderLocked(end wal.Pos) *edit {
	w := &q.disk
	ed := &edit{replay: end, slotNs: w.slotNs, slots: len(w.lists), loaded: w.loaded, pending: w.pending, pins: maps.Clone(q.pins)}
	for name, t := range q.mem.topics {
		if t.paused {
			ed.paused = append(ed.paused, name)
		}
	}
	return ed
}

func trailingZeros(x uint64) int {
	n := 0
	for x&1 == 0 {
		x >>= 1
		n++
	}
	return n
}

// encode appends ed's frame to b. The IDs changed are reduced to their last change (the journal
// of entries holds one op per entry already).
func (ed *edit) encode(b []byte) []byte {
	entries := slices.DeleteFunc(ed.entries, func(op entryOp) bool { return op.skip })
	ids := make(map[string]idOp, len(ed.ids))
	for _, op := range ed.ids {
		ids[op.id] = op
	}
	var nDelE, nDelI int
	for _, op := range entries {
		if op.del {
			nDelE++
		}
	}
	for _, op := range ids {
		if op.del {
			nDelI++
		}
	}
	var names []string
	index := make(map[string]uint32)
	name := func(s string) uint32 {
		i, ok := index[s]
		if !ok {
			i = uint32(len(names))
			index[s] = i
			names = append(names, s)
		}
		return i
	}
	paused := slices.Sorted(slices.Values(ed.paused))
	for _, p := range paused {
		name(p)
	}
	for _, il := range ed.lists {
		for _, lt := range il.topics {
			name(lt.name)
		}
	}

	le := binary.LittleEndian
	start := len(b)
	b = append(b, make([]byte, editHeader)...)
	var flags byte
	if ed.full {
		flags = 1
	}
	b = append(b, flags)
	b = le.AppendUint64(b, uint64(ed.replay))
	b = le.AppendUint64(b, uint64(ed.slotNs))
	b = le.AppendUint32(b, uint32(ed.slots))
	b = le.AppendUint64(b, uint64(ed.loaded))
	b = le.AppendUint64(b, uint64(ed.pending))
	for _, n := range []int{len(names), len(paused), len(ed.lists), len(ed.pins), len(entries) - nDelE, nDelE, len(ids) - nDelI, nDelI} {
		b = le.AppendUint32(b, uint32(n))
	}
	for _, s := range names {
		b = appendStr(b, s)
	}
	for _, p := range paused {
		b = le.AppendUint32(b, index[p])
	}
	for _, il := range ed.lists {
		b = le.AppendUint32(b, uint32(il.i))
		b = le.AppendUint64(b, uint64(il.l.slot))
		b = le.AppendUint64(b, uint64(il.l.head))
		b = le.AppendUint64(b, uint64(il.l.first))
		b = le.AppendUint64(b, uint64(il.l.due))
		b = le.AppendUint64(b, uint64(il.l.n))
		b = le.AppendUint32(b, uint32(len(il.topics)))
		for _, lt := range il.topics {
			b = le.AppendUint32(b, index[lt.name])
			b = le.AppendUint64(b, uint64(lt.n))
			b = le.AppendUint64(b, uint64(lt.due))
			b = le.AppendUint64(b, uint64(lt.last))
		}
	}
	for _, seg := range slices.Sorted(maps.Keys(ed.pins)) {
		b = le.AppendUint32(b, seg)
		b = le.AppendUint64(b, uint64(ed.pins[seg]))
	}
	for _, op := range entries {
		if !op.del {
			e := &op.ce
			b = le.AppendUint64(b, uint64(e.origin))
			b = le.AppendUint64(b, uint64(e.pos))
			b = le.AppendUint64(b, uint64(e.deliverAt))
			b = le.AppendUint32(b, e.attempt)
			b = append(b, e.failure)
			b = le.AppendUint64(b, uint64(e.failedAt))
			b = appendStr(b, e.topic)
		}
	}
	for _, op := range entries {
		if op.del {
			b = le.AppendUint64(b, uint64(op.ce.origin))
		}
	}
	for _, op := range ids {
		if !op.del {
			b = le.AppendUint64(b, uint64(op.loc.slot))
			b = le.AppendUint64(b, uint64(op.loc.pos))
			b = appendStr(b, op.id)
		}
	}
	for _, op := range ids {
		if op.del {
			b = appendStr(b, op.id)
		}
	}
	body := b[start+editHeader:]
	le.PutUint32(b[start:], uint32(len(body)))
	le.PutUint32(b[start+4:], crc32.Checksum(body, crcTable))
	return b
}

func appendStr(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) { return maps.Keys(m) }

// fullEdit returns ck as one full edit.
func (ck *checkpoint) fullEdit() *edit {
	ed := &edit{full: true, replay: ck.replay, slotNs: ck.slotNs, slots: ck.slots, loaded: ck.loaded, pending: ck.pending, pins: ck.pins,
		paused: ck.paused}
	for i, l := range ck.lists {
		if l.head != 0 {
			ed.lists = append(ed.lists, indexedList{i: i, l: l, topics: ck.topics[i]})
		}
	}
	for _, e := range ck.entries {
		ed.entries = append(ed.entries, entryOp{ce: e})
	}
	for id, loc := range ck.ids {
		ed.ids = append(ed.ids, idOp{id: id, loc: loc})
	}
	return ed
}

// decodeCheckpoint decodes a checkpoint file's contents, of any version. Damage gives a
// *wal.CorruptError naming path and the offset where decoding failed.
func decodeCheckpoint(path string, b []byte) (*checkpoint, error) {
	if len(b) < 12 || string(b[:8]) != checkpointMagic {
		return nil, &wal.CorruptError{File: path, Reason: "not a checkpoint (bad magic)"}
	}
	version := binary.LittleEndian.Uint32(b[8:])
	switch {
	case version >= 1 && version <= 3:
		return decodeV3(path, b)
	case version != 4 && version != checkpointVersion:
		return nil, &wal.CorruptError{File: path, Offset: 8, Reason: fmt.Sprintf("unsupported checkpoint version %d", version)}
	}
	var ck *checkpoint
	off := 12
	for off < len(b) {
		if len(b)-off < editHeader {
			break // a last edit cut short
		}
		n := int(binary.LittleEndian.Uint32(b[off:]))
		if n > len(b)-off-editHeader {
			break // a last edit cut short
		}
		body := b[off+editHeader : off+editHeader+n]
		if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(b[off+4:]) {
			return nil, &wal.CorruptError{File: path, Offset: int64(off), Reason: "checkpoint edit fails its checksum"}
		}
		var err error
		if ck, err = applyEdit(ck, body, version); err != nil {
			return nil, &wal.CorruptError{File: path, Offset: int64(off), Reason: err.Error()}
		}
		off += editHeader + n
		if ck.full == 0 {
			ck.full = int64(off)
		}
		ck.end = int64(off)
	}
	if ck == nil {
		return nil, &wal.CorruptError{File: path, Offset: 12, Reason: "checkpoint holds no edit"}
	}
	return ck, nil
}

// applyEdit applies the edit body of a file of the given version (4 or 5) to ck (nil before the
// first edit, which must be full). Version 4 edits have no names, paused topics, list topics or
// n, and no failure in their entries.
func applyEdit(ck *checkpoint, body []byte, version uint32) (*checkpoint, error) {
	v5 := version >= 5
	d := ckDecoder{b: body}
	full := d.u8()&1 != 0
	replay, slotNs, slots := wal.Pos(d.u64()), int64(d.u64()), int(d.u32())
	loaded, pending := int64(d.u64()), int64(d.u64())
	var nn, npa int
	if v5 {
		nn, npa = int(d.u32()), int(d.u32())
	}
	nl, np, ne, nde, ni, ndi := int(d.u32()), int(d.u32()), int(d.u32()), int(d.u32()), int(d.u32()), int(d.u32())
	if d.bad || slotNs < int64(time.Millisecond) || slots < 1 || slots > 1<<24 {
		return nil, fmt.Errorf("slot length %d ns or %d slots out of range", slotNs, slots)
	}
	// Each section entry takes at least 2 bytes: counts beyond the data are damage, caught before
	// they size an allocation.
	if rest := len(body) - d.off; nl > slots || nn > rest || npa > rest || np > rest || ne > rest || nde > rest || ni > rest || ndi > rest {
		return nil, fmt.Errorf("section counts %d/%d/%d/%d/%d/%d/%d/%d exceed the data", nn, npa, nl, np, ne, nde, ni, ndi)
	}
	switch {
	case full:
		ck = &checkpoint{version: version, lists: make([]slotList, slots), hasDue: true, topics: make(map[int][]ckListTopic),
			entries: make(map[wal.Pos]ckEntry, ne), ids: make(map[string]idLoc, ni)}
	case ck == nil:
		return nil, errors.New("first checkpoint edit is not full")
	case ck.slotNs != slotNs || ck.slots != slots:
		return nil, errors.New("checkpoint edit changes the wheel's shape")
	}
	ck.replay, ck.slotNs, ck.slots, ck.loaded, ck.pending = replay, slotNs, slots, loaded, pending
	names := make([]string, nn)
	for i := range names {
		names[i] = d.str()
	}
	name := func() string {
		i := int(d.u32())
		if i >= len(names) {
			d.bad = true
			return ""
		}
		return names[i]
	}
	if v5 {
		ck.paused = make([]string, npa)
		for i := range ck.paused {
			ck.paused[i] = name()
		}
	}
	for range nl {
		i := int(d.u32())
		l := slotList{slot: int64(d.u64()), head: wal.Pos(d.u64()), first: wal.Pos(d.u64()), due: int64(d.u64())}
		if i >= slots {
			return nil, fmt.Errorf("list index %d of %d", i, slots)
		}
		delete(ck.topics, i)
		if v5 {
			l.n = int64(d.u64())
			nt := int(d.u32())
			if nt > len(body)-d.off {
				return nil, fmt.Errorf("list of %d topics exceeds the data", nt)
			}
			if nt > 0 {
				lts := make([]ckListTopic, nt)
				for j := range lts {
					lts[j] = ckListTopic{name: name(), n: int64(d.u64()), due: int64(d.u64()), last: int64(d.u64())}
				}
				ck.topics[i] = lts
			}
		}
		ck.lists[i] = l
	}
	ck.pins = make(pins, np)
	for range np {
		seg := d.u32()
		ck.pins[seg] = int64(d.u64())
	}
	// Removals first: an edit may remove a message and hold another with the same origin, added
	// since (a copy of it).
	sets := make([]ckEntry, ne)
	for i := range sets {
		e := ckEntry{origin: wal.Pos(d.u64()), pos: wal.Pos(d.u64()), deliverAt: int64(d.u64()), attempt: d.u32()}
		if v5 {
			e.failure, e.failedAt = d.u8(), int64(d.u64())
		}
		e.topic = d.str()
		sets[i] = e
	}
	for range nde {
		delete(ck.entries, wal.Pos(d.u64()))
	}
	for _, e := range sets {
		ck.entries[e.origin] = e
	}
	for range ni {
		loc := idLoc{slot: int64(d.u64()), pos: wal.Pos(d.u64())}
		ck.ids[d.str()] = loc
	}
	for range ndi {
		delete(ck.ids, d.str())
	}
	if d.bad {
		return nil, errors.New("checkpoint edit cut short")
	}
	if d.off != len(body) {
		return nil, fmt.Errorf("%d stray bytes in checkpoint edit", len(body)-d.off)
	}
	return ck, nil
}

// decodeV3 decodes a checkpoint of versions 1 to 3: one full snapshot.
//
//	0   8  magic "tockckp1"
//	8   4  version (version 1 lacks the due counts of heads, and versions 1 and 2 count
//	       cancelled messages among those in the disk wheel)
//	12  8  replay position
//	20  8  slot length in nanoseconds
//	28  4  slots in the disk wheel
//	32  8  loaded
//	40  8  messages in the disk wheel
//	48  4  heads, 4 pins, 4 entries, 4 user IDs: the counts of the sections that follow
//	       heads:    slot int64, head uint64, due int64 (due from version 2 on)
//	       pins:     segment uint32, count int64
//	       entries:  pos uint64, origin uint64, deliverAt int64, attempt uint32,
//	                 topicLen uint16 and topic
//	       user IDs: slot int64, idLen uint16 and id
//	end 4  CRC-32C of everything before it
func decodeV3(path string, b []byte) (*checkpoint, error) {
	const fixed = 64
	bad := func(off int, format string, args ...any) error {
		return &wal.CorruptError{File: path, Offset: int64(off), Reason: fmt.Sprintf(format, args...)}
	}
	if len(b) < fixed+4 {
		return nil, bad(len(b), "checkpoint of %d bytes is too short", len(b))
	}
	body := b[:len(b)-4]
	if want, got := binary.LittleEndian.Uint32(b[len(b)-4:]), crc32.Checksum(body, crcTable); want != got {
		return nil, bad(len(b)-4, "checkpoint checksum mismatch: stored %08x, computed %08x", want, got)
	}
	d := ckDecoder{b: body, off: 8}
	version := d.u32()
	headSize := 16
	if version >= 2 {
		headSize = 24
	}
	ck := &checkpoint{
		version: version,
		replay:  wal.Pos(d.u64()),
		slotNs:  int64(d.u64()),
		slots:   int(d.u32()),
		loaded:  int64(d.u64()),
		pending: int64(d.u64()),
		hasDue:  version >= 2,
	}
	nh, np, ne, nu := int(d.u32()), int(d.u32()), int(d.u32()), int(d.u32())
	if ck.slotNs < int64(time.Millisecond) || ck.slots < 1 || ck.slots > 1<<24 {
		return nil, bad(20, "slot length %d ns or %d slots out of range", ck.slotNs, ck.slots)
	}
	if rest := len(body) - d.off; nh > rest/headSize || np > rest/12 || ne > rest/30 || nu > rest/10 || nh > ck.slots {
		return nil, bad(48, "section counts %d/%d/%d/%d exceed the data", nh, np, ne, nu)
	}
	ck.lists = make([]slotList, ck.slots)
	for range nh {
		l := slotList{slot: int64(d.u64()), head: wal.Pos(d.u64())}
		if version >= 2 {
			l.due = int64(d.u64())
		}
		n := int64(ck.slots)
		ck.lists[((l.slot%n)+n)%n] = l
	}
	ck.pins = make(pins, np)
	for range np {
		seg := d.u32()
		ck.pins[seg] = int64(d.u64())
	}
	ck.entries = make(map[wal.Pos]ckEntry, ne)
	for range ne {
		e := ckEntry{pos: wal.Pos(d.u64()), origin: wal.Pos(d.u64()), deliverAt: int64(d.u64()), attempt: d.u32(), topic: d.str()}
		ck.entries[e.origin] = e
	}
	ck.ids = make(map[string]idLoc, nu)
	for range nu {
		slot := int64(d.u64())
		ck.ids[d.str()] = idLoc{slot: slot}
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

func (d *ckDecoder) u8() byte {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
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

// open makes the checkpoint file of dir, which ck was decoded from, the one appended to: from the
// end of its last valid edit, so that one cut short is written over.
func (c *checkpointFile) open(dir string, ck *checkpoint) error {
	f, err := os.OpenFile(filepath.Join(dir, checkpointName), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
	c.f, c.size, c.fullSize, c.pins = f, ck.end, ck.full, maps.Clone(ck.pins)
	return nil
}

// A checkpointFile is the checkpoint file being appended to, owned by whoever holds ckptMu.
type checkpointFile struct {
	f        *os.File // nil until the first full edit is written
	size     int64    // bytes in the file
	fullSize int64    // bytes of its first (full) edit
	pins     pins     // the pins of the last edit written
	edits    int      // edits written since Open, for tests and benchmarks
}

// rewriteAt is how large the edits may grow, beyond the full state they describe, before the file
// is rewritten as one full edit: the rewrite costs about what the edits since the last did.
func (c *checkpointFile) rewriteAt() int64 { return 2*c.fullSize + 1<<20 }

// writeFull replaces dir's checkpoint with a new file holding the full edit ed, atomically and
// durably, and makes it the file appended to.
func (c *checkpointFile) writeFull(dir string, ed *edit) error {
	path := filepath.Join(dir, checkpointName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
	b := binary.LittleEndian.AppendUint32([]byte(checkpointMagic), checkpointVersion)
	b = ed.encode(b)
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = wal.SyncDir(dir)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
	c.close()
	c.f, c.size, c.fullSize, c.pins = f, int64(len(b)), int64(len(b)), ed.pins
	c.edits++
	return nil
}

// appendEdit appends ed to the file and syncs it.
func (c *checkpointFile) appendEdit(ed *edit) error {
	b := ed.encode(nil)
	if _, err := c.f.WriteAt(b, c.size); err != nil {
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
	if err := c.f.Sync(); err != nil {
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
	c.size += int64(len(b))
	c.pins = ed.pins
	c.edits++
	return nil
}

// rewrite rewrites the file as one full edit of the state it describes, merged from the file.
func (c *checkpointFile) rewrite(dir string) error {
	path := filepath.Join(dir, checkpointName)
	b := make([]byte, c.size)
	if _, err := c.f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
	ck, err := decodeCheckpoint(path, b)
	if err != nil {
		return err
	}
	return c.writeFull(dir, ck.fullEdit())
}

func (c *checkpointFile) close() {
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
}

// checkpoint writes a checkpoint edit, once the log it describes is durable, and then deletes the
// segments nothing needs any more.
func (q *Queue) checkpoint() error {
	q.ckptMu.Lock()
	defer q.ckptMu.Unlock()
	end, pins, err := q.writeCheckpoint()
	if err != nil || pins == nil {
		return err
	}
	return q.retain(end, pins)
}

// writeCheckpoint writes a checkpoint edit if anything changed since the last, and returns its
// replay position and pins (nil if it wrote none). ckptMu must be held.
func (q *Queue) writeCheckpoint() (wal.Pos, pins, error) {
	q.mu.Lock()
	if q.err != nil {
		err := q.err
		q.mu.Unlock()
		return 0, nil, err
	}
	end := q.log.End()
	if end == q.ckptPos && q.ckpt.f != nil {
		q.mu.Unlock()
		return 0, nil, nil
	}
	var ed *edit
	if q.ckpt.f == nil {
		ed = q.fullEditLocked(end)
	} else {
		ed = q.changesLocked(end)
	}
	q.mu.Unlock()
	if err := q.log.WaitDurable(end); err != nil {
		return 0, nil, err
	}
	var err error
	if ed.full {
		err = q.ckpt.writeFull(q.dir, ed)
	} else {
		err = q.ckpt.appendEdit(ed)
	}
	if err == nil && q.ckpt.size > q.ckpt.rewriteAt() {
		err = q.ckpt.rewrite(q.dir)
	}
	if err != nil {
		return 0, nil, err
	}
	q.mu.Lock()
	q.ckptPos = end
	q.mu.Unlock()
	return end, ed.pins, nil
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
