package devices

import (
	"math"
	"math/bits"
	"time"

	"github.com/omnisat/omnisat/pipeline"
)

// SampleClock counts samples against the wall clock: sample n of a stream that started at Start
// is due at Start + n/rate. Whatever is paced by it decides from counts, never from when it last
// woke up, so waking late never adds up to drift.
type SampleClock struct {
	Start time.Time
	rate  float64 // samples per second of wall time
	whole uint64  // rate when it is a whole number (exact integer arithmetic), else 0
}

// NewSampleClock starts a clock at start for rate samples a second; speed > 1 compresses time
// (tests), 0 means 1.
func NewSampleClock(start time.Time, rate int, speed float64) SampleClock {
	if speed <= 0 {
		speed = 1
	}
	c := SampleClock{Start: start, rate: float64(rate) * speed}
	if c.rate >= 1 && c.rate == math.Trunc(c.rate) {
		c.whole = uint64(c.rate)
	}
	return c
}

// Due is how many samples are due by now: 0 before Start.
func (c SampleClock) Due(now time.Time) int64 {
	d := now.Sub(c.Start)
	if d <= 0 {
		return 0
	}
	if c.whole == 0 {
		return int64(float64(d) * c.rate / 1e9)
	}
	hi, lo := bits.Mul64(uint64(d), c.whole)
	q, _ := bits.Div64(hi, lo, 1e9) // d < 2^63 ns and rate < 1e9: no overflow
	return int64(q)
}

// At is when sample count n is reached: the first moment at which Due is at least n.
func (c SampleClock) At(n int64) time.Time {
	if n <= 0 {
		return c.Start
	}
	if c.whole == 0 {
		// One nanosecond more than the exact time, so that rounding never makes a waiter
		// wake a hair early and find nothing due.
		return c.Start.Add(time.Duration(math.Ceil(float64(n)/c.rate*1e9)) + 1)
	}
	hi, lo := bits.Mul64(uint64(n), 1e9)
	lo, carry := bits.Add64(lo, c.whole-1, 0)
	q, _ := bits.Div64(hi+carry, lo, c.whole)
	return c.Start.Add(time.Duration(q))
}

// PlaybackClock stands in for a sound card pulling a playback queue in real time: whenever
// someone looks (CatchUp), it pulls what a device would have taken by then. Nothing wakes up to
// do it: a speaker without a device (output none or a WAV file) and a PortAudio speaker whose
// device is lost both consume their queue this way, so Pending falls as if it played.
type PlaybackClock struct {
	pb     *pipeline.Playback
	clock  SampleClock
	pulled int64 // samples accounted since the clock started
	buf    []float32
}

// NewPlaybackClock starts consuming pb at its output rate from now.
func NewPlaybackClock(pb *pipeline.Playback, now time.Time) *PlaybackClock {
	return &PlaybackClock{pb: pb, clock: NewSampleClock(now, pb.OutRate(), 1), buf: make([]float32, pb.OutRate()/10)}
}

// Restart counts from now: what was due before is not pulled.
func (c *PlaybackClock) Restart(now time.Time) {
	c.clock, c.pulled = NewSampleClock(now, c.pb.OutRate(), 1), 0
}

// CatchUp pulls what is due by now and hands it to sink (nil: into nothing) in blocks: the
// queued audio, then, once the queue has run dry, silence (only as long as the block that ran
// dry when sink is nil, since nothing would hear the rest). Memory use does not depend on how
// long it has been.
func (c *PlaybackClock) CatchUp(now time.Time, sink func([]float32)) { c.catchUp(now, sink, sink) }

// CatchUpSound is CatchUp for a sink that only cares for sound (a peak meter): once the queue
// has run dry, the silence is counted but not handed over, so a speaker that plays into nothing
// does no work per second of silence.
func (c *PlaybackClock) CatchUpSound(now time.Time, sink func([]float32)) { c.catchUp(now, sink, nil) }

// catchUp hands the queued audio to sound and the silence after it to silence (nil: into
// nothing).
func (c *PlaybackClock) catchUp(now time.Time, sound, silence func([]float32)) {
	due := c.clock.Due(now) - c.pulled
	for due > 0 {
		block := c.buf[:min(due, int64(len(c.buf)))]
		got := c.pb.Pull(block)
		if sound != nil {
			sound(block)
		}
		c.pulled += int64(len(block))
		due -= int64(len(block))
		if got == 0 && c.pb.Pending() == 0 {
			break // dry (not just held back by a jitter buffer): the rest is silence
		}
	}
	if due <= 0 {
		return
	}
	c.pulled += due
	if silence == nil {
		return
	}
	clear(c.buf)
	for due > 0 {
		n := min(due, int64(len(c.buf)))
		silence(c.buf[:n])
		due -= n
	}
}

// Ahead hands up to n samples to sink (nil: into nothing) now, ahead of the clock, as a
// device takes audio into its buffer: the clock pulls nothing more until it has caught up.
func (c *PlaybackClock) Ahead(n int64, sink func([]float32)) {
	for n > 0 {
		block := c.buf[:min(n, int64(len(c.buf)))]
		c.pb.Pull(block)
		if sink != nil {
			sink(block)
		}
		c.pulled += int64(len(block))
		n -= int64(len(block))
	}
}
