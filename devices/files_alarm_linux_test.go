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
