package queuetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tockwheel/tock/queue"
)

// The cases of queue.Scheduler, and of Put's Replace. They run when the engine is a
// queue.Scheduler (and, for those that inspect the fire put ahead, a queue.Admin), and are
// skipped otherwise; the Replace cases are skipped for an engine whose Put answers
// errors.ErrUnsupported (Run probes it).

var scheduleCases = []struct {
	name string
	run  func(ctx context.Context, h *env, s queue.Scheduler)
}{
	{"ScheduleSetGet", testScheduleSetGet},
	{"ScheduleInvalid", testScheduleInvalid},
	{"SchedulePages", testSchedulePages},
	{"ScheduleFires", testScheduleFires},
	{"ScheduleEveryTimeOnce", testScheduleEveryTimeOnce},
	{"ScheduleReplaceRemovesFire", testScheduleReplaceRemovesFire},
	{"ScheduleDelete", testScheduleDelete},
	{"SchedulePauseResume", testSchedulePauseResume},
	{"ScheduleTrigger", testScheduleTrigger},
	{"ScheduleOverlapSkip", testScheduleOverlapSkip},
}

var replaceCases = []struct {
	name string
	run  func(ctx context.Context, h *env)
}{
	{"PutReplace", testPutReplace},
	{"PutReplaceLeased", testPutReplaceLeased},
}

func (h *env) setSchedule(ctx context.Context, s queue.Scheduler, sc queue.Schedule) bool {
	h.Helper()
	created, err := s.SetSchedule(ctx, sc)
	if err != nil {
		h.Fatalf("SetSchedule(%q, %q): %v", sc.Name, sc.Spec, err)
	}
	return created
}

func (h *env) schedule(ctx context.Context, s queue.Scheduler, name string) queue.ScheduleInfo {
	h.Helper()
	info, err := s.Schedule(ctx, name)
	if err != nil {
		h.Fatalf("Schedule(%q): %v", name, err)
	}
	return info
}

// pendingFire returns the ID of the schedule's next fire, which the engine put ahead of its time
// (OverlapAllow), and checks that it waits.
func (h *env) pendingFire(ctx context.Context, s queue.Scheduler, name string) string {
	h.Helper()
	info := h.schedule(ctx, s, name)
	if len(info.Next) == 0 {
		h.Fatalf("schedule %q has no next fire time", name)
	}
	id := queue.FireID(name, info.Next[0], false)
	if _, err := as[queue.Admin](h).Message(ctx, id); err != nil {
		h.Fatalf("the next fire %q of schedule %q, put ahead: %v", id, name, err)
	}
	return id
}

// testScheduleSetGet sets a schedule, reads it back with its defaults spelt out and its next fire
// times, and replaces it.
func testScheduleSetGet(ctx context.Context, h *env, s queue.Scheduler) {
	sc := queue.Schedule{Name: "digest", Topic: "mail", Payload: payload("digest"), Spec: "30 2 * * *", TimeZone: "Europe/Paris"}
	if !h.setSchedule(ctx, s, sc) {
		h.Fatal("SetSchedule of a new schedule reported a replace")
	}
	info := h.schedule(ctx, s, "digest")
	want := sc
	want.Misfire, want.Overlap = queue.MisfireOnce, queue.OverlapAllow
	got := info.Schedule
	if got.Name != want.Name || got.Topic != want.Topic || !bytes.Equal(got.Payload, want.Payload) || got.Spec != want.Spec ||
		got.TimeZone != want.TimeZone || got.Misfire != want.Misfire || got.Overlap != want.Overlap {
		h.Fatalf("Schedule = %+v; want %+v", got, want)
	}
	if info.Paused || len(info.Next) != queue.FireTimes || info.Fires != 1 || !info.LastFire.IsZero() {
		h.Fatalf("new schedule: paused %v, next %v, fires %d, last fire %v; want running, %d times, the first put ahead, none yet",
			info.Paused, info.Next, info.Fires, info.LastFire, queue.FireTimes)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	for i, t := range info.Next {
		local := t.In(paris)
		if !t.After(time.Now()) || (i > 0 && !t.After(info.Next[i-1])) || local.Minute() != 30 || (local.Hour() != 2 && local.Hour() != 3) {
			h.Fatalf("next fire times %v: want increasing future times at 02:30 Paris time (03:00 on a spring-forward day)", info.Next)
		}
	}
	sc.Spec, sc.Misfire, sc.Overlap = "@every 1h", queue.MisfireAll, queue.OverlapSkip
	before := time.Now()
	if h.setSchedule(ctx, s, sc) {
		h.Fatal("SetSchedule of an existing schedule reported a create")
	}
	after := time.Now()
	info = h.schedule(ctx, s, "digest")
	if info.Spec != "@every 1h" || info.Misfire != queue.MisfireAll || info.Overlap != queue.OverlapSkip {
		h.Fatalf("replaced schedule reads %+v", info.Schedule)
	}
	// One period after the set, rounded up to the second (a second of slack for the clocks).
	if next := info.Next[0]; next.Before(before.Add(time.Hour-time.Second)) || next.After(after.Add(time.Hour+2*time.Second)) {
		h.Fatalf("@every 1h set between %v and %v: next fire %v; want one period after the set", before, after, next)
	}
	_, err := s.Schedule(ctx, "nothing")
	h.wantErr("Schedule of an unknown name", err, queue.ErrNotFound)
	st, err := s.ScheduleStats(ctx)
	// The fire put ahead went with the replace, and an OverlapSkip schedule puts none ahead.
	if err != nil || st.Schedules != 1 || st.Paused != 0 || st.Fires != 0 {
		h.Fatalf("ScheduleStats = %+v, %v; want 1 schedule, none paused, no fire", st, err)
	}
}

// testScheduleInvalid checks that each bad field is refused with ErrInvalid naming it.
func testScheduleInvalid(ctx context.Context, h *env, s queue.Scheduler) {
	ok := queue.Schedule{Name: "n", Topic: "t", Spec: "@hourly"}
	for _, tc := range []struct {
		field string
		edit  func(*queue.Schedule)
	}{
		{"name", func(sc *queue.Schedule) { sc.Name = "a@b" }},
		{"name", func(sc *queue.Schedule) { sc.Name = "" }},
		{"topic", func(sc *queue.Schedule) { sc.Topic = "" }},
		{"spec", func(sc *queue.Schedule) { sc.Spec = "61 * * * *" }},
		{"spec", func(sc *queue.Schedule) { sc.Spec = "@every 1ms" }},
		{"time_zone", func(sc *queue.Schedule) { sc.TimeZone = "Atlantis/Capital" }},
		{"misfire", func(sc *queue.Schedule) { sc.Misfire = "sometimes" }},
		{"overlap", func(sc *queue.Schedule) { sc.Overlap = "maybe" }},
	} {
		sc := ok
		tc.edit(&sc)
		_, err := s.SetSchedule(ctx, sc)
		h.wantErr("SetSchedule with a bad "+tc.field, err, queue.ErrInvalid)
		if !strings.Contains(err.Error(), tc.field) {
			h.Fatalf("SetSchedule with a bad %s: %q does not name the field", tc.field, err)
		}
	}
	sc := ok
	sc.Payload = make([]byte, MaxPayload+1)
	_, err := s.SetSchedule(ctx, sc)
	h.wantErr("SetSchedule with a payload over the limit", err, queue.ErrTooLarge)
	if _, err := s.Schedule(ctx, "n"); !errors.Is(err, queue.ErrNotFound) {
		h.Fatalf("a refused schedule was stored: %v", err)
	}
}

// testSchedulePages pages through schedules in the order of their names.
func testSchedulePages(ctx context.Context, h *env, s queue.Scheduler) {
	names := []string{"a", "b.1", "b.2", "c", "d:x", "e-1", "e_2"}
	for _, n := range []int{4, 0, 6, 2, 1, 5, 3} {
		h.setSchedule(ctx, s, queue.Schedule{Name: names[n], Topic: "t", Spec: "@daily"})
	}
	var got []string
	cursor := ""
	for range len(names) + 1 {
		page, next, err := s.Schedules(ctx, cursor, 3)
		if err != nil {
			h.Fatalf("Schedules(%q, 3): %v", cursor, err)
		}
		for _, info := range page {
			got = append(got, info.Name)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if strings.Join(got, " ") != strings.Join(names, " ") {
		h.Fatalf("paged schedules %v; want %v", got, names)
	}
	for _, limit := range []int{0, -1, queue.MaxPage + 1} {
		_, _, err := s.Schedules(ctx, "", limit)
		h.wantErr("Schedules with a bad limit", err, queue.ErrInvalid)
	}
}

// testScheduleFires runs a sub-second schedule and checks its fires: the schedule's topic and
// payload, IDs naming their nominal time in milliseconds, due at it and never before it.
func testScheduleFires(ctx context.Context, h *env, s queue.Scheduler) {
	h.setSchedule(ctx, s, queue.Schedule{Name: "tick", Topic: "ticks", Payload: payload("tock"), Spec: "@every 250ms"})
	var prev time.Time
	for range 4 {
		d := h.receiveOne(ctx, "ticks", time.Minute)
		h.ack(ctx, d.Receipt)
		name, at, ok := queue.ParseFireID(d.ID)
		if !ok || name != "tick" || !strings.HasSuffix(d.ID, "Z") || !strings.Contains(d.ID, ".") {
			h.Fatalf("fire ID %q: want tick@<RFC 3339 time with milliseconds>", d.ID)
		}
		if !bytes.Equal(d.Payload, payload("tock")) {
			h.Fatalf("fire payload %q", d.Payload)
		}
		if d.DeliverAt.Before(at) {
			h.Fatalf("fire %q due at %v, before its nominal time", d.ID, d.DeliverAt)
		}
		if !prev.IsZero() && at.Sub(prev)%(250*time.Millisecond) != 0 {
			h.Fatalf("fire %q %v after the previous one: not a multiple of the period", d.ID, at.Sub(prev))
		}
		prev = at
	}
	if info := h.schedule(ctx, s, "tick"); info.Fires < 4 || info.LastFireID == "" {
		h.Fatalf("after 4 fires: fires %d, last %q", info.Fires, info.LastFireID)
	}
}

// testScheduleEveryTimeOnce runs a schedule every 50 ms for about 1.5 s, with MisfireAll so that
// a loaded machine cannot excuse a gap, and checks that its nominal times follow each other without
// a gap or a repeat. Its leases are as short as the drain's (see drain): a receive whose reply was
// lost leaves a gap only until its fires come again.
func testScheduleEveryTimeOnce(ctx context.Context, h *env, s queue.Scheduler) {
	const period = 50 * time.Millisecond
	h.setSchedule(ctx, s, queue.Schedule{Name: "fast", Topic: "fast", Spec: "@every 50ms", Misfire: queue.MisfireAll})
	end := time.Now().Add(1500 * time.Millisecond)
	seen := map[string]bool{}
	var times []time.Time
	take := func(d queue.Delivery) {
		if seen[d.ID] {
			h.Fatalf("fire %q delivered twice", d.ID)
		}
		seen[d.ID] = true
		_, at, _ := queue.ParseFireID(d.ID)
		times = append(times, at)
	}
	for time.Now().Before(end) {
		for _, d := range h.receive(ctx, "fast", 100, drainVisibility) {
			take(d)
			h.ack(ctx, d.Receipt)
		}
	}
	if err := s.PauseSchedule(ctx, "fast"); err != nil {
		h.Fatalf("PauseSchedule: %v", err)
	}
	h.drain(ctx, s, "fast", len(times), take)
	if len(times) < 3 {
		h.Fatalf("%d fires in 1.5 s of @every 50ms: too few to tell a gap", len(times))
	}
	first, last := times[0], times[0]
	for _, t := range times {
		first, last = minTime(first, t), maxTime(last, t)
	}
	if want := int(last.Sub(first)/period) + 1; want != len(times) {
		h.Fatalf("%d distinct fires from %v to %v; want %d, one per period", len(times), first, last, want)
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// testScheduleReplaceRemovesFire replaces a daily schedule and checks that its fire put ahead
// carries the new payload.
func testScheduleReplaceRemovesFire(ctx context.Context, h *env, s queue.Scheduler) {
	sc := queue.Schedule{Name: "daily", Topic: "t", Payload: payload("old"), Spec: "0 6 * * *"}
	h.setSchedule(ctx, s, sc)
	id := h.pendingFire(ctx, s, "daily")
	sc.Payload = payload("new")
	h.setSchedule(ctx, s, sc)
	m, err := as[queue.Admin](h).Message(ctx, id)
	if err != nil || !bytes.Equal(m.Payload, payload("new")) {
		h.Fatalf("after the replace, fire %q: %q, %v; want the new payload", id, m.Payload, err)
	}
	sc.Spec = "0 7 * * *"
	h.setSchedule(ctx, s, sc)
	if _, err := as[queue.Admin](h).Message(ctx, id); !errors.Is(err, queue.ErrNotFound) {
		h.Fatalf("after a replace with another time, the old fire %q: %v; want it removed", id, err)
	}
	h.pendingFire(ctx, s, "daily")
}

// testScheduleDelete deletes a schedule: its fire to come goes with it, and it is gone.
func testScheduleDelete(ctx context.Context, h *env, s queue.Scheduler) {
	h.setSchedule(ctx, s, queue.Schedule{Name: "gone", Topic: "t", Spec: "@daily"})
	id := h.pendingFire(ctx, s, "gone")
	if ok, err := s.DeleteSchedule(ctx, "gone"); !ok || err != nil {
		h.Fatalf("DeleteSchedule = %v, %v; want true", ok, err)
	}
	if _, err := as[queue.Admin](h).Message(ctx, id); !errors.Is(err, queue.ErrNotFound) {
		h.Fatalf("the deleted schedule's fire %q: %v; want it removed", id, err)
	}
	if ok, err := s.DeleteSchedule(ctx, "gone"); ok || err != nil {
		h.Fatalf("second DeleteSchedule = %v, %v; want false", ok, err)
	}
	_, err := s.Schedule(ctx, "gone")
	h.wantErr("Schedule after DeleteSchedule", err, queue.ErrNotFound)
	h.wantErr("PauseSchedule of nothing", s.PauseSchedule(ctx, "gone"), queue.ErrNotFound)
	h.wantErr("ResumeSchedule of nothing", s.ResumeSchedule(ctx, "gone"), queue.ErrNotFound)
}

// testSchedulePauseResume pauses a schedule (its fire to come goes, and it fires no more) and
// resumes it.
func testSchedulePauseResume(ctx context.Context, h *env, s queue.Scheduler) {
	h.setSchedule(ctx, s, queue.Schedule{Name: "p", Topic: "t", Spec: "@daily"})
	id := h.pendingFire(ctx, s, "p")
	for range 2 {
		if err := s.PauseSchedule(ctx, "p"); err != nil {
			h.Fatalf("PauseSchedule: %v", err)
		}
	}
	if info := h.schedule(ctx, s, "p"); !info.Paused || info.Next != nil {
		h.Fatalf("paused schedule: paused %v, next %v", info.Paused, info.Next)
	}
	if _, err := as[queue.Admin](h).Message(ctx, id); !errors.Is(err, queue.ErrNotFound) {
		h.Fatalf("the paused schedule's fire %q: %v; want it removed", id, err)
	}
	if st, err := s.ScheduleStats(ctx); err != nil || st.Paused != 1 {
		h.Fatalf("ScheduleStats = %+v, %v; want 1 paused", st, err)
	}
	for range 2 {
		if err := s.ResumeSchedule(ctx, "p"); err != nil {
			h.Fatalf("ResumeSchedule: %v", err)
		}
	}
	if info := h.schedule(ctx, s, "p"); info.Paused {
		h.Fatal("resumed schedule is paused")
	}
	if got := h.pendingFire(ctx, s, "p"); got != id {
		h.Fatalf("resumed: next fire %q; want %q again", got, id)
	}
	// A paused @every schedule fires nothing.
	h.setSchedule(ctx, s, queue.Schedule{Name: "q", Topic: "q", Spec: "@every 100ms"})
	if err := s.PauseSchedule(ctx, "q"); err != nil {
		h.Fatal(err)
	}
	h.drain(ctx, s, "q", 0, func(queue.Delivery) {})
}

// drainVisibility is the lease of the fires the schedule cases receive: on a busy machine an
// engine on a server can lose a receive's reply (and a repeated receive leases other messages),
// and the fires of the lost reply come again only once their lease ends.
const drainVisibility = 5 * time.Second

// drain receives and acks the fires of the paused schedule name on its topic, passing each
// delivery to seen first, until it has every fire the schedule counts (have of them came before)
// and nothing comes for 400 ms; it waits for fires a lost reply left leased, up to two leases with
// nothing coming. A paused schedule that kept firing would keep it going: it fails after 100
// receives.
func (h *env) drain(ctx context.Context, s queue.Scheduler, name string, have int, seen func(queue.Delivery)) {
	h.Helper()
	topic := h.schedule(ctx, s, name).Topic
	quiet := time.Now()
	for range 100 {
		rctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		ds, _ := h.e.Receive(rctx, topic, 100, drainVisibility)
		cancel()
		for _, d := range ds {
			seen(d)
			h.ack(ctx, d.Receipt)
		}
		have += len(ds)
		if len(ds) > 0 {
			quiet = time.Now()
		} else if uint64(have) >= h.schedule(ctx, s, name).Fires || time.Since(quiet) >= 2*drainVisibility {
			return
		}
	}
	h.Fatalf("topic %q still gets fires after schedule %q was paused", topic, name)
}

// testScheduleTrigger fires a schedule once outside its spec.
func testScheduleTrigger(ctx context.Context, h *env, s queue.Scheduler) {
	h.setSchedule(ctx, s, queue.Schedule{Name: "now", Topic: "t", Payload: payload("x"), Spec: "@yearly"})
	if err := s.PauseSchedule(ctx, "now"); err != nil {
		h.Fatal(err)
	}
	before := time.Now()
	id, err := s.TriggerSchedule(ctx, "now")
	if err != nil {
		h.Fatalf("TriggerSchedule: %v", err)
	}
	name, at, ok := queue.ParseFireID(id)
	if !ok || name != "now" || at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		h.Fatalf("TriggerSchedule = %q; want now@<about now>", id)
	}
	d := h.receiveOne(ctx, "t", time.Minute)
	if d.ID != id || !bytes.Equal(d.Payload, payload("x")) {
		h.Fatalf("delivered %q %q; want the triggered fire %q", d.ID, d.Payload, id)
	}
	h.ack(ctx, d.Receipt)
	_, err = s.TriggerSchedule(ctx, "none")
	h.wantErr("TriggerSchedule of nothing", err, queue.ErrNotFound)
	if info := h.schedule(ctx, s, "now"); info.LastFireID != id {
		h.Fatalf("last fire %q; want the triggered %q", info.LastFireID, id)
	}
}

// testScheduleOverlapSkip holds the leases of the fires of an OverlapSkip schedule and checks that
// no other fire is put meanwhile, each nominal time passed over and counted as a misfire, and that
// fires come again once they are acked. A first decision made late (a busy machine) puts the times
// that passed together, as one decision (see queue.OverlapSkip): the case leases every fire put
// before it holds them. How late a decision comes is the machine's: the case checks what was put
// and counted, not the nominal times of what comes after.
func testScheduleOverlapSkip(ctx context.Context, h *env, s queue.Scheduler) {
	h.setSchedule(ctx, s, queue.Schedule{Name: "slow", Topic: "slow", Spec: "@every 100ms", Overlap: queue.OverlapSkip})
	held := []queue.Delivery{h.receiveOne(ctx, "slow", time.Minute)}
	// The fire just leased waits, and so does the latest of its decision: nothing more is put.
	if n := h.schedule(ctx, s, "slow").Fires; n > 1 {
		held = append(held, h.receiveAll(ctx, "slow", int(n)-1, time.Minute)...)
	}
	h.expectNothing(ctx, "slow", 600*time.Millisecond)
	// Held until four nominal times were decided: each passed over, none put.
	var info queue.ScheduleInfo
	h.eventually(ctx, func() error {
		info = h.schedule(ctx, s, "slow")
		if info.Fires != uint64(len(held)) || info.Misfires >= 4 {
			return nil
		}
		return fmt.Errorf("%d misfires while %d fires of @every 100ms were held; want at least 4", info.Misfires, len(held))
	})
	if info.Fires != uint64(len(held)) {
		h.Fatalf("%d fires put while the %d put before them were held; want none", info.Fires-uint64(len(held)), len(held))
	}
	var a time.Time
	for _, d := range held {
		h.ack(ctx, d.Receipt)
		_, at, _ := queue.ParseFireID(d.ID)
		a = maxTime(a, at)
	}
	next := h.receiveOne(ctx, "slow", time.Minute)
	if _, b, _ := queue.ParseFireID(next.ID); !b.After(a) {
		h.Fatalf("fire %q after the held ones, the latest at %v: not later", next.ID, a)
	}
}

// testPutReplace replaces a scheduled message: new payload and due time, one message.
func testPutReplace(ctx context.Context, h *env) {
	h.put(ctx, queue.Message{ID: "remind", Topic: "t", Payload: payload("a"), DeliverAt: time.Now().Add(time.Hour)})
	h.put(ctx, queue.Message{ID: "remind", Topic: "t", Payload: payload("b"), DeliverAt: time.Now().Add(200 * time.Millisecond), Replace: true})
	d := h.receiveOne(ctx, "t", time.Minute)
	if d.ID != "remind" || !bytes.Equal(d.Payload, payload("b")) || d.Attempt != 1 {
		h.Fatalf("delivered %q %q attempt %d; want the replacement", d.ID, d.Payload, d.Attempt)
	}
	h.ack(ctx, d.Receipt)
	h.expectNothing(ctx, "t", 300*time.Millisecond)
	// Nothing waiting: a replace stores the message.
	h.put(ctx, queue.Message{ID: "fresh", Topic: "t", Payload: payload("c"), Replace: true})
	if d := h.receiveOne(ctx, "t", time.Minute); d.ID != "fresh" {
		h.Fatalf("delivered %q; want fresh", d.ID)
	}
}

// testPutReplaceLeased checks that a leased message is not replaced, and that the answer says so.
func testPutReplaceLeased(ctx context.Context, h *env) {
	h.put(ctx, queue.Message{ID: "busy", Topic: "t", Payload: payload("a")})
	d := h.receiveOne(ctx, "t", time.Minute)
	_, err := h.e.Put(ctx, queue.Message{ID: "busy", Topic: "t", Payload: payload("b"), Replace: true})
	var de *queue.DuplicateError
	if !errors.As(err, &de) || !de.Leased {
		h.Fatalf("Put replacing a leased message: %v; want a *DuplicateError with Leased", err)
	}
	h.ack(ctx, d.Receipt)
	h.expectNothing(ctx, "t", 300*time.Millisecond)
}
