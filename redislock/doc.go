// Package redislock is a distributed lock in Redis whose lease a watchdog renews while it is held,
// as Redisson's RLock does, with the renewals of all locks batched on one timing wheel.
//
// # Basics
//
// A Locker is made once per Redis deployment and shared:
//
//	locker := redislock.New(rdb, redislock.WithWheel(w))
//	lk, err := locker.Lock(ctx, "invoice:42")
//	if err != nil {
//		return err
//	}
//	defer lk.Unlock(context.WithoutCancel(ctx))
//	select {
//	case <-lk.Lost():
//		return errors.New("lost the lock") // stop: someone else may hold it now
//	case res := <-work(ctx, lk.Token()):
//		...
//	}
//
// Lock waits for the lock; TryLock returns ErrNotAcquired at once when another owner holds it.
//
// By default a lock has a lease of the watchdog timeout (WithWatchdogTimeout, 30 s by default) that
// the Locker renews every third of it for as long as the lock is held. A holder whose process dies
// stops renewing, and the lock frees itself when the lease runs out. WithLease gives a fixed lease
// instead, which is not renewed.
//
// The watchdog is one periodic timer per Locker on a tock wheel, not a goroutine or ticker per lock.
// Each round renews every held lock with one script call per batch of up to 256 keys, all batches in
// one pipeline; with Redis Cluster a batch holds only keys of one hash slot. A round that fails is
// retried every timeout/12 until the lease would end; then the lock is lost, and its Lost channel
// is closed so that the holder can stop its work. Lost is also closed when a renewal finds the key
// gone or taken over, as after a Redis restart without persistence.
//
// Lock waits without polling: it subscribes to the lock's release channel, and a timer on the wheel
// set to the holder's remaining time to live covers a lost message or a holder that died.
//
// Every acquisition gets a fencing token (Lock.Token), which increases with every acquisition of
// a name. Pass it to the storage the lock protects so that it can refuse writes from a holder whose
// lock has meanwhile expired and been acquired again.
//
// WithOwner makes locks reentrant: the same owner token may acquire a lock it holds, and the lock
// is free after as many unlocks as acquisitions.
//
// # Data layout
//
// The layout and the scripts are a stable protocol, so that programs in other languages can share
// locks with this package. For a lock named N (non-empty, without '}'):
//
//	tock:lock:{N}            hash, with a lease (PEXPIRE) while the lock is held
//	    owner                owner token of the holder
//	    token                fencing token of the current acquisition (decimal)
//	    count                number of holds of the owner (reentrant acquisitions not yet released)
//	    hold:<id>            "1" per hold; <id> is random per acquisition call, so that a retried
//	                         acquire or release counts once
//	tock:lock:{N}:fence      hash, no expiry
//	    last                 the last fencing token handed out (HINCRBY)
//	    released             the token of the last acquisition released by its holder, so that a
//	                         retried release can tell "already released" from "expired"
//	tock:lock:{N}:released   pub/sub channel; the token is published when the lock is freed
//
// The {N} hash tag keeps both keys of a lock in one Redis Cluster slot. The fence key stays after
// the lock is freed: one small key per lock name ever used.
//
// Three Lua scripts operate on these keys; their sources in scripts.go are the reference:
//
//   - acquire (KEYS: lock, fence; ARGV: owner, hold field, lease ms): if the lock hash has no owner,
//     take the next token from fence.last, write owner, token, count=1 and the hold field, and set
//     the lease; if the owner matches, add the hold field (and count it, unless it existed) and
//     extend the lease to at least the given one. Replies {1, token} when held, or {0, PTTL} when
//     another owner holds it.
//   - release (KEYS: lock, fence; ARGV: token, hold field, channel, owner): if the lock's token and
//     owner match, delete the hold field and decrement count; at zero delete the lock, set
//     fence.released to the token and publish the token on the channel.
//   - renew (KEYS: lock keys; ARGV: lease ms, then a token and an owner per key): extend the lease
//     of each key whose token and owner match to at least the given one; reply 1 or 0 per key. The
//     owner is compared too because tokens start again when the fence key is lost.
//
// A client in another language acquires with the acquire script, keeps the lease alive by running
// renew (or PEXPIRE after checking the token and owner in a script) more often than the lease, and
// releases with the release script. It may use any owner token and hold field; two clients sharing
// an owner token share the lock reentrantly.
//
// # Caveats
//
// The lock is as safe as Redis is consistent. With one server and no persistence, a restart frees
// every lock (their holders see Lost at the next renewal) and resets the fencing tokens; use AOF
// with appendfsync always where tokens must never repeat. With replication (Sentinel, Cluster) a
// failover can lose the last writes to the old primary, and so a lock; this package does not
// implement Redlock across independent servers.
//
// Lost is closed when the lease has ended by the Locker's clock, which counts it from before the
// renewal was sent: so Lost closes no later than Redis expires the key if the two clocks run at the
// same rate, and possibly a little earlier. Work that ignores Lost, or runs between a check of Lost
// and a write, is protected only by the fencing token.
//
// Each release wakes one waiting goroutine per Locker, the one of that Locker that has waited
// longest; the woken waiters of different Lockers (processes) race, so there is no order across
// processes, and a goroutine that asks while the lock is free may get it before the waiters. With a
// Ring, the release messages of locks on other shards than the pub/sub connection's are not
// received, so waiters fall back on the holder's lease timer.
//
// A Locker holds no goroutine when idle and needs no Close: its pub/sub connection is closed a few
// seconds after the last wait, and a wheel it created for itself stops its goroutines when no timer
// is pending.
package redislock
