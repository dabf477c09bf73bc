package rediskit

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/redistest"
)

// slotKeys sweep the edges of hash tags: empty and unclosed braces, several tags, bytes that are
// not UTF-8.
var slotKeys = []string{
	"", "foo", "bar", "hello", "123456789", "{", "}", "{}", "}{", "{}x", "x{}", "{a}", "{a}b", "b{a}",
	"{a}{b}", "a{b}c{d}", "a{{b}}", "{{}}", "a}b{c}", "tock:lock:{job}", "tock:lock:{job}:fence",
	"tock:lock:{a{b}:fence", "\x00\xff{\x80}", "ünïcödé{ключ}", "{tock/3.0}:meta",
}

// slotOracle starts a redis-server in cluster mode, whose CLUSTER KEYSLOT is the reference.
func slotOracle(t testing.TB) *redis.Client {
	s := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func checkSlot(t testing.TB, rdb *redis.Client, key string) {
	t.Helper()
	want, err := rdb.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := Slot(key); int64(got) != want {
		t.Fatalf("Slot(%q) = %d, Redis says %d", key, got, want)
	}
}

func TestSlotMatchesRedis(t *testing.T) {
	if got := CRC16("123456789"); got != 0x31c3 {
		t.Fatalf("CRC16 check value = %#x, want 0x31c3", got)
	}
	rdb := slotOracle(t)
	for _, k := range slotKeys {
		checkSlot(t, rdb, k)
	}
}

func FuzzSlot(f *testing.F) {
	for _, k := range slotKeys {
		f.Add(k)
	}
	rdb := slotOracle(f)
	f.Fuzz(func(t *testing.T, key string) {
		checkSlot(t, rdb, key)
	})
}
