package audio

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestStallCheckFollowsDelivery: the supervisor of a stream that delivers does not look at it
// (each look was a wake-up of the process: a ticker at half the timeout looked twice per
// timeout, a check set from the last delivery once), and declares a stream that stops lost once
// stallTimeout has passed since its last buffer, not before.
func TestStallCheckFollowsDelivery(t *testing.T) {
	l := newLink("microphone", "read", "test", nil, nil)
	l.stallTimeout = time.Second
	l.gen.Store(1) // an open stream, as openStream leaves it (no PortAudio stream: it runs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A device delivering a buffer every 20 ms for 3 s, then nothing.
	delivering := 3 * time.Second
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for end := time.Now().Add(delivering); time.Now().Before(end); <-tick.C {
			l.moved(1)
		}
	}()
	start := time.Now()
	since, err := l.watch(ctx)
	found := time.Now()
	if err == nil || !strings.Contains(err.Error(), "no audio for") {
		t.Fatalf("watch: %v, want the stall", err)
	}
	if quiet := found.Sub(since); quiet < l.stallTimeout {
		t.Errorf("declared lost %v after the last buffer, before the stall timeout of %v", quiet, l.stallTimeout)
	}
	if ran := found.Sub(start); ran < delivering {
		t.Errorf("declared lost after %v, while the device still delivered (for %v)", ran, delivering)
	}
	// The look that finds the stall, and one more when the first (at half the timeout) came
	// before the first buffer or found the stall a hair early: a late timer only makes fewer.
	// Three seconds of delivery were four or five looks when each look set the next.
	looks, most := l.looks.Load(), int64(2)
	t.Logf("%d looks in %v", looks, found.Sub(start).Round(time.Millisecond))
	if looks > most {
		t.Errorf("%d stall checks in %v: want at most %d, none while the device delivers", looks, found.Sub(start).Round(time.Millisecond), most)
	}
}

// TestStallCheckPolls: a stream whose callbacks do not wake Go (an idle speaker playing silence)
// counts as delivering once its records are read: the stall check reads them before it judges,
// so the stream is not declared lost while it plays.
func TestStallCheckPolls(t *testing.T) {
	l := newLink("speaker", "play", "test", nil, nil)
	l.stallTimeout = 200 * time.Millisecond
	l.gen.Store(1)
	polls := 0
	l.poll = func() {
		polls++
		l.moved(1) // the records say the device played
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l.moved(1)
	if _, err := l.watch(ctx); err != nil {
		t.Fatalf("watch: %v, want the stream to run until the end", err)
	}
	if polls == 0 {
		t.Error("the stall check never read the records")
	}
}
