//go:build linux

package devices

import (
	"context"
	"testing"
	"time"
)

// A file microphone wakes once a block and hands the block over; the wait allocates nothing
// (it built a callback and its error variable at every block).
func TestPacedSourceWaitAllocatesNothing(t *testing.T) {
	src := NewPacedSource(make([]float32, 1600), 16000, true, 1)
	src.SetPeriod(time.Millisecond)
	buf := make([]float32, 16)
	ctx := context.Background()
	if allocs := testing.AllocsPerRun(50, func() {
		if _, err := src.Read(ctx, buf); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("a paced Read allocates %.1f times, want 0", allocs)
	}
}

// A wait reads the timer once, when the poller says it expired: not also right after arming
// it, when a read can only find nothing (one system call a block for nothing).
func TestAlarmReadsOncePerExpiry(t *testing.T) {
	a := newAlarm()
	if a.file == nil {
		t.Fatal("no timerfd")
	}
	defer a.file.Close()
	ctx := context.Background()
	const waits = 20
	for range waits {
		if err := a.wait(ctx, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if a.reads != waits {
		t.Fatalf("%d waits read the timer %d times, want once each", waits, a.reads)
	}
	// An alarm armed for a nanosecond has expired before its wait begins: the poller still
	// says so.
	for range waits {
		if err := a.wait(ctx, time.Nanosecond); err != nil {
			t.Fatal(err)
		}
	}
}

// A wait that begins late (its goroutine held up between deciding to wait and waiting, as on a
// busy machine) still wakes at the expiry. The poller forgets any readiness it has seen when a
// wait begins; a timer armed before that could expire, be seen and be forgotten, and the wait
// would then sleep for ever.
func TestAlarmWakesWhenItsWaitBeginsLate(t *testing.T) {
	a := newAlarm()
	if a.file == nil {
		t.Fatal("no timerfd")
	}
	defer a.file.Close()
	// Long past a 1 ms expiry, with the goroutine parked so that the poller runs meanwhile.
	a.beforePoll = func() { time.Sleep(20 * time.Millisecond) }
	done := make(chan error, 1)
	go func() {
		for range 5 {
			if err := a.wait(context.Background(), time.Millisecond); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a wait never woke: its timer's expiry was lost")
	}
}
