// Package redisq is a delay queue kept in Redis: an implementation of [queue.Engine] on one Redis
// server, a Sentinel-managed primary or a Redis Cluster, which several stateless processes share.
// It is what the embedded engine, package delayq, is on one machine's disk, for deployments that
// outgrow one machine: replication and failover are Redis's, and no process of this package holds
// state that another could not take over.
//
// # Basics
//
//	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ClusterStateReloadInterval: 2 * time.Second})
//	q, err := redisq.Open(ctx, rdb, redisq.WithPrefix("tock"))
//	if err != nil {
//		return err
//	}
//	defer q.Close()
//	id, err := q.Put(ctx, queue.Message{Topic: "email", Payload: body, DeliverAt: time.Now().Add(time.Hour)})
//	ds, err := q.Receive(ctx, "email", 32, 30*time.Second) // waits until something is due
//
// Every process that opens the same prefix on the same Redis deployment serves the same queue: a
// message put through one is received through any. Open creates the deployment on first use
// (its shard count, WithShards, is fixed then) and checks that later processes agree.
//
// Redis 7.0 or later is required: the scripts use the "#!lua" shebang (see Scripts), sharded
// pub/sub, and effects replication of scripts, which Redis 7 always uses: replicas apply a
// script's writes rather than run it again, so a script may read the clock (TIME).
//
// # Shards
//
// Messages are spread over a fixed number of shards. Every key of a shard carries the shard's hash
// tag, so a shard lives in one Redis Cluster slot, and every operation on it is one Lua script:
// atomic, and decided by the clock of the Redis server that runs it. The tag of shard i of
// prefix p is "p/i.k", with k the smallest number from 0 up for which the tag's slot falls in the
// i-th of N equal ranges of the 16384 slots; so the shards spread evenly over masters that own
// contiguous slot ranges, as redis-cli creates them.
//
// A message lives in one shard from its Put until it is acked or cancelled. A generated ID names
// its shard (and the second it was due when put), so Cancel goes straight to it. A chosen ID's home
// shard is FNV-1a (64 bits) of the ID modulo N, unless the ID has the form of a generated one, in
// which case the shard it names is its home. A message with a chosen ID lives in its home shard,
// except when a batch puts it elsewhere (see Batches).
//
// Generated IDs are 24 characters of base32 ("0123456789abcdefghijklmnopqrstuv"), encoding 15
// bytes: the shard (2 bytes, big-endian), the Unix second the message was due when put (5 bytes)
// and 8 random bytes. Put draws a new one in the unlikely case that it names a waiting message.
//
// # Key layout
//
// The layout and the scripts are the protocol between the processes of a deployment; they are
// documented here so that they can be inspected with redis-cli and checked against the sources
// (lua/*.lua, which are the reference). With T the tag of a shard (keys are "{T}:" and a suffix):
//
//	{p}:config        hash: version, shards (N), secret (the receipts' HMAC key, hex); written once
//	{T}:meta          hash: adv, drain, cur, ver, sched, ready, leased (below)
//	{T}:guard         never written; every script names it (see Slot migration)
//	{T}:secs          sorted set: the seconds (Unix, as member and score) that have messages waiting
//	{T}:w:<sec>       hash: message ID -> record, for the messages due in that second (the wheel)
//	{T}:ix            hash: ID -> second, for waiting messages whose second the ID does not name
//	{T}:live          hash: ID -> record, for messages due or leased
//	{T}:r:<topic>     sorted set: the due messages of a topic, scored by due time in milliseconds
//	{T}:topics        set: the topics whose {T}:r:<topic> is not empty
//	{T}:lease         sorted set: leased message IDs, scored by lease deadline in milliseconds
//	{T}:alias         hash: chosen ID -> "<shard>.<batch token>", for IDs whose message lives elsewhere
//	{T}:abort:<token> string, expires after an hour: a batch that must not be written
//	{T}:done:<sec>    set, expires after 12 s: tombstones "<nonce>|<id>" of messages acked or
//	                  cancelled in that second (see Retries)
//	{T}:ev            sharded pub/sub channel of the shard's events
//	tock:lock:{T}     the shard's housekeeping lease, a lock of package redislock
//
// A message waiting for its due time is one field of its second's hash; it costs its record, its
// ID and Redis's hash-table overhead (about 200 bytes with a 100-byte payload), and nothing else
// unless its ID is chosen (a field of {T}:ix). The count of a second is HLEN of its hash, so the
// wheel's forecast (DueCounts) needs no counters of its own.
//
// In {T}:meta, adv is the "advanced to" pointer: every second below it has been claimed for
// promotion, and a message due in such a second goes straight to the ready set. drain is the
// second being promoted, and cur the HSCAN cursor of its hash, so that a second with a million
// messages is moved in bounded steps. ver counts the scripts that published an event (see Events).
// sched, ready and leased count the messages in the wheel, in the ready sets (some of which may be
// due a little ahead: see Promotion) and leased; Stats adds them over the shards.
//
// A record is text, then bytes:
//
//	<due>,<req>,<att>,<tok>,<aux>,<nonce>,<topic length>;<topic><payload>
//
// due is when the message is (or was) due, in Unix milliseconds by the clock of the Redis server
// (DeliverAt rounded up to the millisecond, never down, or the time of the Put if later); req is
// the DeliverAt it was put with, in milliseconds, when that differs from due (a Put that repeats
// a chosen ID is compared with it); att counts deliveries; tok is the token of the last lease (16
// characters of base64url), empty before the first and after a Nack; aux is "<shard>.<batch
// token>" for a message put by a batch under an alias in another shard, and empty otherwise; nonce
// is the Put call's random nonce for a chosen ID (8 bytes of base64url), empty for a generated ID,
// which is a nonce itself.
//
// # Scripts
//
// Every script's KEYS are {T}:meta and {T}:guard (and the shard's lock key for the scripts that
// check a fencing token); the other keys of the shard are named inside the script, from the tag.
// The scripts that change a shard:
//
//   - put: stores messages. For each, a message already waiting under its ID makes it a retried
//     Put (same topic, payload and requested time: nothing is written) or a duplicate (the waiting
//     one's due time is returned); an alias makes the caller resolve it first. A message due
//     within a second of the script's clock, or in a second below adv, goes to the ready set of
//     its topic with its exact due time; any other to the hash of its second. In a batch nothing
//     is written unless every message can be.
//   - receive: promotes what is due and expires due leases (as tick does, in a small budget),
//     then leases up to max messages of the topic whose due time has come by the script's clock,
//     earliest first: each gets a new lease token (from the caller's random bytes), one more
//     delivery, and a deadline in {T}:lease. It replies with the deliveries, the topic's next due
//     time, and the shard's next second and lease deadline.
//   - ack: for each (ID, token): removes the message if its record holds the token (acked), replies
//     "done" if no message has the ID, and "stale" otherwise (leased again since).
//   - nack: ends a current lease whose token matches and makes the message due after the delay, or
//     moves it to the dead-letter topic after the maximum number of failed deliveries.
//   - cancel: removes the message with the ID wherever it waits (wheel, ready set, lease).
//   - tick: the housekeeping of the shard's owner (see Ownership): checks the fencing token against
//     the lock, promotes the seconds that start within the owner's lead of the script's clock, and
//     expires leases whose deadline has passed (a failed delivery: due again after the backoff, or
//     a dead letter), each in a bounded budget; replies with what remains.
//   - reserve, resolve, unalias: the alias steps of cross-shard batches (see Batches).
//
// Read-only scripts (flag no-writes, so they run under maxmemory too): stats (the counters, and
// how many ready messages are not due yet), due (the count of each second in a range) and peek
// (the shard's next events and the heads of given topics).
//
// The scripts declare their flags in a "#!lua" shebang, so that Redis decides before a script
// starts whether it may run above maxmemory, never at a write halfway through it (which would
// leave a message half moved): put, reserve and resolve, which add data, are refused as a whole
// above maxmemory; receive, ack, nack, cancel, tick and unalias, which remove or move it, run
// there too, so that consumers can drain a full Redis.
//
// # Timing
//
// What is due is decided inside the scripts, by the Redis server's clock (TIME): a message is
// leased only once its due time, in milliseconds and rounded up, is not after the script's
// millisecond, which is rounded down. No process's clock can make a message early; a process
// whose clock runs ahead only asks too soon and is told when to ask again.
//
// Promotion moves a second's records from its hash to the ready sets of their topics, where each
// is scored by its own due time; it runs ahead of the second (the owner's lead: a quarter of a
// second, plus more for a second with many messages, about 10 µs per message), so that a second of
// a million messages is ready in time. A ready message whose due time has not come waits in its
// ready set; Stats counts it as scheduled, not due.
//
// Processes do not poll. Each keeps, on its tock wheel, the times it learnt from script replies and
// events: per shard the next second and lease deadline, and per topic it has receivers for, the
// shard's earliest due message. A Receive waits for the earliest, runs the receive script on the
// shards whose time has come, and waits again when they had nothing. A script that makes a time
// earlier (a Put into an empty topic, a new earliest second, a lease with the earliest deadline)
// publishes an event on the shard's channel, so every process learns of it at once.
//
// Pub/sub delivers nothing to a connection that dropped, so a process re-reads a shard's times
// (peek) whenever its subscription was re-established (Redis also drops the sharded
// subscriptions of a slot that moved), and pings each subscription that was quiet for a
// WithRecheck period (30 s by default): a reply proves nothing was lost on that connection, and
// no reply within another period makes it subscribe again. An idle deployment thus costs Redis one
// PING per subscription per period (one subscription per process on one server, one per shard
// per process on a cluster), and no other command while no message comes due: owners let their
// shards go (see Ownership).
//
// # Events
//
// A shard's channel carries one message per script that published, with ver, the shard's event
// count, so that a process can tell a reply older than an event it has applied:
//
//	m <ver> <second|-> <lease deadline|-> (<due ms> <topic length>:<topic>)*   times made earlier
//	n <ver> <second|-> <count> <lease deadline|-> <owner|->                    a tick's result
//	o <owner|->                                                                 ownership taken or given up
//
// # Ownership
//
// Each shard has at most one owner, the process holding its housekeeping lease: a redislock lock
// named after the shard's tag (so its key is in the shard's slot), renewed by redislock's watchdog
// (WithOwnerLease, 10 s by default). The owner runs tick at the shard's next second minus its lead
// and at each lease deadline, and publishes what it did. The tick script reads the lock's hash and
// refuses a fencing token that is not the current holder's, so a process that was paused or cut
// off past its lease, and resumes believing it owns the shard, cannot act as its owner.
//
// Ownership follows work: a process takes a free shard when one of the shard's times comes (each
// process at its own offset, and later the more shards it owns, which spreads ownership), and lets
// it go when the shard's next time is further than three leases away, so an idle deployment renews
// no leases. A new owner rebuilds nothing but the near window: its first tick reads the index of
// seconds and the lease deadlines.
//
// Delivery does not depend on an owner being alive: the receive script promotes and expires what is
// already due before it leases, and a process that sees a shard's time pass by a second (the grace)
// without the owner's event runs tick itself, without a fencing token and without a lead. The owner
// is what makes delivery precise (promotion ahead of time, so a large second is ready when due),
// what expires leases of topics nobody is receiving from, and what saves the other processes from
// all doing the same work.
//
// # Receipts
//
// A receipt is 36 characters of base64url followed by the message ID: a version byte, the shard (2
// bytes), the lease token (12 random bytes, kept in the record) and the first 12 bytes of
// HMAC-SHA256, under the deployment's secret, of the shard, token and ID. A receipt whose MAC does
// not verify is refused with queue.ErrUnknownReceipt without contacting Redis, whether or not its
// message exists; only receipts the engine issued, byte for byte, verify. So Ack can tell a receipt
// of a message that is done (no record: acked or cancelled, so the ack succeeds again) from a
// forgery, and needs no record of acked messages.
//
// # Batches
//
// PutBatch writes a whole batch with one script on one shard: the home shard of its first chosen
// ID, or any shard when it has none; its generated IDs name that shard. A chosen ID whose home is
// another shard gets an alias there, so that its uniqueness is still checked in one place:
//
//  1. reserve, on each other home shard: fails if the ID is waiting there or aliased to another
//     shard; otherwise writes alias "<batch shard>.<batch token>".
//  2. put, on the batch shard: refuses if the token is marked aborted or is older than ten minutes
//     (then the batch is retried from the start); otherwise writes every message, each aliased one
//     with aux naming its alias.
//
// An alias found by a later Put or Cancel of its ID is resolved on the shard it names (resolve):
// if the message is there with the token, the alias is real; otherwise the token is marked aborted
// (so a batch that reserved but has not written yet can never write) and the alias is removed.
// Ack and Cancel of an aliased message remove its alias afterwards (unalias); one left behind by a
// process that died is removed when next resolved. Batches without chosen IDs, or whose chosen IDs
// all have the batch's home shard, take one script.
//
// # Durability
//
// Put, PutBatch, Ack, Nack and Cancel are grouped: concurrent calls for the shards of one Redis
// master share a pipeline, in which the scripts of one shard share a call, followed by WAIT for
// the master's replicas. By default (WithReplicaWait) each such pipeline waits for one replica where
// the master has one (INFO replication, read again every few seconds) for up to a second; a
// write that no replica confirmed in time returns an error matching queue.ErrUnavailable, although
// it was made on the master and may survive (retry with the same chosen ID to be safe).
//
// What a nil return guarantees, then, is Redis's:
//
//   - One server without persistence: nothing survives a restart of Redis.
//   - appendonly yes with appendfsync everysec: up to about a second of acknowledged writes is lost
//     when the server or machine crashes; appendfsync always loses none (at a cost in throughput).
//   - With replicas and the replica wait: an acknowledged write is on the master and at least one
//     replica. A failover promotes a replica, and Redis Cluster and Sentinel promote the most
//     up-to-date one, but replication is asynchronous and a promoted replica may miss writes that
//     reached only the other replica; only writes that reached no replica are certain to be lost,
//     and those were not acknowledged.
//   - min-replicas-to-write on the masters makes a master refuse writes (NOREPLICAS) while fewer
//     replicas than that are connected and recent, so an isolated master stops accepting writes
//     that a failover would discard; the engine reports them as queue.ErrUnavailable. Receive,
//     Ack and the housekeeping write too, so a master left without its replica (after a failover,
//     until the old master is back as its replica) serves no shard until one is back.
//
// Receive's leases are not waited for: a lease lost in a failover only means an earlier
// redelivery, and an Ack of it then fails with queue.ErrUnknownReceipt.
//
// # Slot migration and failover
//
// Each script names {T}:guard, a key that never exists. While the shard's slot migrates, Redis
// answers a script that names a missing key with TRYAGAIN (or ASK and then TRYAGAIN on the target),
// so no script runs on a half-moved shard, whose undeclared keys might be on either side; the
// engine retries until the migration ends. A Put with a generated ID that meets TRYAGAIN,
// CLUSTERDOWN, MOVED, READONLY, a refused connection or a similar reply that proves the script did
// not run, moves to another shard (with a new ID); so while one master fails over, puts go on to
// the others.
//
// go-redis learns of a failover from MOVED replies and its periodic reload of the cluster's state.
// The engine cannot change a client it is given, so set ClusterOptions.ClusterStateReloadInterval
// to a second or two (its default is a minute; Open logs a warning above 10 s), and leave
// ClusterOptions.MaxRetries unset (see Retries). The engine asks the client to reload its state
// (ReloadState) whenever a call fails with a connection error, CLUSTERDOWN, READONLY,
// MASTERDOWN or MOVED. Set cluster-require-full-coverage no on the servers, so that the masters
// that did not fail keep serving their shards while a failed one is replaced.
//
// # Retries
//
// A write that Redis refused is sent again, to the shard's master as the client then knows it,
// after a backoff, until the call's context ends. A write whose connection failed after it was sent
// may or may not have run: it is sent again too, for at most 8 seconds after it was first sent,
// and then the call fails with an error matching queue.ErrUnavailable that says the outcome is
// unknown. The scripts make a repeated write harmless:
//
//   - put: a message already waiting under its ID is a retried Put. A message put due within 10 s
//     (marked 'y' in its nonce field), and acked or cancelled within 10 s of its due time, leaves
//     a tombstone for 10 s (a member "<nonce>|<id>" of {T}:done:<second>); a repeated put (flagged
//     as such) that finds its tombstone stores nothing. So an acked message is not stored again by
//     a retry of the Put that stored it, while a new Put of the same chosen ID (another nonce)
//     stores a new message. (A message due later than the retries last cannot be done before they
//     end: it leaves no tombstone.)
//   - ack: a receipt whose message is gone is acked again (see Receipts).
//   - receive: a repeated receive leases more messages; the ones of the lost reply come again
//     after their visibility timeout, counting an attempt.
//   - nack and cancel: the repeat reports queue.ErrUnknownReceipt, or false, for what the first
//     run did.
//
// So that only the engine repeats writes, the grouped writes to a single server use a client
// without go-redis's retries (one of the same options is made if the client given retries); the
// node clients of a cluster client do not retry unless ClusterOptions.MaxRetries is set.
//
// # Caveats
//
// Messages due at the same millisecond have no promised order; messages of different shards are
// ordered by due time within each Receive only as far as it sees them. DueCounts counts to the
// second, and does not count messages already promoted (those due within about a second).
// Lateness in Stats is that of this process's promotions. The processes of a deployment should be
// given the same options: the maximum attempts, backoff and dead-letter topic apply in whichever
// process runs the script that needs them. Redis's memory is the queue's capacity: with maxmemory
// reached, writes fail with queue.ErrUnavailable (set maxmemory-policy noeviction: an evicting
// policy would drop messages).
package redisq
