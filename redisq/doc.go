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
// Redis 7.0 or later is required: the scripts are the functions of a Redis function library
// (see Scripts), and redisq uses sharded pub/sub and effects replication of scripts, which Redis 7
// always uses: replicas apply a script's writes rather than run them again, so a script may read
// the clock (TIME).
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
// bytes: the shard (2 bytes, big-endian), the Unix second the message was due when put (5 bytes),
// the Unix millisecond of the put by the process's estimate of the Redis clock, modulo 2^16 (2
// bytes), and 6 random bytes. So the IDs of messages put for one instant grow with time, and go to
// the end of their topic's wheel (see Key layout). Put draws a new one in the unlikely case that
// it names a waiting message.
//
// # Key layout
//
// The layout and the scripts are the protocol between the processes of a deployment; they are
// documented here so that they can be inspected with redis-cli and checked against the sources
// (lua/*.lua, which are the reference). With T the tag of a shard (keys are "{T}:" and a suffix):
//
//	{p}:config        hash: version (3), shards (N), secret (the receipts' HMAC key, hex); written
//	                  once, and again if Redis loses it (see Durability)
//	{T}:meta          hash: dep (the deployment's stamp, see Durability), adv, ver, sched, ready,
//	                  leased (below)
//	{T}:guard         never written; every script names it (see Slot migration)
//	{T}:rec           hash: message ID -> record, for every waiting message
//	{T}:xi:<topic>    sorted set, every score 0: the bounds of the chunks of the topic's wheel (below)
//	{T}:xc:<n>:<topic><bound>
//	                  sorted set: a chunk of the wheel of the topic (of n bytes): IDs of scheduled
//	                  messages, scored by due time in milliseconds
//	{T}:xt            sorted set: the topics with scheduled messages, scored by the earliest one's due time
//	{T}:sc            hash: second (Unix) -> how many scheduled messages are due in it
//	{T}:secs          sorted set: the seconds {T}:sc counts (member and score)
//	{T}:r:<topic>     sorted set: the ready messages of a topic, scored by due time in milliseconds
//	{T}:topics        set: the topics whose {T}:r:<topic> is not empty
//	{T}:lease         sorted set: leased message IDs, scored by lease deadline in milliseconds
//	{T}:l:<topic>     sorted set: the same, for the messages of one topic
//	{T}:d:<topic>     sorted set: the dead letters that died on the topic and are not leased, scored
//	                  by when they died, in milliseconds
//	{T}:tc            hash: per topic, counters "s<topic>" (scheduled), "p<topic>" (puts),
//	                  "v<topic>" (deliveries) and "a<topic>" (acks)
//	{T}:paused        set: the paused topics
//	{T}:why           hash: message ID -> the reason its last failed delivery gave (a Nack's
//	                  queue.WithReason), for the waiting messages whose record's fail kind says so
//	{T}:lim           hash: topic -> its delivery limit, "<rate>,<burst>,<concurrency>", a copy in
//	                  every shard (see Limits)
//	{T}:lb:<topic>    hash: tok, ts: the token bucket of a limited topic's rate, on its home shard
//	{T}:lp:<topic>    sorted set: the permits of a limited topic's leases, on its home shard: lease
//	                  token -> deadline (ms, a margin after the lease's)
//	{T}:lat           hash: the lateness of the messages made due: n, sum, max (ms), b1...b17 (see Timing)
//	{T}:alias         hash: chosen ID -> "<shard>.<batch token>", for IDs whose message lives elsewhere
//	{T}:abort:<token> string, expires after an hour: a batch that must not be written
//	{T}:done:<sec>    set, expires after 12 s: tombstones "<nonce>|<id>" of messages acked or
//	                  cancelled in that second (see Retries)
//	{T}:sch           hash: schedule name -> schedule record (see Schedules)
//	{T}:sact          sorted set: the running schedules, scored by when a process must act on each (ms)
//	{T}:snames        sorted set, every score 0: the schedules' names, for paging
//	{T}:ev            sharded pub/sub channel of the shard's events
//	tock:lock:{T}     the shard's housekeeping lease, a lock of package redislock
//
// A waiting message is a field of {T}:rec and one entry of a sorted set: its topic's wheel while it
// is scheduled, its topic's ready set once promoted (or put due within a second), the leases while
// leased. A scheduled message with a 100-byte payload costs Redis about 276 bytes (see the figures
// in Admin): its record and ID in the hash, and its ID and due time in a chunk.
//
// The wheel of a topic is its scheduled messages in the order of (due time, ID), cut in chunks:
// each a sorted set of at most 128 IDs scored by due time, which Redis keeps as a listpack (a
// compact array, about 35 bytes an entry; a bigger sorted set is a skip list and a hash table, at
// about 125 bytes an entry). A chunk covers a range of (due time, ID); its key ends with its lower
// bound, "<due time in ms, 14 digits><ID>", which is also its member in {T}:xi:<topic>, where
// ZREVRANGEBYLEX finds the chunk of an entry in one command (an entry after the last chunk's
// bound, as delays counted from now are, and generated IDs put for one instant, needs none). The first chunk's bound is "", so that every
// entry has a chunk. A chunk that reaches 128 entries is split in two (the last one, filled in
// order, splits off only its last few, so that it stays full); an empty one is removed (the first
// by renaming the second to it); one under 16 entries is merged into the chunk before it when both
// fit in 96. An ID longer than 64 bytes (Redis's zset-max-listpack-value) makes its chunk a skip
// list, which it may stay after the ID is gone: about 90 bytes more per entry of that chunk. Chosen
// IDs that long cost memory, and nothing else.
//
// In {T}:meta, schn and schp count the shard's schedules and the paused ones, and schf and schm
// their fires and misfires. In {T}:meta, adv is the "advanced to" pointer: every second below it has been claimed for
// promotion, and a message due in such a second goes straight to the ready set. ver counts the
// scripts that published an event (see Events). sched, ready and leased count the messages in the
// wheels, in the ready sets (some of which may be due a little ahead: see Timing) and leased;
// Stats adds them over the shards.
//
// A record is text, then bytes:
//
//	<due>,<req>,<att>,<tok>,<aux>,<nonce>,<fail>,<dead>,<origin length>,<topic length>[,<headers length>];<origin><topic>[<headers>]<payload>
//
// due is when the message is (or was) due, in Unix milliseconds by the clock of the Redis server
// (DeliverAt rounded up to the millisecond, never down, or the time of the Put if later); req is
// the DeliverAt it was put with, in milliseconds, when that differs from due (a Put that repeats
// a chosen ID is compared with it); att counts deliveries; tok is the token of the last lease (16
// characters of base64url), empty before the first and after a Nack; aux is "<shard>.<batch
// token>" for a message put by a batch under an alias in another shard (or given one by the upgrade
// from layout version 2 or 3), and empty otherwise; nonce
// is the Put call's random nonce for a chosen ID (8 bytes of base64url), empty for a generated ID,
// which is a nonce itself. fail is the last failed delivery, "n<ms>" (nacked at) or "x<ms>" (lease
// expired at), "d<ms>" (nacked to its dead letters at once, queue.WithDeadLetter), empty before the
// first; "N<ms>" and "D<ms>" are "n" and "d" whose Nack gave a reason, kept in {T}:why, so that the
// scripts that end a message look there only when there is something to remove. A dead letter's topic is its dead-letter topic; origin is the
// topic it died on, and dead "<ms>.<attempts>" when it died and after how many deliveries there
// (its attempts count from 0 again on the dead-letter topic); both are empty for any other message.
// A message with headers (queue.Message.Headers) has an eleventh field, their length, and the
// headers themselves between its topic and its payload: a JSON object of strings, keys in order,
// as {"traceparent":"00-..."}; a message without has neither, so records written before headers
// existed read as they did. The scripts carry the headers along wherever they rewrite a record,
// and compare no headers (a retried Put is one whatever its headers). Processes of a version
// before headers refuse records that have them (a malformed record): upgrade every process of a
// deployment before putting messages with headers.
//
// # Scripts
//
// Every script's KEYS are {T}:meta and {T}:guard (and the shard's lock key for the scripts that
// check a fencing token); the other keys of the shard are named inside the script, from the tag.
// The scripts that change a shard:
//
//   - put: stores messages. For each, a message already waiting under its ID makes it a retried
//     Put (same topic and payload, and the same requested time or two that have both come by the
//     script's clock, to the millisecond: nothing is written) or a duplicate (the waiting one's
//     due time is returned); an alias makes the caller resolve it first. A message due
//     within a second of the script's clock, or in a second below adv, goes to the ready set of
//     its topic with its exact due time; any other to its topic's wheel. In a batch nothing is
//     written unless every message can be.
//   - receive: promotes what is due and expires due leases (as tick does, in a small budget),
//     then leases up to max messages of the topic whose due time has come by the script's clock,
//     earliest first: each gets a new lease token (the caller's random base and its rank), one more
//     delivery, and a deadline in {T}:lease. It replies with the deliveries, the topic's next due
//     time, and the shard's next second and lease deadline.
//   - ack: for each (ID, token): removes the message if its record holds the token (acked), replies
//     "done" if no message has the ID, and "stale" otherwise (leased again since).
//   - nack: ends a current lease whose token matches and makes the message due after the delay, or
//     moves it to the dead-letter topic after the maximum number of failed deliveries (or at once,
//     when the caller asks), recording the failure and its reason.
//   - limit: sets or removes a topic's limit in {T}:lim (every shard), and on its home shard
//     resets its bucket to full when the rate changes; publishes the topic's head, so that its
//     receivers look again.
//   - permit: on a limited topic's home shard, by the script's clock: acquire grants up to n
//     permits (the bucket's whole tokens, and the concurrency less the permits held, after those
//     past their deadline are dropped), each under a lease token the caller gives and a deadline,
//     and says when the next comes when it grants none; release drops permits and gives unused
//     tokens back to the bucket (less the refill the bucket may have lost while they were out:
//     see Limits), publishing the topic's head when that frees a permit; extend moves the
//     deadlines of permits, of any topics homed on the shard.
//   - extend: for each (ID, token, visibility), moves the deadline of a current lease whose token
//     matches, and whose deadline has not passed by the script's clock, to the visibility from
//     that clock (in {T}:lease and {T}:l:<topic>); the token, and so the receipt, stays the
//     same. The extensions of one shard's leases made together (ExtendBatch, or concurrent
//     Extends) are one script.
//   - cancel: removes the message with the ID wherever it waits (wheel, ready set, lease).
//   - tick: the housekeeping of the shard's owner (see Ownership): checks the fencing token against
//     the lock, promotes the seconds that start within the owner's lead of the script's clock, and
//     expires leases whose deadline has passed (a failed delivery: due again after the backoff, or
//     a dead letter), each in a bounded budget; replies with what remains.
//   - reserve, resolve, unalias: the alias steps of cross-shard batches (see Batches).
//   - delivernow, requeue, purge, pause: the actions of Admin (see there).
//
// Every script that moves a message keeps its topic's wheel, leases, dead letters and counters in
// step with it, in the same script.
//
// Read-only scripts (flag no-writes, so they run under maxmemory too): stats (the counters, how
// many ready messages are not due yet, and the lateness hash), due (the count of each second in a
// range), peek (the shard's next events and the heads of given topics), topics, list and message
// (see Admin), and reclaim: when the reply of a receive script is lost after it was sent (the
// connection failed or timed out), the Receive asks the shard for the topic's leases whose token
// begins with the base it sent and whose deadline is in the window that script could have set,
// and returns them, rather than leave them leased to no one until their visibility runs out.
//
// The scripts are the functions of one library, which Open loads on every master (FUNCTION LOAD;
// Redis keeps it with the data, and replicas get it from their master). The library is
// lua/prelude.lua followed by each script's file, as the body of a function that calls the
// prelude's begin first; the library is named "tock_" and the first 16 hexadecimal digits of the
// SHA-1 of its source, and each function "<library>_<file>", so that two versions of redisq on one
// Redis (a rolling upgrade) each call their own. A node that answers "Function not found" (a master
// restored or flushed without it) is given the library and asked again; Redis refuses FUNCTION
// LOAD above maxmemory, so Open loads the library only on a node that does not list it (FUNCTION
// LIST), and a process opened on a full Redis drains it, but a node that lost the library cannot
// be given it until it is below maxmemory again (where EVAL of a script's source ran). A library
// takes some 290 KB of Redis's memory (INFO memory: 190 KB of compiled functions,
// used_memory_vm_functions, and its 100 KB of source), a tenth of what its 25 scripts took in the
// script cache, each with the prelude (2.1 MB compiled and 0.9 MB of source). Libraries of
// earlier versions stay in Redis until deleted (FUNCTION DELETE tock_<digits>; FUNCTION LIST
// shows them). A Redis user restricted by an ACL needs FCALL, FUNCTION LOAD and FUNCTION LIST (in
// the category @scripting) where it needed EVALSHA and SCRIPT LOAD before.
//
// The functions declare their flags, so that Redis decides before a script starts whether it may
// run above maxmemory, never at a write halfway through it (which would leave a message half
// moved): put, reserve and resolve, which add data, are refused as a whole above maxmemory; the
// others, which remove or move it, run there too, so that consumers can drain a full Redis and an
// operator can act on it.
//
// # Timing
//
// What is due is decided inside the scripts, by the Redis server's clock (TIME): a message is
// leased only once its due time, in milliseconds and rounded up, is not after the script's
// millisecond, which is rounded down. No process's clock can make a message early; a process
// whose clock runs ahead only asks too soon and is told when to ask again.
//
// Promotion moves the messages of the seconds that start within the owner's lead from the wheels to
// the ready sets, where each is scored by its own due time: it takes the topics in the order of
// {T}:xt, the first chunk of each, at most a budget of messages per script, and leaves the records
// where they are. It runs ahead of the second (the lead: a quarter of a second, plus more for a
// second with many messages, about 10 µs per message, from {T}:sc), so that a second of a million
// messages is ready in time. A ready message whose due time has not come waits in its
// ready set; Stats counts it as scheduled, not due, and DueCounts counts it in its due second.
//
// Lateness is measured where it is decided: every script that makes a message due (a Put due within
// a second, a promotion, a failed delivery due again, DeliverNow, Requeue) adds how long after its
// due time it did so (0 when ahead of it) to the shard's {T}:lat: a count, a sum and a maximum in
// milliseconds, and the count of each bucket with upper bounds 0, 1, 2, 5, 10, 25, 50, 100, 250,
// 500 ms, 1, 2.5, 5, 10, 30, 60 s, and above. Stats adds the shards' hashes up: Lateness.Count and
// Sum cover every message made due since the deployment was created, whichever process's script
// did it (so every process reports the same), and P50, P99 and Max the messages made due since the
// oldest of this process's Stats calls of the last minute (all of them on its first call), each to
// the upper bound of its bucket. It measures the engine in Redis: the time a process takes to learn
// that a message is due, and the round trip of its Receive, are not in it.
//
// Processes do not poll. Each keeps, on its tock wheel, the times it learnt from script replies and
// events: per shard the next second and lease deadline, and per topic it has receivers for, the
// shard's earliest due message. A Receive waits for the earliest, runs the receive script on the
// shards whose time has come (at once, up to 16 of them, each asked for its share of the messages
// asked for, and no more shards than leave each a share of 25: a script's own cost is that of
// some five to ten messages leased), and waits again when they had nothing. A script that makes a time
// earlier (a Put into an empty topic, a new earliest second, a lease with the earliest deadline)
// publishes an event on the shard's channel, so every process learns of it at once.
//
// Pub/sub delivers nothing to a connection that dropped, so a process re-reads a shard's times
// (peek) whenever its subscription was re-established (Redis also drops the sharded
// subscriptions of a slot that moved), and pings each subscription that was quiet for a
// WithRecheck period (30 s by default): a reply proves nothing was lost on that connection, and
// no reply within another period makes it subscribe again. A lost event that leaves no trace (a
// process believes a shard has nothing ready of a topic while it has, and the shard's later
// events tell only of heads earlier than the one there) has a floor too: the schedule driver's
// read of each shard, at least once a period (see Schedules), also returns the heads of the
// topics this process has Receives waiting on, and lowers what the process knows to them (a
// message found so, due more than a period before the read, is logged as a warning: a defect).
// An idle deployment thus costs Redis, per period, one PING per subscription (one subscription
// per process on one server, one per shard per process on a cluster) and, per process and shard,
// one scheddue script of five commands (FCALL, the stamp's HGET, TIME, two ZRANGEBYSCORE), one
// more per topic waited on: with three processes, 16 shards and the default period, 8 commands a
// second, 9.6 with Receives waiting on one topic; and no other command while no message comes
// due: owners let their shards go (see Ownership).
//
// # Events
//
// A shard's channel carries one message per script that published, with ver, the shard's event
// count, so that a process can tell a reply older than an event it has applied:
//
//	m <ver> <second|-> <lease deadline|-> (<due ms> <topic length>:<topic>)*   times made earlier
//	n <ver> <second|-> <count> <lease deadline|-> <owner|->                    a tick's result
//	o <owner|->                                                                 ownership taken or given up
//	s <ms|->                                                                    the shard's earliest schedule act time
//
// The heads of paused topics are left out of 'm' events (see Admin), except in the event of the
// script that resumes one, which carries its head whatever it was.
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
// no leases. A new owner rebuilds nothing but the near window: its first tick reads the earliest
// second and lease deadline.
//
// Delivery does not depend on an owner being alive, nor on time: a process that has not seen the
// owner's event 100 ms (the grace, plus an offset of its own of up to half as much) after the owner
// should have ticked runs tick itself, without a fencing token but with the owner's lead, so that
// a second whose owner died (its lease not yet run out) is still promoted before it starts; the
// first process to act publishes its event, and the others, seeing the shard's times move on, do
// nothing. A lease deadline, which has no lead, is expired that much late. The receive script
// promotes and expires what is already due before it leases, too. The owner is what saves the
// other processes from all doing the same work, and what expires, on time, the leases of topics
// nobody is receiving from. A process killed with messages due over the next seconds costs them
// no lateness: in cmd/tockd's TestKilledInstanceLeavesNoLateness (two tockd on one Redis, 1,000
// messages, the owner of some shards killed), the survivor delivers them with a lateness p99
// under 25 ms.
//
// # Limits
//
// A topic's delivery limit (queue.Limiter) is a copy in every shard's {T}:lim, and the permits on
// its home shard (FNV-1a of its name modulo N, as for a chosen ID). The receive script leases
// nothing of a limited topic to a caller that holds no permits, and replies that the topic is
// limited; the caller then asks the home shard's permit script for permits, runs the receive
// script with the permits' tokens as the lease tokens (on the shards whose messages are due), and
// gives back the permits it did not use: the bucket takes their tokens back less the refill of
// the time they were out (rate·span), which it would have lost had it been full meanwhile, so
// that a receive that took the whole bucket and gave it back later does not let two others take
// a burst each at once. An ack or nack of a limited topic's message replies the
// topic, and the caller gives its permit back; an extension extends its permit too. A permit of a
// lease that ends otherwise (it ran out, its consumer died) is dropped at its deadline, a second
// after the lease's, so that the shards' clocks may differ by that much without the concurrency
// being passed. So every consumer of every process is bound by the limit, decided by the home
// shard's clock: at most rate·T + burst deliveries in any T seconds, and at most concurrency
// permits at once (a lease taken without one, before the limit was set, is not counted). A
// Receive granted none waits, on the wheel, until the next permit the script announced or the
// home shard's event that one came free.
//
// # Schedules
//
// A Queue is a queue.Scheduler. A schedule lives in the home shard of its name (FNV-1a, as a chosen
// ID's), and so do its fires: the home shard of an ID of the form "<name>@<RFC 3339 time>" is that
// of the name (layout version 4; a message put under such an ID before, by version 2 or 3, has an
// alias there: see the upgrade at the end). So one script, on one shard, decides that a nominal time fires
// and puts its message, and exactly one message per nominal time follows from Redis running each
// script whole, whatever the number of processes.
//
// A schedule's record, in {T}:sch, holds its definition, its version (one more per SetSchedule),
// the first nominal time not yet decided ("next"), the anchor of an @every spec, and the IDs of
// its latest two fires (lua/schedule.lua has its format). {T}:sact scores each running schedule by
// when a process must act on it: under queue.OverlapAllow, a little after the fire put ahead
// falls due (a tenth of the time to the following nominal time, at most 100 ms; the following
// fire is then put ahead), so that the planning of many schedules of one period does not hold up
// the receives of the fires they just made due; under queue.OverlapSkip, at the next nominal time. Cron
// specs, time zones and misfire policies are computed in Go (package schedule): Lua has no time
// zone database. A process acts on a shard in two scripts: scheddue (read-only) returns the
// schedules whose act time has come by Redis's clock (and, for an OverlapSkip schedule, whether
// its latest fire still waits: then the times that came are skipped, whenever the second script
// runs), and the heads of the topics the caller has Receives waiting on (the receivers' floor,
// see Timing); the process plans each from that clock
// and sends the schedule script's fire operation, which, for each schedule whose version and
// next are still those it planned from, puts the fires (through the same steps as a Put) and
// records the new next and act time, atomically. A plan from a stale read is refused whole, so a
// process that paused between the two scripts, or a retry of the script after a lost reply, puts
// nothing twice; and since next only grows, a nominal time is never decided twice.
//
// No process owns a schedule: every process keeps, per shard, the earliest act time on its
// wheel (from replies, and from the "s" events the schedule script publishes when it changes
// it), and acts at that time plus its own stagger of up to 10 ms, so that the process with the
// least stagger usually acts alone and the others find the work done. It reads each shard again
// at least every recheck period (WithRecheck), whatever it knows, so that an event or a timer it
// lost delays the shard's schedules by that much at most, rather than silencing them. Fires put
// ahead have nine tenths of a period of slack; a fire of an OverlapSkip schedule is put when it is
// decided, up to the stagger and a round trip late.
//
// A nominal time decided more than queue.MisfireGrace after it is a misfire, whatever the reason:
// the processes cannot tell one too busy to step in time (a step that ran long) from none
// running, or Redis unreachable, which the misfire policies are for. Under queue.OverlapAllow
// the fire was put nine tenths of a period ahead or more, so only a step that much (and the grace)
// late meets the policy; under queue.OverlapSkip, decided at its time, a step more than the grace
// late does: MisfireSkip passes the time over, MisfireOnce fires the latest of those that came,
// MisfireAll each, due at once. After every process was down, or Redis unreachable, the fires
// are those of delayq closed as long, under either overlap policy (TestMisfireOverlap in both
// packages); delayq differs only in firing late, each, the times that came while it was open
// and too busy to plan them, which it can tell.
//
// SetSchedule, DeleteSchedule and PauseSchedule remove the schedule's latest fire if it is not
// yet due (nor leased, nor a dead letter): the fire put ahead. The schedule script is a grouped
// write like Put's (replica wait, retries); SetSchedule carries a nonce so that its repeat after
// a lost reply reports what the first run did. A schedule is about 150 bytes plus its topic,
// spec, zone and payload in Redis, and one member of two sorted sets.
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
// # Admin
//
// A Queue is a queue.Admin: an operator can list the topics with their counts, page through a
// topic's messages by state without consuming them, and act on them. Every count and list comes
// from the sets each shard keeps per topic, in the scripts that move messages, never from a scan of
// the backlog:
//
//   - Topics runs the topics script on every shard in one pipeline. Its work is a few commands per
//     topic the shard has counters of: scheduled is the counter "s<topic>" plus the ready messages
//     not due yet, due the ready set up to the script's clock, leased ZCARD of {T}:l:<topic>, dead
//     ZCARD of {T}:d:<topic>, and puts, deliveries and acks the counters. A topic's counters stay
//     in each shard once the topic was used there (about 100 bytes per topic and shard), so that
//     they only grow; a deployment with an unbounded number of topic names grows with them.
//   - Messages merges the shards' entries in one order: by score (due time, lease deadline, or
//     time of death) and then by ID, byte by byte, which is the order of every sorted set it reads
//     and of the wheels' bounds. Its cursor is the position (score, ID) of the last message of a
//     page, so one cursor resumes every shard, and stays valid however the topic changes. A page
//     of n asks every shard, in one pipeline, for about 2n/N entries after the position (the list
//     script finds it with a ZREVRANGEBYLEX in the wheel, or a ZCOUNT and a binary search of
//     equal scores, then reads forward), and asks again, for twice as many, the shards that may
//     hold more of the page. Scheduled messages are the wheel's chunks merged with the ready
//     messages not due yet; due ones the ready set up to the clock; leased ones {T}:l:<topic>; dead
//     letters {T}:d:<topic>. Payloads are cut to queue.PreviewLen in the script.
//   - Message reads the message's record, and where it is (one read-only script).
//   - DeliverNow, Requeue, Purge, Pause and Resume are grouped writes, as Put's are (replica wait,
//     retries). Purge, and Requeue of every dead letter of a topic, run scripts of at most 500
//     messages on every shard at once until none is left. Purged messages are done as cancelled
//     ones are (they leave tombstones, see Retries).
//   - A dead letter is in state Dead from its death until it is acked, cancelled, purged or
//     requeued, except while a consumer of the dead-letter topic holds it (state Leased, and then
//     out of {T}:d:<topic>, back in when its lease fails). It is listed and counted under the topic
//     it died on, and also, as a message of the dead-letter topic, in that topic's due, scheduled
//     (waiting after a failure there) or leased messages; MessageInfo gives it the topic it died on
//     and counts its deliveries there and on the dead-letter topic. Requeue of every dead letter
//     moves, after those in {T}:d:<topic>, those leased on the dead-letter topic that this Queue's
//     options name, found among its leases.
//   - Pause adds the topic to {T}:paused in every shard. The receive script then leases nothing of
//     it and replies that it has no head, so that a Receive waits without asking again, and events
//     leave its heads out, so that puts do not wake its receivers. Resume removes it, and each
//     shard's script publishes the topic's head: the receivers of every process ask at once.
//
// Measured on a loaded 2-core machine (bench/redisq_test.go, medians of 3, beside asynq in the same
// run): a message an hour ahead with a 100-byte payload costs Redis 278 bytes when each is put with
// a delay of an hour, 275 when a million are due at one instant (asynq: 646; ratio 0.43 for both;
// BenchmarkRedisMemory). A page of 100 scheduled messages out of a million costs Redis 440
// commands and about 1.4 ms of its CPU on 16 shards, and 466 behind 20,000 (asynq's Inspector: 103
// commands, 0.46 ms, paging by rank); paging through all of them grows Redis's memory by 50 KB
// (BenchmarkRedisPage).
//
// [Check] verifies a deployment's layout for an operator (tock check -redis URL): every record in
// exactly one place, the wheels' chunks, the counters, and the limits (the same in every shard, a
// limited topic's bucket and permits on its home shard only). It reads each shard while the writes
// of the shard's master are paused, for at most 10 s per shard.
//
// # Durability
//
// Put, PutBatch, Ack, Nack and Cancel are grouped: concurrent calls for the shards of one Redis
// master share a pipeline (two are kept in flight to each master), in which the scripts of one
// shard share a call, followed by WAIT for the master's replicas. By default (WithReplicaWait) each such pipeline waits for one replica where
// the master has one (INFO replication, read again every few seconds) for up to a second; a
// write that no replica confirmed in time returns an error matching queue.ErrUnavailable, although
// it was made on the master and may survive (retry with the same chosen ID to be safe).
//
// What a nil return guarantees, then, is Redis's:
//
//   - One server without persistence (save "", appendonly no): a restart of Redis, or FLUSHALL,
//     loses every message and lease, and the deployment's configuration (see below).
//   - RDB snapshots only (save, appendonly no): a restart brings back the last snapshot: the
//     writes since it are lost (messages put since are gone; messages acked or cancelled since
//     come back, and are delivered again; leases taken since are forgotten, their messages
//     delivered again). The configuration, written once, comes back with it.
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
// A Redis that lost the deployment's data is noticed, and the processes agree on it again. Each
// shard carries in {T}:meta the stamp of the configuration it belongs to (16 hex digits of a hash
// of the secret), which Open writes; every script is given the stamp of the configuration its
// process holds, and refuses, before anything else, a shard without one (its data was lost) or
// with another. The process that meets the refusal, or whose Ready, or Ack of a receipt it cannot
// verify, finds {p}:config not the one it holds, reconciles (at most every 100 ms):
//
//   - {p}:config gone (a restart without persistence, FLUSHALL, or the restart of the Cluster
//     master of its slot): it writes it again from its own, the same secret and shard count, so that
//     the processes opened before the loss agree, and so does any process opened after; receipts
//     stay valid.
//   - {p}:config written anew by a process opened after the loss, before any other noticed it,
//     with the same shard count: it adopts its secret and stamp (receipts issued before are refused
//     from then on; their messages, if they were kept, are delivered again after their visibility).
//   - Written anew with another shard count, or by another layout version: the process refuses to
//     serve it for good: every call, and Ready, fail with an error matching queue.ErrUnavailable
//     that names the cause, and the process must be restarted; it writes nothing meanwhile, as
//     every script of its view meets shards it does not stamp.
//
// It then stamps every shard with the configuration's stamp; the shards that had none lost their
// data, and are logged. Each case is logged at level ERROR and counted (Metrics:
// redis_deployment_lost_total, redis_deployment_adopted_total, redis_deployment_stale). Messages
// kept only in the lost data are gone, as Redis's setting says.
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
//   - delivernow, requeue and purge: the repeat finds the work done, and reports false, or counts
//     only what it did itself; pause is the same whether it runs once or twice.
//
// So that only the engine repeats writes, the grouped writes to a single server use a client
// without go-redis's retries (one of the same options is made if the client given retries); the
// node clients of a cluster client do not retry unless ClusterOptions.MaxRetries is set.
//
// # Caveats
//
// Messages due at the same millisecond have no promised order; messages of different shards are
// ordered by due time within each Receive only as far as it sees them. DueCounts counts to the
// second: each message in the step where its due second begins. The processes of a deployment
// should be given the same options: the maximum attempts, backoff and dead-letter topic apply in
// whichever process runs the script that needs them (Requeue looks for leased dead letters on the
// dead-letter topic of the Queue it is called on). Redis's memory is the queue's capacity: with
// maxmemory reached, writes fail with queue.ErrUnavailable (set maxmemory-policy noeviction: an
// evicting policy would drop messages).
//
// What a retried Put can tell. A chosen ID makes a Put idempotent while its message waits
// (scheduled, due, leased, or a dead letter): a Put of it with the same topic, payload and DeliverAt
// stores nothing and returns nil, whoever repeats it and however late. Due at once is one DeliverAt
// (queue.Engine.Put), judged by Redis's clock: a tockd whose clock runs ahead of Redis's resolves
// an absent due time to one still to come there, so a retry of such a Put within that skew of
// the first is a duplicate. Once the message is acked,
// cancelled or purged, its ID is free: a Put of it stores a new message, which is delivered again.
// Only the engine's own repeats of one Put call are told from a new Put then, by the call's nonce
// and the tombstone the message leaves for 10 s (when it was put due within 10 s, the only messages
// that can be done before the engine stops repeating, 8 s after the first send). A Put that the
// caller repeats itself (after an error saying the outcome is unknown, or a restart) is a new call
// with a new nonce: if the first one stored the message and it was acked or cancelled before the
// repeat, the repeat stores it again; no tombstone, and no window, tells the two apart. Nor can
// Message: queue.ErrNotFound means never stored or already done alike. A Put with a generated ID
// repeated by its caller always stores another message.
//
// The layout has a version, in {p}:config: this package reads and writes version 5. Version 2 added
// the topics' wheels, leases, dead letters, counters and pauses, and the last failure and origin in
// the records; version 3 the reasons of failures ({T}:why), the fail kinds 'd', 'N' and 'D', the
// extend script, the delivery limits ({T}:lim, {T}:lb:<topic>, {T}:lp:<topic>) and the shards'
// stamps; version 4 the schedules, and the home of their fires' IDs (see Schedules); version 5 a
// message's headers, an optional field of its record. Open upgrades a deployment of version 2, 3
// or 4 in place: each version only adds keys (and, in 3, fail kinds; in 5, an optional field of a
// record) to the one before, so the upgrade writes the new version in {p}:config, and logs it
// (level WARN). From version 2 or 3 it first gives an alias on its new home to each message under
// a chosen ID of a fire's form that those versions homed by the whole ID, in another shard than
// its name's, as a batch does (the message stays in its shard; its record's aux names the alias,
// whose token is "0-rehome" unless a batch put it), so that Cancel, Put, Message and a schedule
// of that name find it by its ID: it reads the shards' records with HSCAN, a page at a time, and
// runs a script per step and message, never one long script; the version is written after, so an
// upgrade interrupted halfway is done again by the next Open. Stop the processes of the older
// version first: they check the version only when they open, and one still running would go on
// writing in the old layout (version 3 homes a chosen ID of the form of a fire elsewhere; version
// 2 could not read a record with a fail kind it does not know; version 4 could not parse a record
// with headers). TestUpgradeFromLayout2, 3 and 4 open deployments that those versions wrote
// (testdata/layout2, layout3, layout4), and TestUpgradeFiresFromLayout3 and
// TestUpgradeFiresInterrupted one of version 3 with chosen IDs of a fire's form
// (testdata/layout3/fires.json). Open refuses a deployment of any other
// version with ErrIncompatible (which matches ErrMismatch), naming both versions, and a process of
// an older version refuses one of a newer, so that two versions never share a deployment once
// opened. A deployment of version 1 is not migrated: drain it with the processes of that version
// (or delete its keys), and Open then creates it anew; or give this version another prefix.
package redisq
