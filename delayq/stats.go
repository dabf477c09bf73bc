package delayq

import (
	"slices"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// Stats is a snapshot of a queue's state and counters, for metrics. Counters count since Open;
// rates are their differences between two snapshots divided by the time between them.
type Stats struct {
	// Pending counts messages not yet due, in the disk wheel and waiting in memory. A message put
	// twice by a roll that a crash interrupted counts twice until its slot is loaded.
	Pending int64
	// Due counts messages due and waiting for Receive.
	Due int
	// Leased counts messages delivered and not yet acked, nacked or expired.
	Leased int

	Puts         uint64 // messages put
	Delivered    uint64 // deliveries by Receive, redeliveries included
	Acked        uint64 // deliveries acked
	Nacked       uint64 // deliveries nacked
	Expired      uint64 // leases that ran out
	DeadLettered uint64 // messages moved to a dead-letter topic
	Cancelled    uint64 // successful Cancel calls

	// Lateness summarises, over the last 4096 messages that came due for the first time, how long
	// after their DeliverAt they became available to Receive. It does not include time spent
	// waiting for a consumer.
	Lateness Lateness

	// CorruptRecords counts the damaged places (records, or the bytes between two valid records)
	// found in the log and the checkpoint since Open. Each costs the messages it held, and is
	// logged with its file and offset; the queue goes on.
	CorruptRecords uint64

	// Segments and DiskBytes describe the log files.
	Segments  int
	DiskBytes int64

	// Syncs describes the log's fdatasync calls since Open.
	Syncs SyncStats
}

// SyncStats describes the fdatasync calls that made the log durable since Open: one per group
// commit (none with WithNoSync), one each time a segment fills, and one at Close. The syncs of
// checkpoints, of directories and of Open's repairs are not counted. Its shape is that of a
// Prometheus histogram, so a metrics exporter can pass it on as it is.
type SyncStats struct {
	Count uint64        // syncs
	Total time.Duration // time spent in them
	// Buckets is cumulative: Buckets[i].Count syncs took at most Buckets[i].UpperBound. The
	// bounds double from 50µs to about 3.3s; slower syncs are counted only in Count.
	Buckets []SyncBucket
}

// A SyncBucket is one bucket of SyncStats.Buckets.
type SyncBucket struct {
	UpperBound time.Duration
	Count      uint64
}

func syncStats(ws wal.SyncStats) SyncStats {
	st := SyncStats{Count: ws.Count, Total: ws.Total, Buckets: make([]SyncBucket, len(ws.Buckets))}
	var n uint64
	for i, c := range ws.Buckets {
		n += c
		st.Buckets[i] = SyncBucket{UpperBound: wal.SyncBound(i), Count: n}
	}
	return st
}

// Lateness is a summary of recent delivery lateness.
type Lateness struct {
	P50, P99, Max time.Duration
}

// counters are the Stats counters, guarded by Queue.mu.
type counters struct {
	puts, delivered, acked, nacked, expired, deadLettered, cancelled uint64
}

// latenessRing keeps the last samples of lateness.
type latenessRing struct {
	samples [4096]time.Duration
	n       int // samples taken, capped by len(samples) when read
}

func (r *latenessRing) add(d time.Duration) {
	r.samples[r.n%len(r.samples)] = d
	r.n++
}

func (r *latenessRing) summary() Lateness {
	n := min(r.n, len(r.samples))
	if n == 0 {
		return Lateness{}
	}
	s := slices.Clone(r.samples[:n])
	slices.Sort(s)
	return Lateness{P50: s[n/2], P99: s[(n*99)/100], Max: s[n-1]}
}

// Stats returns a snapshot of q's state and counters. It works after Close too.
func (q *Queue) Stats() Stats {
	segs, sizes := q.log.Segments()
	corrupt := q.corruptRecords()
	syncs := syncStats(q.log.SyncStats())
	q.mu.Lock()
	defer q.mu.Unlock()
	st := Stats{
		Pending:        q.disk.pending + int64(len(q.mem.byOrigin)-q.mem.ready-q.mem.leased),
		Due:            q.mem.ready,
		Leased:         q.mem.leased,
		Puts:           q.stats.puts,
		Delivered:      q.stats.delivered,
		Acked:          q.stats.acked,
		Nacked:         q.stats.nacked,
		Expired:        q.stats.expired,
		DeadLettered:   q.stats.deadLettered,
		Cancelled:      q.stats.cancelled,
		Lateness:       q.mem.lateness.summary(),
		Segments:       len(segs),
		CorruptRecords: corrupt,
		Syncs:          syncs,
	}
	for _, n := range sizes {
		st.DiskBytes += n
	}
	return st
}
