package tock

import (
	"fmt"
	"math/bits"
)

// check walks every shard of w and verifies the wheel's invariants: each occupancy bit matches a
// non-empty slot list, lists are well linked, every pending node sits in the slot its deadline
// calls for relative to cur, counts agree, and the free list holds only free nodes.
func (w *Wheel) check() error {
	for si, s := range w.shards {
		s.mu.Lock()
		err := s.checkLocked()
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("shard %d: %w", si, err)
		}
	}
	return nil
}

func (s *shard) checkLocked() error {
	inLists := 0
	for lvl := 0; lvl < maxLevels; lvl++ {
		if lvl >= s.levels && s.occupied[lvl] != 0 {
			return fmt.Errorf("level %d beyond %d levels is occupied", lvl, s.levels)
		}
		for slot := 0; slot < slotCount; slot++ {
			head := s.heads[lvl][slot]
			bit := s.occupied[lvl]&(1<<slot) != 0
			if bit != (head != 0) {
				return fmt.Errorf("level %d slot %d: bit %v, head %d", lvl, slot, bit, head)
			}
			prev := uint32(0)
			for i := head; i != 0; i = s.node(i).next {
				n := s.node(i)
				inLists++
				if inLists > int(s.used) {
					return fmt.Errorf("level %d slot %d: list cycles", lvl, slot)
				}
				if n.prev != prev {
					return fmt.Errorf("node %d: prev %d, want %d", i, n.prev, prev)
				}
				if n.status() != statePending {
					return fmt.Errorf("node %d in a slot has state %d", i, n.status())
				}
				if got := int(n.state >> listShift); got != lvl*slotCount+slot {
					return fmt.Errorf("node %d records list %d, is in %d", i, got, lvl*slotCount+slot)
				}
				if n.at < s.cur {
					return fmt.Errorf("node %d due at tick %d, before cur %d", i, n.at, s.cur)
				}
				wantLvl := (bits.Len64(uint64(n.at^s.cur)) - 1) / slotBits
				wantSlot := int(n.at>>(uint(wantLvl)*slotBits)) & slotMask
				if wantLvl != lvl || wantSlot != slot {
					// A slot that starts exactly at cur may still await its cascade.
					start := n.at >> (uint(lvl) * slotBits) << (uint(lvl) * slotBits)
					if lvl == 0 || start != s.cur {
						return fmt.Errorf("node %d due %d (cur %d) is at level %d slot %d, want %d/%d",
							i, n.at, s.cur, lvl, slot, wantLvl, wantSlot)
					}
				}
				prev = i
			}
		}
	}
	firing := 0
	for _, p := range s.periodic {
		if st := s.node(p.i).status(); st == stateFiring {
			firing++
		}
	}
	if !s.stopped && inLists+firing != s.pending {
		return fmt.Errorf("pending %d, but %d in slots and %d periodic firing", s.pending, inLists, firing)
	}
	free := 0
	for i := s.free; i != 0; i = s.node(i).next {
		free++
		if free > int(s.used) {
			return fmt.Errorf("free list cycles")
		}
		if st := s.node(i).status(); st != stateFree {
			return fmt.Errorf("free node %d has state %d", i, st)
		}
	}
	return nil
}
