// Package schedule is when a [queue.Schedule] fires: it parses a schedule's spec and time zone,
// gives its nominal fire times across daylight saving changes, and decides, at a given moment,
// which nominal times an engine fires now and which it passes over by the misfire policy. Both
// of tock's engines use it, so that a schedule fires at the same times on either; the engines
// keep the state it is given (the first nominal time not yet decided) and make the decision
// durable with the fires' messages.
//
// # Basics
//
//	spec, err := schedule.Parse("30 9 * * mon-fri", "Europe/Paris", start)
//	t := spec.Next(now)                                  // the first nominal time after now
//	plan := spec.Plan(next, now, queue.MisfireOnce, queue.OverlapAllow)
//	// put a message per plan.Fire (ID queue.FireID), record plan.Next, act again at plan.Act
//
// Cron expressions and descriptors are parsed by github.com/robfig/cron/v3's parser (5 fields,
// an optional seconds field first, and the descriptors); the fire times are computed here, in the
// schedule's zone, by the rules [queue.Schedule.TimeZone] states: a local time that does not
// exist fires at the instant the clocks jump, one that occurs twice fires at its first
// occurrence. "@every <duration>" is read here too, to the millisecond, from [queue.MinEvery].
//
// # Caveats
//
// Time zones come from the system's IANA database, or from the one embedded by importing
// time/tzdata, as cmd/tockd does. A schedule's times follow the database of the process that
// computes them: processes with different databases may disagree on a zone whose rules changed.
// Every function is pure and safe for concurrent use; a [Spec] is immutable.
package schedule
