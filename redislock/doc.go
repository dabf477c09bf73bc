// Package redislock is a distributed lock in Redis whose lease a watchdog renews while it is held,
// as Redisson's RLock does, with the renewals of all locks batched on one timing wheel.
//
// # Basics
//
// A [Locker] is made once per Redis deployment and shared:
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
// [Locker.Lock] waits for the lock; [Locker.TryLock] returns [ErrNotAcquired] at once when another
// owner holds it.
//
// By default a lock has a lease of the watchdog timeout ([WithWatchdogTimeout], 30 s by default)
// that the Locker renews every third of it for as long as the lock is held. A holder whose process
// dies stops renewing, and the lock frees itself when the lease runs out. [WithLease] gives a fixed
// lease instead, which is not renewed.
//
// The watchdog is one periodic timer per Locker on a tock wheel, not a goroutine or ticker per lock.
// Each round renews every held lock with one script call per batch of up to 256 locks held on the
// same Redis master, sent as one pipeline per master: a Redis Cluster of three masters costs three
// calls for 600 locks, however many hash slots they fall in. A round that fails is retried every
// timeout/12 until the lease would end; then the lock is lost, and its [Lock.Lost] channel is
// closed so that the holder can stop its work. Lost is also closed when a renewal finds the key
// gone or taken over, as after a Redis restart without persistence.
//
// Lock waits without polling: it subscribes to the lock's release channel, and a timer on the wheel
// set to the holder's remaining time to live covers a lost message or a holder that died.
//
// Every acquisition gets a fencing token ([Lock.Token]), which increases with every acquisition of
// a name. Pass it to the storage the lock protects so that it can refuse writes from a holder whose
// lock has meanwhile expired and been acquired again.
//
// [WithOwner] makes locks reentrant: the same owner token may acquire a lock it holds, and the lock
// is free after as many unlocks as acquisitions.
//
// # Replicas and failover
//
// Where the master that grants a lock has replicas in sync, the Locker waits (WAIT) for one of
// them to acknowledge the acquisition before returning it, for up to [WithReplicaWait] (1 s by
// default), and fails with [ErrNotReplicated] if none does; it counts a renewal only once a replica
// has it too. So a failover that promotes that replica keeps the lock and its lease. The script and
// the WAIT go to the master as one pipeline, as WAIT covers the writes of its own connection.
//
// Calls that fail for a reason that passes by itself (a connection refused or reset, CLUSTERDOWN,
// TRYAGAIN, MOVED, ASK, READONLY, LOADING) are retried within the lease, classified as package
// redisq classifies them (both use one internal package); after each failure that suggests the
// topology changed (a connection that failed, MOVED, CLUSTERDOWN, READONLY, MASTERDOWN) the
// Locker has a [redis.ClusterClient] reload its slot map ([redis.ClusterClient.ReloadState]), as
// go-redis alone reloads it only on a redirection or every ClusterStateReloadInterval (60 s by
// default), and would go on calling a dead master until long after a replica took over.
//
// # Client settings
//
// A Locker works with go-redis's defaults. It relies on these settings of the client it is given:
//
//   - ContextTimeoutEnabled: true is recommended. The watchdog gives each round one renewal period;
//     without it go-redis ignores that deadline, and a round sent to a master that stopped
//     answering (paused, or behind a network that drops packets) lasts ReadTimeout or DialTimeout
//     (5 s each by default) before its retry. Without it keep those well below a third of the
//     watchdog timeout.
//   - ReadTimeout must be longer than [WithReplicaWait]: a WAIT sent in a pipeline is bounded by
//     ReadTimeout, not by its own timeout.
//   - A ClusterClient needs MaxRedirects of at least 1 (the default is 3), for the renewals of locks
//     whose slot is being migrated. ClusterStateReloadInterval need not be short.
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
//	    last                 the last fencing token handed out
//	    epoch                master_replid (from INFO) of the master that handed it out
//	    released             the token of the last acquisition released by its holder, so that a
//	                         retried release can tell "already released" from "expired"
//	tock:lock:{N}:released   pub/sub channel; the token is published when the lock is freed
//
// The {N} hash tag keeps both keys of a lock in one Redis Cluster slot. The fence key stays after
// the lock is freed: one small key per lock name ever used.
//
// Four Lua scripts operate on these keys; their sources in scripts.go are the reference:
//
//   - acquire (KEYS: lock, fence; ARGV: owner, hold field, lease ms): if another owner holds the
//     lock, reply {0, PTTL, 0}. If nobody does, take the next token (below), write owner, token,
//     count=1 and the hold field, and set the lease. If the owner holds it, add the hold field
//     (and count it, unless it existed) and extend the lease to at least the given one. Then reply
//     {1, token, replicas}, replicas being the replicas connected to the master in sync
//     ("state=online" in INFO replication), whom the caller may WAIT for.
//   - release (KEYS: lock, fence; ARGV: token, hold field, channel, owner): if the lock's token and
//     owner match, delete the hold field and decrement count; at zero delete the lock, set
//     fence.released to the token and publish the token on the channel.
//   - renew (KEYS: lock keys of one slot; ARGV: lease ms, then a token and an owner per key): extend
//     the lease of each key whose token and owner match to at least the given one; reply 1 or 0
//     per key. The owner is compared too because a token can repeat when the fence key is lost.
//   - renew by master (no KEYS; ARGV: lease ms, then a key, a token and an owner per lock; declared
//     allow-cross-slot-keys, Redis 7): renew's work for locks of any slots one master serves; reply
//     1, 0, or -1 (not served here) per key, then the number of replicas in sync.
//
// The next token of a name is last+1 if the fence's epoch is the master's own. If the fence is
// missing, it is Redis's clock in microseconds (TIME); if the epoch is another, the larger of
// last+1,000,000 and that clock: Redis gives a master a new replication ID whenever it restarts or
// a replica is promoted, and such a master cannot know whether acquisitions it never saw were lost.
//
// A client in another language acquires with the acquire script, keeps the lease alive by running
// renew (or PEXPIRE after checking the token and owner in a script) more often than the lease, and
// releases with the release script. It may use any owner token and hold field; two clients sharing
// an owner token share the lock reentrantly.
//
// # Caveats
//
// The lock is as safe as Redis is consistent; this package does not implement Redlock across
// independent servers. What each deployment guarantees:
//
// One server. While it runs, one owner at a time holds a name. A restart without persistence frees
// every lock: holders of watchdog locks see Lost at their next renewal, up to a third of the
// watchdog timeout later, and holders of fixed leases not before their lease ends, so another
// owner may acquire a lock before its old holder knows it lost it; only the fencing token protects
// the work then. With AOF and appendfsync always nothing acknowledged is lost; with everysec a
// restart may lose the last second of acquisitions, with the same effect. Tokens never repeat:
// after a restart that kept the fence key they jump a million ahead; after one that lost it they
// start again from Redis's clock, which is above the old ones unless the clock was set back, or
// unless the name averaged more than one acquisition per microsecond since its first (counting
// each restart or failover as a million).
//
// Sentinel ([redis.NewFailoverClient]), and each master of a Cluster. Everything said of one server
// holds for the master. With the replica wait on, a failover keeps every lock that was returned and
// every lease as renewed, if it promotes a replica that acknowledged them: one that did is in
// sync at least as far as any other, and both Sentinel (among replicas of equal priority) and
// Cluster (by rank) prefer the replica with the most data; with several replicas per master a
// Cluster election may still go to one that did not. After a failover a lease ends by the promoted
// node's clock at the time the old master set, so clocks of the nodes that differ by more than
// Lost's margin shorten or lengthen leases by the difference. With the replica wait off
// ([WithReplicaWait](0)), a failover may lose the last acquisitions and renewals: another owner can
// then acquire such a lock before its holder's next renewal shows it lost (Lost closes then), and
// tokens stay unique as described for one server. A master cut off from its replicas by the
// network fails acquisitions and renewals (nobody acknowledges them) until it drops the replicas
// (repl-timeout, 60 s by default); from then on it has no replicas to wait for and grants and renews
// locks alone, while the other side may promote one. Redis Cluster stops such a master's writes
// after cluster-node-timeout; with Sentinel set min-replicas-to-write (and min-replicas-max-lag) so
// that it refuses them. During a Cluster slot migration, the renewals of the locks whose keys have
// already moved are routed through the client and not waited for.
//
// Ring ([redis.Ring]). Its shards are independent servers, each with the guarantees of one server;
// there is no replica wait. When the Ring takes a shard for down, the names it held move to other
// shards, where they can be acquired at once while their old holders still hold them, and their
// tokens increase only as far as the shards' clocks agree.
//
// Lost is closed a safety margin before the lease ends by the Locker's clock, counted from before
// the request that set it: 2 ms plus a thousandth of the lease, which covers a tick of the default
// wheel with as much scheduling delay, and clock rates of the Locker and Redis that differ by up
// to 1000 ppm. So Lost is closed before Redis expires the key. A call to Lost compares the time
// itself, so a check made after another owner acquired the lock always finds it closed; a goroutine
// blocked on the channel is woken by a timer on the wheel, later by whatever the wheel's tick
// exceeds 1 ms and the scheduler is late. Work that ignores Lost, or runs between a check of Lost
// and a write, is protected only by the fencing token. An acquisition whose reply comes after its
// lease ended fails with [ErrSlowReply] rather than return a lock that is lost already.
//
// Each release wakes one waiting goroutine per Locker, the one of that Locker that has waited
// longest; the woken waiters of different Lockers (processes) race, so there is no order across
// processes, and a goroutine that asks while the lock is free may get it before the waiters. With a
// Ring, the release messages of locks on other shards than the pub/sub connection's are not
// received, so waiters fall back on the holder's lease timer.
//
// A Locker holds no goroutine when idle and needs no Close: its pub/sub connection is closed a few
// seconds after the last wait, and a wheel it created for itself stops its goroutines when no timer
// is pending. Renewing the locks of a Cluster master with one script needs Redis 7.0 or later;
// with an older Redis the Locker renews them with one script per hash slot.
package redislock
