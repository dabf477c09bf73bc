package delayq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/queue"
)

// TestAdminCrash kills, with SIGKILL at a random moment, child processes (TestAdminCrashChild) that
// purge, pause, resume and requeue in a loop, reporting each action before it begins and after it
// returns, and then checks the directory: every action that returned holds, none that did not
// begin has happened, and one cut short by the kill holds or not, whole.
//
// Each round of a child puts messages due in an hour on topic s and purges s's scheduled messages;
// pauses topic p (even rounds) or resumes it (odd ones); and puts a message on a topic of its own,
// fails it to death (one attempt), and requeues it.
func TestAdminCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs child processes")
	}
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	type action struct{ began, ended bool }
	acts := map[string]*action{} // by what and round: "purge 2-7", "pause 2-7", "requeue 2-7"
	act := func(key string) *action {
		if acts[key] == nil {
			acts[key] = &action{}
		}
		return acts[key]
	}
	// Purge takes every scheduled message of s, so a message whose own round's purge never began
	// (its child was killed first) is taken by the next purge of a later child. seq numbers the
	// lines of every child in the order they were written; a message must be gone if a purge
	// that began after its put returned, and kept if none began after it.
	seq := 0
	puts := map[string]int{}         // ID put on s -> seq of its put
	var purgeBegan, purgeEnded []int // seqs of the purges' begin lines, of those that returned
	purgeOf := map[string]int{}      // round -> seq of its purge's begin
	var lastPause string             // the last pause or resume that returned: "on" or "off", with its round
	var pauseRounds []string         // rounds whose pause or resume began, in order
	dead := map[string]string{}      // ID on d that died -> its round
	exercised := func() bool { return len(purgeEnded) > 0 && len(dead) > 0 && lastPause != "" }
	killRounds(rng, 5, exercised, func(gen int, inOpen bool) {
		env := []string{"DELAYQ_ADMIN_CRASH_DIR=" + dir, fmt.Sprintf("DELAYQ_ADMIN_CRASH_GEN=%d", gen)}
		runUntilKilled(t, "TestAdminCrashChild", env, time.Duration(200+rng.IntN(800))*time.Millisecond, inOpen, func(line string) {
			f := strings.Fields(line)
			if len(f) != 3 {
				if strings.HasPrefix(line, "fatal") {
					t.Fatalf("child: %s", line)
				}
				return // test-framework output, or a line cut short by the kill
			}
			seq++
			switch f[0] {
			case "put": // put round n: the batch s-round-0 ... s-round-(n-1)
				n, _ := strconv.Atoi(f[2])
				for i := range n {
					puts[adminCrashID(f[1], i)] = seq
				}
			case "begin":
				act(f[1] + " " + f[2]).began = true
				if f[1] == "purge" {
					purgeBegan = append(purgeBegan, seq)
					purgeOf[f[2]] = seq
				}
				if f[1] == "pause" || f[1] == "resume" {
					pauseRounds = append(pauseRounds, f[2])
				}
			case "end":
				act(f[1] + " " + f[2]).ended = true
				if f[1] == "purge" {
					purgeEnded = append(purgeEnded, purgeOf[f[2]])
				}
				if f[1] == "pause" || f[1] == "resume" {
					lastPause = f[1] + " " + f[2]
				}
			case "dead": // dead ID round
				dead[f[1]] = f[2]
			}
		})
	})

	q := open(t, dir, WithMaxAttempts(1))
	check(t, q)
	ctx := context.Background()
	purged, kept := 0, 0
	after := func(seqs []int, put int) bool { return len(seqs) > 0 && seqs[len(seqs)-1] > put }
	for id, put := range puts {
		_, err := q.Message(ctx, id)
		switch {
		case after(purgeEnded, put) && !errors.Is(err, ErrNotFound):
			t.Errorf("%s: %v after a purge that began after its put returned; want ErrNotFound", id, err)
		case !after(purgeBegan, put) && err != nil:
			t.Errorf("%s, put after every purge began: %v", id, err)
		}
		if err == nil {
			kept++
		} else {
			purged++
		}
	}
	// The last child may have been killed after its batch was stored but before it said so: five
	// messages more, none of them named in puts.
	if ti := topicOf(t, q, "s"); ti.Scheduled != int64(kept) && ti.Scheduled != int64(kept+5) {
		t.Errorf("topic s: %+v; want %d scheduled (or 5 more from a batch put as its child was killed)", ti, kept)
	}
	// The pause: as the last one that returned left it, unless a later one began.
	paused := topicOf(t, q, "p").Paused
	if lastPause != "" && pauseRounds[len(pauseRounds)-1] == strings.Fields(lastPause)[1] {
		if want := strings.HasPrefix(lastPause, "pause"); paused != want {
			t.Errorf("topic p paused %v; the last action, which returned, was %s", paused, lastPause)
		}
	}
	requeued := 0
	for id, round := range dead {
		a := act("requeue " + round)
		m, err := q.Message(ctx, id)
		switch {
		case err != nil:
			t.Errorf("dead letter %s of round %s: %v", id, round, err)
		case a.ended && (m.State == queue.Dead || m.Topic != id):
			t.Errorf("%s of round %s after its requeue returned: %+v; want it back on its topic", id, round, m)
		case !a.began && m.State != queue.Dead:
			t.Errorf("%s of round %s, whose requeue never began: %+v; want it dead", id, round, m)
		}
		if m.State != queue.Dead {
			requeued++
		}
	}
	t.Logf("%d messages purged, %d kept; %d dead letters, %d requeued; topic p paused %v after %q",
		purged, kept, len(dead), requeued, paused, lastPause)
	if purged == 0 || len(dead) == 0 || lastPause == "" {
		t.Errorf("the children purged %d messages, killed %d, paused or resumed %q: the test exercised too little", purged, len(dead), lastPause)
	}
}

// adminCrashID is the ID of the i-th message of the batch a child of TestAdminCrash puts on
// topic s in round.
func adminCrashID(round string, i int) string { return fmt.Sprintf("s-%s-%d", round, i) }

func TestAdminCrashChild(t *testing.T) {
	dir := os.Getenv("DELAYQ_ADMIN_CRASH_DIR")
	if dir == "" {
		t.Skip("run by TestAdminCrash")
	}
	gen, _ := strconv.Atoi(os.Getenv("DELAYQ_ADMIN_CRASH_GEN"))
	q, r := openCrashChild(dir, WithMaxAttempts(1), WithCheckpointInterval(50*time.Millisecond), WithSegmentSize(16<<10))
	report, fatal := r.report, r.fatal
	report("ready")
	ctx := context.Background()
	for r := 0; ; r++ {
		round := fmt.Sprintf("%d-%d", gen, r)
		var ms []Message
		for i := range 5 {
			ms = append(ms, Message{ID: adminCrashID(round, i), Topic: "s", DeliverAt: time.Now().Add(time.Hour)})
		}
		if _, err := q.PutBatch(ctx, ms); err != nil {
			fatal("put", err)
		}
		// One line for the batch: a kill between lines would otherwise leave part of a stored
		// batch unreported.
		report("put %s %d", round, len(ms))
		report("begin purge %s", round)
		if _, err := q.Purge(ctx, "s", queue.Scheduled); err != nil {
			fatal("purge", err)
		}
		report("end purge %s", round)

		what, set := "resume", q.Resume
		if r%2 == 0 {
			what, set = "pause", q.Pause
		}
		report("begin %s %s", what, round)
		if err := set(ctx, "p"); err != nil {
			fatal(what, err)
		}
		report("end %s %s", what, round)

		id, topic := "d-"+round, "d-"+round
		if _, err := q.Put(ctx, Message{ID: id, Topic: topic}); err != nil {
			fatal("put", err)
		}
		ds, err := q.Receive(ctx, topic, 1, time.Hour)
		if err != nil {
			fatal("receive", err)
		}
		if err := q.Nack(ctx, ds[0].Receipt, 0); err != nil {
			fatal("nack", err)
		}
		report("dead %s %s", id, round)
		report("begin requeue %s", round)
		if n, err := q.Requeue(ctx, topic, id); err != nil || n != 1 {
			fatal("requeue", fmt.Errorf("%d requeued, %v", n, err))
		}
		report("end requeue %s", round)
	}
}
