package redisq

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tockwheel/tock/queue"
)

// A record is the stored form of a message (see the package doc):
//
//	<due>,<req>,<att>,<tok>,<aux>,<nonce>,<fail>,<dead>,<origin length>,<topic length>[,<headers length>];<origin><topic>[<headers>]<payload>
//
// The scripts write records; the engine decodes those that receive, list and message return.
type record struct {
	due     int64
	att     int
	tok     string
	aux     string // "<home>.<batch token>" for a message put under an alias in another shard, else ""
	topic   string
	payload []byte
	headers map[string]string // nil for none

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

// recordFields is the number of fields of a record's header, without the headers' length, which
// only a message with headers has.
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
	if len(f) != recordFields && len(f) != recordFields+1 {
		return bad()
	}
	due, err1 := strconv.ParseInt(f[0], 10, 64)
	att, err2 := strconv.Atoi(f[2])
	olen, err3 := strconv.Atoi(f[8])
	tlen, err4 := strconv.Atoi(f[9])
	hlen := 0
	if len(f) > recordFields {
		var err error
		if hlen, err = strconv.Atoi(f[10]); err != nil || hlen <= 0 {
			return bad()
		}
	}
	body := s[semi+1:]
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || olen < 0 || tlen < 0 || olen > len(body) || tlen > len(body)-olen || hlen > len(body)-olen-tlen {
		return bad()
	}
	t, h := olen+tlen, olen+tlen+hlen
	rec := record{due: due, att: att, tok: f[3], aux: f[4], origin: body[:olen], topic: body[olen:t], payload: []byte(body[h:])}
	if hlen > 0 {
		var err error
		if rec.headers, err = decodeHeaders(body[t:h]); err != nil {
			return record{}, fmt.Errorf("%w: record headers: %v", ErrProtocol, err)
		}
	}
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

// encodeHeaders returns a message's headers as a record holds them: a JSON object of strings, its
// keys in order (as encoding/json writes a map), so that redis-cli shows them as they are; "" for
// none.
func encodeHeaders(h map[string]string) string {
	if len(h) == 0 {
		return ""
	}
	b, _ := json.Marshal(h) // cannot fail for a map of strings
	return string(b)
}

// decodeHeaders decodes what encodeHeaders wrote, and checks that it holds headers the engine
// would have taken.
func decodeHeaders(s string) (map[string]string, error) {
	var h map[string]string
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, err
	}
	if len(h) == 0 {
		return nil, fmt.Errorf("no headers in %q", s)
	}
	if err := queue.CheckHeaders(h); err != nil {
		return nil, err
	}
	return h, nil
}
