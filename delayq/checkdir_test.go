package delayq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/internal/testlong"
)

// TestCheckFindsDamage checks a clean directory, then one with a waiting message's record damaged
// in a sealed segment: Check names the file and offset, what the record seems to hold, and the list
// it broke, and changes nothing; a directory in use is refused.
func TestCheckFindsDamage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q := open(t, dir, WithSegmentSize(4<<10), WithLogger(quiet))
	var ids []string
	base := time.Now().Truncate(time.Second).Add(time.Hour + 500*time.Millisecond) // five slots, however long the puts take
	for i := range 100 {
		id, err := q.Put(ctx, Message{Topic: "t", Payload: fmt.Appendf(nil, "m%d", i), DeliverAt: base.Add(time.Duration(i%5) * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := Check(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("Check of a directory in use: %v", err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(dir)
	if err != nil || len(rep.Damage) != 0 || rep.TornTail != nil || rep.Pending != 100 || rep.Lists != 5 || rep.Records < 100 {
		t.Fatalf("Check of a clean queue: %+v, %v", rep, err)
	}
	victim := originOfID(t, ids[40])
	flipLastByte(t, dir, victim)
	rep, err = Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, wal.SegmentName(victim.Segment()))
	if len(rep.Damage) != 1 || rep.Damage[0].File != path || rep.Damage[0].Offset != int64(victim.Offset()) {
		t.Fatalf("damage %+v; want one at %s:%d", rep.Damage, path, victim.Offset())
	}
	held := strings.Join(rep.Damage[0].Held, "; ")
	if !strings.Contains(held, ids[40]) || !strings.Contains(held, "list of slot") {
		t.Fatalf("damage held %q; want the message's ID and its list", held)
	}
	if rep.Pending != 99 {
		t.Fatalf("%d pending past the damage, want 99", rep.Pending)
	}
}

// TestCheckAgreesWithOpen is the regression test of tock check passing directories that Open
// found damaged (a flipped byte in the checkpoint, a flipped or cut secret: Check did not read
// them as Open does). In each trial a crashed queue directory (a checkpoint, and log after it)
// is damaged as damageOne says; Check reads a copy, and the queue opens another, lets the loader
// read every list and compaction every segment it would, as it does over its life. The damaged
// places each reports must be the same, and Check finds damage exactly when CorruptRecords counts
// some. Then (issue 18's point 2) the damage is accounted for: after that queue's Close, Check
// finds no damage it has not reported, and the next Open, living as long, counts none.
func TestCheckAgreesWithOpen(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	base := t.TempDir()
	trials, damaged := testlong.Pick(15, 150), 0
	for trial := range trials {
		src := filepath.Join(base, fmt.Sprint(trial))
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			opts := []Option{WithSlot(100 * time.Millisecond), WithHorizon(10 * time.Second), WithSegmentSize(4 << 10),
				WithCheckpointInterval(time.Hour), WithLogger(quiet)}
			q := open(t, filepath.Join(src, "live"), opts...)
			t0 := time.Now()
			var ids []string
			put := func(n int) {
				for i := range n {
					// Due now (in memory), within the horizon, and beyond it.
					at := t0.Add(time.Duration(rng.IntN(3)) * time.Duration(i%40) * 400 * time.Millisecond)
					m := Message{Topic: fmt.Sprint("t", i%3), Payload: fmt.Appendf(nil, "message %d", i), DeliverAt: at}
					if i%9 == 0 {
						m.ID = fmt.Sprintf("chosen-%d-%d", len(ids), i)
					}
					id, err := q.Put(ctx, m)
					if err != nil {
						t.Fatal(err)
					}
					ids = append(ids, id)
				}
			}
			put(150)
			for _, i := range rng.Perm(len(ids))[:10] {
				q.Cancel(ctx, ids[i])
			}
			ds, _ := q.Receive(ctx, "t0", 5, time.Hour)
			for _, d := range ds[:len(ds)/2] {
				q.Ack(ctx, d.Receipt)
			}
			time.Sleep(1500 * time.Millisecond) // some lists loaded, far ones rolled
			synctest.Wait()
			if err := q.checkpoint(); err != nil {
				t.Fatal(err)
			}
			put(60)
			dir := filepath.Join(src, "crashed")
			crashCopy(t, nil, q, filepath.Join(src, "live"), dir)
			what := damageOne(t, rng, dir)
			checked, opened := filepath.Join(src, "checked"), filepath.Join(src, "opened")
			copyDir(t, dir, checked)
			copyDir(t, dir, opened)
			rep, err := Check(checked)
			if err != nil {
				t.Fatalf("trial %d (%s): Check: %v", trial, what, err)
			}
			live := func() *Queue {
				q := open(t, opened, append(opts, WithCompaction(0.5, 1<<40))...)
				if _, err := q.compactTargets(newCompactor(), 0); err != nil { // compaction's first look
					t.Fatal(err)
				}
				time.Sleep(time.Minute) // the loader reads every list
				synctest.Wait()
				return q
			}
			q = live()
			place := func(d Damage) string { return fmt.Sprintf("%s:%d", filepath.Base(d.File), d.Offset) }
			var fromCheck, fromOpen []string
			for _, d := range rep.Damage {
				fromCheck = append(fromCheck, place(d))
			}
			q.damageMu.Lock()
			for _, d := range q.dmg.found {
				fromOpen = append(fromOpen, place(d))
			}
			q.damageMu.Unlock()
			slices.Sort(fromCheck)
			slices.Sort(fromOpen)
			if !slices.Equal(fromCheck, fromOpen) || (len(fromCheck) > 0) != (q.Snapshot().CorruptRecords > 0) {
				t.Fatalf("trial %d (%s): Check found %v, Open %v (CorruptRecords %d)", trial, what, fromCheck, fromOpen, q.Snapshot().CorruptRecords)
			}
			if len(fromCheck) > 0 {
				damaged++
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			if rep, err := Check(opened); err != nil || len(rep.Damage) != 0 {
				t.Fatalf("trial %d (%s): Check after the Open that reported the damage: %v; damage %+v (accounted for: %d)", trial, what, err, rep.Damage, len(rep.Accounted))
			}
			q = live()
			if n := q.Snapshot().CorruptRecords; n != 0 {
				t.Fatalf("trial %d (%s): the Open after the one that reported the damage counts %d damaged places", trial, what, n)
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Logf("%d trials, %d with damage Open reported (the others: torn writes, or damage to nothing needed)", trials, damaged)
	if damaged < trials/3 {
		t.Fatalf("only %d of %d trials damaged anything needed: the test exercised too little", damaged, trials)
	}
}
