package pipeline

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The helpers here are prefixed pb so that they cannot collide with the other tests' helpers.

var pbRates = []int{48000, 44100, 24000, 16000}

func pbNew(t testing.TB, out int) *Playback {
	t.Helper()
	p, err := NewPlayback(24000, out)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pbSine is n samples of a sine of freq Hz at rate with amplitude amp.
func pbSine(n, rate int, freq, amp float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(amp * math.Sin(2*math.Pi*freq*float64(i)/float64(rate)))
	}
	return x
}

// pbPullAll pulls in pieces of size until the queue and the resampler are empty.
func pbPullAll(p *Playback, size int) []float32 {
	var out []float32
	buf := make([]float32, size)
	for p.Pending() > 0 {
		n := p.Pull(buf)
		out = append(out, buf[:n]...)
	}
	return out
}

// pbMaxJump is the largest sample-to-sample step in x.
func pbMaxJump(x []float32) (float64, int) {
	var m float64
	at := 0
	for i := 1; i < len(x); i++ {
		if d := math.Abs(float64(x[i] - x[i-1])); d > m {
			m, at = d, i
		}
	}
	return m, at
}

// queueStepHalf is the most a queued sample may move: the queue holds 16-bit samples
// (see fifo) and rounds to the nearest step.
const queueStepHalf = 0.5/32768 + 1e-7

// TestPlaybackQueueIs16Bit: the queue holds half what float32 would.
func TestPlaybackQueueIs16Bit(t *testing.T) {
	// Ten seconds queued at 48 kHz: 480,000 samples, in a ring that has doubled from half a
	// second to 768,000: 3.1 MB as float32, 1.5 MB as 16-bit.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	p := pbNew(t, 48000)
	p.Play(make([]float32, 10*24000))
	runtime.GC()
	runtime.ReadMemStats(&after)
	if q := p.Stats().Queued; q < 10*48000-100 {
		t.Fatalf("%d samples queued", q)
	}
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 2_000_000 {
		t.Errorf("ten seconds queued take %d bytes of heap", grown)
	}
	runtime.KeepAlive(p)
}

// TestPlaybackContinuity: audio played in arbitrary pieces comes out exactly as the whole
// signal resampled in one go, apart from the fade-in at the very start.
func TestPlaybackContinuity(t *testing.T) {
	for _, rate := range pbRates {
		t.Run(strconv.Itoa(rate), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(rate), 1))
			x := make([]float32, 24000)
			for i := range x {
				x[i] = float32(0.5*math.Sin(2*math.Pi*440*float64(i)/24000) + 0.2*rng.Float64() - 0.1)
			}
			rs, err := NewResampler(24000, rate)
			if err != nil {
				t.Fatal(err)
			}
			want := rs.Flush(rs.Process(nil, x))

			for _, mode := range []string{"play-then-pull", "interleaved"} {
				p := pbNew(t, rate)
				var got []float32
				buf := make([]float32, 512)
				for rest := x; len(rest) > 0; {
					n := min(len(rest), 1+rng.IntN(2000))
					p.Play(rest[:n])
					rest = rest[n:]
					// Interleaved: pull only what is queued, as a device that never starves.
					for mode == "interleaved" && p.Stats().Queued >= len(buf) {
						k := p.Pull(buf[:1+rng.IntN(len(buf))])
						got = append(got, buf[:k]...)
					}
				}
				got = append(got, pbPullAll(p, 441)...)
				if len(got) != len(want) {
					t.Fatalf("%s: got %d samples, want %d", mode, len(got), len(want))
				}
				fade := p.fadeLen
				for i := range got {
					w := want[i]
					if i < fade {
						w *= float32(i) / float32(fade)
					}
					if d := math.Abs(float64(got[i] - w)); d > queueStepHalf {
						t.Fatalf("%s: sample %d = %v, want %v", mode, i, got[i], w)
					}
				}
				if pd := p.Pending(); pd != 0 {
					t.Errorf("%s: Pending after draining = %v", mode, pd)
				}
			}
		})
	}
}

// TestPlaybackPending checks Pending and Position through playing and draining.
func TestPlaybackPending(t *testing.T) {
	p := pbNew(t, 48000)
	if p.Pending() != 0 || p.Position() != 0 {
		t.Fatalf("fresh queue: Pending %v Position %v", p.Pending(), p.Position())
	}
	p.Play(make([]float32, 24000)) // 1 s
	near := func(what string, got, want time.Duration) {
		t.Helper()
		if d := got - want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("Pending after 1 s", p.Pending(), time.Second)
	buf := make([]float32, 12000) // 250 ms
	if n := p.Pull(buf); n != len(buf) {
		t.Fatalf("Pull gave %d queued samples, want %d", n, len(buf))
	}
	near("Pending after 250 ms pulled", p.Pending(), 750*time.Millisecond)
	near("Position after 250 ms pulled", p.Position(), 250*time.Millisecond)
	pbPullAll(p, 480)
	if p.Pending() != 0 {
		t.Errorf("Pending after draining = %v", p.Pending())
	}
	near("Position after draining", p.Position(), time.Second)
	// Silence is pulled but is not played audio.
	p.Pull(buf)
	near("Position after pulling silence", p.Position(), time.Second)
	st := p.Stats()
	if st.Played != 48000 || st.Pulled != 48000+int64(len(buf)) || st.Underruns != 1 {
		t.Errorf("stats %+v: want Played 48000, Pulled %d, Underruns 1", st, 48000+len(buf))
	}
}

// TestPlaybackFlush checks what FlushAfter keeps and drops.
func TestPlaybackFlush(t *testing.T) {
	const rate = 48000
	fade := int(PlaybackFade.Seconds() * rate)
	buf := make([]float32, 4800)

	t.Run("keep", func(t *testing.T) {
		p := pbNew(t, rate)
		p.Play(pbSine(24000, 24000, 300, 0.5))
		p.Pull(buf) // 100 ms played
		p.FlushAfter(200 * time.Millisecond)
		want := 200*time.Millisecond + PlaybackFade
		if got := p.Pending(); got < want-time.Millisecond || got > want+time.Millisecond {
			t.Errorf("Pending after FlushAfter(200ms) = %v, want %v", got, want)
		}
		rest := pbPullAll(p, 480)
		if len(rest) != rate/5+fade {
			t.Errorf("played %d samples after the flush, want %d", len(rest), rate/5+fade)
		}
		if v := math.Abs(float64(rest[len(rest)-1])); v > 0.5/float64(fade)+1e-6 {
			t.Errorf("last sample before the cut = %v: not faded", v)
		}
	})
	t.Run("zero", func(t *testing.T) {
		p := pbNew(t, rate)
		p.Play(pbSine(24000, 24000, 300, 0.5))
		p.Pull(buf)
		p.FlushAfter(0)
		if got := p.Pending(); got > PlaybackFade+time.Millisecond/10 {
			t.Errorf("Pending after FlushAfter(0) = %v, want ≤ %v", got, PlaybackFade)
		}
		out := make([]float32, 480)
		n := p.Pull(out)
		if n > fade {
			t.Errorf("FlushAfter(0) left %d samples, want ≤ %d (the fade)", n, fade)
		}
		for i, v := range out[fade:] {
			if v != 0 {
				t.Fatalf("sample %d after FlushAfter(0) and the fade = %v, want 0", fade+i, v)
			}
		}
		// A new reply plays normally, from the start.
		p.Play(pbSine(2400, 24000, 300, 0.5))
		if got := pbPullAll(p, 480); len(got) != 4800 {
			t.Errorf("after the flush a 100 ms reply gave %d samples, want 4800", len(got))
		}
	})
	t.Run("cut", func(t *testing.T) {
		// Cut: the device fades and drops what it holds itself, so the queue goes at once,
		// with no fade and no underrun ramp after it (lastOut was mid-sine), and the next
		// reply fades in.
		p := pbNew(t, rate)
		p.Play(pbSine(24000, 24000, 300, 0.5))
		p.Pull(buf[:4760]) // 29.75 cycles of the sine: the last sample is near its trough
		p.Cut()
		if got := p.Pending(); got != 0 {
			t.Errorf("Pending after Cut = %v, want 0", got)
		}
		out := make([]float32, 480)
		if n := p.Pull(out); n != 0 {
			t.Errorf("Cut left %d samples", n)
		}
		for i, v := range out {
			if v != 0 {
				t.Fatalf("sample %d after Cut = %v, want 0 (no underrun ramp)", i, v)
			}
		}
		if st := p.Stats(); st.Flushed == 0 || st.Queued != 0 {
			t.Errorf("stats after Cut %+v: want the queue counted as flushed", st)
		}
		p.Play(pbSine(2400, 24000, 300, 0.5))
		got := pbPullAll(p, 480)
		if len(got) != 4800 {
			t.Errorf("after Cut a 100 ms reply gave %d samples, want 4800", len(got))
		}
		if v := math.Abs(float64(got[1])); v > 0.5*2/float64(fade)+1e-3 {
			t.Errorf("the reply after Cut starts at %v: not faded in", v)
		}
	})
	t.Run("beyond", func(t *testing.T) {
		p := pbNew(t, rate)
		p.Play(make([]float32, 2400)) // 100 ms
		before := p.Pending()
		p.FlushAfter(time.Second)
		if p.Pending() != before || p.Stats().Flushed != 0 {
			t.Errorf("FlushAfter beyond the queue changed it: Pending %v → %v, stats %+v", before, p.Pending(), p.Stats())
		}
		p.FlushAfter(-time.Second) // treated as 0
		if p.Pending() > PlaybackFade {
			t.Errorf("FlushAfter(-1s): Pending %v", p.Pending())
		}
	})
}

// TestPlaybackNoClicks: at the start, an underrun, resumption, a flush and volume changes,
// no output step is larger than the signal's own steps plus a fade's step.
func TestPlaybackNoClicks(t *testing.T) {
	for _, rate := range []int{48000, 44100} {
		t.Run(strconv.Itoa(rate), func(t *testing.T) {
			const amp = 0.9
			p := pbNew(t, rate)
			fade := 0.003 * float64(rate) // a 3 ms fade, fixed here so that a shorter one fails
			natural := 2 * math.Pi * 440 / float64(rate) * amp
			bound := natural + amp/fade + 0.01
			sig := pbSine(24000, 24000, 440, amp)
			var out []float32
			pull := func(ms int, size int) {
				buf := make([]float32, size)
				for range ms * rate / 1000 / size {
					p.Pull(buf)
					out = append(out, buf...)
				}
			}
			phase := 0
			play := func(n int) { // continue the sine where it stopped
				p.Play(sig[phase : phase+n])
				phase += n
			}
			pull(20, 480)                      // silence
			play(2400)                         // 100 ms
			pull(300, 441)                     // plays, then underruns mid-buffer
			play(1200)                         // resumes
			pull(30, 480)                      // ends mid-fade-in? no: 50 ms queued, 30 pulled
			play(4800)                         // more
			pull(60, 512)                      // playing
			p.FlushAfter(0)                    // cut
			pull(20, 480)                      // silence
			play(24000 - phase - 1)            // a long one
			pull(50, 480)                      // playing
			p.SetVolume(10)                    // ramps down
			pull(50, 480)                      //
			p.SetVolume(100)                   // ramps up
			pull(50, 480)                      //
			p.FlushAfter(7 * time.Millisecond) // cut a little later
			pull(30, 333)
			if m, at := pbMaxJump(out); m > bound {
				t.Errorf("largest step %.4f at sample %d (%.1f ms), bound %.4f", m, at, float64(at)*1000/float64(rate), bound)
			} else {
				t.Logf("largest step %.4f (bound %.4f; a click to 0 from full amplitude would be %.2f)", m, bound, amp)
			}
			if st := p.Stats(); st.Underruns < 3 {
				t.Errorf("stats %+v: want at least 3 underruns (start excluded)", st)
			}
		})
	}
}

// TestPlaybackVolume checks the gain after a ramp and the clamping of SetVolume.
func TestPlaybackVolume(t *testing.T) {
	p := pbNew(t, 24000) // equal rates: the output is the input
	for _, c := range []struct{ set, want int }{{-5, 0}, {500, 100}, {50, 50}} {
		p.SetVolume(c.set)
		if p.Volume() != c.want {
			t.Errorf("SetVolume(%d): Volume() = %d, want %d", c.set, p.Volume(), c.want)
		}
	}
	x := make([]float32, 24000)
	for i := range x {
		x[i] = 0.8
	}
	p.Play(x)
	out := make([]float32, 24000)
	p.Pull(out)
	ramp := int(PlaybackVolumeRamp.Seconds()*24000) + 1
	want := float32(0.8 * 0.125) // 50 → (0.5)^3
	for i, v := range out[ramp:] {
		if math.Abs(float64(v-want)) > 0.125*queueStepHalf {
			t.Fatalf("sample %d at volume 50 = %v, want %v", ramp+i, v, want)
		}
	}
	p.SetVolume(0)
	p.Play(x)
	p.Pull(out)
	for i, v := range out[ramp:] {
		if v != 0 {
			t.Fatalf("sample %d at volume 0 = %v, want 0", ramp+i, v)
		}
	}
}

// TestPlaybackBadInput: NaN, infinities and huge values never reach the device as such.
func TestPlaybackBadInput(t *testing.T) {
	if _, err := NewPlayback(24000, 0); err == nil {
		t.Error("NewPlayback(24000, 0) succeeded")
	}
	if _, err := NewPlayback(24000, 1000000); err == nil {
		t.Error("NewPlayback(24000, 1000000) succeeded")
	}
	p := pbNew(t, 48000)
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e30, -1e30, 0.5}
	for range 100 {
		p.Play(bad)
	}
	p.Play(nil)
	for i, v := range pbPullAll(p, 480) {
		if v != v || v > 1.2 || v < -1.2 { // the filter may overshoot a clipped step a little
			t.Fatalf("sample %d = %v", i, v)
		}
	}
	p.Pull(nil)
}

// TestPlaybackPullDoesNotAllocate covers playing, underrun and the tail drain.
func TestPlaybackPullDoesNotAllocate(t *testing.T) {
	p := pbNew(t, 44100)
	p.Play(make([]float32, 24000))
	buf := make([]float32, 441)
	if a := testing.AllocsPerRun(100, func() { p.Pull(buf) }); a != 0 {
		t.Errorf("Pull while playing: %v allocations", a)
	}
	pbPullAll(p, 441)
	p.Play(make([]float32, 100))
	if a := testing.AllocsPerRun(100, func() { p.Pull(buf) }); a != 0 {
		t.Errorf("Pull through an underrun: %v allocations", a)
	}
}

// TestPlaybackConcurrent runs every method at once (meant for -race).
func TestPlaybackConcurrent(t *testing.T) {
	p := pbNew(t, 44100)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	run := func(f func(rng *rand.Rand)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(rand.Uint64(), 2))
			for {
				select {
				case <-stop:
					return
				default:
					f(rng)
				}
			}
		}()
	}
	sig := pbSine(24000, 24000, 300, 0.9)
	run(func(rng *rand.Rand) { n := rng.IntN(4800); p.Play(sig[:n]); time.Sleep(time.Millisecond) })
	run(func(rng *rand.Rand) { p.Play(sig[:10]) })
	bad := false
	var badMu sync.Mutex
	run(func(rng *rand.Rand) {
		buf := make([]float32, 441)
		p.Pull(buf)
		for _, v := range buf {
			if v != v || v > 1.2 || v < -1.2 {
				badMu.Lock()
				bad = true
				badMu.Unlock()
			}
		}
	})
	run(func(rng *rand.Rand) {
		p.FlushAfter(time.Duration(rng.IntN(100)) * time.Millisecond)
		time.Sleep(3 * time.Millisecond)
	})
	run(func(rng *rand.Rand) { _ = p.Pending(); _ = p.Position(); _ = p.Stats(); p.SetVolume(rng.IntN(101)) })
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if bad {
		t.Error("Pull produced NaN or out-of-range samples")
	}
	p.FlushAfter(0)
	pbPullAll(p, 441)
	if p.Pending() != 0 {
		t.Errorf("Pending after flush and drain = %v", p.Pending())
	}
}

// BenchmarkPlayback: one op is one second of 24 kHz audio played in 20 ms pieces and pulled
// in 10 ms device buffers; ms-cpu/s is the CPU per second of audio.
func BenchmarkPlayback(b *testing.B) {
	for _, rate := range []int{48000, 44100} {
		b.Run("24kto"+strconv.Itoa(rate), func(b *testing.B) {
			p := pbNew(b, rate)
			sig := pbSine(24000, 24000, 440, 0.5)
			buf := make([]float32, rate/100)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for i := 0; i < len(sig); i += 480 {
					p.Play(sig[i : i+480])
					p.Pull(buf)
					p.Pull(buf)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/s-audio")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s")
		})
	}
}

// BenchmarkPlaybackLatency: the time from Play (a 20 ms piece on an idle queue) to the first
// queued sample available to Pull.
func BenchmarkPlaybackLatency(b *testing.B) {
	p := pbNew(b, 44100)
	sig := pbSine(480, 24000, 440, 0.5)
	buf := make([]float32, 64)
	b.ResetTimer()
	for range b.N {
		p.Play(sig)
		for p.Pull(buf) == 0 {
		}
		b.StopTimer()
		p.FlushAfter(0)
		pbPullAll(p, 441)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs-play-to-pull")
}

// The jitter buffer holds audio that arrives into silence for its length of device time, then
// plays it all; an underrun re-arms it.
func TestPlaybackJitterBuffer(t *testing.T) {
	p, err := NewPlayback(24000, 48000)
	if err != nil {
		t.Fatal(err)
	}
	p.SetJitterBuffer(100 * time.Millisecond) // 4800 output samples
	tone := make([]float32, 2400)             // 100 ms at 24 kHz
	for i := range tone {
		tone[i] = 0.5
	}
	p.Play(tone)
	out := make([]float32, 480)
	pulled := 0
	for pulled < 4800 {
		if n := p.Pull(out); n != 0 {
			t.Fatalf("audio played after %d samples of device time, want 4800 of waiting", pulled)
		}
		pulled += len(out)
	}
	got := 0
	for range 20 {
		got += p.Pull(out)
	}
	if got < 4700 {
		t.Fatalf("after the wait only %d samples played, want the whole 100 ms", got)
	}
	// Dry now: the next audio waits again.
	p.Play(tone)
	if n := p.Pull(out); n != 0 {
		t.Fatalf("audio after an underrun played at once (%d samples)", n)
	}
	p.SetJitterBuffer(0)
	if n := p.Pull(out); n == 0 {
		t.Fatal("with no jitter buffer, queued audio did not play")
	}
}
