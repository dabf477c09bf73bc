package delayq

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// A receipt names one lease of one message. It is 44 characters of unpadded base64url of 33
// bytes, big endian:
//
//	0   1   version (2)
//	1   8   origin: the position of the message's first record, which names it in memory
//	9   8   lease number: 64 random bits drawn at Receive (0 names no lease)
//	17  16  the tag: bytes 1 to 17 enciphered with AES-256 under a key derived from the
//	        directory's secret
//
// The tag makes receipts verifiable on their own: a receipt that verifies was issued by a queue
// of this directory, byte for byte (the encoding has no padding bits, so one receipt has one
// spelling). So Ack can tell a receipt whose message is gone (acked or cancelled: done, and the
// ack succeeds again, however long ago or across restarts) from a forged one (refused as
// unknown), with no record of past acks. Lease numbers are random so that a consumer's receipt
// says nothing of another consumer's; the tag alone already makes receipts unforgeable.
//
// The tag is a MAC because what it authenticates is one AES block, always 16 bytes: AES is a
// pseudorandom permutation, and a pseudorandom function of a fixed-length message is a MAC; to
// forge one is to predict AES under an unknown key (for 2^64 receipts issued, the birthday bound
// on telling a permutation from a function, far more than a queue issues). It costs one block
// cipher call, where HMAC-SHA256 costs two hash compressions and its state's copying: a tenth of
// the time, for the receipt made at every delivery and checked at every ack.
//
// Version 1 receipts (issued before, up to the release whose receipts took HMAC-SHA256) carry,
// instead of the tag, the first 16 bytes of HMAC-SHA256 under the secret of bytes 0 to 17; they
// still verify, so an ack retried across an upgrade succeeds.
const (
	receiptHMACVersion = 1
	receiptVersion     = 2
	receiptBytes       = 33
	receiptMAC         = 16
)

// receiptLen is the length of every receipt the queue issues.
const receiptLen = (receiptBytes*8 + 5) / 6

var receiptEncoding = base64.RawURLEncoding.Strict()

// receiptKeyLabel derives the key of receipts' tags from the secret (HMAC-SHA256 of the label
// under the secret), so that the secret itself keys only version 1's HMAC.
const receiptKeyLabel = "tock delayq receipt tag key, AES-256, version 2"

// receiptCipher returns the block cipher of receipts' tags under the key derived from secret.
func receiptCipher(secret [32]byte) cipher.Block {
	m := hmac.New(sha256.New, secret[:])
	m.Write([]byte(receiptKeyLabel))
	b, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		panic("delayq: AES-256 refused a 32-byte key: " + err.Error()) // cannot happen
	}
	return b
}

// makeReceipt returns the receipt of lease number lease of the message whose first record is at
// origin. mu must be held: the scratch space is the queue's.
func (q *Queue) makeReceipt(origin wal.Pos, lease uint64) string {
	b, text := q.receiptScratch.bytes[:], q.receiptScratch.text[:]
	b[0] = receiptVersion
	binary.BigEndian.PutUint64(b[1:], uint64(origin))
	binary.BigEndian.PutUint64(b[9:], lease)
	q.tags.Encrypt(b[17:], b[1:17])
	receiptEncoding.Encode(text, b)
	return string(text)
}

// parseReceipt returns the origin and lease number of a receipt the queue issued; ok is false for
// any other string, malformed or forged. mu must be held: the scratch space is the queue's.
func (q *Queue) parseReceipt(s string) (origin wal.Pos, lease uint64, ok bool) {
	if len(s) != receiptLen {
		return 0, 0, false
	}
	b, text, tag := q.receiptScratch.bytes[:], q.receiptScratch.text[:], q.receiptScratch.tag[:]
	copy(text, s)
	if n, err := receiptEncoding.Decode(b, text); err != nil || n != receiptBytes {
		return 0, 0, false
	}
	switch b[0] {
	case receiptVersion:
		q.tags.Encrypt(tag, b[1:17])
	case receiptHMACVersion:
		q.receiptHMAC(tag, b[:17])
	default:
		return 0, 0, false
	}
	if subtle.ConstantTimeCompare(b[17:], tag) != 1 {
		return 0, 0, false
	}
	return wal.Pos(binary.BigEndian.Uint64(b[1:])), binary.BigEndian.Uint64(b[9:]), true
}

// A receiptScratch is the space makeReceipt and parseReceipt work in: a receipt's bytes, its
// text and a tag. It lives in the Queue, under mu, since the block cipher's interface would move
// arrays of the stack to the heap, an allocation at each call.
type receiptScratch struct {
	bytes [receiptBytes]byte
	text  [receiptLen]byte
	tag   [receiptMAC]byte
}

// receiptHMAC writes the MAC of a version 1 receipt's bytes b to mac.
func (q *Queue) receiptHMAC(mac, b []byte) {
	m := hmac.New(sha256.New, q.secret[:])
	m.Write(b)
	copy(mac, m.Sum(nil))
}

// The secret file (its bytes are format's secret.go) holds the key of the receipts' MACs. It is
// created with the queue (or, for a directory made before receipts carried a MAC, at the first
// Open that needs it), durably, and never changes: a receipt stays verifiable across restarts, so
// a retried Ack of a message acked before a restart succeeds. A secret file that is damaged is
// reported as damage and replaced: receipts issued before are then refused as unknown (an ack of
// them fails; the messages are delivered again).
const secretName = "secret"

// loadSecret reads the directory's secret, creating it when there is none or it is damaged (not
// when checking), and keys the receipts' tags with it.
func (q *Queue) loadSecret() error {
	defer func() { q.tags = receiptCipher(q.secret) }()
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
