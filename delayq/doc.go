// Package delayq is a durable delayed-message queue embedded in a Go program: producers Put
// messages to be delivered at a time of their choosing, any distance ahead; consumers Receive them
// when they are due, and Ack them when done. Messages survive a crash of the process (and, unless
// [WithNoSync], of the machine) from the moment [Queue.Put] returns. A [Queue] is a
// [queue.Engine], a [queue.Reporter] and a [queue.Admin]: the contract of package queue, which it
// passes the conformance suite of (package queuetest), and the server, client and CLI serve it.
//
// # Basics
//
//	q, err := delayq.Open("/var/lib/app/queue")
//	id, err := q.Put(ctx, delayq.Message{Topic: "email", Payload: body, DeliverAt: time.Now().Add(time.Hour)})
//	ds, err := q.Receive(ctx, "email", 32, 30*time.Second) // blocks until something is due
//	for _, d := range ds {
//		send(d.Payload)
//		q.Ack(ctx, d.Receipt)
//	}
//
// Storage is a log of append-only segment files of checksummed records. Concurrent Puts share one
// write and one fdatasync (group commit), so many producers together reach close to the disk's
// sequential rate; a [Queue.PutBatch] is written as one atomic group, all or nothing. Waiting
// messages are kept on disk in a coarse wheel of slots (one second each by default) whose lists
// are threaded backwards through the log: memory does not grow with the number of pending messages
// put with generated IDs. A little before a slot comes due it is read into the in-memory tock
// wheel, which delivers each message within about a millisecond of its due time and never before.
// Messages due beyond the wheel's horizon (a day by default) are written again when their slot
// comes round, so there is no maximum delay. A message is due at the later of its DeliverAt and
// its Put.
//
// Delivery is at least once. [Queue.Receive] leases messages for a visibility timeout; a message
// not acked in time is due again after a backoff, and after a maximum number of failed deliveries
// it moves to a dead-letter topic. Acks are durable: an acked message is never delivered again.
// [Queue.Ack] reports its outcome per receipt ([AckError]), and a retried ack succeeds, across
// restarts too: a receipt carries a MAC under a secret the directory keeps (the file "secret",
// made with the queue), so a receipt whose message is done is told from a forged one without
// remembering acks. [Queue.Cancel] removes a waiting message by ID. An ID the producer chooses is
// unique among waiting messages: a retried Put is recognised and stored once, a different message
// with the ID is refused with [ErrDuplicate].
//
// [Queue.DueCounts] tells how many messages fall due in each second (or any step) ahead, from
// counts the disk wheel keeps per slot, without reading messages: enough for a status page's
// forecast.
//
// # Operating the queue
//
// [Queue.Topics] lists the topics with their messages in each state (scheduled, due, leased, dead
// letters by the topic they died on), the due time of their oldest due message, whether they are
// paused, and their puts, deliveries and acks. The counts are kept as messages move, in memory and
// in each slot list of the disk wheel by topic (checkpointed with the wheel), so Topics costs time
// in the number of topics only, however many messages wait. [Queue.Messages] pages through a
// topic's messages in a state without consuming them; scheduled ones are read from the disk wheel
// a slot's list at a time, in due order, so memory stays at a page's worth however long the
// backlog (see its doc for the cost in time). [Queue.Message] shows one message whole.
//
// The actions are records like any other change, durable when they return: [Queue.DeliverNow]
// makes a scheduled message due at once; [Queue.Requeue] sends dead letters back to their topic
// with their attempts reset; [Queue.Purge] removes a topic's scheduled, due or dead messages (the
// scheduled ones of the disk wheel with one record per slot list, whatever their number);
// [Queue.Pause] holds a topic's deliveries, across restarts, until [Queue.Resume];
// [Queue.SetLimit] bounds them (a rate with a burst, a concurrency: see queue.Limiter), for every
// consumer, the next permit a timer on the wheel. A message's
// last failed delivery (nacked, or its lease expired) and its time are kept for every message in
// memory and in the checkpoint, so a dead letter always tells why it died.
//
// Every change to the queue's durable state is a record, applied by one function both when it is
// appended and when recovery replays it. A checkpoint is written every few seconds, after the log
// it describes is durable; it is a log of edits, each holding only what changed since the one
// before, so its cost follows the rate of change, not the number of messages pending. Open cuts a
// torn write at the end of the log, reads the checkpoint and replays only the log written since.
// Segments whose messages are all acked, cancelled or rolled forward are deleted after a
// checkpoint, so disk use follows live data.
//
// A segment holding messages due at many different times would be kept until the last of them is
// done; compaction copies the messages still waiting on disk out of old segments that are mostly
// dead, so they can be deleted. Every checkpoint interval, a background goroutine estimates the
// live fraction of each closed segment; a segment under half live (see [WithCompaction]), whose
// waiting messages are not all due soon compared with its age, has the wheel slots it holds
// messages of written again at the head of the log, paced to a few MiB/s and sharing the log's
// syncs with Puts. A copy keeps its message's ID and receipts; the old record is released only
// once the copy is recoverable, so a message is neither lost nor delivered twice because it moved.
// With delays spread evenly, disk use stays near 1.5 times the live data, at the cost of writing a
// message about 1.5 times on average. Messages already due, leased, or in the near window are not
// moved.
//
// Damaged data (a flipped bit, a record that fails its checksum, a segment gone) costs only the
// messages it held: Open does not refuse the queue, nothing is cut or rewritten, the damage is
// logged once with its file and offset and what it held, counted in [Snapshot].CorruptRecords, and
// the queue goes on. The next checkpoint records it as accounted for: later Opens, which may meet
// it again, neither log nor count it.
// Every reader of a slot's list reads past damage alike, so [Queue.Messages] lists what Receive
// will deliver. [Check] (the command tock check) verifies a directory offline.
//
// # A full disk
//
// A write or sync of the log or the checkpoint that fails (a full disk, a quota reached, an I/O
// error) stops the queue: the calls whose records were not yet durable fail, every later call and
// every waiting Receive fails, and [Queue.Ready] reports it, all with errors matching
// [ErrUnavailable] that keep the cause in their chain; the failure is logged at level ERROR. A
// call that failed was not acknowledged, and its records may or may not be found after it.
//
// The queue does not resume in place: its memory holds the effect of records the disk did not
// take, and a second way of rebuilding the state beside recovery's would be one more place for a
// mistake to lose data. The way back is recovery's, the one every crash takes: [Queue.Close] the
// stopped queue and [Open] the directory again once the disk has room. Close cuts the log back to
// what was synced (after a failed fdatasync the kernel may show bytes from its cache that the disk
// does not hold), Open replays what was durable, so every acknowledged message is there and none
// comes early; leases end, as at any reopen. While the disk is still full, Open fails with an
// error matching ErrUnavailable: try again later. tockd does this by itself (see cmd/tockd): it
// reopens the directory, with a backoff, until an Open succeeds, answering 503 meanwhile.
//
// # Caveats
//
// Ordering is by due time, to the millisecond; messages due at the same moment have no promised
// order. A message may be delivered more than once: after a crash, an expired lease, or a lost ack.
// A message put with a chosen ID costs about 60 bytes of memory while it waits on disk; generated
// IDs cost nothing. Due messages that no consumer receives stay in memory, with their payloads
// and headers, until received. A delivery interrupted by a crash does not count as an attempt. Leases end when
// the queue closes: after a restart, the receipt of a message still waiting is stale. Damage to a
// Cancel or Ack record loses the cancel or the ack (the message is delivered after all, or again).
// The counters of [Queue.Topics] (puts, deliveries, acks) count since Open. Directories written
// by versions of delayq before the operator's actions are opened (each slot list is read once to
// count its messages by topic), but logs written since cannot be read by those versions, nor, once
// a delivery limit or a Nack's reason was written (a Limit record, an Update's reason, checkpoint
// version 6), or a message with headers (a Put record's headers, checkpoint version 11), by the
// versions before them: such a version finds a checkpoint of a version it does not know, calls it
// damaged and rebuilds from the log, where it counts each Put with headers as a damaged record.
// The directory belongs to one Queue at a time (an flock enforces it on Unix). Nothing is replicated:
// losing the disk loses the queue.
package delayq
