package delayq

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/queue"
)

// TestOpensOlderDirectories opens the queue directories of testdata/v3 to v9, written by
// delayq before checkpoints became logs of edits and records got group flags (v3, by
// TestWriteV3Fixture in commit 0e4c31d), before the operator's actions changed the checkpoint and
// the records and receipts carried a MAC (v4, by TestWriteV4Fixture in commit 3e34371), and before
// delivery limits and the reasons of failures were kept (v5, by TestWriteV5Fixture in commit
// 915212f: every record kind, a paused topic, a purge, a requeue, a dead letter, the receipt
// secret), and before the checkpoint was written through the log's framing (v6, by the same test
// named TestWriteV6Fixture, with a limit and reasons, run on commit cf8fbdc), before the checkpoint
// kept the topics Cancels and Purges took messages of (v7, by TestWriteFixture of
// fixture_gen_test.go run on commit fcb1137), and before it kept the damaged places accounted for
// (v8, by the same test run on commit 2ce04ce), and by version 9, which keeps them (v9, by the
// same test run on commit 5c4a900), and by version 11, whose Puts carry headers (v11, by the same
// test, which puts messages with headers in every place a message can be; version 10 added
// schedules, whose directories TestOpensScheduleDirectories opens): for each, one copied while the
// queue was open, with log to replay after its checkpoint, and one after Close. Exactly the
// messages their PENDING file lists must be delivered, with their payloads and headers (none
// before version 11) and none early, and the queue must reopen from the
// checkpoint it writes in the new format. The fixtures were written in a synctest bubble, so their times are the bubble's.
func TestOpensOlderDirectories(t *testing.T) {
	for _, name := range []string{"v3/crashed", "v3/closed", "v4/crashed", "v4/closed", "v5/crashed", "v5/closed", "v6/crashed", "v6/closed",
		"v7/crashed", "v7/closed", "v8/crashed", "v8/closed", "v9/crashed", "v9/closed", "v10/crashed", "v10/closed", "v11/crashed", "v11/closed"} {
		t.Run(name, func(t *testing.T) {
			version, err := strconv.Atoi(strings.TrimPrefix(filepath.Dir(name), "v"))
			if err != nil {
				t.Fatal(err)
			}
			src := filepath.Join("testdata", name)
			want := readPending(t, filepath.Join(src, "PENDING"))
			dir := filepath.Join(t.TempDir(), "q")
			copyDir(t, src, dir)
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(10 * time.Second) // past the moment the fixture was taken
				opts := []Option{WithSlot(100 * time.Millisecond), WithHorizon(10 * time.Second), WithSegmentSize(4 << 10), WithLogger(quiet)}
				q := open(t, dir, opts...)
				check(t, q)
				if st := q.Snapshot(); st.CorruptRecords != 0 || st.Pending+int64(st.Due) != int64(len(want)) {
					t.Fatalf("after Open: %+v; want %d messages", st, len(want))
				}
				// The counts by topic, learnt by reading the lists, are those of the messages.
				byTopic := map[string]int64{}
				for _, m := range want {
					byTopic[m.Topic]++
				}
				ts, err := q.Topics(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for _, ti := range ts {
					if n := ti.Scheduled + ti.Due + ti.Leased; n != byTopic[ti.Topic] {
						t.Errorf("topic %s: %+v; want %d messages", ti.Topic, ti, byTopic[ti.Topic])
					}
					delete(byTopic, ti.Topic)
				}
				if len(byTopic) != 0 {
					t.Errorf("topics not listed: %v", byTopic)
				}
				if version >= 5 && !topicOf(t, q, "held").Paused {
					t.Errorf("topic held, paused when the fixture was written, is not paused")
				}
				if version >= 6 {
					ls, err := q.Limits(context.Background())
					if want := (queue.Limit{Rate: 1000, Burst: 10, Concurrency: 5}); err != nil || len(ls) != 1 || ls[0].Topic != "b" || ls[0].Limit != want {
						t.Errorf("limits %+v, %v; want b's %+v", ls, err, want)
					}
				}
				// A chosen ID of the fixture is still known as pending.
				if _, err := q.Put(context.Background(), Message{ID: "user-far", Topic: "t", Payload: []byte("other")}); err == nil {
					t.Fatal("Put with the ID of a pending message of the fixture succeeded")
				}
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				q = open(t, dir, opts...)
				check(t, q)
				ctx := context.Background()
				if err := q.Resume(ctx, "held"); err != nil { // paused in v5
					t.Fatal(err)
				}
				for len(want) > 0 {
					found := false
					for _, topic := range []string{"t", "b", "big", "dl", "dl.dead", "held"} {
						rctx, cancel := context.WithTimeout(ctx, time.Millisecond)
						ds, _ := q.Receive(rctx, topic, 100, time.Hour)
						cancel()
						for _, d := range ds {
							w, ok := want[d.ID]
							switch {
							case !ok:
								t.Fatalf("%s delivered: not pending, or twice", d.ID)
							case d.Topic != w.Topic || !bytes.Equal(d.Payload, w.Payload):
								t.Fatalf("%s delivered on %s with %d bytes; want %s with %d", d.ID, d.Topic, len(d.Payload), w.Topic, len(w.Payload))
							case !maps.Equal(d.Headers, w.Headers) || (d.Headers == nil) != (w.Headers == nil):
								t.Fatalf("%s delivered with headers %q; want %q", d.ID, d.Headers, w.Headers)
							case time.Now().Before(w.DeliverAt):
								t.Fatalf("%s delivered %v early", d.ID, w.DeliverAt.Sub(time.Now()))
							}
							delete(want, d.ID)
							found = true
						}
					}
					if !found {
						if time.Now().After(time.Date(2000, 1, 1, 0, 2, 0, 0, time.UTC)) {
							t.Fatalf("%d messages never delivered", len(want))
						}
						time.Sleep(100 * time.Millisecond)
					}
				}
				check(t, q)
			})
		})
	}
}

// readPending reads a fixture's PENDING file: a line per pending message.
func readPending(t *testing.T, path string) map[string]Message {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]Message{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		var h map[string]string
		if last := fs[len(fs)-1]; strings.HasPrefix(last, "h=") { // headers, from version 11
			b, err := hex.DecodeString(last[2:])
			if err != nil || json.Unmarshal(b, &h) != nil || len(h) == 0 {
				t.Fatalf("bad headers in line %q", line)
			}
			fs = fs[:len(fs)-1]
		}
		fs = append(fs, "") // an empty payload has no field
		if len(fs) < 4 {
			t.Fatalf("bad line %q", line)
		}
		ns, err1 := strconv.ParseInt(fs[2], 10, 64)
		p, err2 := hex.DecodeString(fs[3])
		if err1 != nil || err2 != nil {
			t.Fatalf("bad line %q", line)
		}
		out[fs[0]] = Message{ID: fs[0], Topic: fs[1], DeliverAt: time.Unix(0, ns), Payload: p, Headers: h}
	}
	return out
}
