package pipeline

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Playback timing constants.
const (
	// PlaybackFade is the length of every fade the queue makes by itself: out of an underrun,
	// back in when audio resumes, and at the cut of FlushAfter. 3 ms is short enough to be
	// heard as "at once" and long enough to turn a step into a ramp, which is what a click is.
	PlaybackFade = 3 * time.Millisecond
	// PlaybackVolumeRamp is how long a volume change takes to reach its target.
	PlaybackVolumeRamp = 20 * time.Millisecond
	// MaxPlaybackQueue bounds the queue: audio played beyond it is dropped and counted
	// (PlaybackStats.Dropped), so a runaway server cannot fill the memory.
	MaxPlaybackQueue = 5 * time.Minute
)

// playChunk is how many input samples Play converts at a time: its scratch buffers have a
// fixed size whatever the caller's chunk size.
const playChunk = 4096

// Playback is the speaker's queue: audio at the model's rate goes in with Play, device-rate
// samples come out with Pull, which the device's callback calls. In between it
//
//   - resamples in one continuous stream (a reply played in many pieces sounds as one piece),
//   - queues without limit in time (up to MaxPlaybackQueue), so a server that produces a
//     second of speech per second of wall time, with stutter, plays without gaps once started,
//   - fills underruns with silence, fading the last sample out and the resumed audio in over
//     PlaybackFade, so starting, stopping and starving never click,
//   - drops queued audio on FlushAfter, fading the cut,
//   - applies a live volume with a ramp,
//   - counts what it handed to the device, so Pending is what has not been played yet.
//
// Pull holds the queue's lock only to copy samples and never allocates; Play does the
// resampling outside that lock, so a long Play never delays the device. All methods are
// safe for concurrent use.
type Playback struct {
	inRate, outRate int
	fadeLen         int     // samples of a fade at outRate
	volStep         float32 // largest gain change per output sample
	maxQueue        int     // samples at outRate
	baseQueue       int     // the room the queue returns to when dry after a long reply, samples

	volume atomic.Int32 // target volume 0..100

	// playMu serialises the producers (Play, FlushAfter) and guards the resampler and the
	// scratch buffers. Pull takes it only with TryLock, to drain the resampler's tail.
	playMu  sync.Mutex
	rs      *Resampler
	clean   []float32 // Play's input after clipping
	conv    []float32 // Play's resampled output
	tailBuf []float32 // Pull's room for the resampler's tail (OutputLen(0))

	// mu guards the queue and the output state; Pull holds it for a copy and a short loop.
	mu        sync.Mutex
	q         fifo
	inSince   int64   // input samples since the resampler's last reset (written with playMu too)
	outSince  int64   // output samples since that reset
	fadeIn    int     // samples of fade-in done since audio last (re)started; fadeLen = none due
	residCur  float32 // fade-out of an underrun: the value still being ramped to 0
	residStep float32
	residLeft int
	under     bool    // the last Pull ended in silence
	lastOut   float32 // the last output sample, before volume
	gain      float32 // the current volume gain, ramping to the target's
	played    int64   // queued samples handed to the device
	pulled    int64   // all samples handed to the device, silence included
	underruns int64
	dropped   int64 // output samples refused because the queue was full
	flushed   int64 // output samples dropped by FlushAfter

	// The jitter buffer: audio that arrives while the output is silent waits jitter output
	// samples (device time) before it plays, so a server delivering about a second of speech
	// per second, with stutter, does not underrun at every delta. armedAt is the pulled count
	// when the first waiting sample was seen, -1 when none waits.
	jitter  int
	armedAt int64
}

// PlaybackStats are the queue's counters, in output samples except Underruns.
type PlaybackStats struct {
	Played    int64 // queued audio handed to the device
	Pulled    int64 // everything handed to the device, silence included
	Queued    int   // waiting in the queue now
	Underruns int64 // times the queue ran dry while playing
	Dropped   int64 // refused because the queue held MaxPlaybackQueue
	Flushed   int64 // dropped by FlushAfter
	Capacity  int   // room the queue holds now, samples: its memory is 2 bytes each
}

// NewPlayback returns a queue from inRate (the model's, 24 kHz) to outRate (the device's),
// at volume 100. It fails when the Resampler cannot convert between the rates.
func NewPlayback(inRate, outRate int) (*Playback, error) {
	rs, err := NewResampler(inRate, outRate)
	if err != nil {
		return nil, fmt.Errorf("pipeline: playback queue: %w", err)
	}
	p := &Playback{
		inRate:   inRate,
		outRate:  outRate,
		fadeLen:  max(1, int(PlaybackFade.Seconds()*float64(outRate))),
		volStep:  float32(1 / (PlaybackVolumeRamp.Seconds() * float64(outRate))),
		maxQueue: int(MaxPlaybackQueue.Seconds() * float64(outRate)),
		rs:       rs,
		clean:    make([]float32, playChunk),
		conv:     make([]float32, 0, rs.OutputLen(playChunk)),
		tailBuf:  make([]float32, 0, rs.OutputLen(0)),
		gain:     1,
		under:    true,
		armedAt:  -1,
	}
	p.volume.Store(100)
	// Half a second of room up front, so that a speaker that has not spoken yet keeps little
	// (two seconds at 48 kHz are 192 KB). The queue grows (in Play) for replies; once one has
	// played, a queue that grew past twice baseQueue goes back to baseQueue, so replies of a
	// few seconds find their room again instead of growing a new one each time.
	p.baseQueue = 2 * outRate
	p.q.buf = make([]int16, outRate/2)
	return p, nil
}

// InRate is the rate Play takes, in Hz.
func (p *Playback) InRate() int { return p.inRate }

// OutRate is the rate Pull produces, in Hz.
func (p *Playback) OutRate() int { return p.outRate }

// Play queues samples at InRate. It never blocks on the device: it resamples outside the
// queue's lock and holds the lock only to append. NaN becomes 0 and samples are clipped to
// [-1, 1], so bad server audio cannot reach the device as a full-scale burst.
func (p *Playback) Play(samples []float32) {
	p.playMu.Lock()
	defer p.playMu.Unlock()
	for len(samples) > 0 {
		n := min(len(samples), playChunk)
		out := p.clean[:n]
		clipInto(out, samples[:n])
		samples = samples[n:]
		if p.inRate != p.outRate { // equal rates: the resampler would only copy
			p.conv = p.rs.Process(p.conv[:0], out)
			out = p.conv
		}
		p.mu.Lock()
		p.inSince += int64(n)
		p.outSince += int64(len(out))
		p.push(out)
		p.mu.Unlock()
	}
}

// push appends to the queue, growing it within maxQueue; a queue that grew for a long reply
// is given back once it has run dry, so memory does not stay at the longest reply. Called with
// mu held.
func (p *Playback) push(s []float32) {
	if p.q.n == 0 && len(p.q.buf) > 2*p.baseQueue {
		p.q.buf, p.q.r = make([]int16, p.baseQueue), 0
	}
	if room := p.maxQueue - p.q.n; len(s) > room {
		p.dropped += int64(len(s) - max(room, 0))
		s = s[:max(room, 0)]
	}
	p.q.push(s)
}

// Pull fills out with the next samples for the device and returns how many of them came from
// the queue (the rest is silence, with the fade-out of an underrun). It does not allocate,
// does not wait for Play, and holds the queue's lock only for a copy and one pass over out.
func (p *Playback) Pull(out []float32) int {
	if len(out) == 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	if !p.waiting() {
		n = p.q.read(out)
		if n < len(out) && p.drainTail() {
			n += p.q.read(out[n:])
		}
	}
	clear(out[n:])

	// Fade-in of audio that starts (or resumes) here.
	if n > 0 && p.fadeIn < p.fadeLen {
		k := min(n, p.fadeLen-p.fadeIn)
		inv := 1 / float32(p.fadeLen)
		for i := range out[:k] {
			out[i] *= float32(p.fadeIn+i) * inv
		}
		p.fadeIn += k
	}
	// The fade-out of an earlier underrun, still running.
	if p.residLeft > 0 {
		k := min(len(out), p.residLeft)
		for i := range out[:k] {
			p.residCur -= p.residStep
			out[i] += p.residCur
		}
		p.residLeft -= k
	}
	// An underrun starting here: ramp from the last value to 0, and fade in what comes next.
	if n < len(out) {
		if n > 0 || !p.under {
			p.underruns++
			v0 := p.lastOut
			if n > 0 {
				v0 = out[n-1]
			}
			p.residCur, p.residStep, p.residLeft = v0, v0/float32(p.fadeLen), p.fadeLen
			k := min(len(out)-n, p.residLeft)
			for i := range out[n : n+k] {
				p.residCur -= p.residStep
				out[n+i] = p.residCur
			}
			p.residLeft -= k
		}
		p.under = true
		p.fadeIn = 0
		if p.q.n == 0 {
			p.armedAt = -1 // dry: the next audio starts a new wait
		}
	} else {
		p.under = false
	}
	p.lastOut = out[len(out)-1]

	// Volume, ramped towards the target.
	target := volumeGain(int(p.volume.Load()))
	g, step := p.gain, p.volStep
	if g == target {
		if g != 1 {
			for i := range out {
				out[i] *= g
			}
		}
	} else {
		for i := range out {
			switch {
			case g < target:
				g = min(g+step, target)
			case g > target:
				g = max(g-step, target)
			}
			out[i] *= g
		}
		p.gain = g
	}

	p.played += int64(n)
	p.pulled += int64(len(out))
	return n
}

// waiting reports whether queued audio is held back by the jitter buffer. Called with mu held.
func (p *Playback) waiting() bool {
	if !p.under || p.jitter == 0 || p.q.n == 0 {
		return false
	}
	if p.armedAt < 0 {
		p.armedAt = p.pulled
	}
	return p.pulled-p.armedAt < int64(p.jitter)
}

// SetJitterBuffer sets how long audio arriving while the output is silent waits before it
// plays (0: at once). It trades start latency for smooth playback of a server that delivers
// about a second of speech per second of wall time.
func (p *Playback) SetJitterBuffer(d time.Duration) {
	p.mu.Lock()
	p.jitter = max(0, int(d.Seconds()*float64(p.outRate)))
	p.mu.Unlock()
}

// drainTail moves the outputs the resampler holds back for its look-ahead into the empty
// queue: without it the last few milliseconds of a reply would wait for the next reply, and
// Pending would never reach 0. It runs only when the queue is dry and no Play is under way,
// so a reply that stutters loses nothing (the next Play starts a new stream after a fade).
// Called with mu held; reports whether it added samples.
func (p *Playback) drainTail() bool {
	if p.held() <= 0 || !p.playMu.TryLock() {
		return false
	}
	defer p.playMu.Unlock()
	p.tailBuf = p.rs.Flush(p.tailBuf[:0])
	p.inSince, p.outSince = 0, 0
	p.q.push(p.tailBuf) // the queue is empty and holds 2 s: no growth
	return len(p.tailBuf) > 0
}

// held is how many output samples the resampler owes for input it has taken. Called with mu.
func (p *Playback) held() int64 {
	return int64(math.Ceil(float64(p.inSince)*float64(p.outRate)/float64(p.inRate))) - p.outSince
}

// FlushAfter drops the queued audio beyond keep (measured from what the device will play
// next) with a PlaybackFade fade at the cut, and forgets the resampler's held-back tail.
// FlushAfter(0) makes the output fall silent within PlaybackFade of the next Pull, so
// within one device buffer plus the fade. When less than keep is queued it does nothing.
func (p *Playback) FlushAfter(keep time.Duration) {
	p.playMu.Lock()
	defer p.playMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	keepN := int(max(keep, 0).Seconds() * float64(p.outRate))
	if int64(p.q.n)+max(p.held(), 0) <= int64(keepN) {
		return
	}
	if keepN < p.q.n {
		// Keep up to PlaybackFade past keep and fade it down to 0: the cut is a ramp.
		k := min(p.q.n, keepN+p.fadeLen)
		p.flushed += int64(p.q.n - k)
		p.q.truncate(k)
		f := k - keepN
		for i := range f {
			p.q.scale(keepN+i, float32(f-1-i)/float32(f))
		}
	}
	p.rs.Reset() // the held-back tail goes too
	p.inSince, p.outSince = 0, 0
}

// Cut drops all the queued audio at once, without a fade, and leaves the output as if it had
// fallen silent already: for a device that fades and drops what it holds itself (the PortAudio
// speaker's ring). The next audio fades in, after the jitter buffer, as after an underrun.
func (p *Playback) Cut() {
	p.playMu.Lock()
	defer p.playMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushed += int64(p.q.n)
	p.q.truncate(0)
	p.rs.Reset() // the held-back tail goes too
	p.inSince, p.outSince = 0, 0
	p.residLeft, p.residCur, p.lastOut = 0, 0, 0
	p.under, p.fadeIn, p.armedAt = true, 0, -1
}

// Pending is how much queued audio the device has not been handed yet, the resampler's
// held-back tail included. Audio inside the device's own buffer is not counted.
func (p *Playback) Pending() time.Duration {
	p.mu.Lock()
	n := int64(p.q.n) + max(p.held(), 0)
	p.mu.Unlock()
	return time.Duration(float64(n) / float64(p.outRate) * float64(time.Second))
}

// SetVolume sets the volume, 0 (mute) to 100 (unity gain); values outside are clamped. The
// gain follows the cube of the volume, as PulseAudio's and ALSA's mixers do, so 50 is about
// -18 dB; it ramps to the new value over PlaybackVolumeRamp.
func (p *Playback) SetVolume(v int) {
	p.volume.Store(int32(min(max(v, 0), 100)))
}

// Volume is the volume last set, 0..100.
func (p *Playback) Volume() int { return int(p.volume.Load()) }

// volumeGain maps a volume 0..100 to a linear gain.
func volumeGain(v int) float32 {
	x := float32(v) / 100
	return x * x * x
}

// Position is how much queued audio has been handed to the device since the start.
func (p *Playback) Position() time.Duration {
	p.mu.Lock()
	n := p.played
	p.mu.Unlock()
	return time.Duration(float64(n) / float64(p.outRate) * float64(time.Second))
}

// Stats returns the queue's counters.
func (p *Playback) Stats() PlaybackStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PlaybackStats{Played: p.played, Pulled: p.pulled, Queued: p.q.n, Underruns: p.underruns, Dropped: p.dropped, Flushed: p.flushed, Capacity: len(p.q.buf)}
}

// fifo is a growable ring of samples, held as 16-bit (sample16.go): a queued reply takes half
// the memory of float32 (30 s queued ahead at 48 kHz are 2.9 MB, not 5.8), at a precision
// sound cards and sound servers mostly take at the end anyway (what Play queues is clipped to
// [-1, 1] first). The volume and the fades are applied to what comes out, in float32.
type fifo struct {
	buf  []int16
	r, n int // read index, samples held
}

// push appends s, doubling the ring when it is full.
func (f *fifo) push(s []float32) {
	if len(s) == 0 {
		return
	}
	if f.n+len(s) > len(f.buf) {
		nb := make([]int16, max(2*len(f.buf), f.n+len(s)))
		k := copy(nb[:f.n], f.buf[f.r:])
		copy(nb[k:f.n], f.buf)
		f.buf, f.r = nb, 0
	}
	w := (f.r + f.n) % len(f.buf)
	k := min(len(s), len(f.buf)-w)
	quantize16Into(f.buf[w:w+k], s[:k])
	quantize16Into(f.buf[:len(s)-k], s[k:])
	f.n += len(s)
}

// read moves up to len(dst) samples into dst and returns how many.
func (f *fifo) read(dst []float32) int {
	n := min(len(dst), f.n)
	if n == 0 {
		return 0
	}
	k := min(n, len(f.buf)-f.r)
	dequantize16Into(dst[:k], f.buf[f.r:f.r+k])
	dequantize16Into(dst[k:n], f.buf[:n-k])
	f.r = (f.r + n) % len(f.buf)
	f.n -= n
	return n
}

// truncate keeps the first k samples.
func (f *fifo) truncate(k int) { f.n = min(f.n, max(k, 0)) }

// scale multiplies the i-th queued sample by g (0 ≤ g ≤ 1).
func (f *fifo) scale(i int, g float32) {
	q := &f.buf[(f.r+i)%len(f.buf)]
	*q = quantize16(dequantize16(*q) * g)
}
