package delayq

import (
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// A receipt names one lease of one message. It is 44 characters of unpadded base64url of 33
// bytes, big endian:
//
//	0   1   version (1)
//	1   8   origin: the position of the message's first record, which names it in memory
//	9   8   lease number: 64 random bits drawn at Receive (0 names no lease)
//	17  16  the first 16 bytes of HMAC-SHA256, under the directory's secret, of bytes 0 to 17
//
// The MAC makes receipts verifiable on their own: a receipt that verifies was issued by a queue
// of this directory, byte for byte (the encoding has no padding bits, so one receipt has one
// spelling). So Ack can tell a receipt whose message is gone (acked or cancelled: done, and the
// ack succeeds again, however long ago or across restarts) from a forged one (refused as
// unknown), with no record of past acks. Lease numbers are random so that a consumer's receipt
// says nothing of another consumer's; the MAC alone already makes receipts unforgeable.
const (
	receiptVersion = 1
	receiptBytes   = 33
	receiptMAC     = 16
)

// receiptLen is the length of every receipt the queue issues.
const receiptLen = (receiptBytes*8 + 5) / 6

var receiptEncoding = base64.RawURLEncoding.Strict()

// makeReceipt returns the receipt of lease number lease of the message whose first record is at
// origin.
func (q *Queue) makeReceipt(origin wal.Pos, lease uint64) string {
	var b [receiptBytes]byte
	b[0] = receiptVersion
	binary.BigEndian.PutUint64(b[1:], uint64(origin))
	binary.BigEndian.PutUint64(b[9:], lease)
	q.receiptMAC(b[17:], b[:17])
	return receiptEncoding.EncodeToString(b[:])
}

// parseReceipt returns the origin and lease number of a receipt the queue issued; ok is false for
// any other string, malformed or forged.
func (q *Queue) parseReceipt(s string) (origin wal.Pos, lease uint64, ok bool) {
	if len(s) != receiptLen {
		return 0, 0, false
	}
	var b [receiptBytes]byte
	if n, err := receiptEncoding.Decode(b[:], []byte(s)); err != nil || n != receiptBytes || b[0] != receiptVersion {
		return 0, 0, false
	}
	var mac [receiptMAC]byte
	q.receiptMAC(mac[:], b[:17])
	if !hmac.Equal(b[17:], mac[:]) {
		return 0, 0, false
	}
	return wal.Pos(binary.BigEndian.Uint64(b[1:])), binary.BigEndian.Uint64(b[9:]), true
}

// receiptMAC writes the MAC of b to mac. Keyed HMAC states are reused (the secret never changes
// once the queue is open): keying one anew costs more than the MAC itself, and a burst of a million
// deliveries makes a million receipts.
func (q *Queue) receiptMAC(mac, b []byte) {
	m, _ := q.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, q.secret[:])
	} else {
		m.Reset()
	}
	m.Write(b)
	var sum [sha256.Size]byte
	copy(mac, m.Sum(sum[:0]))
	q.macs.Put(m)
}

// The secret file (its bytes are format's secret.go) holds the key of the receipts' MACs. It is
// created with the queue (or, for a directory made before receipts carried a MAC, at the first
// Open that needs it), durably, and never changes: a receipt stays verifiable across restarts, so
// a retried Ack of a message acked before a restart succeeds. A secret file that is damaged is
// reported as damage and replaced: receipts issued before are then refused as unknown (an ack of
// them fails; the messages are delivered again).
const secretName = "secret"

// loadSecret reads the directory's secret, creating it when there is none or it is damaged (not
// when checking).
func (q *Queue) loadSecret() error {
	path := filepath.Join(q.dir, secretName)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		key, err := format.DecodeSecret(b)
		if err == nil {
			q.secret = key
			return nil
		}
		q.damaged(wal.NewCorruptError(path, 0, "receipt secret damaged ("+err.Error()+"); a new one replaces it, and receipts issued before it are refused"))
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("delayq: %w", err)
	}
	if q.checking {
		return nil
	}
	if _, err := crand.Read(q.secret[:]); err != nil {
		return fmt.Errorf("delayq: receipt secret: %w", err)
	}
	return writeSecret(q.dir, q.secret)
}

// writeSecret replaces dir's secret file with key, atomically and durably.
func writeSecret(dir string, key [32]byte) error {
	b := format.AppendSecret(nil, key)
	path := filepath.Join(dir, secretName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("delayq: receipt secret: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = wal.SyncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("delayq: receipt secret: %w", err)
	}
	return nil
}
