package redisq

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tockwheel/tock/queue"
)

// A schedRecord is a schedule as the schedule script keeps it in {T}:sch (see lua/schedule.lua,
// the reference):
//
//	gen,created,updated,start,next,paused,fires,misfires,misfire,overlap,nonce,created by nonce,
//	latest fire ID,the one before,topic length,spec length,zone length;<topic><spec><zone><payload>
//
// gen counts the SetSchedule calls of the schedule, so that a fire planned from an older version
// is refused; start is the anchor of an @every spec (Unix ms); next is the first nominal time not
// yet decided (Unix ms, -1 when none is left); nonce is the last SetSchedule call's, so that its
// repeat is told from a new call.
type schedRecord struct {
	gen               int64
	created, updated  int64
	start, next       int64
	paused            bool
	fires, misfires   uint64
	misfire           queue.Misfire
	overlap           queue.Overlap
	nonce             string
	createdByNonce    bool
	last, prev        string
	topic, spec, zone string
	payload           []byte
}

func decodeSchedRecord(s string) (schedRecord, error) {
	var r schedRecord
	semi := strings.IndexByte(s, ';')
	if semi < 0 {
		return r, fmt.Errorf("%w: schedule record without a header", ErrProtocol)
	}
	f := strings.Split(s[:semi], ",")
	if len(f) != 17 {
		return r, fmt.Errorf("%w: schedule record header of %d fields", ErrProtocol, len(f))
	}
	nums := make([]int64, 0, 8)
	for _, i := range []int{0, 1, 2, 3, 4, 6, 7, 14, 15, 16} {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return r, fmt.Errorf("%w: schedule record field %d: %q", ErrProtocol, i, f[i])
		}
		nums = append(nums, n)
	}
	r.gen, r.created, r.updated, r.start, r.next = nums[0], nums[1], nums[2], nums[3], nums[4]
	r.fires, r.misfires = uint64(nums[5]), uint64(nums[6])
	r.paused = f[5] == "1"
	r.misfire, r.overlap = queue.Misfire(f[8]), queue.Overlap(f[9])
	r.nonce, r.createdByNonce = f[10], f[11] == "1"
	r.last, r.prev = f[12], f[13]
	body := s[semi+1:]
	tl, sl, zl := nums[7], nums[8], nums[9]
	if tl < 0 || sl < 0 || zl < 0 || tl+sl+zl > int64(len(body)) {
		return r, fmt.Errorf("%w: schedule record lengths %d, %d, %d over a body of %d bytes", ErrProtocol, tl, sl, zl, len(body))
	}
	r.topic, r.spec, r.zone = body[:tl], body[tl:tl+sl], body[tl+sl:tl+sl+zl]
	r.payload = []byte(body[tl+sl+zl:])
	return r, nil
}

func (r schedRecord) encode() string {
	b01 := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	return fmt.Sprintf("%d,%d,%d,%d,%d,%s,%d,%d,%s,%s,%s,%s,%s,%s,%d,%d,%d;%s%s%s%s",
		r.gen, r.created, r.updated, r.start, r.next, b01(r.paused), r.fires, r.misfires, r.misfire, r.overlap,
		r.nonce, b01(r.createdByNonce), r.last, r.prev, len(r.topic), len(r.spec), len(r.zone),
		r.topic, r.spec, r.zone, r.payload)
}

// schedule returns the schedule the record holds, named name.
func (r schedRecord) schedule(name string) queue.Schedule {
	return queue.Schedule{Name: name, Topic: r.topic, Payload: r.payload, Spec: r.spec, TimeZone: r.zone,
		Misfire: r.misfire, Overlap: r.overlap}
}

// millisOr returns t in Unix milliseconds, or -1 for the zero time.
func millisOr(t time.Time) int64 {
	if t.IsZero() {
		return -1
	}
	return t.UnixMilli()
}
