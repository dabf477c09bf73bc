package tock

import "math/bits"

// The hierarchy. Each shard keeps its pending timers in levels of slotCount slots; a slot of level
// l spans slotCount^l ticks, so level 0 slots are single ticks. A deadline tick t is placed by
// comparing it with cur, the next tick the shard will process: the level is the highest base-64
// digit in which t and cur differ, and the slot is t's digit at that level. Every timer in a slot
// therefore shares all higher digits with cur, and the slot's digit is at or after cur's.
//
// When cur reaches the first tick of a slot above level 0, that slot is cascaded: each of its
// timers is placed again and lands on a lower level, because cur now shares one more digit with it.
// Level 0 slots fire. No timer is ever placed in a slot that starts after its deadline, so nothing
// fires early, however far away it was scheduled.
//
// One bit per slot marks the non-empty slots of each level, so the next tick with work is found with
// a few bit operations per level.

const (
	slotBits  = 6
	slotCount = 1 << slotBits
	slotMask  = slotCount - 1
	maxLevels = 11 // 66 bits of ticks: any int64 deadline at any tick
)

// levelsFor returns how many levels cover every deadline tick up to maxTick.
func levelsFor(maxTick int64) int {
	return (bits.Len64(uint64(maxTick)) + slotBits - 1) / slotBits
}

// listLocked returns the slot list, level*slotCount+slot, in which a timer due at tick at belongs.
func (s *shard) listLocked(at int64) uint32 {
	lvl := (bits.Len64(uint64(at^s.cur)) - 1) / slotBits
	return uint32(lvl*slotCount + int(at>>(uint(lvl)*slotBits))&slotMask)
}

// linkLocked puts node i in the slot its deadline calls for and marks it pending.
func (s *shard) linkLocked(i uint32, n *node) {
	if n.at < s.cur {
		n.at = s.cur
	}
	list := s.listLocked(n.at)
	lvl, slot := list/slotCount, list%slotCount
	head := &s.heads[lvl][slot]
	n.prev = 0
	n.next = *head
	if *head != 0 {
		s.node(*head).prev = i
	}
	*head = i
	s.occupied[lvl] |= 1 << slot
	n.state = list<<listShift | n.state&flagsKept | statePending
}

// moveLocked changes the deadline of the pending node i to tick at. A node whose slot stays the
// same, as when an idle timeout is pushed back by less than its slot's span, keeps its place.
func (s *shard) moveLocked(i uint32, n *node, at int64) {
	if at >= s.cur && s.listLocked(at) == n.state>>listShift {
		n.at = at
		return
	}
	s.unlinkLocked(i, n)
	n.at = at
	s.linkLocked(i, n)
}

// unlinkLocked takes the pending node i out of its slot.
func (s *shard) unlinkLocked(i uint32, n *node) {
	list := n.state >> listShift
	lvl, slot := list/slotCount, list%slotCount
	if n.prev != 0 {
		s.node(n.prev).next = n.next
	} else {
		s.heads[lvl][slot] = n.next
		if n.next == 0 {
			s.occupied[lvl] &^= 1 << slot
		}
	}
	if n.next != 0 {
		s.node(n.next).prev = n.prev
	}
	n.next, n.prev = 0, 0
}

// nextLocked returns the next tick at which the shard has work: a level 0 slot to fire or a
// higher slot to cascade. It returns false when the shard holds no timers.
//
// Each level's first occupied slot is a candidate, and the earliest wins. Usually that is the
// lowest occupied level, but not always: when the driver moves cur ahead over idle ticks onto the
// first tick of a higher slot that still awaits its cascade, timers scheduled next land in level 0
// of the same span, and the cascade at cur must come first.
func (s *shard) nextLocked() (int64, bool) {
	next, ok := int64(0), false
	for lvl := 0; lvl < s.levels; lvl++ {
		occ := s.occupied[lvl]
		if occ == 0 {
			continue
		}
		shift := uint(lvl) * slotBits
		slot := int64(bits.TrailingZeros64(occ))
		t := max(s.cur>>(shift+slotBits)<<(shift+slotBits)|slot<<shift, s.cur)
		if !ok || t < next {
			next, ok = t, true
		}
	}
	return next, ok
}

// detachLocked empties slot (lvl, slot) and returns the head of its former list.
func (s *shard) detachLocked(lvl, slot int) uint32 {
	i := s.heads[lvl][slot]
	s.heads[lvl][slot] = 0
	s.occupied[lvl] &^= 1 << slot
	return i
}

// advanceLocked processes every tick up to and including now: it cascades the slots that start at
// each tick with work and fires the timers due then, appending their callbacks to s.batch.
func (s *shard) advanceLocked(now int64) {
	for {
		t, ok := s.nextLocked()
		if !ok || t > now {
			break
		}
		s.cur = t
		// Cascade from the top down: a slot of level l may refill the slot of level l-1 that
		// starts at the same tick, which is then cascaded in turn.
		for lvl := s.levels - 1; lvl >= 1; lvl-- {
			slot := int(t>>(uint(lvl)*slotBits)) & slotMask
			if s.occupied[lvl]&(1<<slot) == 0 {
				continue
			}
			for i := s.detachLocked(lvl, slot); i != 0; {
				n := s.node(i)
				next := n.next
				s.linkLocked(i, n)
				i = next
			}
		}
		if slot := int(t) & slotMask; s.occupied[0]&(1<<slot) != 0 {
			for i := s.detachLocked(0, slot); i != 0; {
				n := s.node(i)
				next := n.next
				s.fireLocked(i, n)
				i = next
			}
		}
		s.cur = t + 1
	}
	if s.cur <= now {
		s.cur = now + 1
	}
}

// firstSlot returns the lowest occupied slot in a non-zero occupancy word.
func firstSlot(occ uint64) int { return bits.TrailingZeros64(occ) }
