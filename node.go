package tock

import "math"

// A node is one timer's entry in a shard. Nodes live in chunks that never move and are recycled
// through a free list, so scheduling allocates nothing once a shard has grown to its peak, and a
// Timer handle can name its node by index. The generation tells a handle whether the node is still
// the timer it was given for: it is bumped each time the node is handed out again.
//
// A node is 32 bytes; with the 16-byte Timer handle that is 48 bytes per pending timer.
type node struct {
	f     func()
	at    int64  // deadline in ticks since the wheel's epoch; the timer fires when the wheel reaches it
	next  uint32 // next node in the slot list or the free list; 0 ends a list
	prev  uint32 // previous node in the slot list; 0 for the head
	gen   uint32
	state uint32 // nodeState in the low bits, flagPeriodic, and the slot list above listShift
}

// Node states. A one-shot timer goes free → pending → free; it is freed the moment it fires, so a
// Stop or Reset that comes after sees a state other than pending, or another generation.
// A periodic timer goes pending → firing (while its callback runs) → pending again, until Stop
// moves it to cancelled (if running) or free.
const (
	stateFree      = 0
	statePending   = 1
	stateFiring    = 2 // periodic only: its callback is running; the node stays allocated
	stateCancelled = 3 // periodic only: stopped while firing; freed when the callback returns

	stateMask    = 3
	flagPeriodic = 4
	flagHandOff  = 8                          // outlives the wheel: Wheel.Stop hands it to a runtime timer (see handoff.go)
	flagsKept    = flagPeriodic | flagHandOff // the flags a node keeps from scheduling until it is freed
	listShift    = 8                          // state>>listShift is level*slotCount+slot while pending
)

func (n *node) status() uint32 { return n.state & stateMask }

func (n *node) setStatus(s uint32) { n.state = n.state&^stateMask | s }

const (
	chunkShift = 10
	chunkSize  = 1 << chunkShift
	chunkMask  = chunkSize - 1
)

// slab holds a shard's nodes. Node 0 is never handed out so that 0 can end lists.
type slab struct {
	chunks []*[chunkSize]node
	free   uint32 // head of the free list, linked through next
	used   uint32 // nodes handed out at least once, node 0 included
}

func (s *slab) node(i uint32) *node {
	return &s.chunks[i>>chunkShift][i&chunkMask]
}

// alloc returns a node that is free to use, or false if the shard has no index left.
func (s *slab) alloc() (uint32, bool) {
	if i := s.free; i != 0 {
		n := s.node(i)
		s.free = n.next
		n.next = 0
		n.gen++
		return i, true
	}
	if s.used == math.MaxUint32 {
		return 0, false
	}
	if s.used&chunkMask == 0 {
		s.chunks = append(s.chunks, new([chunkSize]node))
		if s.used == 0 {
			s.used = 1
		}
	}
	i := s.used
	s.used++
	return i, true
}

// release puts node i back on the free list and drops its callback so the closure can be collected.
func (s *slab) release(i uint32, n *node) {
	n.f = nil
	n.state = stateFree
	n.prev = 0
	n.next = s.free
	s.free = i
}
