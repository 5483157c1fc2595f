package devices

import (
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/omnisat/omnisat/devices/wav"
)

// fakeClock is a wall clock a test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestSampleClock(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, rate := range []int{8000, 16000, 22050, 24000, 44100, 48000} {
		for _, speed := range []float64{1, 4, 0.5} {
			c := NewSampleClock(start, rate, speed)
			if c.Due(start.Add(-time.Second)) != 0 || c.Due(start) != 0 {
				t.Fatalf("rate %d: samples due before the start", rate)
			}
			for _, n := range []int64{1, 2, 159, 160, 4410, 1e6, 1e9, 3e10} {
				at := c.At(n)
				if got := c.Due(at); got < n {
					t.Fatalf("rate %d speed %v: Due(At(%d)) = %d", rate, speed, n, got)
				}
				if got := c.Due(at.Add(-2 * time.Nanosecond)); got >= n && n < 1e9 {
					t.Fatalf("rate %d speed %v: sample %d due before At", rate, speed, n)
				}
			}
		}
	}
}

// A paced source hands out its samples in order, whole periods at a time and never before the
// clock has reached the end of the block, and ends with the short last block.
func TestPacedSourceDeliversBlocks(t *testing.T) {
	const rate, n = 16000, 16000*3/2 + 123 // a short last block
	samples := make([]float32, n)
	for i := range samples {
		samples[i] = float32(i)
	}
	src := NewPacedSource(samples, rate, false, 20) // 100 ms periods take 5 ms
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	buf := make([]float32, 700)
	var got []float32
	for {
		k, err := src.Read(ctx, buf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			t.Fatal("Read returned nothing and no error")
		}
		// Only whole blocks are handed out, each once the clock has passed its end.
		if c, due := src.Captured(), src.clock.Due(time.Now()); c != n && c > due/1600*1600 {
			t.Fatalf("handed out %d samples when %d were due (blocks of 1600)", c, due)
		}
		got = append(got, buf[:k]...)
	}
	if len(got) != n {
		t.Fatalf("got %d samples, want %d", len(got), n)
	}
	for i, v := range got {
		if v != float32(i) {
			t.Fatalf("sample %d is %v", i, v)
		}
	}
	if _, err := src.Read(ctx, buf); !errors.Is(err, io.EOF) {
		t.Fatalf("after the end: %v", err)
	}
}

func TestPacedSourceLoopsAndCancels(t *testing.T) {
	src := NewPacedSource([]float32{1, 2, 3}, 16000, true, 100)
	src.SetPeriod(10 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	buf := make([]float32, 1000)
	var got []float32
	for len(got) < 1000 {
		k, err := src.Read(ctx, buf[:1000-len(got)])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:k]...)
	}
	for i, v := range got {
		if v != float32(i%3+1) {
			t.Fatalf("sample %d is %v", i, v)
		}
	}
	// A reader waiting for the next block returns when its context ends.
	slow := NewPacedSource(make([]float32, 16000), 16000, true, 1)
	slow.SetPeriod(time.Hour)
	done := make(chan error, 1)
	go func() { _, err := slow.Read(ctx, buf); done <- err }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Read: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Read did not return after cancel")
	}
}

// A source whose reader gave up (its context ended mid-wait) serves the next reader, with a new
// context, as before: the wait that was cut short leaves nothing behind that cuts the next short
// or keeps it waiting.
func TestPacedSourceReadAfterCancel(t *testing.T) {
	src := NewPacedSource([]float32{1, 2, 3}, 16000, true, 1)
	src.SetPeriod(20 * time.Millisecond)
	buf := make([]float32, 320)
	for round := range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			var err error
			for err == nil { // reads until cancelled, mid-wait
				_, err = src.Read(ctx, buf)
			}
			done <- err
		}()
		time.Sleep(30 * time.Millisecond)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: cancelled Read: %v", round, err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		before := src.Captured()
		for src.Captured() < before+2*320 {
			if _, err := src.Read(ctx, buf); err != nil {
				t.Fatalf("round %d: Read after a cancelled one: %v", round, err)
			}
		}
		cancel()
	}
}

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// playLong plays minutes of one-second replies into spk, the clock moving one second per reply,
// and returns every sample played.
func playLong(t *testing.T, spk *FileSpeaker, clk *fakeClock, minutes int) (played int64) {
	t.Helper()
	reply := make([]float32, 24000)
	for i := range reply {
		reply[i] = float32(0.5 * math.Sin(2*math.Pi*440*float64(i)/24000))
	}
	for range minutes * 60 {
		spk.Play(reply)
		clk.advance(time.Second)
		if p := spk.Pending(); p != 0 {
			t.Fatalf("a second after a one-second reply %v is still pending", p)
		}
		played += int64(len(reply))
	}
	return played
}

// Issue 13.5: a speaker without a device kept every sample it played (RSS +46 MiB in 90 s).
// Now what has been played is gone: the live heap after half an hour of speech is what it was
// after a minute, and the queue's room is back to its size up front.
func TestNoneSpeakerMemoryFlat(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	spk := NewFileSpeaker("", 24000)
	spk.now = clk.now
	spk.clock.Restart(clk.now())
	defer spk.Close()
	playLong(t, spk, clk, 1)
	base := heapInUse()
	played := playLong(t, spk, clk, 30) + 60*24000
	grown := int64(heapInUse()) - int64(base)
	st := spk.Stats()
	t.Logf("heap after 1 min %d KB, after 31 min %+d KB; queue room %d samples", base/1024, grown/1024, st.Capacity)
	if grown > 1<<20 {
		t.Fatalf("the live heap grew by %d KB over 30 minutes of speech", grown/1024)
	}
	if st.Played != played || st.Dropped != 0 || st.Peak < 0.49 {
		t.Fatalf("stats %+v, want %d played", st, played)
	}
	if st.Capacity > 2*24000*2 {
		t.Fatalf("the queue holds room for %d samples", st.Capacity)
	}
	if spk.timer != nil {
		t.Fatal("a speaker without a file set a timer")
	}
}

// The WAV speaker streams to its file: memory stays flat, and the file holds the played audio
// on the wall clock's timeline (the silence between replies included).
func TestWAVSpeakerStreamsToFile(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	path := filepath.Join(t.TempDir(), "spk.wav")
	spk := NewFileSpeaker(path, 24000)
	if err := spk.Err(); err != nil {
		t.Fatal(err)
	}
	spk.now = clk.now
	spk.clock.Restart(clk.now())
	clk.advance(500 * time.Millisecond) // silence first
	playLong(t, spk, clk, 1)
	base := heapInUse()
	playLong(t, spk, clk, 5)
	grown := int64(heapInUse()) - int64(base)
	if grown > 1<<20 {
		t.Fatalf("the live heap grew by %d KB over 5 minutes written to a file", grown/1024)
	}
	clk.advance(250 * time.Millisecond) // silence after
	if err := spk.Close(); err != nil {
		t.Fatal(err)
	}
	a, err := wav.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := 24000/2 + 6*60*24000 + 24000/4
	if len(a.Samples) != want {
		t.Fatalf("the file holds %d samples, want %d (0.5 s + 6 min + 0.25 s)", len(a.Samples), want)
	}
	for _, i := range []int{0, 11999, len(a.Samples) - 1} {
		if a.Samples[i] != 0 {
			t.Fatalf("sample %d is %v, want silence", i, a.Samples[i])
		}
	}
	// Inside the speech (away from the 3 ms fade-in) the tone is there, on time.
	for _, i := range []int{12000 + 1000, 12000 + 24000*90 + 17} {
		wantV := 0.5 * math.Sin(2*math.Pi*440*float64((i-12000)%24000)/24000)
		if math.Abs(float64(a.Samples[i])-wantV) > 1e-3 {
			t.Fatalf("sample %d is %v, want %v", i, a.Samples[i], wantV)
		}
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

// A WAV speaker brings its file up to date while it plays and sets no timer once the queue
// has played out.
func TestWAVSpeakerFlushesWhilePlaying(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spk.wav")
	spk := NewFileSpeaker(path, 24000)
	defer spk.Close()
	spk.Play(make([]float32, 24000*3/2))
	deadline := time.Now().Add(30 * time.Second)
	for {
		spk.mu.Lock()
		idle := spk.timer == nil && spk.pb.Pending() == 0
		spk.mu.Unlock()
		a, err := wav.ReadFile(path)
		if idle && err == nil && len(a.Samples) >= 24000*3/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: idle %v, file %d samples (%v)", idle, len(a.Samples), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if rec, err := spk.Recording(); err != nil || len(rec) < 24000*3/2 {
		t.Fatalf("Recording: %d samples, %v", len(rec), err)
	}
	if rec, err := NewFileSpeaker("", 24000).Recording(); rec != nil || err != nil {
		t.Fatalf("a speaker without a file recorded %d samples (%v)", len(rec), err)
	}
	if bad := NewFileSpeaker(filepath.Join(t.TempDir(), "missing", "x.wav"), 24000); bad.Err() == nil {
		t.Fatal("a file in a missing folder gave no error")
	}
}

// FlushAfter(0) silences at once, leaving nothing pending; the cut is a fade in the file, not a
// step; FlushAfter(keep) keeps keep.
func TestFileSpeakerFlush(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	path := filepath.Join(t.TempDir(), "spk.wav")
	spk := NewFileSpeaker(path, 24000)
	spk.now = clk.now
	spk.clock.Restart(clk.now())
	tone := make([]float32, 24000)
	for i := range tone {
		tone[i] = 0.5
	}
	spk.Play(tone)
	clk.advance(100 * time.Millisecond)
	spk.FlushAfter(200 * time.Millisecond)
	if p := spk.Pending(); p < 200*time.Millisecond || p > 205*time.Millisecond {
		t.Fatalf("after FlushAfter(200ms): %v pending", p)
	}
	clk.advance(50 * time.Millisecond)
	spk.FlushAfter(0)
	if p := spk.Pending(); p != 0 {
		t.Fatalf("after FlushAfter(0): %v pending", p)
	}
	clk.advance(time.Second)
	if err := spk.Close(); err != nil {
		t.Fatal(err)
	}
	a, err := wav.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := 24000 * 150 / 1000
	if len(a.Samples) != 24000*1150/1000 || math.Abs(float64(a.Samples[cut-1])-0.5) > 1e-3 || a.Samples[cut+100] != 0 {
		t.Fatalf("%d samples; before the cut %v, after %v", len(a.Samples), a.Samples[cut-1], a.Samples[cut+100])
	}
	for i := cut; i < cut+72; i++ { // 3 ms down to 0, never a step
		if d := a.Samples[i-1] - a.Samples[i]; d < 0 || d > 0.02 {
			t.Fatalf("the cut steps by %v at sample %d", d, i)
		}
	}
}

// BenchmarkNoneSpeakerSecond is what a speaker without a device costs per second while it plays
// silence (the clock consumes a second at every look; its peak scans every sample).
func BenchmarkNoneSpeakerSecond(b *testing.B) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	spk := NewFileSpeaker("", 24000)
	spk.now = clk.now
	spk.clock = NewPlaybackClock(spk.pb, clk.now())
	b.ReportAllocs()
	for b.Loop() {
		clk.advance(time.Second)
		spk.Pending()
	}
}

// The peak is the loudest sample either way round, kept through the silence played after it.
func TestFileSpeakerPeak(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	spk := NewFileSpeaker("", 24000)
	spk.now = clk.now
	spk.clock = NewPlaybackClock(spk.pb, clk.now())
	reply := make([]float32, 24000) // long enough for the fade in to end
	for i := range reply {
		reply[i] = 0.5
		if i%100 == 50 {
			reply[i] = -0.75
		}
	}
	spk.Play(reply)
	clk.advance(2 * time.Second)
	if p := spk.Stats().Peak; p != 0.75 {
		t.Fatalf("peak %v, want 0.75", p)
	}
}

// BenchmarkNoneSpeakerReplySecond is what a speaker without a device costs per second of a
// reply: a second of 24 kHz audio played in 100 ms deltas, and the clock catching up on it.
func BenchmarkNoneSpeakerReplySecond(b *testing.B) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	spk := NewFileSpeaker("", 24000)
	spk.now = clk.now
	spk.clock = NewPlaybackClock(spk.pb, clk.now())
	reply := make([]float32, 24000)
	for i := range reply {
		reply[i] = float32(i%101)/101 - 0.5
	}
	b.ReportAllocs()
	for b.Loop() {
		for i := 0; i < len(reply); i += 2400 {
			spk.Play(reply[i : i+2400])
			clk.advance(100 * time.Millisecond)
			spk.Pending()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s")
}
