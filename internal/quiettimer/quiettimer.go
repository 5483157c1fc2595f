// Package quiettimer is a timer that is re-armed without cost while it never fires: a link
// watchdog pushed back at every message, a deadline moved as a reply grows.
//
// A runtime timer (time.Timer, a net.Conn deadline) that is moved later still wakes the process
// at the moment it was first due: the runtime keeps the earlier time in its heap until it next
// looks, and both the poller and its monitor thread (sysmon) sleep only until then. A streaming
// session that extends a read deadline at every message, a write deadline at every chunk and
// checks a ping timer every few seconds was woken that way about twice a second — each time
// the monitor's naps too — for nothing.
//
// On Linux a Timer is a timerfd waited for in the runtime's poller, moved with one raw system
// call (no scheduler involvement, no wake-up), and lazily: a Reset that pushes the timer back
// by less than a quarter of its duration, and a Stop, leave the timerfd early; when it expires
// it is re-armed for the time now due, or left off. A watchdog pushed back at every message
// then costs a system call once in a quarter of its timeout instead of one per message, and at
// most one early expiry once the messages stop. Elsewhere, or if the descriptor cannot be made,
// it is a time.Timer.
package quiettimer

import (
	"sync/atomic"
	"time"
)

// Timer delivers a tick on C when it expires. As with a time.Timer before Go 1.23, a tick may
// still be on its way after a Reset or Stop: receivers check what they were waiting for
// against the clock and re-arm the timer when it is not due yet.
type Timer struct {
	C <-chan struct{}

	c     chan struct{} // C, capacity 1
	fired atomic.Int64  // expiries delivered
	impl
}

// New returns a stopped Timer. Close releases it.
func New() *Timer {
	t := &Timer{c: make(chan struct{}, 1)}
	t.C = t.c
	t.impl.start(t.deliver)
	return t
}

// deliver is an expiry: a tick on C, unless one is waiting already.
func (t *Timer) deliver() {
	t.fired.Add(1)
	select {
	case t.c <- struct{}{}:
	default:
	}
}

// Reset makes the timer expire once, d from now (at once if d ≤ 0).
func (t *Timer) Reset(d time.Duration) { t.impl.reset(d) }

// Stop keeps the timer from expiring until the next Reset.
func (t *Timer) Stop() { t.impl.stop() }

// Close stops the timer for good and releases what it holds.
func (t *Timer) Close() { t.impl.close() }

// Fires is how many expiries the timer has delivered: a timer that is always pushed back in
// time never fires (tests and wake-up accounting).
func (t *Timer) Fires() int64 { return t.fired.Load() }

// Wakes is how many times the timer has woken the process: the expiries it delivered and, on
// Linux, the early ones that only re-armed it (see reset). A timer pushed back more often than
// every three quarters of its duration never wakes it (tests and wake-up accounting).
func (t *Timer) Wakes() int64 { return t.fired.Load() + t.impl.earlyWakes() }

// runtimeTimer stands in where there is no timerfd: a time.Timer.
type runtimeTimer struct {
	timer  *time.Timer
	closed atomic.Bool // a Reset after Close does nothing
}

func newRuntimeTimer(fire func()) *runtimeTimer {
	r := &runtimeTimer{timer: time.AfterFunc(time.Hour, fire)}
	r.timer.Stop()
	return r
}

func (r *runtimeTimer) reset(d time.Duration) {
	if !r.closed.Load() {
		r.timer.Reset(d)
	}
}

func (r *runtimeTimer) stop() { r.timer.Stop() }

func (r *runtimeTimer) close() {
	r.closed.Store(true)
	r.timer.Stop()
}
