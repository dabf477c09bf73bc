package rediskit

import "strings"

// SlotCount is the number of hash slots of Redis Cluster.
const SlotCount = 16384

// HashTag returns the part of key that Redis Cluster hashes: the text between the first '{' and
// the first '}' after it, if that is not empty, and the whole key otherwise.
func HashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// Slot returns the Redis Cluster hash slot of key: CRC16 of its hash tag, modulo SlotCount.
func Slot(key string) int {
	return int(CRC16(HashTag(key)) % SlotCount)
}

// CRC16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum with which Redis
// Cluster maps a hash tag to its slot.
func CRC16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
