package redisq

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tockwheel/tock/queue"
)

// A position is a place in the order Messages pages in: a score (due time, lease deadline or time
// of death, in Unix milliseconds) and, among equal scores, the message ID byte by byte. It is the
// order of the sets the list script reads, in every shard alike, so one position resumes a page
// in all of them: the cursor of Messages is the position of the last message it returned.
type position struct {
	ms int64
	id string
}

func (p position) less(o position) bool {
	return p.ms < o.ms || (p.ms == o.ms && p.id < o.id)
}

// maxCursorMs is the largest score a cursor may name: the wheels' chunk bounds write due times in
// 14 digits (see the package doc), and every score the engine makes (a due time up to
// queue.MaxDeliverAt, a lease deadline, a time of death) has 13. A larger one would reach the
// scripts as a number that Lua cannot write in 14 digits, and find the wrong chunk.
const maxCursorMs = 99_999_999_999_999

// cursorVersion starts every cursor, so that a cursor of another layout is refused, not misread.
const cursorVersion = "1"

var cursorEncoding = base64.RawURLEncoding.Strict()

// encode returns the cursor of p: the version, the score and the ID in base64url, dot-separated.
func (p position) encode() string {
	return cursorVersion + "." + strconv.FormatInt(p.ms, 10) + "." + cursorEncoding.EncodeToString([]byte(p.id))
}

// decodeCursor returns the position a cursor names; ok is false for anything encode did not make.
func decodeCursor(s string) (p position, ok bool) {
	v, rest, ok1 := strings.Cut(s, ".")
	ms, id, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || v != cursorVersion {
		return position{}, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n < 0 || n > maxCursorMs || strconv.FormatInt(n, 10) != ms {
		return position{}, false
	}
	b, err := cursorEncoding.DecodeString(id)
	if err != nil || len(b) > MaxID {
		return position{}, false
	}
	// The decoder skips newlines: refuse what encode would not have written.
	p = position{ms: n, id: string(b)}
	if p.encode() != s {
		return position{}, false
	}
	return p, true
}

// stateCodes are the list script's names of the states.
var stateCodes = map[queue.State]string{queue.Scheduled: "s", queue.Due: "d", queue.Leased: "l", queue.Dead: "x"}

// Messages returns up to limit messages of topic in state, and the cursor of the next page; see
// [queue.Admin.Messages]. Each shard keeps the topic's messages of each state in order (the
// scheduled ones in the topic's index of the wheel, see the package doc), and a page is a merge of
// the shards' next entries after the cursor's position: a first round asks every shard, in one
// pipeline, for about twice its share of the page; a shard that holds more of the page is asked
// again for twice as many, until the page is known. A page costs Redis O(shards + limit) entries
// read (times log n to find the position), and this process memory for that many, whatever the
// size of the topic. A message whose due time changes between pages may be missed or shown again.
func (q *Queue) Messages(ctx context.Context, topic string, state queue.State, cursor string, limit int) ([]queue.MessageInfo, string, error) {
	if err := q.usable(); err != nil {
		return nil, "", err
	}
	if err := checkTopic("messages", topic); err != nil {
		return nil, "", err
	}
	code, ok := stateCodes[state]
	if !ok {
		return nil, "", fmt.Errorf("redisq: messages: state %q: %w", state, queue.ErrInvalid)
	}
	if limit < 1 || limit > queue.MaxPage {
		return nil, "", fmt.Errorf("redisq: messages: limit %d: want 1 to %d: %w", limit, queue.MaxPage, queue.ErrInvalid)
	}
	var from *position
	if cursor != "" {
		p, ok := decodeCursor(cursor)
		if !ok {
			return nil, "", fmt.Errorf("redisq: messages: cursor %.40q: %w", cursor, queue.ErrInvalid)
		}
		from = &p
	}
	return q.page(ctx, topic, state, code, from, limit)
}

// An entry is one message a list script returned.
type entry struct {
	pos  position
	size int
	rec  string // "" for an entry without a record, which is skipped
	// reason is the reason of the message's last failure, "" for none.
	reason string
}

// A stream is what one shard returned of a page, in order.
type stream struct {
	shard   int
	entries []entry
	asked   int  // how many the last call asked for
	done    bool // the shard has nothing after its last entry
}

func (s *stream) last() position { return s.entries[len(s.entries)-1].pos }

// page makes one page of Messages (see there): rounds of list scripts, each on the shards that may
// still hold messages of the page, until the entries up to the last of the page are known from
// every shard.
func (q *Queue) page(ctx context.Context, topic string, state queue.State, code string, from *position, limit int) ([]queue.MessageInfo, string, error) {
	n := q.lay.shards()
	streams := make([]*stream, n)
	ask := make([]int, n)
	first := 2*((limit+n-1)/n) + 2
	for i := range streams {
		streams[i] = &stream{shard: i}
		ask[i] = i
		streams[i].asked = first
	}
	for {
		if err := q.fetch(ctx, topic, code, from, streams, ask); err != nil {
			return nil, "", err
		}
		// Every entry up to the earliest last entry of the shards that have more is known.
		var frontier *position
		var all []entry
		for _, s := range streams {
			all = append(all, s.entries...)
			if !s.done && (frontier == nil || s.last().less(*frontier)) {
				p := s.last()
				frontier = &p
			}
		}
		slices.SortFunc(all, func(a, b entry) int {
			switch {
			case a.pos.less(b.pos):
				return -1
			case b.pos.less(a.pos):
				return 1
			}
			return 0
		})
		// target is the position of the limit-th message among the entries known; a shard whose
		// last entry is before it may hold messages of the page.
		var target *position
		real := 0
		for _, e := range all {
			if e.rec != "" {
				real++
				if real == limit {
					p := e.pos
					target = &p
					break
				}
			}
		}
		if frontier == nil || (target != nil && !frontier.less(*target)) {
			return q.pageOf(topic, state, all, frontier, limit)
		}
		ask = ask[:0]
		for _, s := range streams {
			if !s.done && (target == nil || s.last().less(*target)) {
				s.asked = min(2*s.asked, 2*queue.MaxPage)
				ask = append(ask, s.shard)
			}
		}
	}
}

// pageOf returns the first limit messages of all (sorted), and the next cursor: the position of
// the last message of the page when it is full and another may follow (a shard is not done:
// frontier is not nil, or a message follows in all), "" otherwise.
func (q *Queue) pageOf(topic string, state queue.State, all []entry, frontier *position, limit int) ([]queue.MessageInfo, string, error) {
	var out []queue.MessageInfo
	var last position
	more := frontier != nil
	for _, e := range all {
		if e.rec == "" {
			continue
		}
		if len(out) == limit {
			more = true
			break
		}
		rec, err := decodeRecord(e.rec)
		if err != nil {
			return nil, "", err
		}
		if rec.topic != topic && rec.origin != topic {
			return nil, "", fmt.Errorf("%w: message %q of topic %q listed under %q", ErrProtocol, e.pos.id, rec.topic, topic)
		}
		out = append(out, messageInfo(e.pos.id, state, e.pos.ms, e.size, rec, e.reason))
		last = e.pos
	}
	if len(out) == limit && more {
		return out, last.encode(), nil
	}
	return out, "", nil
}

// fetch runs the list script on the shards ask, each after its last entry (or from), and appends
// what they return to their streams.
func (q *Queue) fetch(ctx context.Context, topic, code string, from *position, streams []*stream, ask []int) error {
	sent := time.Now()
	replies, err := q.onShards(ctx, listScript, ask, func(s int) []any {
		st := streams[s]
		var after *position
		if len(st.entries) > 0 {
			p := st.last()
			after = &p
		} else {
			after = from
		}
		if after == nil {
			return []any{code, topic, "0", 0, "", st.asked, queue.PreviewLen}
		}
		return []any{code, topic, "1", after.ms, after.id, st.asked, queue.PreviewLen}
	})
	if err != nil {
		return fmt.Errorf("redisq: messages: %w", unavailable(err))
	}
	for k, v := range replies {
		st := streams[ask[k]]
		if len(v) < 1 || (len(v)-1)%5 != 0 {
			return fmt.Errorf("%w: list script replied %d values", ErrProtocol, len(v))
		}
		now, _ := v[0].(int64)
		q.clock.observe(now, sent)
		got := (len(v) - 1) / 5
		for i := 1; i < len(v); i += 5 {
			id, _ := v[i].(string)
			size, _ := v[i+2].(int64)
			rec, _ := v[i+3].(string)
			why, _ := v[i+4].(string)
			st.entries = append(st.entries, entry{pos: position{ms: scoreOf(v[i+1]), id: id}, size: int(size), rec: rec, reason: why})
		}
		st.done = got < st.asked
	}
	return nil
}

// scoreOf reads a sorted set's score from a script's reply, where it is a string (from
// WITHSCORES) or an integer; scores are whole milliseconds.
func scoreOf(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
		f, _ := strconv.ParseFloat(v, 64)
		return int64(f)
	}
	return 0
}
