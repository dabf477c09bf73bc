// Package tock is a hierarchical timing wheel: a timer facility for programs that keep many
// timeouts pending, cancel most of them, and fire the rest on time.
//
// # Basics
//
// A [Wheel] schedules callbacks, as [time.AfterFunc] does:
//
//	w := tock.New()
//	defer w.Stop()
//	t, err := w.AfterFunc(30*time.Second, func() { conn.Close() })
//	...
//	t.Reset(30 * time.Second) // the connection was used: push the timeout back
//	...
//	t.Stop() // done: the timeout will not fire
//
// [Wheel.AfterFunc], [Timer.Stop] and [Timer.Reset] take constant time whatever the number of
// pending timers, and allocate nothing once the wheel has grown to its peak: a pending timer costs
// a 32-byte node in the wheel and a 16-byte Timer handle. [Wheel.Every] and [Wheel.EveryDelay] run
// a callback periodically, and [Wheel.WithTimeout] and [Wheel.WithDeadline] make contexts whose
// deadlines are timers on the wheel.
//
// Each deadline is rounded up to the wheel's tick ([WithTick], 1 ms by default). A callback never
// runs before its deadline and normally runs within a tick after it, however far ahead it was
// scheduled: far timers sit in coarse levels and move down to finer ones as they approach, as in
// the Linux kernel's timer wheel and Kafka's hierarchical wheel, but without their rounding.
//
// The wheel is split into shards, one per processor by default, each with its own lock and driver
// goroutine; goroutines schedule on their processor's shard, so throughput grows with cores. A
// driver sleeps until the next tick that has work, so an idle wheel makes no wake-ups, and a driver
// whose shard is empty exits, so an idle wheel holds no goroutines.
//
// Callbacks run on an executor chosen with an option: a bounded pool of goroutines (the default,
// see [WithPoolExecutor]), the driver goroutine itself ([WithInlineExecutor]), or a goroutine per
// callback ([WithGoroutineExecutor]). The pool is the default because it keeps both promises most
// programs need: a burst of a million due timers runs in a few goroutines rather than a million,
// and a callback that blocks does not stop the wheel.
//
// A callback that panics is recovered and reported ([WithPanicHandler]; by default logged with
// [log/slog]) and the wheel goes on.
//
// # Caveats
//
// Lateness is bounded by a tick only while the process gets CPU time: a driver that is not
// scheduled, or a pool whose goroutines are all blocked in callbacks, delays callbacks further. A
// callback is never early.
//
// A [Timer] cannot be re-armed once it has fired or been stopped: [Timer.Reset] returns false then,
// and a new timer must be scheduled with [Wheel.AfterFunc]. This is what lets the wheel recycle
// timer nodes.
//
// [Wheel.Stop] does not wait for callbacks that have already fired.
//
// A driver does not wake up when timers are stopped, only when earlier ones arrive: after the last
// timer of a shard is stopped, its driver sleeps until that timer's deadline and exits then. Code
// that checks for leftover goroutines, as a [testing/synctest] bubble does, should Stop the wheel.
//
// A shard keeps the memory of its peak number of pending timers for reuse; it does not shrink.
//
// Tests that use a Wheel inside a testing/synctest bubble must create the wheel inside the bubble.
package tock
