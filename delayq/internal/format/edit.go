package format

import (
	"fmt"
	"math"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// # Checkpoint edits
//
// A checkpoint file is a log of edits (see checkpoint.go): each holds the whole state (full) or
// what changed since the edit before. The body of an edit, version 6:
//
//	0  1  flags: bit 0 full (the state is this edit alone; the first edit of a file is full)
//	1  8  replay position: the log position recovery replays from
//	9  8  slot length in nanoseconds (fixed when the queue is created)
//	17 4  slots in the disk wheel (horizon / slot, fixed when the queue is created)
//	21 8  loaded: the newest slot moved to memory
//	29 8  messages in the disk wheel, not counting cancelled ones
//	37 4×9 the counts of the sections that follow:
//	   names:     name: the topics the lists, paused and limits sections name, by their index in
//	              this section (names are the edit's own), in the order they are first named
//	   paused:    name uint32 (all of them: they replace the edit before's)
//	   limits:    name uint32, rate float64 bits, burst, concurrency uint32 (all of them: they
//	              replace the edit before's)
//	   lists:     index uint32, slot int64, head, first uint64, due, n int64, topics uint32, then
//	              per topic: name uint32, n, due, last int64 (a list that is empty has head 0)
//	   pins:      segment uint32, count int64 (all of them: they replace the edit before's)
//	   entries:   origin, pos uint64, deliverAt int64, attempt uint32, failure uint8, failedAt
//	              int64, topic name (empty: the topic in the record at pos), reason name (empty:
//	              none)
//	   removed entries: origin uint64 (applied before the entries held)
//	   IDs:       slot int64, pos uint64, id name
//	   removed IDs: id name
//
// Version 5 had no limits section, and no reason in entries. Version 4 had no names, paused or list
// topics sections, no n in lists, and no failure in entries: its counts are those of lists, pins,
// entries, removed entries, IDs and removed IDs.

// An Edit is one edit of a checkpoint: a plain value, applied by the queue (see delayq's
// checkpoint.go). In a full edit, Lists are every list that is not empty, and nothing is removed.
type Edit struct {
	Full    bool
	Replay  wal.Pos
	SlotNs  int64
	Slots   int
	Loaded  int64
	Pending int64
	// Paused lists every paused topic (version 5 on).
	Paused []string
	// Limits lists every topic's delivery limit (version 6 on).
	Limits []Limit
	// Lists are the lists that changed, each whole; a list with Head 0 is empty.
	Lists []List
	// Pins are all of them, by segment.
	Pins []Pin
	// Entries are the messages in memory added or changed; RemovedEntries the origins of those
	// removed, applied first (an edit may remove a message and hold another of the same origin).
	Entries        []Entry
	RemovedEntries []wal.Pos
	// IDs are the chosen IDs of the disk wheel set; RemovedIDs those deleted, applied after.
	IDs        []ID
	RemovedIDs []string
}

// A List is a disk wheel's list, at wheel index Index.
type List struct {
	Index       int
	Slot        int64
	Head, First wal.Pos
	Due, N      int64 // N: version 5 on
	Topics      []ListTopic
}

// A ListTopic is what a list holds of one topic (version 5 on).
type ListTopic struct {
	Name         string
	N, Due, Last int64
}

// A Limit is a topic's delivery limit, as a Limit record holds it (version 6 on).
type Limit struct {
	Topic              string
	Rate               float64
	Burst, Concurrency uint32
}

// A Pin is the number of records still needed in a segment.
type Pin struct {
	Segment uint32
	Count   int64
}

// An Entry is a message in memory.
type Entry struct {
	Origin, Pos wal.Pos
	DeliverAt   int64
	Attempt     uint32
	Failure     uint8 // version 5 on
	FailedAt    int64 // version 5 on
	// Topic is set only when it differs from the record's (a dead letter).
	Topic string
	// Reason is the reason of its failure, if its Nack gave one (version 6 on).
	Reason string
}

// An ID is a chosen ID of a message in the disk wheel: the slot it is due in and its Put (0 when
// not known).
type ID struct {
	ID   string
	Slot int64
	Pos  wal.Pos
}

// MaxSlots bounds the number of slots of a disk wheel.
const MaxSlots = 1 << 24

// appendEdit appends the body of ed, in the current version, to b.
func appendEdit(b []byte, ed *Edit) ([]byte, error) {
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
	for _, p := range ed.Paused {
		name(p)
	}
	for _, l := range ed.Limits {
		if math.IsNaN(l.Rate) || l.Rate < 0 {
			return nil, fmt.Errorf("%w: limit of rate %v in a checkpoint edit", errMalformed, l.Rate)
		}
		name(l.Topic)
	}
	for _, l := range ed.Lists {
		for _, lt := range l.Topics {
			name(lt.Name)
		}
	}
	for _, s := range names {
		if len(s) > MaxName {
			return nil, fmt.Errorf("%w: topic of %d bytes in a checkpoint edit", errMalformed, len(s))
		}
	}
	for _, e := range ed.Entries {
		if len(e.Topic) > MaxName || len(e.Reason) > MaxName {
			return nil, fmt.Errorf("%w: topic of %d bytes in a checkpoint edit", errMalformed, len(e.Topic))
		}
	}
	for _, id := range ed.IDs {
		if len(id.ID) > MaxName {
			return nil, fmt.Errorf("%w: id of %d bytes in a checkpoint edit", errMalformed, len(id.ID))
		}
	}
	for _, id := range ed.RemovedIDs {
		if len(id) > MaxName {
			return nil, fmt.Errorf("%w: id of %d bytes in a checkpoint edit", errMalformed, len(id))
		}
	}
	e := encoder{b: b}
	var flags byte
	if ed.Full {
		flags = 1
	}
	e.u8(flags)
	e.pos(ed.Replay)
	e.i64(ed.SlotNs)
	e.u32(uint32(ed.Slots))
	e.i64(ed.Loaded)
	e.i64(ed.Pending)
	for _, n := range []int{len(names), len(ed.Paused), len(ed.Limits), len(ed.Lists), len(ed.Pins), len(ed.Entries), len(ed.RemovedEntries), len(ed.IDs), len(ed.RemovedIDs)} {
		e.u32(uint32(n))
	}
	for _, s := range names {
		e.name(s)
	}
	for _, p := range ed.Paused {
		e.u32(index[p])
	}
	for _, l := range ed.Limits {
		e.u32(index[l.Topic])
		e.u64(math.Float64bits(l.Rate))
		e.u32(l.Burst)
		e.u32(l.Concurrency)
	}
	for _, l := range ed.Lists {
		e.u32(uint32(l.Index))
		e.i64(l.Slot)
		e.pos(l.Head)
		e.pos(l.First)
		e.i64(l.Due)
		e.i64(l.N)
		e.u32(uint32(len(l.Topics)))
		for _, lt := range l.Topics {
			e.u32(index[lt.Name])
			e.i64(lt.N)
			e.i64(lt.Due)
			e.i64(lt.Last)
		}
	}
	for _, p := range ed.Pins {
		e.u32(p.Segment)
		e.i64(p.Count)
	}
	for _, en := range ed.Entries {
		e.pos(en.Origin)
		e.pos(en.Pos)
		e.i64(en.DeliverAt)
		e.u32(en.Attempt)
		e.u8(en.Failure)
		e.i64(en.FailedAt)
		e.name(en.Topic)
		e.name(en.Reason)
	}
	for _, o := range ed.RemovedEntries {
		e.pos(o)
	}
	for _, id := range ed.IDs {
		e.i64(id.Slot)
		e.pos(id.Pos)
		e.name(id.ID)
	}
	for _, id := range ed.RemovedIDs {
		e.name(id)
	}
	return e.b, nil
}

// decodeEdit decodes the body of an edit of a file of the given version (4 to 6).
func decodeEdit(body []byte, version uint32) (*Edit, error) {
	v5, v6 := version >= 5, version >= 6
	d := decoder{b: body, keep: true}
	ed := &Edit{}
	ed.Full = d.u8()&1 != 0
	ed.Replay, ed.SlotNs, ed.Slots = d.pos(), d.i64(), int(d.u32())
	ed.Loaded, ed.Pending = d.i64(), d.i64()
	var nn, npa, nli int
	if v5 {
		nn, npa = int(d.u32()), int(d.u32())
	}
	if v6 {
		nli = int(d.u32())
	}
	nl, np, ne, nde, ni, ndi := int(d.u32()), int(d.u32()), int(d.u32()), int(d.u32()), int(d.u32()), int(d.u32())
	if d.bad || ed.SlotNs < int64(time.Millisecond) || ed.Slots < 1 || ed.Slots > MaxSlots {
		return nil, fmt.Errorf("slot length %d ns or %d slots out of range", ed.SlotNs, ed.Slots)
	}
	// Each section entry takes at least 2 bytes: counts beyond the data are damage, caught before
	// they size an allocation.
	if rest := d.left(); nl > ed.Slots || nl > rest || nn > rest || npa > rest || nli > rest || np > rest || ne > rest || nde > rest || ni > rest || ndi > rest {
		return nil, fmt.Errorf("section counts %d/%d/%d/%d/%d/%d/%d/%d exceed the data", nn, npa, nl, np, ne, nde, ni, ndi)
	}
	// Names are numbered in the order they are first named, each once, all named: anything else
	// is not what appendEdit writes.
	names := make([]string, nn)
	distinct := make(map[string]bool, nn)
	for i := range names {
		names[i] = d.name()
		if distinct[names[i]] {
			return nil, fmt.Errorf("name %q twice in checkpoint edit", names[i])
		}
		distinct[names[i]] = true
	}
	named := 0
	name := func() string {
		i := int(d.u32())
		if i > named || i >= len(names) {
			d.bad = true
			return ""
		}
		if i == named {
			named++
		}
		return names[i]
	}
	if v5 {
		ed.Paused = make([]string, npa)
		for i := range ed.Paused {
			ed.Paused[i] = name()
		}
	}
	if v6 {
		ed.Limits = make([]Limit, nli) // not nil: they replace the edit before's
		for i := range ed.Limits {
			l := Limit{Topic: name(), Rate: math.Float64frombits(d.u64()), Burst: d.u32(), Concurrency: d.u32()}
			if math.IsNaN(l.Rate) || l.Rate < 0 {
				return nil, fmt.Errorf("limit of rate %v in checkpoint edit", l.Rate)
			}
			ed.Limits[i] = l
		}
	}
	ed.Lists = make([]List, nl)
	for i := range ed.Lists {
		l := List{Index: int(d.u32()), Slot: d.i64(), Head: d.pos(), First: d.pos(), Due: d.i64()}
		if l.Index >= ed.Slots {
			return nil, fmt.Errorf("list index %d of %d", l.Index, ed.Slots)
		}
		if v5 {
			l.N = d.i64()
			nt := int(d.u32())
			if nt > d.left() {
				return nil, fmt.Errorf("list of %d topics exceeds the data", nt)
			}
			if nt > 0 {
				l.Topics = make([]ListTopic, nt)
				for j := range l.Topics {
					l.Topics[j] = ListTopic{Name: name(), N: d.i64(), Due: d.i64(), Last: d.i64()}
				}
			}
		}
		ed.Lists[i] = l
	}
	ed.Pins = make([]Pin, np)
	for i := range ed.Pins {
		ed.Pins[i] = Pin{Segment: d.u32(), Count: d.i64()}
	}
	ed.Entries = make([]Entry, ne)
	for i := range ed.Entries {
		e := Entry{Origin: d.pos(), Pos: d.pos(), DeliverAt: d.i64(), Attempt: d.u32()}
		if v5 {
			e.Failure, e.FailedAt = d.u8(), d.i64()
		}
		e.Topic = d.name()
		if v6 {
			e.Reason = d.name()
		}
		ed.Entries[i] = e
	}
	ed.RemovedEntries = make([]wal.Pos, nde)
	for i := range ed.RemovedEntries {
		ed.RemovedEntries[i] = d.pos()
	}
	ed.IDs = make([]ID, ni)
	for i := range ed.IDs {
		ed.IDs[i] = ID{Slot: d.i64(), Pos: d.pos()}
		ed.IDs[i].ID = d.name()
	}
	ed.RemovedIDs = make([]string, ndi)
	for i := range ed.RemovedIDs {
		ed.RemovedIDs[i] = d.name()
	}
	if d.bad {
		return nil, fmt.Errorf("checkpoint edit cut short, or a name out of order")
	}
	if d.left() != 0 {
		return nil, fmt.Errorf("%d stray bytes in checkpoint edit", d.left())
	}
	if named != len(names) {
		return nil, fmt.Errorf("%d of %d names unused in checkpoint edit", len(names)-named, len(names))
	}
	return ed, nil
}
