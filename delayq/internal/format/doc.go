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
// An edit is fixed fields and then tagged sections (edit.go), each a list of items. To add a
// section, for a new kind of state or an optional field of the items of another (an optional
// field is best a section of its own, keyed as those items are, holding only the items that have
// it):
//
//  1. Add its field to Edit, and its tag, the next one, to the section constants; give the tag the
//     next checkpoint version in sectionSince, and make that version CheckpointVersion.
//  2. Write it in appendEdit with section(...), after the sections of lower tags, and read it in
//     editDecoder.section. An edit without it decodes to the zero value: say what that means (none,
//     or unchanged) in its doc.
//  3. Add a row to versions.go and the section to sampleEdits in edit_test.go.
//  4. In delayq, fill it in checkpoint.go (what goes into an edit, under the lock only what must be)
//     and apply it in checkpointfile.go's applyEdit.
//
// Files of the versions before keep decoding: they simply have no such section.
package format
