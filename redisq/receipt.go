package redisq

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"sync"
)

// A receipt is receiptHead characters of base64url, then the message ID:
//
//	version (1 byte) | shard (2 bytes) | lease token (12 bytes) | MAC (12 bytes)
//
// where MAC is the first 12 bytes of HMAC-SHA256 under the deployment's secret of "r1", the shard,
// the token and the ID. The token is random and kept in the message's record while the lease is
// current; the MAC lets Ack tell a receipt of a message that is gone (acked or cancelled) from a
// forgery without asking Redis.
const (
	receiptVersion = 1
	tokenLen       = 12
	macLen         = 12
	receiptBytes   = 1 + 2 + tokenLen + macLen
	receiptHead    = receiptBytes / 3 * 4 // 27 bytes are 36 characters, without padding
)

var b64 = base64.RawURLEncoding.Strict()

// tokenBase is the length of the random base of the lease tokens the receive script makes (see
// receive.lua): each token is the base followed by two characters of base64url for the lease's
// rank in the script, so that a script's tokens differ from one another and, by the base's 84
// random bits, from every other script's.
const tokenBase = tokenLen/3*4 - 2

// receipt is a decoded receipt.
type receipt struct {
	shard int
	token string // the lease token as the record keeps it: 16 characters of base64url
	id    string
}

// newToken returns a fresh lease token in the form the records keep.
func newToken() string {
	var b [tokenLen]byte
	rand.Read(b[:])
	return b64.EncodeToString(b[:])
}

// signer makes and checks receipts with a deployment's secret (make one with newSigner). It is
// immutable, and safe for concurrent use.
type signer struct {
	// macs holds HMACs keyed with the secret, to be reset and used again: hmac.New hashes the key's
	// two pads and allocates two digests for every receipt, more than the receipt's own hashing
	// (it was a tenth of tockd's time in a burst of 1,000 deliveries and their acks), while a reset
	// HMAC starts again from the pads it keeps.
	macs *sync.Pool
}

func newSigner(secret []byte) signer {
	return signer{macs: &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }}}
}

// mac returns the MAC of a receipt, appended to dst[:0] (which needs sha256.Size bytes of
// capacity not to allocate).
func (g signer) mac(dst []byte, shard int, token []byte, id string) []byte {
	m := g.macs.Get().(hash.Hash)
	m.Reset()
	var s [4]byte
	s[0], s[1] = 'r', '1'
	binary.BigEndian.PutUint16(s[2:], uint16(shard))
	m.Write(s[:])
	m.Write(token)
	m.Write([]byte(id))
	sum := m.Sum(dst[:0])
	g.macs.Put(m)
	return sum[:macLen]
}

// issue returns the receipt of a lease of message id on shard under token (as newToken makes).
func (g signer) issue(shard int, token, id string) string {
	var b [receiptBytes]byte
	b[0] = receiptVersion
	binary.BigEndian.PutUint16(b[1:3], uint16(shard))
	if n, err := b64.Decode(b[3:3+tokenLen], []byte(token)); err != nil || n != tokenLen {
		panic("redisq: malformed lease token " + token)
	}
	var sum [sha256.Size]byte
	copy(b[3+tokenLen:], g.mac(sum[:], shard, b[3:3+tokenLen], id))
	return b64.EncodeToString(b[:]) + id
}

// verify decodes a receipt and checks its MAC; ok is false for anything this deployment did not
// issue, byte for byte.
func (g signer) verify(s string, shards int) (r receipt, ok bool) {
	if len(s) < receiptHead {
		return receipt{}, false
	}
	var b [receiptBytes]byte
	n, err := b64.Decode(b[:], []byte(s[:receiptHead]))
	if err != nil || n != receiptBytes || b[0] != receiptVersion {
		return receipt{}, false
	}
	shard := int(binary.BigEndian.Uint16(b[1:3]))
	id := s[receiptHead:]
	var sum [sha256.Size]byte
	if shard >= shards || !hmac.Equal(b[3+tokenLen:], g.mac(sum[:], shard, b[3:3+tokenLen], id)) {
		return receipt{}, false
	}
	return receipt{shard: shard, token: b64.EncodeToString(b[3 : 3+tokenLen]), id: id}, true
}
