package delayq

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// The checkpoint file: its edits are appended and synced; when they outgrow the state they
// describe, the file is rewritten as one full edit, merged from the file itself, without the
// queue's lock: to a temporary file that is synced, renamed over the old one, and made durable by
// syncing the directory. Recovery applies the edits in order (applyEdit). A last edit cut short (a
// crash while appending it) is ignored: the one before describes a state the log still holds all
// of, since retention follows an edit only once it is durable. Any other damage makes the
// checkpoint unusable, and the state is rebuilt from the log.
//
// Versions 1 to 3 were one snapshot per file, version 4 lacked what version 5 added (see format's
// versions.go). Open reads them, reads every list once to learn what they lack (the counts of each
// list by topic; for versions up to 3 the first record of each list and the record of each chosen
// ID, and for versions 1 and 2 the due counts), and writes the state in the current version.

const checkpointName = "checkpoint"

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
	// limits are the topics' delivery limits (version 6 on).
	limits []format.Limit
	hasDue bool // lists carry their due counts (not in version 1)
	// end is where the last valid edit ends, and full the size of the first (version 4 on).
	end, full int64
	pins      pins
	entries   map[wal.Pos]ckEntry // by origin
	ids       map[string]idLoc
	// damage holds the damaged places of the log accounted for (version 9 on; see damage.go).
	damage []wal.Pos
	// schedules by name, and their counts (version 10 on).
	schedules       map[string]format.Schedule
	fires, misfires uint64
}

// A ckListTopic is a listTopic as the checkpoint keeps it.
type ckListTopic struct {
	name         string
	n, due, last int64
	taken        bool
}

// A ckEntry is a message in memory, as the checkpoint keeps it.
type ckEntry struct {
	pos, origin wal.Pos
	deliverAt   int64
	attempt     uint32
	failure     uint8
	failedAt    int64
	topic       string // set only when it differs from the record's (a dead letter)
	reason      string // of the failure, when its Nack gave one
}

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

// decodeCheckpoint decodes a checkpoint file's contents, of any version, applying its edits in
// order. Damage gives a *wal.CorruptError naming path and the offset where decoding failed.
func decodeCheckpoint(path string, b []byte) (*checkpoint, error) {
	var ck *checkpoint
	cf, err := format.DecodeCheckpoint(b, func(ed *format.Edit) error {
		var err error
		ck, err = ck.applyEdit(ed)
		return err
	})
	var fe *format.Error
	if errors.As(err, &fe) {
		return nil, wal.NewCorruptError(path, fe.Offset, fe.Reason)
	}
	if err != nil {
		return nil, err
	}
	if cf.Snapshot != nil {
		return fromSnapshot(cf.Snapshot), nil
	}
	ck.version, ck.end, ck.full = cf.Version, cf.End, cf.FirstEnd
	return ck, nil
}

// applyEdit applies ed to ck (nil before the first edit, which must be full) and returns the
// result. Edits of version 4 hold no paused topics (nil) and no counts by topic.
func (ck *checkpoint) applyEdit(ed *format.Edit) (*checkpoint, error) {
	switch {
	case ed.Full:
		ck = &checkpoint{lists: make([]slotList, ed.Slots), hasDue: true, topics: make(map[int][]ckListTopic),
			entries: make(map[wal.Pos]ckEntry, len(ed.Entries)), ids: make(map[string]idLoc, len(ed.IDs)),
			schedules: make(map[string]format.Schedule, len(ed.Schedules))}
	case ck == nil:
		return nil, errors.New("first checkpoint edit is not full")
	case ck.slotNs != ed.SlotNs || ck.slots != ed.Slots:
		return nil, errors.New("checkpoint edit changes the wheel's shape")
	}
	ck.replay, ck.slotNs, ck.slots, ck.loaded, ck.pending = ed.Replay, ed.SlotNs, ed.Slots, ed.Loaded, ed.Pending
	if ed.Paused != nil {
		ck.paused = ed.Paused
	}
	if ed.Limits != nil {
		ck.limits = ed.Limits
	}
	for _, l := range ed.Lists {
		delete(ck.topics, l.Index)
		if len(l.Topics) > 0 {
			lts := make([]ckListTopic, len(l.Topics))
			for j, lt := range l.Topics {
				lts[j] = ckListTopic{name: lt.Name, n: lt.N, due: lt.Due, last: lt.Last, taken: lt.Taken}
			}
			ck.topics[l.Index] = lts
		}
		ck.lists[l.Index] = slotList{slot: l.Slot, head: l.Head, first: l.First, due: l.Due, n: l.N}
	}
	ck.damage = ed.Damage
	ck.pins = make(pins, len(ed.Pins))
	for _, p := range ed.Pins {
		ck.pins[p.Segment] = p.Count
	}
	// Removals first: an edit may remove a message and hold another with the same origin, added
	// since (a copy of it).
	for _, origin := range ed.RemovedEntries {
		delete(ck.entries, origin)
	}
	for _, e := range ed.Entries {
		ck.entries[e.Origin] = fromFormatEntry(e)
	}
	for _, id := range ed.IDs {
		ck.ids[id.ID] = idLoc{slot: id.Slot, pos: id.Pos}
	}
	for _, id := range ed.RemovedIDs {
		delete(ck.ids, id)
	}
	for _, name := range ed.RemovedSchedules {
		delete(ck.schedules, name)
	}
	for _, s := range ed.Schedules {
		ck.schedules[s.Name] = s
	}
	ck.fires, ck.misfires = ed.Fires, ed.Misfires
	return ck, nil
}

func fromFormatEntry(e format.Entry) ckEntry {
	return ckEntry{pos: e.Pos, origin: e.Origin, deliverAt: e.DeliverAt, attempt: e.Attempt, failure: e.Failure, failedAt: e.FailedAt, topic: e.Topic, reason: e.Reason}
}

// fromSnapshot returns the state a checkpoint of versions 1 to 3 held.
func fromSnapshot(s *format.Snapshot) *checkpoint {
	ck := &checkpoint{version: s.Version, replay: s.Replay, slotNs: s.SlotNs, slots: s.Slots, loaded: s.Loaded, pending: s.Pending,
		hasDue: s.Version >= 2, lists: make([]slotList, s.Slots), pins: make(pins, len(s.Pins)),
		entries: make(map[wal.Pos]ckEntry, len(s.Entries)), ids: make(map[string]idLoc, len(s.IDs))}
	n := int64(s.Slots)
	for _, h := range s.Heads {
		ck.lists[((h.Slot%n)+n)%n] = slotList{slot: h.Slot, head: h.Head, due: h.Due}
	}
	for _, p := range s.Pins {
		ck.pins[p.Segment] = p.Count
	}
	for _, e := range s.Entries {
		ck.entries[e.Origin] = fromFormatEntry(e)
	}
	for _, id := range s.IDs {
		ck.ids[id.ID] = idLoc{slot: id.Slot}
	}
	return ck
}

// fullEdit returns ck as one full edit.
func (ck *checkpoint) fullEdit() *format.Edit {
	ed := &edit{full: true, replay: ck.replay, slotNs: ck.slotNs, slots: ck.slots, loaded: ck.loaded, pending: ck.pending, pins: ck.pins,
		paused: ck.paused, limits: ck.limits, damage: ck.damage,
		entries: make([]entryOp, 0, len(ck.entries)), ids: make([]idOp, 0, len(ck.ids))}
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
	ed.fires, ed.misfires = ck.fires, ck.misfires
	for _, name := range slices.Sorted(maps.Keys(ck.schedules)) {
		ed.schedules = append(ed.schedules, ck.schedules[name])
	}
	return ed.toFormat()
}

// A checkpointFile is the checkpoint file being appended to, owned by whoever holds ckptMu.
type checkpointFile struct {
	f        *os.File // nil until the first full edit is written
	size     int64    // bytes in the file
	fullSize int64    // bytes of its first (full) edit
	pins     pins     // the pins of the last edit written
	edits    int      // edits written since Open, for tests and benchmarks
	// added is the size of the last edit appended when all it did was add entries and IDs (see
	// edit.onlyAdds), else 0.
	added int64
	// drainFrom is the size of the file before the run of edits that only removed (see
	// edit.onlyRemoves) that the last edit appended ends, or 0 when the last edit did more.
	drainFrom int64
}

// open makes the checkpoint file of dir, which ck was decoded from, the one appended to: from the
// end of its last valid edit, so that one cut short is written over.
func (c *checkpointFile) open(dir string, ck *checkpoint) error {
	f, err := os.OpenFile(filepath.Join(dir, checkpointName), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
	c.f, c.size, c.fullSize, c.pins = f, ck.end, ck.full, ck.pins.clone()
	return nil
}

// rewriteAt is how large the edits may grow, beyond the full state they describe, before the file
// is rewritten as one full edit: the rewrite costs about what the edits since the last did.
func (c *checkpointFile) rewriteAt() int64 { return 2*c.fullSize + 1<<20 }

// needsRewrite reports whether the file has grown past rewriteAt, not counting the last edit if
// all it did was add: such an edit's bytes are all state, which a rewrite would write again whole.
// A slot of 100,000 messages loaded between two checkpoints is such an edit, of megabytes; counted,
// it made the checkpoint after each loaded burst decode the file and write it all again, just
// before (or, on a busy machine, during) the burst's delivery. The edit after it, which removes
// what the burst's acks removed, brings the file back to its bound: growth past the bound is at
// most one edit.
//
// Nor is the file rewritten while the edits only remove (a burst being acked: see
// edit.onlyRemoves), unless empty says that nothing is left to write, or the run of them has
// doubled the file: the state is shrinking, and a rewrite in the middle of the acks decodes the
// file and writes again, with a sync of megabytes beside the log's, what the next edit removes.
// At 100,000 messages due in one second, the checkpoint half a second in found the file over its
// bound, as the load's edit counted again, and rewrote it during the delivery. Such a run ends:
// each of its edits removes entries or IDs that the file's state holds, fewer at each step, and
// the file is rewritten once the run has doubled it.
func (c *checkpointFile) needsRewrite(empty bool) bool {
	if c.size-c.added <= c.rewriteAt() {
		return false
	}
	return c.drainFrom == 0 || empty || c.size > 2*c.drainFrom
}

// writeFull replaces dir's checkpoint with a new file holding the full edit ed, atomically and
// durably, and makes it the file appended to.
func (c *checkpointFile) writeFull(dir string, ed *format.Edit) error {
	b, err := format.AppendEdit(format.AppendCheckpointHeader(nil), ed)
	if err != nil {
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
	path := filepath.Join(dir, checkpointName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
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
	c.f, c.size, c.fullSize, c.pins, c.added, c.drainFrom = f, int64(len(b)), int64(len(b)), pinsOf(ed), 0, 0
	c.edits++
	return nil
}

// appendEdit appends ed to the file and syncs it; onlyAdds says that all ed does is add, onlyRemoves
// that all it does is remove (see needsRewrite).
func (c *checkpointFile) appendEdit(ed *format.Edit, onlyAdds, onlyRemoves bool) error {
	b, err := format.AppendEdit(nil, ed)
	if err != nil {
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
	if _, err := c.f.WriteAt(b, c.size); err != nil {
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
	if err := c.f.Sync(); err != nil {
		return fmt.Errorf("delayq: checkpoint: %w", err)
	}
	switch {
	case !onlyRemoves:
		c.drainFrom = 0
	case c.drainFrom == 0:
		c.drainFrom = c.size
	}
	c.size += int64(len(b))
	c.added = 0
	if onlyAdds {
		c.added = int64(len(b))
	}
	c.pins = pinsOf(ed)
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

// pinsOf returns the pins of ed.
func pinsOf(ed *format.Edit) pins {
	p := make(pins, len(ed.Pins))
	for _, pin := range ed.Pins {
		p[pin.Segment] = pin.Count
	}
	return p
}
