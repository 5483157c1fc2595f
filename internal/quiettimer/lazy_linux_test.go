//go:build linux

package quiettimer

import (
	"testing"
	"time"
)

func (t *Timer) kernelSets() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sets
}

// A watchdog pushed back at every message, and a write timer set and stopped around every
// write, move the kernel's timer about once in a quarter of their duration, not at every call.
func TestPushedBackRarelyMovesTheKernelTimer(t *testing.T) {
	watchdog := New()
	defer watchdog.Close()
	for range 1000 {
		watchdog.Reset(time.Hour)
	}
	if n := watchdog.kernelSets(); n != 1 {
		t.Errorf("a watchdog pushed back 1000 times set its timerfd %d times, want 1", n)
	}
	writes := New()
	defer writes.Close()
	for range 1000 {
		writes.Reset(time.Hour)
		writes.Stop()
	}
	if n := writes.kernelSets(); n != 1 {
		t.Errorf("a write timer set and stopped 1000 times set its timerfd %d times, want 1", n)
	}
	writes.Reset(time.Minute) // earlier than the timerfd: moved at once
	if n := writes.kernelSets(); n != 2 {
		t.Errorf("a Reset earlier than the timerfd set it %d times in all, want 2", n)
	}
	if watchdog.Wakes() != 0 || writes.Wakes() != 0 {
		t.Fatalf("Wakes() = %d and %d, want 0", watchdog.Wakes(), writes.Wakes())
	}
}

// A timer pushed back by less than its slack fires at the time it was last pushed to, not when
// the kernel's timer was set for: the early expiry re-arms it.
func TestPushedBackFiresAtTheLastDue(t *testing.T) {
	t.Parallel()
	tm := New()
	defer tm.Close()
	const d = 400 * time.Millisecond
	// Both Resets at the same instant, so that the second is d/8 later whatever the load.
	tm.mu.Lock()
	real := tm.now
	at := real()
	tm.now = func() time.Duration { return at }
	tm.mu.Unlock()
	tm.Reset(d)
	tm.Reset(d + d/8) // within its slack of the timerfd: not moved in the kernel
	tm.mu.Lock()
	tm.now = real
	tm.mu.Unlock()
	if n := tm.kernelSets(); n != 1 {
		t.Fatalf("the push set the timerfd (%d sets)", n)
	}
	select {
	case <-tm.C:
	case <-time.After(within):
		t.Fatal("no tick")
	}
	tm.mu.Lock()
	ticked := tm.now()
	tm.mu.Unlock()
	if ticked < at+d+d/8 {
		t.Fatalf("ticked %v after the Resets, before the last due (%v)", ticked-at, d+d/8)
	}
	if got := tm.Fires(); got != 1 {
		t.Fatalf("Fires() = %d, want 1", got)
	}
	// The early expiry, unless the machine was so slow that it came after the last due.
	if got := tm.Wakes(); got < 1 || got > 2 {
		t.Fatalf("Wakes() = %d, want 1 or 2", got)
	}
}

// A stopped timer whose timerfd was set wakes the process once, at the time it was set for,
// and delivers nothing.
func TestStoppedWakesOnceAndDeliversNothing(t *testing.T) {
	t.Parallel()
	tm := New()
	defer tm.Close()
	tm.Reset(50 * time.Millisecond)
	tm.Stop()
	deadline := time.Now().Add(within)
	for tm.Wakes() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stopped timer's timerfd never expired")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-tm.C:
		t.Fatal("a stopped timer ticked")
	default:
	}
	if tm.Fires() != 0 || tm.Wakes() != 1 {
		t.Fatalf("Fires() = %d, Wakes() = %d; want 0 and 1", tm.Fires(), tm.Wakes())
	}
}
