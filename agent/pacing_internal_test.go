package agent

import (
	"context"
	"testing"
	"time"
)

// The pacer never holds back audio captured in real time; it sends what queued up before a
// session started at the catch-up rate (never faster, the first chunk at once, and without
// falling behind it); a session that has streamed a while catches a brief hold-up up at once.
func TestPacer(t *testing.T) {
	const chunk, block = 4000, 1600 // 250 ms chunks, 100 ms device periods
	for _, tt := range []struct {
		name           string
		backlog        int // chunks queued when the session starts
		stallAt, stall int // the sender is held up for stall blocks at block stallAt
	}{
		{"live", 0, 0, 0},
		{"replay after a gap", 12, 0, 0},
		{"hold-up in a long session", 0, 1000, 10},
	} {
		p := &pacer{rate: 1.1}
		var captured int64
		var queue int
		for range tt.backlog {
			captured += chunk
			queue++
		}
		start := captured
		p.restart(captured)
		next := captured + chunk
		sent, held, maxQueue := 0, 0, 0
		for i := range 2000 {
			captured += block
			for captured >= next {
				queue++
				next += chunk
			}
			maxQueue = max(maxQueue, queue)
			if i >= tt.stallAt && i < tt.stallAt+tt.stall {
				continue
			}
			if i == tt.stallAt+tt.stall && tt.stall > 0 && queue < 3 {
				t.Fatalf("%s: only %d chunks queued after the hold-up", tt.name, queue)
			}
			for queue > 0 {
				if p.wait(captured, chunk) > 0 {
					held++
					break
				}
				p.take(chunk)
				queue--
				sent++
				// After the first chunk, never more than rate × what was captured since the start.
				if limit := float64(captured-start)*1.1 + chunk; float64(sent*chunk) > limit+1 {
					t.Fatalf("%s: %d chunks sent after %d samples captured: faster than 1.1× real time", tt.name, sent, captured-start)
				}
			}
			if tt.stall > 0 && i == tt.stallAt+tt.stall && queue > 0 {
				t.Errorf("%s: %d chunks still queued right after the hold-up", tt.name, queue)
			}
		}
		if tt.backlog == 0 && tt.stall == 0 && held != 0 {
			t.Errorf("%s: live capture held back %d times", tt.name, held)
		}
		if queue > 1 {
			t.Errorf("%s: %d chunks still queued after %v of capture", tt.name, queue, samplesToDuration(int(captured-start)))
		}
		if tt.backlog > 0 && held == 0 {
			t.Errorf("%s: the replay was never held back: a burst", tt.name)
		}
	}
	p := &pacer{rate: 1.1}
	p.take(16000)
	p.take(11000)
	if w := p.wait(0, 6600); w < 999*time.Millisecond || w > 1001*time.Millisecond {
		t.Errorf("after a 1 s first chunk and 1.1 s more: wait %v for a second of capture", w)
	}
}

// A lazy deadline behaves as context.WithDeadline whether or not anybody waits on it.
func TestLazyDeadline(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()

	unwatched := withLazyDeadline(parent, time.Now().Add(20*time.Millisecond))
	if err := unwatched.Err(); err != nil {
		t.Fatalf("before the deadline: %v", err)
	}
	time.Sleep(30 * time.Millisecond)
	if err := unwatched.Err(); err != context.DeadlineExceeded {
		t.Fatalf("past the deadline, never waited on: %v", err)
	}
	unwatched.release()

	watched := withLazyDeadline(parent, time.Now().Add(20*time.Millisecond))
	<-watched.Done() // ends by itself at the deadline
	if err := watched.Err(); err != context.DeadlineExceeded {
		t.Fatalf("after Done: %v", err)
	}
	watched.release()

	early := time.Now().Add(time.Hour)
	child := withLazyDeadline(parent, early)
	if d, ok := child.Deadline(); !ok || !d.Equal(early) {
		t.Fatalf("deadline %v %v", d, ok)
	}
	done := child.Done()
	cancelParent()
	<-done
	if err := child.Err(); err != context.Canceled {
		t.Fatalf("after the parent's cancel: %v", err)
	}
	if err := withLazyDeadline(parent, early).Err(); err != context.Canceled {
		t.Fatalf("made under a cancelled parent: %v", err)
	}
	child.release()
}
