package redisq

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/queue"
)

// rehomed are the layout versions that homed a chosen ID of a fire's form ("<name>@<RFC 3339
// time>") by FNV-1a of the whole ID, as any chosen ID; version 4 homes it with the name (see
// layout.home), so that a schedule and its fires share a shard. Open upgrades a deployment of
// such a version with rehomeFires before it writes the new version.
var rehomed = []string{"2", "3"}

// rehomeToken is the token of the aliases rehomeFires writes for messages that no batch put:
// any token serves, as long as the alias and the record's aux name the same one.
const rehomeToken = "0-rehome"

// rehomePage is the COUNT of rehomeFires's HSCANs: how many records Redis looks at per call.
const rehomePage = 500

// rehomeFires makes every message of a deployment of layout version 2 or 3 found by its ID where
// this version looks for it, and returns how many messages it changed. Only chosen IDs of a
// fire's form whose home under the old version (FNV-1a of the ID) is not their name's need it.
// Such a message stays in its shard (its receipts name the shard), and is given an alias on its
// new home, as a message a batch put in another shard is (see Batches in the package doc):
//
//  1. reserve, on the new home: alias ID -> "<its shard>.<token>", the token being that of the
//     record's aux when a batch of the old version put it, else rehomeToken;
//  2. unalias, on the old home: the alias of ID a batch of the old version left there, if any;
//  3. rehome, on its shard: aux "<new home>.<token>".
//
// A message already on its new home drops the alias a batch of the old version left on its old
// home (2), then its aux (3). Each step writes what it would write again when repeated, and what
// a concurrent Open writes too; the version is written only after (see Open), so an upgrade
// interrupted anywhere is done again, whole, by the next Open. Each shard's records are read with
// HSCAN, rehomePage at a time, and each step is a script on one message: however many messages
// the deployment holds, Redis is never held for long.
func (q *Queue) rehomeFires(ctx context.Context) (int, error) {
	changed := 0
	for s := range q.lay.shards() {
		key := "{" + q.lay.tags[s] + "}:rec"
		var cursor uint64
		for {
			kv, next, err := q.rdb.HScan(ctx, key, cursor, "*@*", rehomePage).Result()
			if err != nil {
				return changed, fmt.Errorf("shard %d: %w", s, unavailable(err))
			}
			for i := 0; i+1 < len(kv); i += 2 {
				did, err := q.rehomeFire(ctx, s, kv[i], kv[i+1])
				if err != nil {
					return changed, fmt.Errorf("shard %d, message %q: %w", s, kv[i], err)
				}
				if did {
					changed++
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return changed, nil
}

// rehomeFire takes the steps of rehomeFires for the message id of shard s, whose record is rec,
// and reports whether it had to.
func (q *Queue) rehomeFire(ctx context.Context, s int, id, rec string) (bool, error) {
	if _, _, ok := queue.ParseFireID(id); !ok {
		return false, nil
	}
	home, old := q.lay.home(id), q.lay.homeV3(id)
	if home == old {
		return false, nil
	}
	r, err := decodeRecord(rec)
	if err != nil {
		return false, err
	}
	if s == home && r.aux == "" {
		return false, nil
	}
	token := rehomeToken
	if r.aux != "" {
		_, t, ok := parseAlias(r.aux, q.lay.shards())
		if !ok {
			return false, fmt.Errorf("%w: record's aux %q", ErrProtocol, r.aux)
		}
		token = t
	}
	at := strconv.Itoa(s) + "." + token
	want := ""
	if s != home {
		want = strconv.Itoa(home) + "." + token
		if err := q.rehomeStep(); err != nil {
			return false, err
		}
		v, err := reserveScript.Run(ctx, q.rdb, q.lay.keys(home), q.withStamp(at, 1, id, "", "", "")...).Slice()
		if err != nil {
			return false, unavailable(err)
		}
		if code := replyAt(v, 2); code != "ok" {
			if gone, err := q.recordChanged(ctx, s, id, rec); err != nil || gone {
				return false, err
			}
			// Not possible in a deployment of the old version, where the ID had one home and
			// one message: the message stays, delivered as any, but found by its ID only
			// through its receipts.
			q.logger().Error("redisq: upgrade: a chosen ID of a fire's form is taken on its new home shard; "+
				"the message of the old version under it stays where it is, not found by its ID",
				"prefix", q.cfg.prefix, "id", id, "shard", s, "home", home, "found", code, "value", replyAt(v, 3))
			return false, nil
		}
	}
	if old != s {
		if err := q.rehomeStep(); err != nil {
			return false, err
		}
		if _, err := unaliasScript.Run(ctx, q.rdb, q.lay.keys(old), q.withStamp(id, at)...).Result(); err != nil {
			return false, unavailable(err)
		}
	}
	if r.aux != want {
		if err := q.rehomeStep(); err != nil {
			return false, err
		}
		v, err := rehomeScript.Run(ctx, q.rdb, q.lay.keys(s), q.withStamp(1, id, r.aux, want)...).Slice()
		if err != nil {
			return false, unavailable(err)
		}
		if replyAt(v, 2) != "1" {
			// The message was acked or cancelled since it was read, by a process that opened
			// the deployment once another had upgraded it: the alias written for it goes.
			if _, err := unaliasScript.Run(ctx, q.rdb, q.lay.keys(home), q.withStamp(id, at)...).Result(); err != nil {
				return false, unavailable(err)
			}
			return false, nil
		}
	}
	return true, nil
}

// rehomeStep calls the test hook of rehomeFire's steps, if any.
func (q *Queue) rehomeStep() error {
	if q.cfg.rehomeStepHook == nil {
		return nil
	}
	return q.cfg.rehomeStepHook()
}

// recordChanged reports whether the record of id in shard s is no longer rec.
func (q *Queue) recordChanged(ctx context.Context, s int, id, rec string) (bool, error) {
	now, err := q.rdb.HGet(ctx, "{"+q.lay.tags[s]+"}:rec", id).Result()
	if err == redis.Nil {
		return true, nil
	}
	if err != nil {
		return false, unavailable(err)
	}
	return now != rec, nil
}
