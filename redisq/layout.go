package redisq

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"github.com/tockwheel/tock/queue"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/tockwheel/tock/internal/rediskit"
)

// Limits of the layout.
const (
	// MaxShards is the largest shard count WithShards accepts: each shard gets a range of at least
	// 16 of the 16384 hash slots, so that a tag for it is found in a few dozen tries.
	MaxShards = 1024
	// MaxPrefix is the longest prefix WithPrefix accepts.
	MaxPrefix = 64
	// slotCount is the number of hash slots of Redis Cluster.
	slotCount = rediskit.SlotCount
)

// layout names the keys of one deployment: its prefix and the tags of its shards. It is immutable.
type layout struct {
	prefix string
	tags   []string // tags[i] is the hash tag of shard i, without braces
}

func newLayout(prefix string, shards int) *layout {
	l := &layout{prefix: prefix, tags: make([]string, shards)}
	for i := range shards {
		l.tags[i] = shardTag(prefix, i, shards)
	}
	return l
}

// shardTag returns the tag of shard i of n: "prefix/i.k" for the smallest k whose slot falls in
// the i-th of n equal ranges of the slots, so that the shards spread evenly over masters that hold
// contiguous ranges.
func shardTag(prefix string, i, n int) string {
	lo, hi := i*slotCount/n, (i+1)*slotCount/n
	base := prefix + "/" + strconv.Itoa(i) + "."
	for k := 0; ; k++ {
		tag := base + strconv.Itoa(k)
		if s := rediskit.Slot("{" + tag + "}"); s >= lo && s < hi {
			return tag
		}
	}
}

func (l *layout) shards() int { return len(l.tags) }

// configKey is the key of the deployment's configuration.
func (l *layout) configKey() string { return "{" + l.prefix + "}:config" }

// metaKey, guardKey and channel name a shard's keys (see the package doc).
func (l *layout) metaKey(s int) string  { return "{" + l.tags[s] + "}:meta" }
func (l *layout) guardKey(s int) string { return "{" + l.tags[s] + "}:guard" }
func (l *layout) channel(s int) string  { return "{" + l.tags[s] + "}:ev" }

// lockName is the name of the shard's redislock lock, whose key is then in the shard's slot.
func (l *layout) lockName(s int) string { return l.tags[s] }

// lockKey is the key redislock keeps the shard's lock in; the tick script checks its token.
func (l *layout) lockKey(s int) string { return "tock:lock:{" + l.tags[s] + "}" }

// keys returns the KEYS of a script on shard s.
func (l *layout) keys(s int) []string { return []string{l.metaKey(s), l.guardKey(s)} }

// lockedKeys returns the KEYS of a script on shard s that reads its lock.
func (l *layout) lockedKeys(s int) []string {
	return []string{l.metaKey(s), l.guardKey(s), l.lockKey(s)}
}

// validPrefix reports why p cannot be a prefix, or nil.
func validPrefix(p string) error {
	if p == "" || len(p) > MaxPrefix {
		return fmt.Errorf("of %d bytes: want 1 to %d", len(p), MaxPrefix)
	}
	for _, c := range []byte(p) {
		if c <= ' ' || c >= 0x7f || c == '{' || c == '}' {
			return fmt.Errorf("%q has a character other than printable ASCII without braces", p)
		}
	}
	return nil
}

// idEncoding is the alphabet of generated IDs: base32 with the digits first, in lower case, which
// is safe in URLs and in the keys and values of the layout.
var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// idLen is the length of a generated ID: 15 bytes in base32.
const idLen = 24

// newID returns a fresh generated ID naming shard s and the Unix second sec, put at nowMs (Unix
// milliseconds). The put's millisecond (modulo 2^16) comes before the random bytes, so that the
// IDs of messages put for one instant grow with time: Redis orders a chunk's entries of equal due
// time by ID, and IDs that grow go to the wheel's last chunk, the cheapest place to add to, instead
// of anywhere in the wheel.
func newID(s int, sec, nowMs int64) string {
	var b [15]byte
	binary.BigEndian.PutUint16(b[0:2], uint16(s))
	putUint40(b[2:7], uint64(sec))
	binary.BigEndian.PutUint16(b[7:9], uint16(nowMs))
	rand.Read(b[9:])
	return idEncoding.EncodeToString(b[:])
}

// parseID decodes a generated ID (or a chosen one of that form): the shard and second it names.
func parseID(id string, shards int) (shard int, sec int64, ok bool) {
	if len(id) != idLen {
		return 0, 0, false
	}
	var b [15]byte
	n, err := idEncoding.Decode(b[:], []byte(id))
	if err != nil || n != len(b) {
		return 0, 0, false
	}
	s := int(binary.BigEndian.Uint16(b[0:2]))
	if s >= shards {
		return 0, 0, false
	}
	return s, int64(uint40(b[2:7])), true
}

func putUint40(b []byte, v uint64) {
	for i := 4; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}

func uint40(b []byte) uint64 {
	var v uint64
	for _, c := range b[:5] {
		v = v<<8 | uint64(c)
	}
	return v
}

// home returns the shard an ID belongs to: the one a generated-form ID names, the home of the
// schedule's name for the ID of a schedule's fire ("<name>@<RFC 3339 time>", so that a schedule
// and its fires share a shard, and one script decides and puts a fire), or FNV-1a of the ID
// modulo the shard count.
func (l *layout) home(id string) int {
	if s, _, ok := parseID(id, l.shards()); ok {
		return s
	}
	if name, _, ok := queue.ParseFireID(id); ok {
		id = name
	}
	return l.hash(id)
}

// homeV3 returns the home of id under layout versions 2 and 3, which homed every chosen ID of
// no generated form by FNV-1a of the whole ID, those of a fire's form included.
func (l *layout) homeV3(id string) int {
	if s, _, ok := parseID(id, l.shards()); ok {
		return s
	}
	return l.hash(id)
}

// hash returns FNV-1a (64 bits) of s modulo the shard count.
func (l *layout) hash(s string) int {
	h := fnv.New64a()
	h.Write([]byte(s))
	return int(h.Sum64() % uint64(l.shards()))
}

// parseAlias splits an alias "<shard>.<token>".
func parseAlias(a string, shards int) (shard int, token string, ok bool) {
	i := strings.IndexByte(a, '.')
	if i < 0 {
		return 0, "", false
	}
	s, err := strconv.Atoi(a[:i])
	if err != nil || s < 0 || s >= shards {
		return 0, "", false
	}
	return s, a[i+1:], true
}
