package format

// The versions of what delayq writes, in one place. A directory written by any version below
// opens with the current one; what a version added cannot be read by the versions before it.
//
// Records (record.go), identified by the kinds and flags they use, not by a number:
//
//	kinds 1-5                 Put, Cancel, Ack, Update, Advance: the first log
//	kind 6                    Relocate: compaction
//	frame group bit           atomic groups (PutBatch, DeliverNow)
//	kinds 7, 8                Pause, Purge: the operator's actions
//	Cancel flag bit 1         the topic of the message cancelled
//	Update failure, failedAt  why the last delivery failed
//	Update failure 4, reason  a consumer's reason, and its failure for good (dead-lettered)
//	kind 9                    Limit: delivery limits per topic
//	kinds 10-12               Schedule, Fire, Unschedule: schedules (schedule.go)
//	Put flag bit 1            a message's headers
//
// Checkpoint files (checkpoint.go), by the version in their header:
//
//	1  one snapshot, no due counts of lists
//	2  due counts of lists
//	3  cancelled messages no longer counted as pending
//	4  a log of edits, each framed by its length and checksum
//	5  names, paused topics, lists' counts by topic and n, the failure of entries
//	6  delivery limits, the reason of entries' failures
//	7  edits framed as the log's frames, their sections tagged (see edit.go's sectionSince)
//	8  the topics of lists that Cancels or Purges took messages of
//	9  the damaged places of the log accounted for
//	10 schedules, the schedules removed, and their counts
//	11 no new edit: written once Put records may carry headers (Put flag bit 1), so that a version
//	   before them refuses the directory rather than take those Puts for damage
//
// The secret file (secret.go): one version, magic "tocksec1".

// CheckpointVersion is the version of the checkpoint files written.
const CheckpointVersion = 11
