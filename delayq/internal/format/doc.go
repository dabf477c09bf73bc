// Package format owns every byte schema delayq writes: the records of the log (record.go), the
// edits of the checkpoint file and its header (edit.go, checkpoint.go, and snapshot.go for the
// snapshots of versions before edits), and the secret file (secret.go). Each schema is a plain Go
// value with a symmetric pair, Append (encode) and Decode, and a round-trip fuzz target; what each
// version added is in versions.go. The package knows nothing of what the values mean: delayq
// applies them (its apply.go for records, checkpoint.go for edits), and the log (package wal)
// frames, checksums and stores the bytes without looking inside.
//
// # Rules
//
//   - Constants (kinds, flag bits, field order, magic strings) are frozen: bytes once written keep
//     their meaning. New things are added, never changed.
//   - Decode refuses what it does not know (an unknown kind, flag, or trailing bytes) as malformed,
//     never skips it: a version of delayq that cannot read a directory says so rather than lose
//     what it did not understand. So a directory written with a new kind or field cannot be
//     opened by versions before it; say so in versions.go.
//   - Append refuses a value that Decode would not give back (a name over MaxName, a kind it does
//     not know, a flag combination that has no encoding), so that decode(encode(v)) == v, and
//     encode(decode(b)) == b for every b Decode accepts: the fuzz targets check both.
//
// # Adding a record kind
//
//  1. Take the next number in the Kind constants (they are never reused), name it in Kind.String,
//     and in Kind.Threads if its records are threaded into the disk wheel's lists.
//  2. Add the fields it needs to Record, reusing one that means the same thing (Topic, ID,
//     Target, DeliverAt). Draw its body in the comment at the top of record.go.
//  3. Add a case to encode and the same case, reading the same fields in the same order, to
//     decode; and a case to Describe, which says what damaged bytes held.
//  4. Add a row to versions.go, and a value of the kind to sampleRecords in record_test.go (the
//     fuzz targets start from it).
//  5. In delayq, apply it in apply.go, the one function that changes the state for a record, both
//     live and in replay; Check and the listing read records through the same code.
//
// # Adding an optional field to a record
//
// Existing records must keep decoding, and a record without the field must encode as before:
//
//   - A kind whose body ends with fixed fields (Ack, Update, Advance, Relocate): append the field
//     at the end, written only when it is set; decode reads it when bytes remain (decoder.more).
//     Fields added this way nest: the second one added is only written after the first, as
//     Update's failedAt follows its failure.
//   - A kind with flags (Put, Cancel, Pause, Purge): take the next free flag bit; write the field
//     when the bit is set, before any field that is "the rest of the body" (Put's payload), as
//     Cancel's topic does with flag bit 1.
//
// In both cases the zero value means "absent", so that records written before the field decode
// to what they meant.
//
// # Adding to the checkpoint
//
// An edit's sections are counted in its header, so a new section, or a new field in the items of
// one, is a new checkpoint version: add the field to Edit (and its item types), bump
// CheckpointVersion, write the new layout in appendEdit, and decode both the old and the new
// version in decodeEdit (the old one gives the zero value), as version 5 did for version 4. Add
// the version to versions.go and to DecodeCheckpoint's switch, and a sample to edit_test.go.
package format
