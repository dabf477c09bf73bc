package redisq

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A record is the stored form of a message (see the package doc):
//
//	<due>,<req>,<att>,<tok>,<aux>,<nonce>,<fail>,<dead>,<origin length>,<topic length>;<origin><topic><payload>
//
// The scripts write records; the engine decodes those that receive, list and message return.
type record struct {
	due     int64
	att     int
	tok     string
	topic   string
	payload []byte

	// failWhy is how the last delivery failed ('n' nacked, 'x' lease expired, 'd' nacked to the
	// dead letters at once; 'N' and 'D' are 'n' and 'd' with a reason, kept in {T}:why; 0 none)
	// and failedAt when it was, in Unix milliseconds.
	failWhy  byte
	failedAt int64
	// origin is the topic a dead letter died on ("" for any other message), diedAt when, and
	// diedAtt after how many deliveries there.
	origin  string
	diedAt  int64
	diedAtt int
}

// recordFields is the number of fields of a record's header.
const recordFields = 10

// decodeRecord decodes a record.
func decodeRecord(s string) (record, error) {
	semi := strings.IndexByte(s, ';')
	if semi < 0 {
		return record{}, fmt.Errorf("%w: record without header", ErrProtocol)
	}
	f := strings.Split(s[:semi], ",")
	bad := func() (record, error) {
		return record{}, fmt.Errorf("%w: record header %q", ErrProtocol, s[:semi])
	}
	if len(f) != recordFields {
		return bad()
	}
	due, err1 := strconv.ParseInt(f[0], 10, 64)
	att, err2 := strconv.Atoi(f[2])
	olen, err3 := strconv.Atoi(f[8])
	tlen, err4 := strconv.Atoi(f[9])
	body := s[semi+1:]
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || olen < 0 || tlen < 0 || olen > len(body) || tlen > len(body)-olen {
		return bad()
	}
	rec := record{due: due, att: att, tok: f[3], origin: body[:olen], topic: body[olen : olen+tlen], payload: []byte(body[olen+tlen:])}
	if fl := f[6]; fl != "" {
		at, err := strconv.ParseInt(fl[1:], 10, 64)
		if err != nil || !strings.ContainsRune("nxdND", rune(fl[0])) {
			return bad()
		}
		rec.failWhy, rec.failedAt = fl[0], at
	}
	if d := f[7]; d != "" {
		ms, n, ok := strings.Cut(d, ".")
		at, err1 := strconv.ParseInt(ms, 10, 64)
		k, err2 := strconv.Atoi(n)
		if !ok || err1 != nil || err2 != nil || rec.origin == "" {
			return bad()
		}
		rec.diedAt, rec.diedAtt = at, k
	}
	return rec, nil
}

// failure returns what MessageInfo says of the record's last failed delivery.
func (r record) failure() (why string, at time.Time) {
	switch r.failWhy {
	case 'n', 'N':
		why = "nacked"
	case 'd', 'D':
		why = "dead-lettered"
	case 'x':
		why = "lease expired"
	default:
		return "", time.Time{}
	}
	return why, time.UnixMilli(r.failedAt)
}
