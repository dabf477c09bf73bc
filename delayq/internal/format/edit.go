package format

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// # Checkpoint edits
//
// A checkpoint file is a log of edits (see checkpoint.go): each holds the whole state (full) or
// what changed since the edit before. The body of an edit, version 8:
//
//	0  1  flags: bit 0 full (the state is this edit alone; the first edit of a file is full)
//	1  8  replay position: the log position recovery replays from
//	9  8  slot length in nanoseconds (fixed when the queue is created)
//	17 4  slots in the disk wheel (horizon / slot, fixed when the queue is created)
//	21 8  loaded: the newest slot moved to memory
//	29 8  messages in the disk wheel, not counting cancelled ones
//	37    sections, in the order of their tags, each at most once and left out when empty:
//	      tag uint8, length uint32 (of the count and the items), count uint32, the items
//
//	tag  section          item
//	1    names            name: the topics the other sections name, by their index here (names
//	                      are the edit's own), numbered in the order they are first named
//	2    paused           name uint32. All of them: an edit without the section has none
//	3    limits           name uint32, rate float64 bits, burst, concurrency uint32: the topics'
//	                      delivery limits. All of them
//	4    lists            index uint32, slot int64, head, first uint64, due, n int64, topics uint32,
//	                      then per topic: name uint32, n, due, last int64. The lists changed,
//	                      each whole (a list that is empty has head 0)
//	5    pins             segment uint32, count int64. All of them
//	6    entries          origin, pos uint64, deliverAt int64, attempt uint32, failure uint8,
//	                      failedAt int64, topic name (empty: the topic in the record at pos),
//	                      reason name (empty: none). The messages in memory added or changed
//	7    removed entries  origin uint64, applied before the entries held
//	8    IDs              slot int64, pos uint64, id name: the chosen IDs set
//	9    removed IDs      id name, applied after the IDs set
//	10   taken            index uint32, name uint32: of the lists of this edit, the topics a Cancel
//	                      or Purge in the list took messages of (version 8 on)
//	11   damage           position uint64: the damaged places of the log that were reported and
//	                      are accounted for (version 9 on). All of them
//	12   schedules        a schedule whole (see schedule.go): those set or changed (all of them
//	                      in a full edit) (version 10 on)
//	13   removed scheds   name: the schedules deleted (version 10 on)
//	14   schedule counts  one item: fires, misfires uint64 of all schedules ever. An edit without
//	                      it counts none (version 10 on)
//
// A section is new in the version sectionSince says; a file of an older version has none of it.
// Versions 7 to 9 had no schedules, version 8 no damage section, version 7 no taken section either.
// Versions 4 to 6 had no tags: their sections, in the order of the tags, were each counted by a
// uint32 after the fixed fields, empty or not. Version 6 had the sections of version 7. Version 5
// had no limits and no reason in entries. Version 4 had no names, paused or list topics, no n in
// lists and no failure in entries.

// An Edit is one edit of a checkpoint: a plain value, applied by the queue (see delayq's
// checkpointfile.go). In a full edit, Lists are every list that is not empty, and nothing is
// removed.
type Edit struct {
	Full    bool
	Replay  wal.Pos
	SlotNs  int64
	Slots   int
	Loaded  int64
	Pending int64
	// Paused lists every paused topic; nil only in an edit of version 4, which did not say.
	Paused []string
	// Limits lists every topic's delivery limit; nil only in an edit before version 6.
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
	// Damage holds every damaged place of the log that has been reported and is accounted for
	// (version 9 on): the position of its first byte, or the start of a segment gone.
	Damage []wal.Pos
	// Schedules are the schedules set or changed, each whole (all of them in a full edit);
	// RemovedSchedules the names of those deleted (version 10 on).
	Schedules        []Schedule
	RemovedSchedules []string
	// Fires and Misfires count those of every schedule since the queue was created (version 10
	// on; zero before).
	Fires, Misfires uint64
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
	// Taken says that a Cancel or Purge in the list took messages of the topic (version 8 on;
	// false before).
	Taken bool
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

// The sections of an edit, by tag (version 6). Frozen.
const (
	secNames byte = 1 + iota
	secPaused
	secLimits
	secLists
	secPins
	secEntries
	secRemovedEntries
	secIDs
	secRemovedIDs
	secTaken
	secDamage
	secSchedules
	secRemovedSchedules
	secScheduleCounts
)

// sectionSince says which version of the checkpoint each section was added in: a file of an older
// version holding it is malformed.
var sectionSince = [...]uint32{secNames: 5, secPaused: 5, secLimits: 6, secLists: 4, secPins: 4, secEntries: 4, secRemovedEntries: 4,
	secIDs: 4, secRemovedIDs: 4, secTaken: 8, secDamage: 9, secSchedules: 10, secRemovedSchedules: 10, secScheduleCounts: 10}

// countedSections are the sections of versions 4 to 6, in the order of their counts: those the
// version had, in the order of their tags.
func countedSections(version uint32) []byte {
	var tags []byte
	for tag := secNames; int(tag) < len(sectionSince); tag++ {
		if sectionSince[tag] <= version {
			tags = append(tags, tag)
		}
	}
	return tags
}

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
			return b, fmt.Errorf("%w: limit of rate %v in a checkpoint edit", errMalformed, l.Rate)
		}
		name(l.Topic)
	}
	for _, l := range ed.Lists {
		for _, lt := range l.Topics {
			name(lt.Name)
		}
	}
	for i := range ed.Schedules {
		if err := checkSchedule(&ed.Schedules[i]); err != nil {
			return b, err
		}
		name(ed.Schedules[i].Topic)
	}
	long := func(s string) bool { return len(s) > MaxName }
	for _, s := range names {
		if long(s) {
			return b, fmt.Errorf("%w: topic of %d bytes in a checkpoint edit", errMalformed, len(s))
		}
	}
	for _, en := range ed.Entries {
		if long(en.Topic) || long(en.Reason) {
			return b, fmt.Errorf("%w: topic or reason of %d bytes in a checkpoint edit", errMalformed, max(len(en.Topic), len(en.Reason)))
		}
	}
	for _, id := range ed.IDs {
		if long(id.ID) {
			return b, fmt.Errorf("%w: id of %d bytes in a checkpoint edit", errMalformed, len(id.ID))
		}
	}
	for _, id := range ed.RemovedIDs {
		if long(id) {
			return b, fmt.Errorf("%w: id of %d bytes in a checkpoint edit", errMalformed, len(id))
		}
	}
	for _, s := range ed.RemovedSchedules {
		if long(s) {
			return b, fmt.Errorf("%w: schedule name of %d bytes in a checkpoint edit", errMalformed, len(s))
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
	section := func(tag byte, n int, items func()) {
		if n == 0 {
			return
		}
		e.u8(tag)
		at := len(e.b)
		e.u32(0)
		e.u32(uint32(n))
		items()
		binary.LittleEndian.PutUint32(e.b[at:], uint32(len(e.b)-at-4))
	}
	section(secNames, len(names), func() {
		for _, s := range names {
			e.name(s)
		}
	})
	section(secPaused, len(ed.Paused), func() {
		for _, p := range ed.Paused {
			e.u32(index[p])
		}
	})
	section(secLimits, len(ed.Limits), func() {
		for _, l := range ed.Limits {
			e.u32(index[l.Topic])
			e.u64(math.Float64bits(l.Rate))
			e.u32(l.Burst)
			e.u32(l.Concurrency)
		}
	})
	section(secLists, len(ed.Lists), func() {
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
	})
	section(secPins, len(ed.Pins), func() {
		for _, p := range ed.Pins {
			e.u32(p.Segment)
			e.i64(p.Count)
		}
	})
	section(secEntries, len(ed.Entries), func() {
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
	})
	section(secRemovedEntries, len(ed.RemovedEntries), func() {
		for _, o := range ed.RemovedEntries {
			e.pos(o)
		}
	})
	section(secIDs, len(ed.IDs), func() {
		for _, id := range ed.IDs {
			e.i64(id.Slot)
			e.pos(id.Pos)
			e.name(id.ID)
		}
	})
	section(secRemovedIDs, len(ed.RemovedIDs), func() {
		for _, id := range ed.RemovedIDs {
			e.name(id)
		}
	})
	taken := 0
	for _, l := range ed.Lists {
		for _, lt := range l.Topics {
			if lt.Taken {
				taken++
			}
		}
	}
	section(secTaken, taken, func() {
		for _, l := range ed.Lists {
			for _, lt := range l.Topics {
				if lt.Taken {
					e.u32(uint32(l.Index))
					e.u32(index[lt.Name])
				}
			}
		}
	})
	section(secDamage, len(ed.Damage), func() {
		for _, p := range ed.Damage {
			e.pos(p)
		}
	})
	section(secSchedules, len(ed.Schedules), func() {
		for i := range ed.Schedules {
			e.schedule(&ed.Schedules[i], index[ed.Schedules[i].Topic])
		}
	})
	section(secRemovedSchedules, len(ed.RemovedSchedules), func() {
		for _, s := range ed.RemovedSchedules {
			e.name(s)
		}
	})
	counts := 0
	if ed.Fires != 0 || ed.Misfires != 0 {
		counts = 1
	}
	section(secScheduleCounts, counts, func() {
		e.u64(ed.Fires)
		e.u64(ed.Misfires)
	})
	return e.b, nil
}

// decodeEdit decodes the body of an edit of a file of the given version (4 to 8).
func decodeEdit(body []byte, version uint32) (*Edit, error) {
	d := &editDecoder{decoder: decoder{b: body, keep: true}, version: version}
	ed := &d.ed
	flags := d.u8()
	if flags&^1 != 0 {
		return nil, fmt.Errorf("unknown flags %#x in checkpoint edit", flags)
	}
	ed.Full = flags&1 != 0
	ed.Replay, ed.SlotNs, ed.Slots = d.pos(), d.i64(), int(d.u32())
	ed.Loaded, ed.Pending = d.i64(), d.i64()
	if d.bad || ed.SlotNs < int64(time.Millisecond) || ed.Slots < 1 || ed.Slots > MaxSlots {
		return nil, fmt.Errorf("slot length %d ns or %d slots out of range", ed.SlotNs, ed.Slots)
	}
	if version >= 5 {
		ed.Paused = []string{} // every edit says which are paused, none or some
	}
	if version >= 6 {
		ed.Limits = []Limit{} // and which topics have limits
	}
	var err error
	if version <= 6 {
		err = d.counted()
	} else {
		err = d.tagged()
	}
	switch {
	case err != nil:
		return nil, err
	case d.bad:
		return nil, fmt.Errorf("checkpoint edit cut short")
	case d.left() != 0:
		return nil, fmt.Errorf("%d stray bytes in checkpoint edit", d.left())
	case d.named != len(d.names):
		return nil, fmt.Errorf("%d of %d names unused in checkpoint edit", len(d.names)-d.named, len(d.names))
	}
	return ed, nil
}

// An editDecoder decodes the sections of one edit.
type editDecoder struct {
	decoder
	version uint32
	ed      Edit
	names   []string
	// named counts the names met so far: names are numbered in the order they are first
	// named, each once, and all are named, which is how appendEdit writes them.
	named int
}

// counted decodes the sections of versions 4 to 6, whose counts follow the fixed fields.
func (d *editDecoder) counted() error {
	tags := countedSections(d.version)
	counts := make([]int, len(tags))
	for i := range counts {
		counts[i] = int(d.u32())
	}
	if d.bad {
		return fmt.Errorf("checkpoint edit cut short")
	}
	for i, tag := range tags {
		if err := d.section(tag, counts[i]); err != nil {
			return err
		}
	}
	return nil
}

// tagged decodes the sections of versions 7 on.
func (d *editDecoder) tagged() error {
	var last byte
	for d.left() > 0 {
		tag, length := d.u8(), int(d.u32())
		if d.bad || tag <= last || int(tag) >= len(sectionSince) || sectionSince[tag] > d.version || length < 4 || length > d.left() {
			return fmt.Errorf("section %d of %d bytes after section %d", tag, length, last)
		}
		last = tag
		end := d.off + length
		n := int(d.u32())
		if n == 0 {
			return fmt.Errorf("section %d is empty", tag)
		}
		if err := d.section(tag, n); err != nil {
			return err
		}
		if d.bad || d.off != end {
			return fmt.Errorf("section %d of %d bytes holds %d", tag, length, length-(end-d.off))
		}
	}
	return nil
}

// topic reads a name's index and returns the name.
func (d *editDecoder) topic() string {
	i := int(d.u32())
	if i > d.named || i >= len(d.names) {
		d.bad = true
		return ""
	}
	if i == d.named {
		d.named++
	}
	return d.names[i]
}

// section decodes the n items of the section tag.
func (d *editDecoder) section(tag byte, n int) error {
	// Each item takes at least 2 bytes: a count beyond the data is damage, caught before it
	// sizes an allocation.
	ed := &d.ed
	if n > d.left() || tag == secLists && n > ed.Slots {
		return fmt.Errorf("%d items in section %d exceed the data", n, tag)
	}
	v5, v6 := d.version >= 5, d.version >= 6
	switch tag {
	case secNames:
		d.names = make([]string, n)
		distinct := make(map[string]bool, n)
		for i := range d.names {
			d.names[i] = d.name()
			if distinct[d.names[i]] {
				return fmt.Errorf("name %q twice in checkpoint edit", d.names[i])
			}
			distinct[d.names[i]] = true
		}
	case secPaused:
		ed.Paused = make([]string, n)
		for i := range ed.Paused {
			ed.Paused[i] = d.topic()
		}
	case secLimits:
		ed.Limits = make([]Limit, n)
		for i := range ed.Limits {
			l := Limit{Topic: d.topic(), Rate: math.Float64frombits(d.u64()), Burst: d.u32(), Concurrency: d.u32()}
			if math.IsNaN(l.Rate) || l.Rate < 0 {
				return fmt.Errorf("limit of rate %v in checkpoint edit", l.Rate)
			}
			ed.Limits[i] = l
		}
	case secLists:
		ed.Lists = make([]List, n)
		for i := range ed.Lists {
			l := List{Index: int(d.u32()), Slot: d.i64(), Head: d.pos(), First: d.pos(), Due: d.i64()}
			if l.Index >= ed.Slots {
				return fmt.Errorf("list index %d of %d", l.Index, ed.Slots)
			}
			if v5 {
				l.N = d.i64()
				nt := int(d.u32())
				if nt > d.left() {
					return fmt.Errorf("list of %d topics exceeds the data", nt)
				}
				if nt > 0 {
					l.Topics = make([]ListTopic, nt)
					for j := range l.Topics {
						l.Topics[j] = ListTopic{Name: d.topic(), N: d.i64(), Due: d.i64(), Last: d.i64()}
					}
				}
			}
			ed.Lists[i] = l
		}
	case secPins:
		ed.Pins = make([]Pin, n)
		for i := range ed.Pins {
			ed.Pins[i] = Pin{Segment: d.u32(), Count: d.i64()}
		}
	case secEntries:
		ed.Entries = make([]Entry, n)
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
	case secRemovedEntries:
		ed.RemovedEntries = make([]wal.Pos, n)
		for i := range ed.RemovedEntries {
			ed.RemovedEntries[i] = d.pos()
		}
	case secIDs:
		ed.IDs = make([]ID, n)
		for i := range ed.IDs {
			ed.IDs[i] = ID{Slot: d.i64(), Pos: d.pos()}
			ed.IDs[i].ID = d.name()
		}
	case secRemovedIDs:
		ed.RemovedIDs = make([]string, n)
		for i := range ed.RemovedIDs {
			ed.RemovedIDs[i] = d.name()
		}
	case secTaken:
		// Marks on the topics of the lists of the edit, in the order appendEdit writes them.
		i, j := 0, 0 // the list, and its topic, that the next mark may be on
		next := func() {
			if j++; j >= len(ed.Lists[i].Topics) {
				i, j = i+1, 0
			}
		}
		for range n {
			index, name := int(d.u32()), d.topic()
			for i < len(ed.Lists) && !(ed.Lists[i].Index == index && j < len(ed.Lists[i].Topics) && ed.Lists[i].Topics[j].Name == name) {
				next()
			}
			if i == len(ed.Lists) {
				return fmt.Errorf("taken mark of topic %q in list %d: no such topic of the edit's lists, or out of order", name, index)
			}
			ed.Lists[i].Topics[j].Taken = true
			next()
		}
	case secDamage:
		ed.Damage = make([]wal.Pos, n)
		for i := range ed.Damage {
			ed.Damage[i] = d.pos()
		}
	case secSchedules:
		ed.Schedules = make([]Schedule, n)
		for i := range ed.Schedules {
			s, err := d.schedule()
			if err != nil {
				return err
			}
			ed.Schedules[i] = s
		}
	case secRemovedSchedules:
		ed.RemovedSchedules = make([]string, n)
		for i := range ed.RemovedSchedules {
			ed.RemovedSchedules[i] = d.name()
		}
	case secScheduleCounts:
		if n != 1 {
			return fmt.Errorf("%d items in the schedule counts", n)
		}
		ed.Fires, ed.Misfires = d.u64(), d.u64()
		if ed.Fires == 0 && ed.Misfires == 0 {
			return fmt.Errorf("schedule counts of zero written")
		}
	}
	return nil
}
