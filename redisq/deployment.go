package redisq

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A view is what this process holds of its deployment's configuration: the receipts' secret, and
// the stamp every shard of the deployment carries. It is immutable; the Queue replaces it when it
// adopts a configuration made anew.
type view struct {
	secret []byte
	stamp  string
	sign   signer
}

func newView(secret []byte) *view {
	return &view{secret: secret, stamp: stampOf(secret), sign: newSigner(secret)}
}

// stampOf is the stamp of the deployment whose receipts' secret is secret: 16 hex digits of
// SHA-256 of it, so that the stamp, which every script is given, does not give the secret away.
func stampOf(secret []byte) string {
	sum := sha256.Sum256(append([]byte("redisq deployment stamp\x00"), secret...))
	return hex.EncodeToString(sum[:8])
}

// deploymentState is the Queue's side of its deployment's configuration.
type deploymentState struct {
	view  atomic.Pointer[view]
	stale atomic.Pointer[error] // set for good once this process cannot serve the deployment

	mu        sync.Mutex   // serializes reconcile
	last      time.Time    // when reconcile last finished
	reconcile atomic.Bool  // noticeStamp's reconcile runs
	checked   atomic.Int64 // when checkConfig last read the configuration, in Unix nanoseconds
}

// signer returns the signer of the current view.
func (q *Queue) signer() signer { return q.dep.view.Load().sign }

// withStamp returns the arguments of a script call: the deployment's stamp, which every script
// checks against its shard's (see prelude.lua), then args.
func (q *Queue) withStamp(args ...any) []any {
	return append([]any{q.dep.view.Load().stamp}, args...)
}

// staleErr returns the error of a process that found its deployment made anew with another shard
// count or layout version, and refuses to serve it; nil otherwise.
func (q *Queue) staleErr() error {
	if p := q.dep.stale.Load(); p != nil {
		return *p
	}
	return nil
}

// The error replies of a script that found its shard's stamp missing or another deployment's.
const (
	stampLost  = "TOCKLOST"
	stampOther = "TOCKSTALE"
)

// isStampErr reports whether err is a script's refusal of a shard without the deployment's stamp.
func isStampErr(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	code, _, _ := strings.Cut(rerr.Error(), " ")
	return code == stampLost || code == stampOther
}

// configScript writes the deployment's configuration unless it exists, and replies with it, 1 if
// it wrote it, and the version it had when it upgraded it in place (empty when it did not). ARGV:
// version, shards, secret, then the versions to upgrade in place to the version given (see
// upgradable).
var configScript = newBareScript("config", "allow-oom", `
local created, from = 0, ''
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'version', ARGV[1], 'shards', ARGV[2], 'secret', ARGV[3])
  created = 1
else
  local had = redis.call('HGET', KEYS[1], 'version')
  for i = 4, #ARGV do
    if had == ARGV[i] then
      redis.call('HSET', KEYS[1], 'version', ARGV[1])
      from = had
      break
    end
  end
end
local v = redis.call('HMGET', KEYS[1], 'version', 'shards', 'secret')
v[4] = created
v[5] = from
return v
`)

// upgradable are the layout versions Open upgrades in place to layoutVersion: those whose keys
// and records the scripts of this version read as they are, so that the upgrade writes the new
// version in {p}:config and, for versions 2 and 3 (rehomed), first makes the messages under
// chosen IDs of a fire's form found where this version looks (rehomeFires). Version 3 only added keys ({T}:why, the limits' {T}:lim,
// {T}:lb:<topic> and {T}:lp:<topic>, the stamp in {T}:meta) and fail kinds ('d', 'N', 'D') that a
// record of version 2 does not have; version 4 only added the schedules' keys, and homes the IDs
// of schedules' fires ("<name>@<time>") with their schedule's name; version 5 only added the
// optional headers of a record, which no record of version 4 has. Version 5 is a version of its
// own, not written over version 4 as it is, because a process of version 4 cannot parse a record
// with headers: its scripts would fail on every such record they touch (a receive, a tick, a
// nack), and its Check would call the deployment damaged. Bumping the version makes such a
// process refuse the deployment at Open instead of sharing it.
var upgradable = []string{"2", "3", "4"}

// stampScript gives a shard the deployment's stamp (ARGV[1]) in its meta (KEYS[1]; KEYS[2] is the
// guard, so that a migrating shard is refused). It replies 0 when the shard had it, 1 when it had
// none (a new shard, or one whose data Redis lost), 2 when it had another deployment's.
var stampScript = newBareScript("stamp", "allow-oom", `
local d = redis.call('HGET', KEYS[1], 'dep')
if d == ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'dep', ARGV[1])
if d then return 2 end
return 1
`)

// A deployConfig is a deployment's configuration as Redis holds it.
type deployConfig struct {
	version string
	shards  int
	secret  []byte
	created bool   // configScript wrote it
	from    string // the version configScript upgraded in place, "" when it did not
}

// ensureConfig reads the deployment's configuration, writing it with version layoutVersion, the
// given shard count and secret if it does not exist, and upgrading it in place from a version of
// upgrade (see upgradable).
func (q *Queue) ensureConfig(ctx context.Context, shards int, secret []byte, upgrade []string) (deployConfig, error) {
	key := "{" + q.cfg.prefix + "}:config"
	args := []any{layoutVersion, shards, hex.EncodeToString(secret)}
	for _, v := range upgrade {
		args = append(args, v)
	}
	v, err := configScript.Run(ctx, q.rdb, []string{key}, args...).Slice()
	if err != nil {
		return deployConfig{}, fmt.Errorf("deployment %q: %w", q.cfg.prefix, unavailable(err))
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	if len(v) != 5 || str(0) == "" {
		return deployConfig{}, fmt.Errorf("%w: configuration of %q is %v", ErrProtocol, q.cfg.prefix, v)
	}
	c := deployConfig{version: str(0), from: str(4)}
	created, _ := v[3].(int64)
	c.created = created == 1
	if c.version != layoutVersion && !slices.Contains(rehomed, c.version) {
		return c, nil
	}
	n, err := strconv.Atoi(str(1))
	sec, err2 := hex.DecodeString(str(2))
	if err != nil || err2 != nil || n < 1 || n > MaxShards || len(sec) < 16 {
		return deployConfig{}, fmt.Errorf("%w: configuration of %q is %v", ErrProtocol, q.cfg.prefix, v[:3])
	}
	c.shards, c.secret = n, sec
	return c, nil
}

// incompatible is the error of a deployment of another layout version.
func (q *Queue) incompatible(version string) error {
	what := "it was made by a newer version of redisq: open it with that version"
	if n, err := strconv.Atoi(version); err == nil && n < 2 {
		what = "this version does not migrate it: drain it with the processes of the version that made it, " +
			"delete its keys (those of prefix " + strconv.Quote(q.cfg.prefix) + "), and Open then creates it anew; " +
			"or open this version with another prefix (WithPrefix)"
	}
	return fmt.Errorf("%w: deployment %q has layout version %s; this version of redisq reads and writes only layout version %s, "+
		"and upgrades %s in place; %s",
		ErrIncompatible, q.cfg.prefix, version, layoutVersion, strings.Join(upgradable, ", "), what)
}

// deployment reads the deployment's configuration, creating it if needed, and checks it; it
// returns the shard count and the view of the deployment, and the layout version to upgrade
// from with finishUpgrade once the shards are stamped ("" when the deployment has this
// version's layout).
func (q *Queue) deployment(ctx context.Context, shardsGiven bool) (int, *view, string, error) {
	var secret [32]byte
	rand.Read(secret[:])
	var inPlace []string
	for _, v := range upgradable {
		if !slices.Contains(rehomed, v) {
			inPlace = append(inPlace, v)
		}
	}
	c, err := q.ensureConfig(ctx, q.cfg.shards, secret[:], inPlace)
	if err != nil {
		return 0, nil, "", fmt.Errorf("redisq: Open: %w", err)
	}
	if c.from != "" {
		q.upgraded(c.from, 0)
	}
	pending := ""
	if c.version != layoutVersion {
		if !slices.Contains(rehomed, c.version) {
			return 0, nil, "", q.incompatible(c.version)
		}
		pending = c.version
	}
	if shardsGiven && c.shards != q.cfg.shards {
		return 0, nil, "", fmt.Errorf("%w: deployment %q has %d shards; WithShards(%d) was given",
			ErrMismatch, q.cfg.prefix, c.shards, q.cfg.shards)
	}
	return c.shards, newView(c.secret), pending, nil
}

// finishUpgrade upgrades the deployment, of layout version from (one of rehomed), whose shards
// are stamped with v: rehomeFires, then the new version in {p}:config, written last so that an
// upgrade interrupted before is done again by the next Open. Processes opening the deployment
// meanwhile do the same (rehomeFires writes what they write), and none serves it before its
// Open has finished the upgrade; one still at it when another has finished and serves finds
// the messages done since gone, and leaves nothing of theirs.
func (q *Queue) finishUpgrade(ctx context.Context, from string, v *view) error {
	n, err := q.rehomeFires(ctx)
	if err != nil {
		return fmt.Errorf("redisq: Open: upgrade from layout version %s: %w", from, err)
	}
	c, err := q.ensureConfig(ctx, q.lay.shards(), v.secret, []string{from})
	if err != nil {
		return fmt.Errorf("redisq: Open: %w", err)
	}
	switch {
	case c.version != layoutVersion:
		return fmt.Errorf("redisq: Open: deployment %q has layout version %s after the upgrade from %s: %w",
			q.cfg.prefix, c.version, from, ErrMismatch)
	case c.shards != q.lay.shards() || !bytes.Equal(c.secret, v.secret):
		return fmt.Errorf("redisq: Open: deployment %q was made anew during its upgrade; open it again: %w",
			q.cfg.prefix, ErrMismatch)
	}
	if c.from != "" {
		q.upgraded(c.from, n)
	}
	return nil
}

// upgraded logs the upgrade in place of the deployment from layout version from, which gave
// rehomed messages an alias on their new home (see rehomeFires).
func (q *Queue) upgraded(from string, rehomed int) {
	q.logger().Warn("redisq: upgraded the deployment in place to this version's layout; no process of the older version "+
		"may serve it any more (one still running writes records this version's scripts do not keep: stop it)",
		"prefix", q.cfg.prefix, "from", from, "to", layoutVersion, "rehomed", rehomed)
}

// stampShards gives every shard the stamp of v, and returns the shards that had none (new, or
// whose data Redis lost) and those that had another deployment's (which they now belong to v's,
// the configuration's).
func (q *Queue) stampShards(ctx context.Context, v *view) (unstamped, restamped []int, err error) {
	all := make([]int, q.lay.shards())
	for s := range all {
		all[s] = s
	}
	cmds := q.pipeScripts(ctx, stampScript, all, func(int) []any { return []any{v.stamp} })
	for s, c := range cmds {
		n, err := c.Int()
		if err != nil {
			return nil, nil, fmt.Errorf("stamp shard %d: %w", s, err)
		}
		switch n {
		case 1:
			unstamped = append(unstamped, s)
		case 2:
			restamped = append(restamped, s)
		}
	}
	return unstamped, restamped, nil
}

// reconcileEvery bounds how often reconcile reads the configuration: calls that come within it
// of the last (the other scripts that met the same lost shard, or a flood of forged receipts)
// take its outcome.
const reconcileEvery = 100 * time.Millisecond

// reconcile brings this process's view of the deployment in line with Redis, after a script found
// a shard without the deployment's stamp or with another, or a check found the configuration
// changed. The configuration in Redis is the truth:
//
//   - Gone (Redis lost it: a restart without persistence, FLUSHALL): it is written again from
//     this process's view, the same secret and shard count, so that every process opened before
//     the loss agrees with it, and so does every process opened after.
//   - Made anew with the same shard count and layout (by a process opened after the loss, before
//     any other noticed it): this process adopts its secret and stamp. Receipts issued before are
//     refused from then on; their messages are delivered again after their visibility.
//   - Made anew with another shard count or layout version: this process refuses to serve it
//     for good: every call and Ready fail with an error matching ErrUnavailable that says why, and
//     the process must be restarted.
//
// Then every shard gets the configuration's stamp; shards that had none lost their data (or are
// new), and shards that had another's belong to this configuration now. Each change is logged at
// level ERROR and counted (redis_deployment_lost_total, redis_deployment_adopted_total,
// redis_deployment_stale).
func (q *Queue) reconcile(ctx context.Context) error {
	q.dep.mu.Lock()
	defer q.dep.mu.Unlock()
	if err := q.staleErr(); err != nil {
		return err
	}
	if time.Since(q.dep.last) < reconcileEvery {
		return nil
	}
	defer func() { q.dep.last = time.Now() }()
	cur := q.dep.view.Load()
	c, err := q.ensureConfig(ctx, q.lay.shards(), cur.secret, nil)
	if err != nil {
		return fmt.Errorf("redisq: %w", err)
	}
	log := q.logger()
	if c.created {
		q.metrics.deploymentLost.Add(1)
		log.Error("redisq: the deployment's configuration was gone from Redis (a restart without persistence, or FLUSHALL): "+
			"wrote it again from this process's, so that every process agrees; the messages kept only in the lost data are gone",
			"prefix", q.cfg.prefix)
	}
	switch {
	case c.version != layoutVersion:
		return q.refuse(fmt.Errorf("redisq: deployment %q was made anew with layout version %s; this process reads and writes %s: restart it: %w",
			q.cfg.prefix, c.version, layoutVersion, ErrUnavailable))
	case c.shards != q.lay.shards():
		return q.refuse(fmt.Errorf("redisq: deployment %q was made anew with %d shards; this process has %d: restart it: %w",
			q.cfg.prefix, c.shards, q.lay.shards(), ErrUnavailable))
	case !bytes.Equal(c.secret, cur.secret):
		// Counted and logged first: whatever the new view serves comes after both.
		q.metrics.deploymentAdopted.Add(1)
		log.Error("redisq: the deployment's configuration was made anew since this process read it (Redis lost its data, and a "+
			"process opened since wrote another): adopted it; receipts issued before are refused, their messages delivered again",
			"prefix", q.cfg.prefix)
		q.dep.view.Store(newView(c.secret))
	}
	unstamped, restamped, err := q.stampShards(ctx, q.dep.view.Load())
	if err != nil {
		return fmt.Errorf("redisq: %w", unavailable(err))
	}
	if len(unstamped) > 0 {
		q.metrics.deploymentLost.Add(1)
		log.Error("redisq: shards of the deployment had lost their data (a restart of their Redis without persistence, or FLUSHALL); "+
			"their messages are gone", "prefix", q.cfg.prefix, "shards", unstamped)
	}
	if len(restamped) > 0 {
		log.Error("redisq: shards of the deployment were stamped by a process with an older configuration; they are the current one's now",
			"prefix", q.cfg.prefix, "shards", restamped)
	}
	return nil
}

// refuse makes this process refuse to serve its deployment for good, with err.
func (q *Queue) refuse(err error) error {
	q.dep.stale.CompareAndSwap(nil, &err)
	q.logger().Error("redisq: refusing to serve the deployment on a stale view of it", "prefix", q.cfg.prefix, "err", err)
	return q.staleErr()
}

// noticeStamp reconciles the deployment in the background, after a grouped write met a shard's
// refusal of its stamp, unless a reconcile it started still runs. The write is sent again after
// its backoff.
func (q *Queue) noticeStamp() {
	if q.closed.Load() || !q.dep.reconcile.CompareAndSwap(false, true) {
		return
	}
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		defer q.dep.reconcile.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), actTimeout)
		defer cancel()
		if err := q.reconcile(ctx); err != nil && q.staleErr() == nil {
			q.logger().Warn("redisq: reconciling the deployment failed; retrying with the next write", "err", err)
		}
	}()
}

// afterStampErr handles the error of a script: for a refusal of a shard's stamp it reconciles the
// deployment and reports whether the script may be sent again (with the stamp of the view then);
// any other error is returned as it is.
func (q *Queue) afterStampErr(ctx context.Context, err error) (again bool, _ error) {
	if !isStampErr(err) {
		return false, err
	}
	if rerr := q.reconcile(ctx); rerr != nil {
		return false, rerr
	}
	return true, nil
}

// checkConfig reads the deployment's configuration and reconciles when it is not what this process
// holds (gone, or made anew). Unless always is set, a call within reconcileEvery of the last does
// nothing.
func (q *Queue) checkConfig(ctx context.Context, always bool) error {
	now := time.Now().UnixNano()
	last := q.dep.checked.Load()
	if !always && (now-last < int64(reconcileEvery) || !q.dep.checked.CompareAndSwap(last, now)) {
		return q.staleErr()
	}
	q.dep.checked.Store(now)
	v, err := q.rdb.HGet(ctx, "{"+q.cfg.prefix+"}:config", "secret").Result()
	if err != nil && err != redis.Nil {
		return unavailable(err)
	}
	if sec, derr := hex.DecodeString(v); err == nil && derr == nil && bytes.Equal(sec, q.dep.view.Load().secret) {
		return nil
	}
	q.dep.mu.Lock()
	q.dep.last = time.Time{} // reconcile now, whenever it last did
	q.dep.mu.Unlock()
	return q.reconcile(ctx)
}

// verify decodes and checks a receipt. One that the current view's secret does not verify may be
// of a configuration made anew since this process read it, by a process opened after Redis lost
// the deployment: the configuration is read again (checkConfig) and the receipt checked with the
// secret then held.
func (q *Queue) verify(ctx context.Context, s string) (receipt, bool) {
	v := q.dep.view.Load()
	if rc, ok := v.sign.verify(s, q.lay.shards()); ok {
		return rc, true
	}
	if q.checkConfig(ctx, false) != nil || q.dep.view.Load() == v {
		return receipt{}, false
	}
	return q.signer().verify(s, q.lay.shards())
}
