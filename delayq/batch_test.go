package delayq

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/internal/testlong"
)

// TestPutBatchIsAtomic is the regression test of a batch cut by a torn write: cutting the last
// record of a synced three-message batch reopened with two of them. The batch is cut as a crash
// during the write could leave it, and each copy is reopened: every message of the batch is there,
// or none, and the message put before it always. In long mode it is cut at every byte from its
// first record to its end (a few hundred reopens); otherwise on both sides of the records' starts
// and of its end, and at 8 bytes drawn at random (set DELAYQ_SEED to repeat them). Every byte of a
// group is cut in the log's own TestGroupIsAtomic.
func TestPutBatchIsAtomic(t *testing.T) {
	base := t.TempDir()
	rng := rand.New(rand.NewPCG(testSeed(t), 0))
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir := filepath.Join(base, "q")
		opts := []Option{WithCheckpointInterval(time.Hour), WithLogger(quiet)}
		q := open(t, dir, opts...)
		at := time.Now().Add(time.Hour)
		before, err := q.Put(ctx, Message{Topic: "t", DeliverAt: at})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.checkpoint(); err != nil {
			t.Fatal(err)
		}
		ids, err := q.PutBatch(ctx, []Message{
			{Topic: "t", Payload: []byte("one"), DeliverAt: at},
			{Topic: "t", Payload: []byte("two"), DeliverAt: at.Add(time.Second)},
			{ID: "three", Topic: "t", Payload: []byte("three"), DeliverAt: at.Add(time.Minute)},
		})
		if err != nil {
			t.Fatal(err)
		}
		_, first, _ := parseID(ids[0])
		end := q.log.End()
		if first.Segment() != end.Segment() {
			t.Fatalf("batch from %v to %v", first, end)
		}
		crashed := filepath.Join(base, "crashed")
		crashCopy(t, nil, q, dir, crashed)
		seg := filepath.Join(crashed, fmt.Sprintf("%010d.seg", end.Segment()))
		whole, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		_, second, _ := parseID(ids[1])
		for _, cut := range batchCuts(rng, int(first.Offset()), int(second.Offset()), int(end.Offset())) {
			dir := filepath.Join(base, fmt.Sprint("cut", cut))
			copyDir(t, crashed, dir)
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(seg)), whole[:cut], 0o644); err != nil {
				t.Fatal(err)
			}
			q := open(t, dir, opts...)
			want := int64(1)
			if cut == int(end.Offset()) {
				want = 4
			}
			if st := q.Snapshot(); st.Pending != want {
				t.Fatalf("cut at %d of %d: %d messages pending, want %d", cut, end.Offset(), st.Pending, want)
			}
			if ok, err := q.Cancel(ctx, before); !ok || err != nil {
				t.Fatalf("cut at %d: the message put before the batch: Cancel = %v, %v", cut, ok, err)
			}
			check(t, q)
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			os.RemoveAll(dir)
		}
	})
}

// batchCuts returns where TestPutBatchIsAtomic cuts a batch that begins at first, whose second
// record begins at second, and that ends at end, in increasing order: every byte in long mode.
func batchCuts(rng *rand.Rand, first, second, end int) []int {
	if testlong.Enabled() {
		cuts := make([]int, 0, end-first+1)
		for cut := first; cut <= end; cut++ {
			cuts = append(cuts, cut)
		}
		return cuts
	}
	set := map[int]bool{}
	for _, b := range []int{first, second, end} {
		for cut := b - 1; cut <= b+1; cut++ {
			if cut >= first && cut <= end {
				set[cut] = true
			}
		}
	}
	for range 8 {
		set[first+rng.IntN(end-first+1)] = true
	}
	cuts := slices.Collect(maps.Keys(set))
	slices.Sort(cuts)
	return cuts
}
