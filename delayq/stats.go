package delayq

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/queue"
)

// A Snapshot is the queue's state and counters, richer than [Queue.Stats], for Go programs that
// embed the queue; [Queue.Metrics] exports the same for Prometheus. Counters count since Open;
// rates are their differences between two snapshots divided by the time between them.
type Snapshot struct {
	// Pending counts messages not yet due, in the disk wheel and waiting in memory (Stats calls
	// them scheduled). A message put twice by a roll that a crash interrupted counts twice until
	// its slot is loaded.
	Pending int64
	// Due counts messages due and waiting for Receive, and those due in slots of the disk wheel
	// that have passed but that the loader has not moved into memory yet (just after Open, or
	// while the loader catches up): Receive gets them once it has.
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
	Purged       uint64 // messages removed by Purge
	Requeued     uint64 // dead letters moved back by Requeue
	DeliveredNow uint64 // scheduled messages made due by DeliverNow
	Extended     uint64 // leases extended by Extend

	// Lateness summarises how long after their DeliverAt messages that came due for the first
	// time became available to Receive: its quantiles over the last 4096, its count and sum over
	// all since Open. It does not include time spent waiting for a consumer.
	Lateness queue.Lateness

	// CorruptRecords counts the damaged places (records, or the bytes between two valid records)
	// found in the log, the checkpoint and the receipt secret since Open, not counting those an
	// Open reported before (accounted for by a checkpoint since). Each costs the messages it held,
	// and is logged once with its file and offset; the queue goes on.
	CorruptRecords uint64

	// Segments and DiskBytes describe the log files: DiskBytes counts their records' bytes. The
	// file being written to is longer on disk, by the zeros written ahead of its records (up to
	// 1 MiB, cut when the queue closes).
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

// counters are the Stats counters, guarded by Queue.mu.
type counters struct {
	puts, delivered, acked, nacked, expired, deadLettered, cancelled uint64
	purged, requeued, deliveredNow, extended                         uint64
}

// latenessRing keeps the last samples of lateness, and the count and sum of all.
type latenessRing struct {
	samples [4096]time.Duration
	n       uint64 // samples taken, capped by len(samples) when read
	sum     time.Duration
}

func (r *latenessRing) add(d time.Duration) {
	r.samples[r.n%uint64(len(r.samples))] = d
	r.n++
	r.sum += d
}

func (r *latenessRing) summary() queue.Lateness {
	n := int(min(r.n, uint64(len(r.samples))))
	if n == 0 {
		return queue.Lateness{}
	}
	s := slices.Clone(r.samples[:n])
	slices.Sort(s)
	return queue.Lateness{P50: s[n/2], P99: s[(n*99)/100], Max: s[n-1], Count: r.n, Sum: r.sum}
}

// Stats reports the queue's counts for [queue.Engine]: Scheduled is [Snapshot].Pending. It reads
// nothing from disk. It fails only after Close (ErrClosed).
func (q *Queue) Stats(ctx context.Context) (queue.Stats, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-q.closed:
		return queue.Stats{}, errClosed
	default:
	}
	return queue.Stats{
		Scheduled: q.pendingLocked(),
		Due:       int64(q.mem.ready) + q.disk.duePassed(time.Now().UnixNano()),
		Leased:    int64(q.mem.leased),
		Lateness:  q.mem.lateness.summary(),
	}, nil
}

// pendingLocked counts the messages not yet due: those of the disk wheel, less those due in slots
// that have passed (see diskWheel.duePassed), and those waiting in memory.
func (q *Queue) pendingLocked() int64 {
	return q.disk.pending - q.disk.duePassed(time.Now().UnixNano()) + int64(len(q.mem.byOrigin)-q.mem.ready-q.mem.leased)
}

// Snapshot returns q's state and counters. It works after Close too.
func (q *Queue) Snapshot() Snapshot {
	segs, sizes := q.log.Segments()
	corrupt := q.corruptRecords()
	syncs := syncStats(q.log.SyncStats())
	q.mu.Lock()
	defer q.mu.Unlock()
	st := Snapshot{
		Pending:        q.pendingLocked(),
		Due:            q.mem.ready + int(q.disk.duePassed(time.Now().UnixNano())),
		Leased:         q.mem.leased,
		Puts:           q.stats.puts,
		Delivered:      q.stats.delivered,
		Acked:          q.stats.acked,
		Nacked:         q.stats.nacked,
		Expired:        q.stats.expired,
		DeadLettered:   q.stats.deadLettered,
		Cancelled:      q.stats.cancelled,
		Purged:         q.stats.purged,
		Requeued:       q.stats.requeued,
		DeliveredNow:   q.stats.deliveredNow,
		Extended:       q.stats.extended,
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

// Metrics reports what [Queue.Snapshot] does, for [queue.Reporter]: the server exports each as
// tock_ and its name. The counters count since Open; those named engine_ count what the queue did
// for every caller, where the server's own tock_puts_total and the like count its requests.
func (q *Queue) Metrics(ctx context.Context) ([]queue.Metric, error) {
	st := q.Snapshot()
	counter := func(name, help string, v uint64) queue.Metric {
		return queue.Metric{Name: name, Help: help, Kind: queue.Counter, Value: float64(v)}
	}
	gauge := func(name, help string, v float64) queue.Metric {
		return queue.Metric{Name: name, Help: help, Kind: queue.Gauge, Value: v}
	}
	fsync := queue.Metric{
		Name: "fsync_duration_seconds",
		Help: "Latency of the log's fsyncs: one per group commit of durable writes (none without sync), one per full log segment.",
		Kind: queue.Histogram, Count: st.Syncs.Count, Sum: seconds(st.Syncs.Total),
		Buckets: make([]queue.Bucket, len(st.Syncs.Buckets)),
	}
	for i, b := range st.Syncs.Buckets {
		fsync.Buckets[i] = queue.Bucket{UpperBound: seconds(b.UpperBound), Count: b.Count}
	}
	return []queue.Metric{
		fsync,
		counter("corrupt_records_total", "Damaged places found in the log, the checkpoint and the receipt secret since the queue opened, those reported by an earlier run left out; each cost the messages it held.", st.CorruptRecords),
		gauge("log_segments", "Segment files of the queue's log.", float64(st.Segments)),
		gauge("log_bytes", "Bytes of the queue's log files.", float64(st.DiskBytes)),
		counter("engine_puts_total", "Messages the engine stored, not counting retried puts of a waiting message.", st.Puts),
		counter("engine_deliveries_total", "Deliveries the engine made, redeliveries included.", st.Delivered),
		counter("engine_acks_total", "Leases the engine ended by an ack.", st.Acked),
		counter("engine_nacks_total", "Leases the engine ended by a nack.", st.Nacked),
		counter("engine_cancels_total", "Waiting messages the engine cancelled.", st.Cancelled),
		counter("lease_expiries_total", "Leases that ran out, each a failed delivery.", st.Expired),
		counter("dead_letters_total", "Messages moved to a dead-letter topic after their last failed delivery.", st.DeadLettered),
		counter("engine_purged_total", "Messages an operator's purge removed.", st.Purged),
		counter("engine_requeued_total", "Dead letters an operator's requeue moved back to their topic.", st.Requeued),
		counter("engine_delivered_now_total", "Scheduled messages an operator made due at once.", st.DeliveredNow),
		counter("engine_extends_total", "Leases the engine extended.", st.Extended),
	}, nil
}

// seconds converts d to seconds in one division, so that a whole number of microseconds comes out
// as the nearest float64 to its decimal value.
func seconds(d time.Duration) float64 { return float64(d) / float64(time.Second) }

// Ready reports whether the queue can serve: nil while it is open and working, an error matching
// ErrClosed after Close, and one matching ErrUnavailable after a failure stopped it.
func (q *Queue) Ready(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delayq: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.log.Err(); err != nil && q.err == nil {
		q.failLocked(err) // the writer failed and no call has met it yet
	}
	return q.usableLocked()
}
