package audio

import (
	"context"
	"testing"
	"time"

	"github.com/omnisat/omnisat/internal/testaudio"
)

// TestCaptureStartDoesNotSpin: ALSA's pulse plugin keeps its descriptor readable while a new
// capture stream holds less than a fragment, and PortAudio's thread polled it again at once,
// a whole core until the first fragment came (about a second of CPU in the first three
// seconds of each open on the virtual card). alsawait.c answers each such denied readiness
// with a pause of at least a millisecond, so a stream can see no more denials than
// milliseconds go by; the spin made them by the hundred thousand. Counts, not times: a busy
// machine only makes fewer. The card does not deny in every open, so the test opens up to
// three times until one does, and fails if none did (it would guard nothing).
func TestCaptureStartDoesNotSpin(t *testing.T) {
	testaudio.Start(t)
	var denied int64
	for open := 1; open <= 3 && denied == 0; open++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		before, opened := deniedReadiness(), time.Now()
		mic, err := OpenMicrophone(ctx, MicConfig{Device: "pulse", Channel: Mixdown}, nil, nil)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		p := make([]float32, 320)
		if _, err := mic.Read(ctx, p); err != nil { // the stream has started
			t.Fatal(err)
		}
		first := time.Since(opened)
		for got := 0; got < OutputRate; { // and a second more
			n, err := mic.Read(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		if err := mic.Close(); err != nil {
			t.Error(err)
		}
		cancel()
		elapsed := time.Since(opened)
		denied = deniedReadiness() - before
		t.Logf("open %d: first samples after %v, %d denied readiness in %v", open,
			first.Round(time.Millisecond), denied, elapsed.Round(time.Millisecond))
		if limit := elapsed.Milliseconds() + 1; denied > limit {
			t.Fatalf("%d denied readiness in %v: PortAudio's thread polled without a pause", denied, elapsed)
		}
	}
	if denied == 0 {
		t.Fatal("no open of the virtual card's capture saw its readiness denied: nothing here guards the pause any more")
	}
}
