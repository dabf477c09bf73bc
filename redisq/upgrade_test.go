package redisq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/queue"
)

// A dumpedKey is one key of a deployment dumped by testdata/layout2/make.go.
type dumpedKey struct {
	Type   string            `json:"type"`
	String string            `json:"string"`
	Hash   map[string]string `json:"hash"`
	Set    []string          `json:"set"`
	ZSet   []struct {
		Member string  `json:"member"`
		Score  float64 `json:"score"`
	} `json:"zset"`
	List []string `json:"list"`
}

// loadDump writes the keys of the dump in file into rdb.
func loadDump(t *testing.T, ctx context.Context, rdb *redis.Client, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var dump map[string]dumpedKey
	if err := json.Unmarshal(data, &dump); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, v := range dump {
			switch v.Type {
			case "string":
				p.Set(ctx, k, v.String, 0)
			case "hash":
				p.HSet(ctx, k, v.Hash)
			case "set":
				p.SAdd(ctx, k, v.Set)
			case "zset":
				for _, z := range v.ZSet {
					p.ZAdd(ctx, k, redis.Z{Member: z.Member, Score: z.Score})
				}
			case "list":
				p.RPush(ctx, k, v.List)
			default:
				return fmt.Errorf("key %q of type %q", k, v.Type)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("loading %s: %v", file, err)
	}
}

// TestUpgradeFromLayout2 loads into a real redis-server a deployment that the redisq of layout
// version 2 wrote (testdata/layout2: messages scheduled, due, failed, dead, leased and paused;
// see make.go there), and opens it: see testUpgrade.
func TestUpgradeFromLayout2(t *testing.T) { testUpgrade(t, "2", 78) }

// TestUpgradeFromLayout3 loads into a real redis-server a deployment that the redisq of layout
// version 3 wrote (testdata/layout3: that of version 2, and failures with reasons, a limited
// topic with permits held; see make.go there), and opens it: see testUpgrade.
func TestUpgradeFromLayout3(t *testing.T) {
	rdb, q := testUpgrade(t, "3", 88)
	ctx := testCtx(t, time.Minute)
	dead, _, err := q.Messages(ctx, "why", queue.Dead, "", 10)
	if err != nil || len(dead) != 1 || dead[0].Reason != "no such mailbox" || dead[0].LastFailure != "dead-lettered" {
		t.Fatalf("the dead letter of \"why\": %+v, %v; want it with its reason", dead, err)
	}
	due, _, err := q.Messages(ctx, "why", queue.Due, "", 10)
	if err != nil || len(due) != 1 || due[0].Reason != "try later" || due[0].LastFailure != "nacked" {
		t.Fatalf("the nacked message of \"why\": %+v, %v; want it with its reason", due, err)
	}
	limits, err := q.Limits(ctx)
	want := queue.TopicLimit{Topic: "limited", Limit: queue.Limit{Rate: 100, Burst: 10, Concurrency: 5}}
	if err != nil || !slices.Contains(limits, want) {
		t.Fatalf("limits: %+v, %v; want %+v among them", limits, err, want)
	}
	// The permits version 3 held ran out with their leases: 5 of the 8 messages are let out at a
	// time, with the permits of this version.
	for left := 8; left > 0; {
		ds, err := q.Receive(ctx, "limited", 8, time.Minute)
		if err != nil {
			t.Fatalf("receive of \"limited\": %v (%d left)", err, left)
		}
		if len(ds) > 5 {
			t.Fatalf("received %d of a topic limited to 5 leased at once", len(ds))
		}
		for _, d := range ds {
			if err := q.Ack(ctx, d.Receipt); err != nil {
				t.Fatal(err)
			}
		}
		left -= len(ds)
	}
	if rep, err := Check(ctx, rdb, "v3"); err != nil || len(rep.Problems) > 0 {
		t.Fatalf("Check at the end: %+v, %v", rep, err)
	}
}

// TestUpgradeFromLayout4 loads into a real redis-server a deployment that the redisq of layout
// version 4 wrote (testdata/layout4: that of version 3, and a paused schedule; see make.go there),
// and opens it: see testUpgrade. The schedule is kept, and this version puts headers beside the
// old version's records.
func TestUpgradeFromLayout4(t *testing.T) {
	rdb, q := testUpgrade(t, "4", 88)
	ctx := testCtx(t, time.Minute)
	si, err := q.Schedule(ctx, "yearly")
	if err != nil || !si.Paused || si.Spec != "0 0 1 1 *" || si.Topic != "sched" {
		t.Fatalf("the schedule of version 4: %+v, %v; want \"yearly\", paused", si, err)
	}
	h := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	id, err := q.Put(ctx, queue.Message{Topic: "due", Payload: []byte("with headers"), Headers: h})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, "due", 1, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != id || !maps.Equal(ds[0].Headers, h) {
		t.Fatalf("a message with headers put after the upgrade: %+v, %v; want it with %q", ds, err, h)
	}
	if rep, err := Check(ctx, rdb, "v4"); err != nil || len(rep.Problems) > 0 {
		t.Fatalf("Check at the end: %+v, %v", rep, err)
	}
}

// testUpgrade loads testdata/layout<version>/deployment.json, a deployment (prefix
// "v<version>") holding messages messages that the redisq of that layout version wrote, into a
// real redis-server, and opens it: Open upgrades it in place to this version's layout; Check
// finds it sound before any write of this version and after; every message that version 2 could
// write is where the old version left it, with its attempts and last failure, and is delivered,
// failed with a reason, extended, limited and acked by this version. It returns the client and
// the Queue, open on the deployment.
func testUpgrade(t *testing.T, version string, messages int) (*redis.Client, *Queue) {
	ctx := testCtx(t, 2*time.Minute)
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	loadDump(t, ctx, rdb, "testdata/layout"+version+"/deployment.json")
	prefix := "v" + version
	if v, err := rdb.HGet(ctx, "{"+prefix+"}:config", "version").Result(); err != nil || v != version {
		t.Fatalf("the dump's layout version: %q, %v; want %s", v, err, version)
	}
	if _, err := Check(ctx, rdb, prefix); !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "upgrades it in place") {
		t.Fatalf("Check of a deployment of layout version %s: %v; want ErrIncompatible saying Open upgrades it", version, err)
	}

	q, err := Open(ctx, rdb, WithPrefix(prefix), WithMaxAttempts(2), WithDeadLetterTopic("dead"),
		WithBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatalf("Open of a deployment of layout version %s: %v", version, err)
	}
	t.Cleanup(func() { q.Close() })
	if v, err := rdb.HGet(ctx, "{"+prefix+"}:config", "version").Result(); err != nil || v != layoutVersion {
		t.Fatalf("layout version after Open: %q, %v; want %s", v, err, layoutVersion)
	}
	if q.lay.shards() != 4 {
		t.Fatalf("shards: %d; want the deployment's 4", q.lay.shards())
	}
	check := func(when string, messages int) {
		t.Helper()
		rep, err := Check(ctx, rdb, prefix)
		if err != nil {
			t.Fatalf("Check %s: %v", when, err)
		}
		if len(rep.Problems) > 0 || rep.Messages != messages {
			t.Fatalf("Check %s: %d messages, problems %q; want %d and none", when, rep.Messages, rep.Problems, messages)
		}
	}
	check("after the upgrade", messages)

	// Every message is where the old version left it. The leases of "held" and the delay of "nacked" (a
	// second each) ran out long ago, by the dump's clock.
	topics, err := q.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]queue.TopicInfo{}
	for _, ti := range topics {
		got[ti.Topic] = ti
	}
	for _, want := range []struct {
		topic                     string
		scheduled, due, leased, d int64
		paused                    bool
	}{
		{"later", 20, 0, 0, 0, false},
		{"due", 0, 30, 0, 0, false},
		{"nacked", 0, 10, 0, 0, false},
		{"doomed", 0, 0, 0, 5, false},
		{"dead", 0, map[string]int64{"2": 5, "3": 6, "4": 6}[version], 0, 0, false}, // from version 3, a dead letter of "why"
		{"stopped", 0, 3, 0, 0, true},
	} {
		ti := got[want.topic]
		if ti.Scheduled != want.scheduled || ti.Due != want.due || ti.Leased != want.leased || ti.Dead != want.d || ti.Paused != want.paused {
			t.Errorf("topic %q: %+v; want scheduled %d, due %d, leased %d, dead %d, paused %v",
				want.topic, ti, want.scheduled, want.due, want.leased, want.d, want.paused)
		}
	}
	if ti := got["held"]; ti.Scheduled+ti.Leased+ti.Due != 10 || ti.Dead != 0 {
		t.Errorf("topic \"held\": %+v; want its 10 messages leased, or to be delivered again", ti)
	}
	m, err := q.Message(ctx, "later-7")
	if err != nil || m.State != queue.Scheduled || string(m.Payload) != "later-7" || !m.DeliverAt.Equal(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("Message(later-7): %+v, %v; want it scheduled for 2100 with its payload", m, err)
	}
	dead, _, err := q.Messages(ctx, "doomed", queue.Dead, "", 10)
	if err != nil || len(dead) != 5 {
		t.Fatalf("dead letters of \"doomed\": %d, %v; want 5", len(dead), err)
	}
	for _, m := range dead {
		if m.Attempts != 2 || m.LastFailure != "nacked" || m.Reason != "" {
			t.Errorf("dead letter %s: attempts %d, last failure %q, reason %q; want 2, nacked, none", m.ID, m.Attempts, m.LastFailure, m.Reason)
		}
	}

	// This version works them.
	receive := func(topic string, n int) []queue.Delivery {
		t.Helper()
		var out []queue.Delivery
		for len(out) < n {
			ds, err := q.Receive(ctx, topic, n-len(out), time.Minute)
			if err != nil {
				t.Fatalf("receive %d of %q: %v (after %d)", n, topic, err, len(out))
			}
			out = append(out, ds...)
		}
		return out
	}
	acks := func(ds []queue.Delivery) {
		t.Helper()
		for _, d := range ds {
			if err := q.Ack(ctx, d.Receipt); err != nil {
				t.Fatalf("ack of %s: %v", d.ID, err)
			}
		}
	}
	ds := receive("due", 30)
	var payloads []string
	for _, d := range ds {
		payloads = append(payloads, string(d.Payload))
		if d.Attempt != 1 {
			t.Errorf("%s of \"due\": attempt %d; want 1", d.ID, d.Attempt)
		}
	}
	slices.Sort(payloads)
	for i := range 30 {
		if !slices.Contains(payloads, fmt.Sprintf("due-%d", i)) {
			t.Fatalf("payloads of \"due\": %q; want due-0 to due-29", payloads)
		}
	}
	acks(ds)

	ds = receive("nacked", 10)
	for _, d := range ds {
		if d.Attempt != 2 {
			t.Errorf("%s of \"nacked\": attempt %d; want 2", d.ID, d.Attempt)
		}
	}
	if err := q.Nack(ctx, ds[0].Receipt, 0, queue.WithReason("upgraded"), queue.WithDeadLetter()); err != nil {
		t.Fatal(err)
	}
	if m, err := q.Message(ctx, ds[0].ID); err != nil || m.State != queue.Dead || m.Reason != "upgraded" || m.LastFailure != "dead-lettered" {
		t.Fatalf("a message of the old version failed for good with a reason: %+v, %v", m, err)
	}
	if err := q.Extend(ctx, ds[1].Receipt, time.Hour); err != nil {
		t.Fatalf("extend: %v", err)
	}
	acks(ds[1:])

	if err := q.SetLimit(ctx, "held", queue.Limit{Rate: 1000, Burst: 100, Concurrency: 5}); err != nil {
		t.Fatal(err)
	}
	// The leases the old version took are held until the housekeeping finds them run out; then the
	// concurrency limit lets 5 out at a time.
	for left := 10; left > 0; {
		ds := receive("held", min(left, 5))
		if len(ds) > 5 {
			t.Fatalf("received %d of a topic limited to 5 leased at once", len(ds))
		}
		for _, d := range ds {
			if d.Attempt != 2 {
				t.Errorf("%s of \"held\": attempt %d; want 2 (its lease of the old version ran out)", d.ID, d.Attempt)
			}
		}
		acks(ds)
		left -= len(ds)
	}
	if ok, err := q.Cancel(ctx, "later-3"); err != nil || !ok {
		t.Fatalf("Cancel of a message put in a batch by the old version: %v, %v", ok, err)
	}
	// 30 due, 9 nacked and 10 held acked, one cancelled.
	check("after this version's writes", messages-50)

	// Opened again, nothing is upgraded (a process of the old version would refuse it now: Open
	// checks the version).
	q2, err := Open(ctx, rdb, WithPrefix(prefix))
	if err != nil {
		t.Fatalf("Open of the upgraded deployment: %v", err)
	}
	q2.Close()
	if v, err := rdb.HGet(ctx, "{"+prefix+"}:config", "version").Result(); err != nil || v != layoutVersion {
		t.Fatalf("layout version after another Open: %q, %v; want %s", v, err, layoutVersion)
	}
	return rdb, q
}

// TestUpgradeFiresFromLayout3 loads a deployment that the redisq of layout version 3 wrote
// (testdata/layout3/fires.json; see fires.go there) holding messages whose chosen IDs have the
// form of a schedule's fire, "<name>@<time>": version 3 homed them by the whole ID, this version
// by the name. Two processes open it at once, and both upgrade it: see checkFiresUpgraded.
func TestUpgradeFiresFromLayout3(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	loadDump(t, ctx, rdb, "testdata/layout3/fires.json")
	var qs [2]*Queue
	var errs [2]error
	var wg sync.WaitGroup
	for i := range qs {
		wg.Go(func() {
			qs[i], errs[i] = Open(ctx, rdb, WithPrefix("v3f"), WithMaxAttempts(2), WithDeadLetterTopic("dead"),
				WithBackoff(time.Millisecond, time.Millisecond))
		})
	}
	wg.Wait()
	for i, q := range qs {
		if errs[i] != nil {
			t.Fatalf("Open %d of 2 at once: %v", i+1, errs[i])
		}
		defer q.Close()
	}
	checkFiresUpgraded(t, ctx, rdb, qs[0])
}

// TestUpgradeFiresInterrupted is TestUpgradeFiresFromLayout3 with the upgrade stopped before its
// k-th script, for every k, as by a process that dies there: the deployment keeps its version,
// and the next Open upgrades it whole.
func TestUpgradeFiresInterrupted(t *testing.T) {
	ctx := testCtx(t, 5*time.Minute)
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	errStop := errors.New("stopped by the test")
	for k := 0; ; k++ {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		loadDump(t, ctx, rdb, "testdata/layout3/fires.json")
		steps := 0
		q, err := Open(ctx, rdb, WithPrefix("v3f"), WithMaxAttempts(2), WithDeadLetterTopic("dead"),
			WithBackoff(time.Millisecond, time.Millisecond), withRehomeStepHook(func() error {
				if steps == k {
					return errStop
				}
				steps++
				return nil
			}))
		if err == nil {
			q.Close()
			if k < 10 {
				t.Fatalf("the upgrade took %d scripts; want at least one per message to rehome (7)", k)
			}
			t.Logf("the upgrade took %d scripts; stopped before each in turn", k)
			return
		}
		if !errors.Is(err, errStop) {
			t.Fatalf("Open stopped before script %d: %v; want the hook's error", k, err)
		}
		if v, err := rdb.HGet(ctx, "{v3f}:config", "version").Result(); err != nil || v != "3" {
			t.Fatalf("layout version after an upgrade stopped before script %d: %q, %v; want 3", k, v, err)
		}
		t.Run(fmt.Sprint("stopped before script ", k), func(t *testing.T) {
			q, err := Open(ctx, rdb, WithPrefix("v3f"), WithMaxAttempts(2), WithDeadLetterTopic("dead"),
				WithBackoff(time.Millisecond, time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			checkFiresUpgraded(t, ctx, rdb, q)
		})
	}
}

// checkFiresUpgraded checks the deployment of testdata/layout3/fires.json once q has opened it:
// each message under an ID of a fire's form is found, cancelled and put again by its ID, a
// different message with its ID is a duplicate, the same one again stores nothing, and Check
// finds the deployment sound.
func checkFiresUpgraded(t *testing.T, ctx context.Context, rdb *redis.Client, q *Queue) {
	t.Helper()
	if v, err := rdb.HGet(ctx, "{v3f}:config", "version").Result(); err != nil || v != layoutVersion {
		t.Fatalf("layout version after Open: %q, %v; want %s", v, err, layoutVersion)
	}
	later := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	fires := []struct {
		id, topic string
		at        time.Time // what it was put with
		state     queue.State
	}{
		{"later0-a@2100-01-01T00:00:00Z", "later", later, queue.Scheduled},
		{"later0-b@2100-01-01T00:00:00Z", "later", later, queue.Scheduled},
		{"later0-c@2100-01-01T00:00:00Z", "later", later, queue.Scheduled},
		{"due0@2026-01-01T00:00:00Z", "due", time.Time{}, queue.Due},
		{"doomed0@2026-01-01T00:00:00Z", "doomed", time.Time{}, queue.Dead},
		{"near2@2100-01-01T00:00:00Z", "batch", later, queue.Scheduled},
		{"far0@2100-01-01T00:00:00Z", "batch", later, queue.Scheduled},
		{"same@2100-01-01T00:00:01Z", "same", later, queue.Scheduled},
	}
	for _, f := range fires {
		if _, _, ok := queue.ParseFireID(f.id); !ok {
			t.Fatalf("%q is not of a fire's form", f.id)
		}
		m, err := q.Message(ctx, f.id)
		if err != nil || m.State != f.state || string(m.Payload) != f.id {
			t.Errorf("Message(%q): %+v, %v; want it %v with its payload", f.id, m, err, f.state)
			continue
		}
		if f.state != queue.Dead { // a dead letter's topic is its dead-letter topic now
			if _, err := q.Put(ctx, queue.Message{ID: f.id, Topic: f.topic, Payload: []byte(f.id), DeliverAt: f.at}); err != nil {
				t.Errorf("Put of %q as it was put: %v; want a retried Put", f.id, err)
			}
		}
		if _, err := q.Put(ctx, queue.Message{ID: f.id, Topic: f.topic, Payload: []byte("other")}); !errors.Is(err, queue.ErrDuplicate) {
			t.Errorf("Put of another message under %q: %v; want ErrDuplicate", f.id, err)
		}
	}
	if rep, err := Check(ctx, rdb, "v3f"); err != nil || len(rep.Problems) > 0 || rep.Messages != 9 {
		t.Fatalf("Check after the upgrade: %+v, %v; want 9 messages and no problem", rep, err)
	}
	for _, f := range fires {
		if ok, err := q.Cancel(ctx, f.id); !ok || err != nil {
			t.Errorf("Cancel(%q): %v, %v; want true", f.id, ok, err)
		}
		if ok, err := q.Cancel(ctx, f.id); ok || err != nil {
			t.Errorf("Cancel(%q) again: %v, %v; want false", f.id, ok, err)
		}
		if _, err := q.Message(ctx, f.id); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("Message(%q) once cancelled: %v; want ErrNotFound", f.id, err)
		}
		if _, err := q.Put(ctx, queue.Message{ID: f.id, Topic: "again", Payload: []byte("again"), DeliverAt: later}); err != nil {
			t.Errorf("Put of %q once cancelled: %v", f.id, err)
		}
	}
	if rep, err := Check(ctx, rdb, "v3f"); err != nil || len(rep.Problems) > 0 || rep.Messages != 9 {
		t.Fatalf("Check at the end: %+v, %v; want 9 messages and no problem", rep, err)
	}
}
