package api

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends r to buf as JSON, with the same fields as encoding/json would write, and
// returns the extended buffer. It writes r.Payload as it is: it must be one valid JSON value, or
// empty for none (the server refuses anything else). encoding/json would check and compact every
// payload again, which costs more than the rest of a batch put; a client that has checked its
// payloads once uses AppendJSON instead.
func (r *PutRequest) AppendJSON(buf []byte) []byte {
	buf = append(buf, '{')
	sep := false
	field := func(name string) {
		if sep {
			buf = append(buf, ',')
		}
		sep = true
		buf = append(buf, name...)
	}
	if r.ID != "" {
		field(`"id":`)
		buf = appendString(buf, r.ID)
	}
	if len(r.Payload) > 0 {
		field(`"payload":`)
		buf = append(buf, r.Payload...)
	}
	if r.Delay != nil {
		field(`"delay":`)
		buf = appendString(buf, *r.Delay)
	}
	if r.DeliverAt != nil {
		field(`"deliver_at":`)
		buf = appendString(buf, *r.DeliverAt)
	}
	if r.Replace {
		field(`"replace":true`)
	}
	if len(r.Headers) > 0 {
		field(`"headers":`)
		buf = appendHeaders(buf, r.Headers)
	}
	return append(buf, '}')
}

// appendHeaders appends h as encoding/json writes a map of strings: an object, its keys in order.
func appendHeaders(buf []byte, h map[string]string) []byte {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	buf = append(buf, '{')
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendString(buf, k)
		buf = append(buf, ':')
		buf = appendString(buf, h[k])
	}
	return append(buf, '}')
}

// AppendJSON appends b to buf as JSON, each message as [PutRequest.AppendJSON] writes it.
func (b *BatchRequest) AppendJSON(buf []byte) []byte {
	buf = append(buf, `{"messages":[`...)
	for i := range b.Messages {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = b.Messages[i].AppendJSON(buf)
	}
	return append(buf, "]}"...)
}

// appendString appends s as a JSON string: as it is, quoted, when it needs no escaping (IDs,
// durations and times do not), else as encoding/json writes it.
func appendString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= utf8.RuneSelf {
			q, _ := json.Marshal(s) // cannot fail for a string
			return append(buf, q...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}

// AppendJSON appends r to buf as JSON, as encoding/json writes it.
func (r *PutResponse) AppendJSON(buf []byte) []byte {
	buf = append(buf, `{"id":`...)
	buf = appendString(buf, r.ID)
	buf = append(buf, `,"deliver_at":`...)
	buf = appendTime(buf, r.DeliverAt)
	return append(buf, '}')
}

// AppendJSON appends r to buf as JSON, as encoding/json writes it.
func (r *BatchResponse) AppendJSON(buf []byte) []byte {
	buf = append(buf, `{"ids":`...)
	if r.IDs == nil {
		buf = append(buf, "null"...)
	} else {
		buf = append(buf, '[')
		for i, id := range r.IDs {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendString(buf, id)
		}
		buf = append(buf, ']')
	}
	buf = append(buf, `,"deliver_at":`...)
	if r.DeliverAt == nil {
		buf = append(buf, "null"...)
	} else {
		buf = append(buf, '[')
		for i, t := range r.DeliverAt {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendTime(buf, t)
		}
		buf = append(buf, ']')
	}
	return append(buf, '}')
}

// AppendJSON appends r to buf as JSON, as encoding/json writes it but for the payloads, which it
// writes as they are: each must be one valid compact JSON value, or empty for null.
func (r *ReceiveResponse) AppendJSON(buf []byte) []byte {
	buf = append(buf, `{"messages":`...)
	if r.Messages == nil {
		buf = append(buf, "null"...)
		return append(buf, '}')
	}
	buf = append(buf, '[')
	for i := range r.Messages {
		if i > 0 {
			buf = append(buf, ',')
		}
		d := &r.Messages[i]
		buf = append(buf, `{"id":`...)
		buf = appendString(buf, d.ID)
		buf = append(buf, `,"payload":`...)
		if len(d.Payload) == 0 {
			buf = append(buf, "null"...)
		} else {
			buf = append(buf, d.Payload...)
		}
		buf = append(buf, `,"deliver_at":`...)
		buf = appendTime(buf, d.DeliverAt)
		buf = append(buf, `,"receipt":`...)
		buf = appendString(buf, d.Receipt)
		buf = append(buf, `,"attempt":`...)
		buf = strconv.AppendInt(buf, int64(d.Attempt), 10)
		if len(d.Headers) > 0 {
			buf = append(buf, `,"headers":`...)
			buf = appendHeaders(buf, d.Headers)
		}
		buf = append(buf, '}')
	}
	return append(buf, "]}"...)
}

// appendTime appends t as encoding/json writes a time.Time: RFC 3339 with nanoseconds, quoted.
// A time it cannot write (a year outside 0 to 9999) is written as the zero time would be.
func appendTime(buf []byte, t time.Time) []byte {
	buf = append(buf, '"')
	if b, err := t.AppendText(buf); err == nil {
		buf = b
	} else {
		buf, _ = time.Time{}.AppendText(buf)
	}
	return append(buf, '"')
}
