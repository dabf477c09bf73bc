package delayq

import (
	"context"
	"testing"
	"time"
)

// TestSyncStats checks that durable puts are counted as syncs, each in a bucket that bounds its
// time, and that puts with NoSync leave the counts flat.
func TestSyncStats(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		opts    []Option
		durable bool
	}{
		{"durable", nil, true},
		{"NoSync", []Option{WithNoSync()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := open(t, t.TempDir(), append(tc.opts, WithLogger(quiet))...)
			before := q.Stats().Syncs
			const puts = 20
			for range puts {
				if _, err := q.Put(ctx, Message{Topic: "t", DeliverAt: time.Now().Add(time.Hour)}); err != nil {
					t.Fatal(err)
				}
			}
			st := q.Stats().Syncs
			n := st.Count - before.Count
			switch {
			case tc.durable && n < puts:
				// Each Put waits for a sync that began after its record was appended.
				t.Errorf("%d syncs for %d puts one after another, want at least %d", n, puts, puts)
			case tc.durable && st.Total <= before.Total:
				t.Errorf("sync time went from %v to %v", before.Total, st.Total)
			case !tc.durable && (n != 0 || st.Total != before.Total):
				t.Errorf("NoSync: %d syncs taking %v counted, want none", n, st.Total-before.Total)
			}
			if len(st.Buckets) == 0 {
				t.Fatal("no buckets")
			}
			prev := SyncBucket{}
			for _, b := range st.Buckets {
				if b.UpperBound <= prev.UpperBound || b.Count < prev.Count || b.Count > st.Count {
					t.Fatalf("buckets not cumulative with rising bounds: %+v after %+v (count %d)", b, prev, st.Count)
				}
				prev = b
			}
			if st.Buckets[0].UpperBound != 50*time.Microsecond || prev.UpperBound < 3*time.Second {
				t.Errorf("buckets span %v to %v, want 50µs to over 3s", st.Buckets[0].UpperBound, prev.UpperBound)
			}
			// Syncs do not take hours: all but the odd stall on a loaded machine are in a bucket.
			if tc.durable && prev.Count == 0 {
				t.Errorf("no sync in any bucket of %+v", st.Buckets)
			}
		})
	}
}
