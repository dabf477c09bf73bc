package delayq

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
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
