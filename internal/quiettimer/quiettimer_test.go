package quiettimer

import (
	"testing"
	"time"
)

// within is how long a tick that is due may take to come on a loaded machine.
const within = 10 * time.Second

func TestFiresAfterReset(t *testing.T) {
	tm := New()
	defer tm.Close()
	start := time.Now()
	tm.Reset(20 * time.Millisecond)
	select {
	case <-tm.C:
	case <-time.After(within):
		t.Fatal("no tick")
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("ticked after %v, before it was due", waited)
	}
	if got := tm.Fires(); got != 1 {
		t.Fatalf("Fires() = %d, want 1", got)
	}
	tm.Reset(0) // due now: fires at once, never disarms
	select {
	case <-tm.C:
	case <-time.After(within):
		t.Fatal("Reset(0) did not tick")
	}
}

// A timer moved later does not fire at the time it was first due: the point of the package.
func TestMovedLaterDoesNotFireEarly(t *testing.T) {
	t.Parallel()
	tm := New()
	defer tm.Close()
	tm.Reset(time.Second)
	tm.Reset(time.Hour)
	stopped := New()
	defer stopped.Close()
	stopped.Reset(time.Second)
	stopped.Stop()
	time.Sleep(1500 * time.Millisecond)
	select {
	case <-tm.C:
		t.Fatal("a timer moved to an hour from now ticked after a second")
	case <-stopped.C:
		t.Fatal("a stopped timer ticked")
	default:
	}
	if tm.Fires() != 0 || stopped.Fires() != 0 {
		t.Fatalf("Fires() = %d and %d, want 0", tm.Fires(), stopped.Fires())
	}
	stopped.Reset(time.Millisecond) // usable again after Stop
	select {
	case <-stopped.C:
	case <-time.After(within):
		t.Fatal("no tick after Stop and Reset")
	}
}

// Close ends the timer's goroutine: it returns only once the wait has ended.
func TestCloseReleases(t *testing.T) {
	for range 100 {
		tm := New()
		tm.Reset(time.Hour)
		tm.Close()
	}
}

// Reset and Stop after Close do nothing (the descriptor's number may be another file's by then).
func TestResetAfterClose(t *testing.T) {
	tm := New()
	tm.Close()
	tm.Reset(time.Millisecond)
	tm.Stop()
	tm.Close()
}

// A Reset is what a session pays for every message it hears: no allocation.
func TestResetAllocatesNothing(t *testing.T) {
	tm := New()
	defer tm.Close()
	if n := testing.AllocsPerRun(100, func() { tm.Reset(time.Hour) }); n != 0 {
		t.Fatalf("Reset allocates %v times", n)
	}
}

// The stand-in where there is no timerfd (other systems; a Linux without one) keeps the same
// promises: it fires when reset, a stopped one does not, and a Reset after Close does nothing.
func TestRuntimeTimerStandIn(t *testing.T) {
	t.Parallel()
	fired := make(chan struct{}, 4)
	r := newRuntimeTimer(func() { fired <- struct{}{} })
	r.reset(time.Millisecond)
	select {
	case <-fired:
	case <-time.After(within):
		t.Fatal("no tick")
	}
	r.reset(time.Second)
	r.stop()
	r.close()
	r.reset(time.Millisecond)
	time.Sleep(1500 * time.Millisecond)
	if n := len(fired); n != 0 {
		t.Fatalf("%d ticks after Stop, Close and a Reset after Close", n)
	}
}
