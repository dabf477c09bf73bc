package redisq

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tockwheel/tock/internal/rediskit"
)

// TestShardTagsSpreadOverSlotRanges checks that each shard's tag falls in its own range of slots,
// so that masters holding contiguous ranges get equal shares of the shards.
func TestShardTagsSpreadOverSlotRanges(t *testing.T) {
	for _, n := range []int{1, 3, 16, 100, MaxShards} {
		l := newLayout("tock", n)
		for i, tag := range l.tags {
			slot := rediskit.Slot(l.metaKey(i))
			if lo, hi := i*slotCount/n, (i+1)*slotCount/n; slot < lo || slot >= hi {
				t.Fatalf("%d shards: tag %q of shard %d is in slot %d, outside [%d, %d)", n, tag, i, slot, lo, hi)
			}
			if !strings.HasPrefix(tag, "tock/"+strconv.Itoa(i)+".") {
				t.Fatalf("tag %q of shard %d", tag, i)
			}
		}
	}
}

func TestGeneratedIDsNameTheirShardAndSecond(t *testing.T) {
	l := newLayout("p", 16)
	for _, tc := range []struct {
		shard int
		sec   int64
	}{{0, 0}, {15, 1_700_000_000}, {7, 1 << 39}} {
		id := newID(tc.shard, tc.sec, 1_700_000_000_123)
		if len(id) != idLen {
			t.Fatalf("newID = %q, %d characters; want %d", id, len(id), idLen)
		}
		s, sec, ok := parseID(id, 16)
		if !ok || s != tc.shard || sec != tc.sec {
			t.Fatalf("parseID(%q) = %d, %d, %v; want %d, %d", id, s, sec, ok, tc.shard, tc.sec)
		}
		if home := l.home(id); home != tc.shard {
			t.Fatalf("home(%q) = %d", id, home)
		}
	}
	if newID(3, 5, 7) == newID(3, 5, 7) {
		t.Fatal("two generated IDs are equal")
	}
}

// The IDs put for one instant must grow with the time of their put, so that they go to the end of
// their topic's wheel (see newID).
func TestGeneratedIDsGrowWithThePutTime(t *testing.T) {
	for ms := int64(1_700_003_840_000); ms < 1_700_003_840_000+300; ms++ { // no wrap of the 16 bits
		a, b := newID(3, 1_700_003_600, ms), newID(3, 1_700_003_600, ms+1)
		if a >= b {
			t.Fatalf("newID put at %d = %q, not before %q put a millisecond later", ms, a, b)
		}
	}
}

func TestChosenIDsHashToTheirHome(t *testing.T) {
	l := newLayout("p", 16)
	seen := make(map[int]bool)
	for i := range 1000 {
		id := "order-" + strconv.Itoa(i)
		s := l.home(id)
		if again := l.home(id); again != s {
			t.Fatalf("home(%q) is %d, then %d", id, s, again)
		}
		seen[s] = true
	}
	if len(seen) != 16 {
		t.Fatalf("1000 chosen IDs fell in %d of 16 shards", len(seen))
	}
	// A generated ID naming a shard beyond the deployment's is a chosen ID like any other.
	id := newID(20, 1, 1000)
	if _, _, ok := parseID(id, 16); ok {
		t.Fatalf("parseID(%q) accepted shard 20 of 16", id)
	}
	for _, id := range []string{"", "short", strings.Repeat("z", idLen), strings.Repeat("0", idLen-1) + "!"} {
		if _, _, ok := parseID(id, 1024); ok {
			t.Errorf("parseID(%q) accepted it", id)
		}
	}
}

func TestValidPrefix(t *testing.T) {
	for _, p := range []string{"tock", "a", "my-app:queue_1.x", strings.Repeat("p", MaxPrefix)} {
		if err := validPrefix(p); err != nil {
			t.Errorf("validPrefix(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"", "a{b", "a}b", "a b", "tab\t", "é", strings.Repeat("p", MaxPrefix+1)} {
		if validPrefix(p) == nil {
			t.Errorf("validPrefix(%q) accepted it", p)
		}
	}
}
