package format

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// # The secret file
//
// The key of the receipts' MACs, made with the queue and never changed:
//
//	0   8   magic "tocksec1"
//	8   32  key: 256 bits from crypto/rand
//	40  4   CRC-32C of bytes 0 to 40

const (
	secretMagic = "tocksec1"
	// SecretSize is the size of a secret file.
	SecretSize = 44
)

// AppendSecret appends the secret file holding key to b.
func AppendSecret(b []byte, key [32]byte) []byte {
	start := len(b)
	b = append(append(b, secretMagic...), key[:]...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// DecodeSecret returns the key a secret file holds, or an *Error when b is not one.
func DecodeSecret(b []byte) ([32]byte, error) {
	var key [32]byte
	switch {
	case len(b) != SecretSize:
		return key, &Error{Offset: int64(min(len(b), SecretSize)), Reason: fmt.Sprintf("secret file of %d bytes, not %d", len(b), SecretSize)}
	case !bytes.Equal(b[:8], []byte(secretMagic)):
		return key, &Error{Reason: "not a secret file (bad magic)"}
	case crc32.Checksum(b[:40], castagnoli) != binary.LittleEndian.Uint32(b[40:]):
		return key, &Error{Offset: 40, Reason: "secret fails its checksum"}
	}
	copy(key[:], b[8:40])
	return key, nil
}
