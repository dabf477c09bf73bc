// Package wal is delayq's write-ahead log: append-only segment files of checksummed frames,
// written with group commit, read back by position or in order. It frames, syncs, segments and
// reads bytes, and knows nothing of what they hold: each frame carries a type byte and a body
// that the content's own package (delayq's internal/format) encodes, decodes and verifies.
//
// The files, by job:
//   - frame.go: the frame's bytes (checksum, length, type, group bit) and its limits, and the end
//     of the log: what a power loss leaves of a write not yet synced, and how Open tells it from
//     corruption;
//   - segment.go: segment files, their header and names, and positions;
//   - files.go: the files appends go through (the operating system's, written ahead of their
//     frames with zeros, or a test's failing disk);
//   - commit.go: appending, group commit (one write and one fdatasync for many appends), and
//     the waits for frames to be written and durable;
//   - repair.go: what Open does to the end of the log: a torn write cut, damage left alone;
//   - scan.go: reading frames in order, past damage;
//   - reader.go: reading frames by position;
//   - corrupt.go: damaged data, and telling a torn write from corruption.
package wal
