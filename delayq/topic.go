package delayq

import "time"

// A topicState is what the queue keeps of one topic: the ready list Receive leases from, the Receive
// calls waiting on it, its pause, and its counts, kept up to date as messages move so that
// Topics costs nothing per message. Its fields are guarded by Queue.mu.
//
// Entries in memory name two topics: e.t, the topic they are on, and e.home, the topic they were
// put on; the two differ for a dead letter, which is on its dead-letter topic and counts as dead
// on the topic it died on. Invariants, which checkState verifies in tests:
//   - ready counts the ready list; scheduled and leased count the entries on the topic waiting
//     in a bucket and leased (dead letters on a dead-letter topic included), and timed lists
//     those entries;
//   - dead holds the dead letters that died on the topic, in memory, and deadWaiting counts
//     those of them not leased;
//   - disk is the sum of the counts of the topic in the disk wheel's lists, and lists the number
//     of lists that count it;
//   - refs counts what points at the topic: entries (through e.t and e.home) and lists. A topic
//     with no refs, no waiting Receive, no pause and no limit is forgotten (its counters with it).
type topicState struct {
	name string

	// The ready list, oldest first, and the Receive calls waiting for it to fill. signal is
	// closed (and replaced) when entries become ready; nil when nobody waits.
	head, tail *entry
	ready      int
	signal     chan struct{}
	waiters    int

	timed       *entry // entries waiting in a bucket (scheduled or leased), linked by tprev/tnext
	scheduled   int
	leased      int
	dead        map[*entry]struct{}
	deadWaiting int
	disk        int64
	lists       int

	refs   int
	paused bool
	// limit is the topic's delivery limit, nil for none (see limit.go).
	limit *limiter
	// Counters since Open, or since the topic was last forgotten: since, when it was made.
	puts, deliveries, acks, nacks uint64
	since                         time.Time
}

// A topicSet holds the topics the queue knows: those with messages, paused ones, and those with
// Receive calls waiting.
type topicSet map[string]*topicState

// get returns the topic named name, making it if it is not known.
func (s topicSet) get(name string) *topicState {
	t := s[name]
	if t == nil {
		t = &topicState{name: name, since: time.Now()}
		s[name] = t
	}
	return t
}

// release forgets t when nothing needs it any more, so that topics named once (a Receive on an
// ever new name, say) keep no memory.
func (s topicSet) release(t *topicState) {
	if t.refs == 0 && t.waiters == 0 && !t.paused && t.limit == nil && s[t.name] == t {
		delete(s, t.name)
	}
}

// hold and drop count a reference to t.
func (t *topicState) hold() { t.refs++ }

func (s topicSet) drop(t *topicState) {
	t.refs--
	s.release(t)
}

// listed reports whether Topics lists t: it holds a message in some state, or is paused.
func (t *topicState) listed() bool {
	return t.paused || t.ready > 0 || t.scheduled > 0 || t.leased > 0 || t.deadWaiting > 0 || t.disk > 0
}
