package delayq

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/queue"
)

// TestWriteFixture writes a testdata directory of the checkpoint version this code writes: queue
// directories as this version of delayq leaves them (every record kind including Pause and Purge,
// Cancels naming their topic, Updates with the cause and reason of the failure, a delivery limit,
// the receipt secret, messages with headers in memory, in the disk wheel, rolled, in a batch,
// dead-lettered, made due and put after the checkpoint), one copied while the queue was open and one after Close, for
// TestOpensOlderDirectories of every later version; and, in its subdirectory schedules, those of
// writeScheduleFixture, for TestOpensScheduleDirectories. It runs only when DELAYQ_WRITE_FIXTURE
// names the directory to write into (testdata/vN, N the version).
func TestWriteFixture(t *testing.T) {
	out := os.Getenv("DELAYQ_WRITE_FIXTURE")
	if out == "" {
		t.Skip("set DELAYQ_WRITE_FIXTURE to the directory to write into")
	}
	writeMessageFixture(t, out)
	writeScheduleFixture(t, filepath.Join(out, "schedules"))
}

// writeMessageFixture writes the directories of messages of TestWriteFixture into out.
func writeMessageFixture(t *testing.T, out string) {
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		opts := []Option{WithSlot(100 * time.Millisecond), WithHorizon(10 * time.Second), WithSegmentSize(4 << 10),
			WithCheckpointInterval(time.Hour), WithCompaction(0, 0), WithMaxAttempts(2), WithLogger(quiet)}
		dir := filepath.Join(base, "q")
		q := open(t, dir, opts...)
		t0 := time.Now()
		type want struct {
			topic   string
			due     time.Time
			payload []byte
			headers map[string]string
		}
		pending := map[string]want{}
		put := func(m Message) string {
			t.Helper()
			id, err := q.Put(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			due := m.DeliverAt
			if due.Before(time.Now()) {
				due = time.Now()
			}
			pending[id] = want{m.Topic, due, m.Payload, m.Headers}
			return id
		}
		cancel := func(id string) {
			t.Helper()
			if ok, err := q.Cancel(ctx, id); !ok || err != nil {
				t.Fatalf("Cancel(%s) = %v, %v", id, ok, err)
			}
			delete(pending, id)
		}
		// headers returns the headers of the ith message of a kind, every other one none.
		headers := func(i int) map[string]string {
			if i%2 == 1 {
				return nil
			}
			return map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", i+1, i+1), "n": fmt.Sprint(i), "empty": ""}
		}
		var near, wheel []string
		for i := range 6 {
			near = append(near, put(Message{Topic: "t", Payload: fmt.Appendf(nil, "near-%d", i), Headers: headers(i), DeliverAt: t0.Add(time.Duration(i) * 10 * time.Millisecond)}))
		}
		for i := range 12 {
			m := Message{Topic: "t", Payload: fmt.Appendf(nil, "wheel-%d", i), Headers: headers(i + 1), DeliverAt: t0.Add(2*time.Second + time.Duration(i)*500*time.Millisecond)}
			if i%3 == 0 {
				m.ID = fmt.Sprintf("user-%d", i)
			}
			wheel = append(wheel, put(m))
		}
		put(Message{ID: "user-far", Topic: "t", Payload: []byte("far chosen"), Headers: headers(0), DeliverAt: t0.Add(25 * time.Second)})
		put(Message{Topic: "t", Payload: []byte("far generated"), DeliverAt: t0.Add(41 * time.Second)})
		put(Message{Topic: "big", Payload: bytes.Repeat([]byte("big!"), 2600), DeliverAt: t0.Add(4 * time.Second)})
		batch := []Message{
			{Topic: "b", Payload: []byte("batch-0"), DeliverAt: t0.Add(3 * time.Second)},
			{ID: "user-batch", Topic: "b", Payload: []byte("batch-1"), Headers: headers(2), DeliverAt: t0.Add(6 * time.Second)},
			{Topic: "b", Payload: []byte("batch-2"), DeliverAt: t0.Add(30 * time.Second)},
		}
		ids, err := q.PutBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			pending[id] = want{batch[i].Topic, batch[i].DeliverAt, batch[i].Payload, batch[i].Headers}
		}
		cancel(near[1])
		cancel(wheel[1]) // a Cancel threaded into a list, naming its topic
		cancel(wheel[3]) // a chosen ID
		// A topic purged from the disk wheel (a Purge record per list) and in memory (Acks).
		for i := range 4 {
			put(Message{Topic: "gone", Payload: fmt.Appendf(nil, "gone-%d", i), DeliverAt: t0.Add(150*time.Millisecond + time.Duration(i)*3*time.Second)})
		}
		synctest.Wait() // the first in memory, waiting in the near window
		if n, err := q.Purge(ctx, "gone", queue.Scheduled); err != nil || n != 4 {
			t.Fatalf("Purge = %d, %v", n, err)
		}
		for id, w := range pending {
			if w.topic == "gone" {
				delete(pending, id)
			}
		}
		// A paused topic, and one paused and resumed.
		if err := q.Pause(ctx, "held"); err != nil {
			t.Fatal(err)
		}
		if err := q.Pause(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		if err := q.Resume(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		put(Message{Topic: "held", Payload: []byte("held"), DeliverAt: t0.Add(time.Second)})
		if err := q.SetLimit(ctx, "b", queue.Limit{Rate: 1000, Burst: 10, Concurrency: 5}); err != nil {
			t.Fatal(err)
		}
		// A message nacked to its dead-letter topic (Updates with the cause), and one requeued back.
		dl := put(Message{Topic: "dl", Payload: []byte("dead letter"), Headers: headers(4)})
		rq := put(Message{Topic: "dl", Payload: []byte("requeued")})
		for range 2 {
			ds, err := q.Receive(ctx, "dl", 2, time.Minute)
			if err != nil || len(ds) != 2 {
				t.Fatalf("Receive: %d, %v", len(ds), err)
			}
			for _, d := range ds {
				if err := q.Nack(ctx, d.Receipt, 0, queue.WithReason("fixture: failed")); err != nil {
					t.Fatal(err)
				}
			}
		}
		if n, err := q.Requeue(ctx, "dl", rq); err != nil || n != 1 {
			t.Fatalf("Requeue = %d, %v", n, err)
		}
		pending[dl] = want{"dl.dead", time.Now(), []byte("dead letter"), headers(4)}
		pending[rq] = want{"dl", time.Now(), []byte("requeued"), nil}
		// Made due now: one from the disk wheel (a Cancel and a copy in one group).
		if ok, err := q.DeliverNow(ctx, wheel[7]); !ok || err != nil {
			t.Fatalf("DeliverNow = %v, %v", ok, err)
		}
		w := pending[wheel[7]]
		w.due = time.Now()
		pending[wheel[7]] = w
		// Two near messages acked, one leased when the files are taken.
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		ds, err := q.Receive(ctx, "t", 3, time.Hour)
		if err != nil || len(ds) != 3 {
			t.Fatalf("Receive: %d, %v", len(ds), err)
		}
		for _, d := range ds[:2] {
			if err := q.Ack(ctx, d.Receipt); err != nil {
				t.Fatal(err)
			}
			delete(pending, d.ID)
		}
		// Let the loader load the first slots of the wheel (rolling the far messages), then
		// relocate lists of old segments.
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if n, err := q.compact(newCompactor(), 2); err != nil || n == 0 {
			t.Fatalf("compaction: %d lists moved, %v", n, err)
		}
		if err := q.checkpoint(); err != nil {
			t.Fatal(err)
		}
		// After the checkpoint: more puts, a cancel, an ack, a nack and an expired lease for the
		// replay.
		for i := range 4 {
			put(Message{Topic: "t", Payload: fmt.Appendf(nil, "after-%d", i), Headers: headers(i), DeliverAt: time.Now().Add(time.Duration(i) * 3 * time.Second)})
		}
		put(Message{ID: "user-after", Topic: "t", Payload: []byte("after chosen"), DeliverAt: time.Now().Add(7 * time.Second)})
		cancel(wheel[5])
		ds, err = q.Receive(ctx, "t", 3, 200*time.Millisecond)
		if err != nil || len(ds) != 3 {
			t.Fatalf("Receive: %d, %v", len(ds), err)
		}
		if err := q.Ack(ctx, ds[0].Receipt); err != nil {
			t.Fatal(err)
		}
		delete(pending, ds[0].ID)
		if err := q.Nack(ctx, ds[1].Receipt, 5*time.Second, queue.WithReason("fixture: later")); err != nil {
			t.Fatal(err)
		}
		p := pending[ds[1].ID]
		p.due = time.Now().Add(5 * time.Second)
		pending[ds[1].ID] = p
		time.Sleep(300 * time.Millisecond) // the third lease runs out: due again after a second
		synctest.Wait()
		p = pending[ds[2].ID]
		p.due = time.Now().Add(time.Second)
		pending[ds[2].ID] = p
		if err := q.log.WaitDurable(q.log.End()); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "# id topic due-unix-nano payload-hex [h=headers-json-hex]: the messages pending in this directory\n")
		for _, id := range slices.Sorted(mapKeys(pending)) {
			w := pending[id]
			fmt.Fprintf(&b, "%s %s %d %s", id, w.topic, w.due.UnixNano(), hex.EncodeToString(w.payload))
			if len(w.headers) > 0 {
				h, _ := json.Marshal(w.headers)
				fmt.Fprintf(&b, " h=%s", hex.EncodeToString(h))
			}
			b.WriteByte('\n')
		}
		writeFixtureDir(t, dir, filepath.Join(out, "crashed"), "PENDING", b.String()) // the log goes on after the checkpoint
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		writeFixtureDir(t, dir, filepath.Join(out, "closed"), "PENDING", b.String()) // the final checkpoint covers everything
	})
}

// writeFixtureDir copies the queue directory dir, open or closed, to dst (in place of what was
// there), without its lock file, and writes there the file name with text: what the directory
// holds, for the test that opens it.
func writeFixtureDir(t *testing.T, dir, dst, name, text string) {
	t.Helper()
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	copyDir(t, dir, dst)
	if err := os.Remove(filepath.Join(dst, "LOCK")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeScheduleFixture writes into out (testdata/vN/schedules, N the checkpoint version this code
// writes: see TestWriteFixture) queue directories with schedules of every kind (a cron spec in a zone, replaced; @every at a sub-second rate with
// OverlapSkip and MisfireAll, fired several times; one paused; one triggered; one deleted) on both
// sides of a checkpoint, and a few messages: a directory copied while the queue was open ("crashed",
// log to replay after the checkpoint) and one after Close ("closed"). Each holds SCHEDULES (the
// moment it was taken and the number of messages, fires included, then the schedules with their
// state as allSchedules prints them).
func writeScheduleFixture(t *testing.T, out string) {
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir := filepath.Join(base, "q")
		q := open(t, dir, scheduleFixtureOptions()...)
		set := func(s queue.Schedule) {
			t.Helper()
			if _, err := q.SetSchedule(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		set(queue.Schedule{Name: "digest", Topic: "mail", Payload: []byte("digest v1"), Spec: "30 9 * * mon-fri", TimeZone: "Europe/Paris"})
		set(queue.Schedule{Name: "tick", Topic: "ticks", Spec: "@every 250ms", Misfire: queue.MisfireAll, Overlap: queue.OverlapSkip})
		set(queue.Schedule{Name: "hourly", Topic: "ticks", Payload: []byte("h"), Spec: "@hourly", Misfire: queue.MisfireSkip})
		set(queue.Schedule{Name: "held", Topic: "ticks", Spec: "*/5 * * * * *"})
		set(queue.Schedule{Name: "gone", Topic: "ticks", Spec: "@daily"})
		if err := q.PauseSchedule(ctx, "held"); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Put(ctx, Message{ID: "user-1", Topic: "t", Payload: []byte("one"), DeliverAt: time.Now().Add(30 * time.Second)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second + 100*time.Millisecond) // tick fires
		if err := q.checkpoint(); err != nil {
			t.Fatal(err)
		}
		// After the checkpoint: in the log only.
		set(queue.Schedule{Name: "digest", Topic: "mail", Payload: []byte("digest v2"), Spec: "30 9 * * mon-fri", TimeZone: "Europe/Paris"})
		if _, err := q.TriggerSchedule(ctx, "hourly"); err != nil {
			t.Fatal(err)
		}
		if ok, err := q.DeleteSchedule(ctx, "gone"); !ok || err != nil {
			t.Fatalf("DeleteSchedule = %v, %v", ok, err)
		}
		if _, err := q.Put(ctx, Message{Topic: "t", Payload: []byte("two"), DeliverAt: time.Now().Add(20 * time.Second)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second + 30*time.Millisecond) // tick fires again, its fires wait
		synctest.Wait()
		check(t, q)
		if err := q.log.WaitDurable(q.log.End()); err != nil {
			t.Fatal(err)
		}
		st := q.Snapshot()
		text := fmt.Sprintf("# taken at %d with %d messages\n", time.Now().UnixNano(), st.Pending+int64(st.Due)) + allSchedules(t, q)
		writeFixtureDir(t, dir, filepath.Join(out, "crashed"), "SCHEDULES", text)
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		writeFixtureDir(t, dir, filepath.Join(out, "closed"), "SCHEDULES", text)
	})
}
