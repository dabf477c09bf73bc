package redisq

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/schedule"
)

// checkSchedules checks the schedules of shard s on rdb, its master (recs are its messages'
// records), and returns the first broken invariant, or nil:
//
//   - every schedule record decodes, names a valid schedule whose home is s, and parses;
//   - snames holds exactly the schedules' names, and the counters schn and schp count them and
//     the paused ones;
//   - sact scores exactly the schedules that are running and have a time left, and no paused one;
//   - every message whose ID is a fire's lives in the home shard of the schedule's name, or is
//     aliased from there (put by a batch in another shard, or homed by layout version 2 or 3
//     elsewhere: see rehomeFires).
func checkSchedules(ctx context.Context, rdb *redis.Client, lay *layout, s int, recs map[string]record) error {
	raw, err := rdb.HGetAll(ctx, lay.schedKey(s)).Result()
	if err != nil {
		return err
	}
	names, err := rdb.ZRange(ctx, lay.schedNamesKey(s), 0, -1).Result()
	if err != nil {
		return err
	}
	acts, err := rdb.ZRangeWithScores(ctx, lay.schedActKey(s), 0, -1).Result()
	if err != nil {
		return err
	}
	paused := int64(0)
	running := map[string]bool{}
	for name, r := range raw {
		rec, err := decodeSchedRecord(r)
		if err != nil {
			return broken("schedule %q: %v", name, err)
		}
		if err := schedule.CheckName(name); err != nil || lay.home(name) != s {
			return broken("schedule %q in shard %d: home %d, name %v", name, s, lay.home(name), err)
		}
		if _, err := schedule.Check(rec.schedule(name), timeMs(rec.start)); err != nil {
			return broken("schedule %q: %v", name, err)
		}
		if rec.paused {
			paused++
		} else if rec.next >= 0 {
			running[name] = true
		}
	}
	if len(names) != len(raw) {
		return broken("snames has %d names, sch %d schedules", len(names), len(raw))
	}
	for _, n := range names {
		if _, ok := raw[n]; !ok {
			return broken("snames has %q, which has no schedule", n)
		}
	}
	for _, z := range acts {
		n, _ := z.Member.(string)
		if !running[n] {
			return broken("sact has %q, which is not a running schedule", n)
		}
		delete(running, n)
	}
	if len(running) > 0 {
		return broken("running schedules without an act time: %v", running)
	}
	meta, err := rdb.HMGet(ctx, lay.metaKey(s), "schn", "schp").Result()
	if err != nil {
		return err
	}
	num := func(v any) int64 { x, _ := v.(string); n, _ := strconv.ParseInt(x, 10, 64); return n }
	if num(meta[0]) != int64(len(raw)) || num(meta[1]) != paused {
		return broken("counters schn, schp = %v; counted %d, %d", meta, len(raw), paused)
	}
	for id, r := range recs {
		name, _, ok := queue.ParseFireID(id)
		if !ok || lay.home(name) == s {
			continue
		}
		if home, _, ok := parseAlias(r.aux, lay.shards()); !ok || home != lay.home(name) {
			return broken("fire %q in shard %d, not aliased from its schedule's home %d (aux %q)", id, s, lay.home(name), r.aux)
		}
	}
	return nil
}

func timeMs(ms int64) time.Time { return time.UnixMilli(ms) }
