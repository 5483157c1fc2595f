package audio

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestStallCheckFollowsDelivery: the supervisor of a stream that delivers looks at it about
// once per stallTimeout (a ticker at half of it looked twice as often), and declares a stream
// that stops lost once stallTimeout has passed since its last buffer, not before.
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
	// One look per stallTimeout from the first (at half of it), and the one that finds the
	// stall a little early and sets the last: a late timer only makes fewer.
	looks, most := l.looks.Load(), int64(found.Sub(start)/l.stallTimeout)+2
	t.Logf("%d looks in %v", looks, found.Sub(start).Round(time.Millisecond))
	if looks > most {
		t.Errorf("%d stall checks in %v: want at most %d, one per stall timeout", looks, found.Sub(start).Round(time.Millisecond), most)
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
