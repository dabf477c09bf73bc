package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/tockwheel/tock/client"
)

const scheduleUsage = `  schedule [flags] NAME TOPIC SPEC [PAYLOAD|-]
                                      create or replace a schedule (--tz ZONE, --misfire
                                      once|skip|all, --overlap allow|skip); SPEC is cron
                                      ("30 9 * * mon-fri"), @daily..., or "@every 10s"
  schedules [flags]                   list the schedules with their next and last fires
  unschedule [flags] NAME             delete a schedule and its fire not yet due
  pause-schedule [flags] NAME         stop a schedule's fires
  resume-schedule [flags] NAME        start them again, from the next time
  trigger  [flags] NAME               fire a schedule once now`

// scheduleCommands returns the subcommands of schedules, by name.
func scheduleCommands() map[string]queueCommand {
	return map[string]queueCommand{
		"schedule":   scheduleCommand,
		"schedules":  schedulesCommand,
		"unschedule": unscheduleCommand,
		"pause-schedule": func(ctx context.Context, a []string, o, e io.Writer) int {
			return scheduleAction(ctx, "pause-schedule", a, o, e)
		},
		"resume-schedule": func(ctx context.Context, a []string, o, e io.Writer) int {
			return scheduleAction(ctx, "resume-schedule", a, o, e)
		},
		"trigger": triggerCommand,
	}
}

func scheduleCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("schedule", "[flags] NAME TOPIC SPEC [PAYLOAD|-]", stderr)
	tz := qc.fs.String("tz", "", "IANA time `zone` of the spec, such as Europe/Paris (default UTC)")
	misfire := qc.fs.String("misfire", "", "what to do with times missed while nothing could fire: once (default), skip or all")
	overlap := qc.fs.String("overlap", "", "allow (default), or skip: no fire while the previous one still waits")
	asJSON := qc.fs.Bool("json", false, "print the schedule as one line of JSON")
	asString := qc.fs.Bool("string", false, "send PAYLOAD as a JSON string whatever it looks like")
	pos, code, ok := qc.parse(args, 3, 4)
	if !ok {
		return code
	}
	req := client.ScheduleRequest{Topic: pos[1], Spec: pos[2], TimeZone: *tz, Misfire: *misfire, Overlap: *overlap}
	if len(pos) == 4 {
		raw := []byte(pos[3])
		if pos[3] == "-" {
			var err error
			if raw, err = io.ReadAll(os.Stdin); err != nil {
				fmt.Fprintf(stderr, "tock schedule: reading stdin: %v\n", err)
				return exitFailed
			}
		}
		payload, err := payloadArg(raw, *asString)
		if err != nil {
			fmt.Fprintf(stderr, "tock schedule: %v\n", err)
			return exitUsage
		}
		req.Payload = payload
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	s, created, err := c.SetSchedule(ctx, pos[0], req)
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	if *asJSON {
		return writeLines(stderr, "schedule", jsonLines(stdout, s))
	}
	verb := "replaced"
	if created {
		verb = "created"
	}
	fmt.Fprintf(stdout, "%s %s: %s in %s on %s\n", verb, s.Name, s.Spec, s.TimeZone, s.Topic)
	printNext(stdout, s)
	return exitOK
}

// printNext prints a schedule's next fire times, in its zone and in UTC.
func printNext(w io.Writer, s client.Schedule) {
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil {
		loc = time.UTC
	}
	for _, t := range s.Next {
		fmt.Fprintf(w, "  next %s  (%s)\n", t.In(loc).Format("Mon 2006-01-02 15:04:05.000 MST"), t.UTC().Format(time.RFC3339Nano))
	}
}

func schedulesCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("schedules", "[flags]", stderr)
	asJSON := qc.fs.Bool("json", false, "print JSON Lines, one schedule a line")
	if _, code, ok := qc.parse(args, 0, 0); !ok {
		return code
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	var all []client.Schedule
	for cursor := ""; ; {
		page, next, err := c.Schedules(ctx, cursor, 0)
		if err != nil {
			return fail(stderr, qc.conn.server, err)
		}
		all = append(all, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	if *asJSON {
		return writeLines(stderr, "schedules", jsonLines(stdout, all...))
	}
	if len(all) == 0 {
		fmt.Fprintln(stdout, "no schedules")
		return exitOK
	}
	now := time.Now()
	t := newTable(stdout)
	fmt.Fprintln(t, "NAME\tTOPIC\tSPEC\tZONE\tNEXT\tLAST\tFIRES\tMISFIRES\tSTATE")
	for _, s := range all {
		next := "-"
		if len(s.Next) > 0 {
			next = ago(s.Next[0], now)
		}
		state := "running"
		if s.Paused {
			state = "paused"
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", s.Name, s.Topic, shorten(s.Spec, 30), s.TimeZone,
			next, ago(s.LastFire, now), s.Fires, s.Misfires, state)
	}
	return writeLines(stderr, "schedules", t.Flush())
}

func unscheduleCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("unschedule", "[flags] NAME", stderr)
	pos, code, ok := qc.parse(args, 1, 1)
	if !ok {
		return code
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	deleted, err := c.DeleteSchedule(ctx, pos[0])
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	if !deleted {
		fmt.Fprintf(stderr, "tock unschedule: no schedule %q\n", pos[0])
		return exitNotFound
	}
	fmt.Fprintf(stdout, "deleted %s\n", pos[0])
	return exitOK
}

// scheduleAction is the pause-schedule command, or resume-schedule's.
func scheduleAction(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall(name, "[flags] NAME", stderr)
	pos, code, ok := qc.parse(args, 1, 1)
	if !ok {
		return code
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	var s client.Schedule
	var err error
	if strings.HasPrefix(name, "pause") {
		s, err = c.PauseSchedule(ctx, pos[0])
	} else {
		s, err = c.ResumeSchedule(ctx, pos[0])
	}
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	if s.Paused {
		fmt.Fprintf(stdout, "paused %s: no fires until tock resume-schedule %s\n", s.Name, s.Name)
		return exitOK
	}
	fmt.Fprintf(stdout, "resumed %s\n", s.Name)
	printNext(stdout, s)
	return exitOK
}

func triggerCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	qc := newQueueCall("trigger", "[flags] NAME", stderr)
	pos, code, ok := qc.parse(args, 1, 1)
	if !ok {
		return code
	}
	c, ctx, cancel, code, ok := qc.connected(ctx)
	if !ok {
		return code
	}
	defer cancel()
	id, err := c.TriggerSchedule(ctx, pos[0])
	if err != nil {
		return fail(stderr, qc.conn.server, err)
	}
	fmt.Fprintln(stdout, id)
	return exitOK
}
