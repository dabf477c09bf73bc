package format

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

var sampleRecords = []Record{
	{Kind: KindPut, Threaded: true, ListSlot: 1 << 40, Prev: wal.MakePos(3, 99), DeliverAt: -5, Attempt: 7, Origin: wal.MakePos(1, 16), ID: "id", Topic: "topic", Payload: []byte("payload")},
	{Kind: KindPut, DeliverAt: 1, ID: "", Topic: "t"},
	{Kind: KindPut, ID: strings.Repeat("i", MaxName), Topic: strings.Repeat("t", MaxName), Payload: bytes.Repeat([]byte{0xff}, 1000)},
	{Kind: KindPut, Threaded: true, ListSlot: 9, DeliverAt: 3, ID: "h", Topic: "t", Payload: []byte("p"),
		Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "empty": "", "Zz": "ü"}},
	{Kind: KindPut, Topic: "t", Headers: map[string]string{"only": "headers"}},
	{Kind: KindCancel, Threaded: true, ListSlot: 12, Prev: wal.MakePos(1, 16), ID: "gone"},
	{Kind: KindCancel, ID: "direct"},
	{Kind: KindAck, Target: wal.MakePos(9, 1234)},
	{Kind: KindUpdate, Target: wal.MakePos(2, 77), DeliverAt: 123456789, Attempt: 3, Topic: "t.dead"},
	{Kind: KindUpdate, Target: wal.MakePos(2, 77)},
	{Kind: KindAdvance, Slot: -3},
	{Kind: KindRelocate, Slot: 1 << 40},
	{Kind: KindCancel, Threaded: true, ListSlot: 12, Prev: wal.MakePos(1, 16), ID: "gone", Topic: "its topic"},
	{Kind: KindUpdate, Target: wal.MakePos(2, 77), DeliverAt: 5, Attempt: 1, Failure: FailureNacked, FailedAt: 4},
	{Kind: KindUpdate, Target: wal.MakePos(2, 77), Topic: "t.dead", Failure: FailureExpired, FailedAt: -1},
	{Kind: KindUpdate, Target: wal.MakePos(2, 77), Topic: "t", Failure: FailureNone},
	{Kind: KindUpdate, Target: wal.MakePos(2, 77), DeliverAt: 5, Attempt: 1, Failure: FailureNacked, FailedAt: 4, Reason: "smtp: 451 try later"},
	{Kind: KindUpdate, Target: wal.MakePos(2, 77), Topic: "t.dead", Failure: FailureDeadLettered, FailedAt: 9, Reason: "no such mailbox"},
	{Kind: KindUpdate, Target: wal.MakePos(2, 77), Topic: "t.dead", Failure: FailureDeadLettered, FailedAt: 9},
	{Kind: KindLimit, Topic: "emails", Rate: 50.5, Burst: 10, Concurrency: 8},
	{Kind: KindLimit, Topic: "emails"},
	{Kind: KindPause, Paused: true, Topic: "paused"},
	{Kind: KindPause, Topic: strings.Repeat("r", MaxName)},
	{Kind: KindPurge, Threaded: true, ListSlot: -7, Prev: wal.MakePos(4, 400), Topic: "purged"},
	{Kind: KindSchedule, Topic: "mail", Payload: []byte("digest"), ScheduleFields: ScheduleFields{Schedule: "digest",
		Spec: "30 9 * * mon-fri", Zone: "Europe/Paris", Misfire: MisfireAll, Overlap: OverlapAllow, SetAt: 5, Start: 6, Next: 7, Act: 8,
		Fired: []int64{1, -2}, Unfired: true}},
	{Kind: KindSchedule, Topic: "t", ScheduleFields: ScheduleFields{Schedule: "s", Spec: "@every 10ms", Misfire: MisfireSkip, Overlap: OverlapSkip}},
	{Kind: KindFire, ScheduleFields: ScheduleFields{Schedule: "digest", Next: 1 << 60, Act: 1 << 59, Missed: 1 << 40, Fired: []int64{3, 4, 5}}},
	{Kind: KindFire, ScheduleFields: ScheduleFields{Schedule: "digest", Fired: []int64{9}, Trigger: true}},
	{Kind: KindFire, ScheduleFields: ScheduleFields{Schedule: "digest", Next: 10, Act: 9, Resumed: true, Fired: []int64{9}}},
	{Kind: KindFire, ScheduleFields: ScheduleFields{Schedule: "skipped", Next: 10, Act: 10, Missed: 1}},
	{Kind: KindUnschedule, ScheduleFields: ScheduleFields{Schedule: "digest", Unfired: true}},
	{Kind: KindUnschedule, ScheduleFields: ScheduleFields{Schedule: strings.Repeat("n", MaxName), Deleted: true}},
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range sampleRecords {
		b, err := r.Append([]byte("keep"))
		if err != nil {
			t.Fatalf("%v: %v", r.Kind, err)
		}
		if string(b[:4]) != "keep" || len(b)-4 != r.Size() {
			t.Fatalf("%v: encoded %d bytes, Size says %d", r.Kind, len(b)-4, r.Size())
		}
		if err := Verify(byte(r.Kind), b[4:]); err != nil {
			t.Fatalf("%v: Verify: %v", r.Kind, err)
		}
		got, err := DecodeRecord(r.Kind, b[4:])
		if err != nil {
			t.Fatalf("%v: %v", r.Kind, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
		}
	}
}

func TestRecordLimits(t *testing.T) {
	for _, r := range []Record{
		{Kind: KindPut, ID: strings.Repeat("i", MaxName+1)},
		{Kind: KindPut, Topic: strings.Repeat("t", MaxName+1)},
		{Kind: KindPut, Payload: make([]byte, MaxPayload+1)},
		{Kind: KindPut, Payload: make([]byte, MaxPayload), Headers: map[string]string{"k": ""}},
		{Kind: KindPut, Headers: map[string]string{"": "empty key"}},
		{Kind: KindPut, Headers: manyHeaders(MaxHeaders + 1)},
		{Kind: KindCancel, ID: "x", Headers: map[string]string{"k": "v"}},
		{Kind: KindPurge, Topic: "not threaded"},
		{Kind: KindUpdate, Failure: FailureDeadLettered + 1},
		{Kind: KindUpdate, Failure: FailureExpired, Reason: "a reason of an expiry"},
		{Kind: KindLimit, Topic: "t", Rate: -1},
		{Kind: KindSchedule, ScheduleFields: ScheduleFields{Misfire: MisfireAll + 1, Overlap: OverlapAllow}},
		{Kind: KindSchedule, ScheduleFields: ScheduleFields{Misfire: MisfireOnce}},
		{Kind: KindSchedule, ScheduleFields: ScheduleFields{Misfire: MisfireOnce, Overlap: OverlapAllow, Spec: strings.Repeat("s", MaxName+1)}},
		{Kind: KindFire, ScheduleFields: ScheduleFields{Trigger: true}},
		{Kind: KindFire, ScheduleFields: ScheduleFields{Trigger: true, Fired: []int64{1}, Next: 1}},
		{Kind: KindFire, ScheduleFields: ScheduleFields{Fired: make([]int64, MaxFired+1)}},
		{Kind: 0},
		{Kind: 99},
	} {
		if b, err := r.Append([]byte("keep")); err == nil || string(b) != "keep" || r.Size() != 0 {
			t.Errorf("%v with id %d topic %d payload %d: err %v, buffer %q, size %d", r.Kind, len(r.ID), len(r.Topic), len(r.Payload), err, b, r.Size())
		}
	}
	big := Record{Kind: KindPut, ID: strings.Repeat("i", MaxName), Topic: strings.Repeat("t", MaxName), Payload: make([]byte, MaxPayload-MaxHeaders*2),
		Headers: manyHeaders(MaxHeaders)}
	if n := big.Size(); n > wal.MaxBody {
		t.Fatalf("the largest Put takes %d bytes, over a frame's %d", n, wal.MaxBody)
	}
	if _, err := big.Append(nil); err != nil {
		t.Fatalf("the largest Put: %v", err)
	}
}

// manyHeaders returns n headers of two bytes each.
func manyHeaders(n int) map[string]string {
	h := make(map[string]string, n)
	for i := range n {
		h[string(rune('A'+i/64))+string(rune('0'+i%64))] = ""
	}
	return h
}

// A malformedBody is a body that is not a valid record of its kind.
type malformedBody struct {
	kind Kind
	body []byte
}

func malformedBodies() []malformedBody {
	return []malformedBody{
		{0, nil},
		{42, []byte{1, 2, 3}},
		{KindPut, make([]byte, 36)},
		{KindPut, append([]byte{4}, make([]byte, 40)...)},                            // unknown flag
		{KindPut, append(make([]byte, 37), 0xff, 0xff)},                              // id longer than body
		{KindCancel, make([]byte, 18)},                                               // id length cut short
		{KindAck, make([]byte, 7)},                                                   // short
		{KindAck, make([]byte, 9)},                                                   // stray byte
		{KindUpdate, append(make([]byte, 20), 5, 0, 'a')},                            // topic cut short
		{KindAdvance, make([]byte, 16)},                                              // stray bytes
		{KindRelocate, make([]byte, 4)},                                              // short
		{KindCancel, append([]byte{3}, make([]byte, 20)...)},                         // topic flag, empty topic
		{KindCancel, append([]byte{4}, make([]byte, 18)...)},                         // unknown flag
		{KindUpdate, append(make([]byte, 22), 5, 0, 0, 0, 0, 0, 0, 0, 0)},            // unknown failure
		{KindUpdate, append(make([]byte, 22), 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 120)}, // a reason of an expiry
		{KindUpdate, append(make([]byte, 22), 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)},      // an empty reason
		{KindUpdate, append(make([]byte, 22), 0, 0, 0, 0, 0, 0, 0, 0, 0)},            // failure 0 written
		{KindUpdate, append(make([]byte, 22), 1, 0, 0)},                              // failedAt cut short
		{KindPause, []byte{2, 0, 0}},                                                 // unknown flag
		{KindPause, []byte{1, 3, 0, 'a'}},                                            // topic cut short
		{KindPurge, make([]byte, 19)},                                                // not threaded
		{KindPurge, append([]byte{1}, make([]byte, 17)...)},                          // topic length cut short
		{KindPurge, append([]byte{3}, make([]byte, 18)...)},                          // unknown flag
		{KindSchedule, append([]byte{2}, make([]byte, 44)...)},                       // unknown flag
		{KindSchedule, append(make([]byte, 33), 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)}, // misfire 0
		{KindSchedule, append(make([]byte, 33), 1, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)}, // overlap 3
		{KindSchedule, append(make([]byte, 33), 1, 1, 1, 0, 0, 0)},                   // a fire cut short
		{KindFire, append([]byte{4}, make([]byte, 28)...)},                           // unknown flag
		{KindFire, append([]byte{1}, make([]byte, 28)...)},                           // a trigger without its fire
		{KindFire, make([]byte, 28)},                                                 // name cut short
		{KindUnschedule, []byte{4, 0, 0}},                                            // unknown flag
		{KindUnschedule, []byte{0, 1, 0}},                                            // name cut short
		{KindPut, append(append([]byte{2}, make([]byte, 40)...), 0, 0)},              // headers flag, no header
		{KindPut, append(append([]byte{2}, make([]byte, 40)...), 1, 0, 0, 0, 0, 0)},  // an empty key
		{KindPut, append(append([]byte{2}, make([]byte, 40)...), 1, 0, 1, 0)},        // header cut short
		{KindPut, append(append([]byte{2}, make([]byte, 40)...),
			2, 0, 1, 0, 'b', 0, 0, 1, 0, 'a', 0, 0)}, // keys out of order
		{KindPut, append(append([]byte{2}, make([]byte, 40)...),
			2, 0, 1, 0, 'a', 0, 0, 1, 0, 'a', 0, 0)}, // a key twice
		{KindPut, append(append([]byte{2}, make([]byte, 40)...), 0x01, 0x04)}, // over MaxHeaders
	}
}

func TestDecodeMalformed(t *testing.T) {
	for i, m := range malformedBodies() {
		if r, err := DecodeRecord(m.kind, m.body); err == nil || !errors.Is(err, errMalformed) {
			t.Errorf("body %d (%v %x) decoded as %+v, %v", i, m.kind, m.body, r, err)
		}
		if err := Verify(byte(m.kind), m.body); err == nil {
			t.Errorf("body %d (%v %x) verified", i, m.kind, m.body)
		}
	}
}

// FuzzRecord checks the record schema both ways: what DecodeRecord accepts, Verify accepts too
// and re-encodes to the same bytes (a record has one encoding), and a value built from the
// fuzzer's fields encodes to bytes that decode to it. It never panics.
func FuzzRecord(f *testing.F) {
	for _, r := range sampleRecords {
		b, _ := r.Append(nil)
		f.Add(uint8(r.Kind), b, int64(0), uint64(0), "", "")
	}
	for _, m := range malformedBodies() {
		f.Add(uint8(m.kind), m.body, int64(-1), uint64(1<<40), "id", "topic")
	}
	f.Fuzz(func(t *testing.T, kind uint8, body []byte, n int64, p uint64, s1, s2 string) {
		k := Kind(kind)
		r, err := DecodeRecord(k, body)
		if verr := Verify(kind, body); (err == nil) != (verr == nil) {
			t.Fatalf("DecodeRecord (%v) and Verify (%v) disagree on %v %x", err, verr, k, body)
		}
		if err == nil {
			again, err := r.Append(nil)
			if err != nil || !bytes.Equal(again, body) {
				t.Fatalf("%v %x decodes to %+v, which encodes to %x, %v", k, body, r, again, err)
			}
			if r.Size() != len(body) {
				t.Fatalf("Size %d of a body of %d bytes", r.Size(), len(body))
			}
		}
		// decode(encode(v)): a value of the kind with the fuzzer's fields, those of the kind only.
		v := recordOf(k, n, wal.Pos(p), s1, s2, body)
		b, err := v.Append(nil)
		if err != nil {
			return
		}
		got, err := DecodeRecord(k, b)
		if err != nil || !reflect.DeepEqual(got, v) {
			t.Fatalf("%+v encodes to %x, which decodes to %+v, %v", v, b, got, err)
		}
	})
}

// recordOf returns a record of kind k with the given values in the fields the kind has.
func recordOf(k Kind, n int64, p wal.Pos, s1, s2 string, payload []byte) Record {
	r := Record{Kind: k}
	switch k {
	case KindPut:
		r.Threaded, r.ListSlot, r.Prev, r.DeliverAt, r.Attempt, r.Origin, r.ID, r.Topic = n&1 != 0, n, p, -n, uint32(n), p+1, s1, s2
		if len(payload) > 0 {
			r.Payload = payload
		}
		if n&2 != 0 {
			r.Headers = map[string]string{s2: s1, "k": string(payload)}
		}
	case KindCancel:
		r.Threaded, r.ListSlot, r.Prev, r.ID, r.Topic = n&1 != 0, n, p, s1, s2
	case KindAck:
		r.Target = p
	case KindUpdate:
		r.Target, r.DeliverAt, r.Attempt, r.Topic = p, n, uint32(n>>3), s1
		if r.Failure = uint8(n & 3); r.Failure != FailureUnchanged {
			r.FailedAt = -n
		}
	case KindAdvance, KindRelocate:
		r.Slot = n
	case KindPause:
		r.Paused, r.Topic = n&1 != 0, s1
	case KindPurge:
		r.Threaded, r.ListSlot, r.Prev, r.Topic = true, n, p, s1
	case KindSchedule:
		r.Schedule, r.Topic, r.Spec, r.Zone = s1, s2, s2, s1
		r.SetAt, r.Start, r.Next, r.Act = n, -n, n+1, int64(p)
		r.Misfire, r.Overlap, r.Unfired = uint8(1+n&1), uint8(1+p&1), n&4 != 0
		if len(payload) > 0 {
			r.Payload = payload
		}
		if n&2 != 0 {
			r.Fired = []int64{n, int64(p)}
		}
	case KindFire:
		r.Schedule, r.Missed = s1, uint64(p)
		if n&1 != 0 {
			r.Trigger, r.Fired = true, []int64{n}
		} else {
			r.Next, r.Act, r.Resumed = n, int64(p), n&2 != 0
		}
	case KindUnschedule:
		r.Schedule, r.Unfired, r.Deleted = s1, n&1 != 0, n&2 != 0
	}
	return r
}
