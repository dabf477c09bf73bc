package redisq

import (
	"fmt"
	"strconv"
	"strings"
)

// A record is the stored form of a message (see the package doc):
//
//	<due>,<req>,<att>,<tok>,<aux>,<nonce>,<topic length>;<topic><payload>
//
// The scripts write records; the engine decodes those that receive returns.
type record struct {
	due     int64
	att     int
	tok     string
	topic   string
	payload []byte
}

// decodeRecord decodes a record.
func decodeRecord(s string) (record, error) {
	semi := strings.IndexByte(s, ';')
	if semi < 0 {
		return record{}, fmt.Errorf("%w: record without header", ErrProtocol)
	}
	f := strings.Split(s[:semi], ",")
	if len(f) != 7 {
		return record{}, fmt.Errorf("%w: record header %q", ErrProtocol, s[:semi])
	}
	due, err1 := strconv.ParseInt(f[0], 10, 64)
	att, err2 := strconv.Atoi(f[2])
	tlen, err3 := strconv.Atoi(f[6])
	body := s[semi+1:]
	if err1 != nil || err2 != nil || err3 != nil || tlen < 0 || tlen > len(body) {
		return record{}, fmt.Errorf("%w: record header %q", ErrProtocol, s[:semi])
	}
	return record{due: due, att: att, tok: f[3], topic: body[:tlen], payload: []byte(body[tlen:])}, nil
}
