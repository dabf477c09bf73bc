package delayq

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/internal/testlong"
)

// TestDiskUseOverADay simulates a day of puts and acks (in a synctest bubble: a day takes seconds)
// and compares the log's size with the live data, the records of messages still pending, every
// simulated hour. With one delay for all messages, a segment's messages are done about one delay
// after it was written, so disk use stays close to live data. With delays spread evenly up to an
// hour, a segment holds messages due over the whole hour: kept until the last is done, it would
// make disk use about twice the live data (plus the acks); compaction moves the messages still
// waiting out of segments less than half live, which brings it near 1.5 times.
func TestDiskUseOverADay(t *testing.T) {
	testlong.Skip(t) // a day of puts and acks runs minutes, more under load
	for _, c := range []struct {
		name     string
		delay    func(*rand.Rand) time.Duration
		maxRatio float64
	}{
		{"fixed delay 30m", func(*rand.Rand) time.Duration { return 30 * time.Minute }, 1.5},
		{"delays spread over 1h", func(r *rand.Rand) time.Duration { return time.Duration(r.Int64N(int64(time.Hour))) }, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				diskUseDay(t, dir, c.delay, c.maxRatio)
			})
		})
	}
}

func diskUseDay(t *testing.T, dir string, delay func(*rand.Rand) time.Duration, maxRatio float64) {
	ctx := context.Background()
	q := open(t, dir, WithSegmentSize(32<<10), WithCheckpointInterval(5*time.Minute))
	rng := rand.New(rand.NewPCG(1, 2))
	const perMinute = 30
	payload := make([]byte, 100)
	recordSize := int64(0)
	// The consumer acks everything as it comes due.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ds, err := q.Receive(ctx, "t", 256, time.Minute)
			if err != nil {
				return
			}
			rs := make([]string, len(ds))
			for i, d := range ds {
				rs[i] = d.Receipt
			}
			if err := q.Ack(ctx, rs...); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var worst float64
	for minute := 1; minute <= 24*60; minute++ {
		batch := make([]Message, perMinute)
		for i := range batch {
			batch[i] = Message{Topic: "t", Payload: payload, DeliverAt: time.Now().Add(delay(rng))}
		}
		if _, err := q.PutBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if recordSize == 0 {
			recordSize = int64(q.log.End().Offset()) // the first batch follows the segment header
			recordSize = (recordSize - 16) / perMinute
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if minute%60 == 0 {
			if err := q.checkpoint(); err != nil {
				t.Fatal(err)
			}
			st := q.Snapshot()
			live := (st.Pending + int64(st.Due) + int64(st.Leased)) * int64(recordSize)
			ratio := float64(st.DiskBytes) / float64(live)
			if minute > 120 {
				worst = max(worst, ratio)
			}
			if minute%360 == 0 {
				t.Logf("hour %2d: %6d pending, live %7d B, disk %7d B in %3d segments: %.2fx", minute/60, st.Pending, live, st.DiskBytes, st.Segments, ratio)
			}
		}
	}
	t.Logf("worst ratio of disk use to live data after the first two hours: %.2fx", worst)
	if worst > maxRatio {
		t.Errorf("disk use reached %.2fx the live data; want at most %.1fx", worst, maxRatio)
	}
	check(t, q)
	q.Close()
	<-done
}

// TestRetainKeepsWhatTheCheckpointNeeds acks a message between the moment a checkpoint is taken
// and the retention that follows it: the segment of the message is no longer pinned, but
// recovery from that checkpoint reads it, so it must stay until the next checkpoint.
func TestRetainKeepsWhatTheCheckpointNeeds(t *testing.T) {
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		opts := []Option{WithSegmentSize(4 << 10), WithCheckpointInterval(time.Hour)}
		dir := filepath.Join(base, "q")
		q := open(t, dir, opts...)
		if _, err := q.Put(ctx, Message{Topic: "t", Payload: make([]byte, 100)}); err != nil {
			t.Fatal(err)
		}
		ds, err := q.Receive(ctx, "t", 1, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		// Messages acked at once fill segments, so the first one holds nothing else needed.
		for q.log.End().Segment() < 3 {
			if _, err := q.Put(ctx, Message{Topic: "f", Payload: make([]byte, 100)}); err != nil {
				t.Fatal(err)
			}
			fs, err := q.Receive(ctx, "f", 1, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Ack(ctx, fs[0].Receipt); err != nil {
				t.Fatal(err)
			}
		}
		// What checkpoint does, with the ack between the checkpoint and retention.
		q.ckptMu.Lock()
		end, pins, err := q.writeCheckpoint()
		q.ckptMu.Unlock()
		if err != nil || pins == nil {
			t.Fatalf("writeCheckpoint: %v, %v", pins, err)
		}
		if err := q.Ack(ctx, ds[0].Receipt); err != nil {
			t.Fatal(err)
		}
		if err := q.retain(end, pins); err != nil {
			t.Fatal(err)
		}
		// A crash now: recovery starts from the checkpoint, which holds the message in memory.
		crashed := filepath.Join(base, "crashed")
		copyDir(t, dir, crashed)
		q2 := open(t, crashed, opts...)
		check(t, q2)
		if st := q2.Snapshot(); st.Pending+int64(st.Due) != 0 {
			t.Fatalf("after recovery: %+v", st)
		}
	})
}
