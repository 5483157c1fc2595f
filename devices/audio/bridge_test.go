package audio

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// ramp is n interleaved frames of ch channels whose frame i holds start+i on every channel.
func ramp(n, ch int, start float32) []float32 {
	s := make([]float32, n*ch)
	for i := range n {
		for c := range ch {
			s[i*ch+c] = start + float32(i)
		}
	}
	return s
}

// TestFlushFadesAndDrops queues many buffers, flushes, and checks that the next buffer plays a
// fade of what was queued down to silence, that the rest is dropped (the record says how much,
// it is not counted as Go being late), that the callback wakes Go to refill, and that what Go
// queues after the flush plays next.
func TestFlushFadesAndDrops(t *testing.T) {
	for _, ch := range []int{1, 2} {
		const buf, fade = 64, 16
		o := newBridgeProbe(ch, 4096, fade)
		defer o.Free()
		o.Write(ramp(10*buf, ch, 1))
		first := o.Take(buf, 1.0)
		if first[0] != 1 || first[(buf-1)*ch] != buf {
			t.Fatalf("%d channels: the first buffer is not the queued ramp: %v...", ch, first[:4])
		}
		if w := o.Wakes(); w != 0 {
			t.Errorf("%d channels: the callback woke Go %d times with 9 buffers still queued", ch, w)
		}
		o.Records()

		o.Cut()
		played := o.Take(buf, 2.0)
		for i := range buf {
			want := float32(0)
			if i < fade {
				want = float32(buf+1+i) * float32(fade-1-i) / fade
			}
			for c := range ch {
				if got := played[i*ch+c]; got != want {
					t.Fatalf("%d channels: frame %d channel %d after the flush: %g, want %g", ch, i, c, got, want)
				}
			}
		}
		recs := o.Records()
		if len(recs) != 1 {
			t.Fatalf("%d channels: %d records for one buffer", ch, len(recs))
		}
		if r := recs[0]; r.Pos != buf || r.Frames != buf || r.Filled != fade || r.Cut != 9*buf-fade {
			t.Errorf("%d channels: record after the flush %+v, want pos %d, frames %d, filled %d, cut %d", ch, r, buf, buf, fade, 9*buf-fade)
		}
		// What the record says was played is what the device played: the faded frames.
		if got := o.Ring(recs[0].Pos, fade); got[ch] != played[ch] {
			t.Errorf("%d channels: the ring holds %g where the device played %g: the echo reference would differ", ch, got[ch], played[ch])
		}
		if o.Queued() != 0 {
			t.Errorf("%d channels: %d frames still queued after the flush", ch, o.Queued())
		}
		if o.Dropped() != 0 {
			t.Errorf("%d channels: the flush counted %d frames as Go being late", ch, o.Dropped())
		}
		if w := o.Wakes(); w == 0 {
			t.Errorf("%d channels: the callback did not wake Go to refill after the flush", ch)
		}

		o.Write(ramp(2*buf, ch, 1000))
		next := o.Take(buf, 3.0)
		if next[0] != 1000 {
			t.Errorf("%d channels: after the flush the device played %g, want the new audio (1000)", ch, next[0])
		}
		if r := o.Records(); len(r) != 1 || r[0].Pos != 10*buf || r[0].Filled != buf || r[0].Cut != 0 {
			t.Errorf("%d channels: record after the refill %+v", ch, r)
		}
	}
}

// TestFlushOfAShortQueue flushes with less than a fade queued: what is queued fades out over
// its own length, nothing is dropped.
func TestFlushOfAShortQueue(t *testing.T) {
	o := newBridgeProbe(1, 1024, 32)
	defer o.Free()
	o.Write(ramp(64+8, 1, 1))
	o.Take(64, 1)
	o.Records()
	o.Cut()
	played := o.Take(64, 2)
	for i := range 8 {
		if want := float32(65+i) * float32(7-i) / 8; played[i] != want {
			t.Fatalf("frame %d: %g, want %g", i, played[i], want)
		}
	}
	if r := o.Records(); r[0].Filled != 8 || r[0].Cut != 0 {
		t.Errorf("record %+v, want filled 8, cut 0", r[0])
	}
}

// TestWakesWhenLessThanABufferIsLeft: without a flush the callback wakes Go only when the buffer
// it took leaves less than one queued, so a deeper queue means fewer wake-ups.
func TestWakesWhenLessThanABufferIsLeft(t *testing.T) {
	o := newBridgeProbe(1, 4096, 16)
	defer o.Free()
	o.Write(ramp(6*64, 1, 1))
	for i := range 6 {
		o.Take(64, float64(i))
		w := o.Wakes()
		if left := 5 - i; left >= 1 && w != 0 || left < 1 && w != 1 {
			t.Errorf("buffer %d (%d left queued): %d wake-ups", i, left, w)
		}
	}
}

// TestEagerWakesOnce: asked to (the microphone waits for what is played), the next callback
// wakes Go although plenty is queued; the one after does not.
func TestEagerWakesOnce(t *testing.T) {
	o := newBridgeProbe(1, 4096, 16)
	defer o.Free()
	o.Write(ramp(8*64, 1, 1))
	o.Take(64, 0)
	if w := o.Wakes(); w != 0 {
		t.Fatalf("%d wake-ups with 7 buffers queued", w)
	}
	o.Eager()
	o.Take(64, 1)
	if w := o.Wakes(); w != 1 {
		t.Errorf("asked to wake Go: %d wake-ups", w)
	}
	o.Take(64, 2)
	if w := o.Wakes(); w != 0 {
		t.Errorf("the callback after: %d wake-ups, want 0", w)
	}
}

// TestIdleOutputPlaysSilenceUnwoken: with the idle flag set (the speaker has nothing to play),
// a callback that finds the ring dry plays silence without waking Go or counting it late, until
// the records of played buffers are three quarters used; without the flag the same callback
// wakes Go at every buffer and counts the silence dropped.
func TestIdleOutputPlaysSilenceUnwoken(t *testing.T) {
	o := newBridgeProbe(1, 4096, 16)
	defer o.Free()
	o.Write(ramp(64, 1, 1)) // the tail of the last sound
	o.SetIdle(true)
	o.Take(64, 0)
	for i := 1; i < probeRecords*3/4-1; i++ {
		out := o.Take(64, float64(i))
		if w := o.Wakes(); w != 0 {
			t.Fatalf("buffer %d, idle with the ring dry: %d wake-ups", i, w)
		}
		for _, v := range out {
			if v != 0 {
				t.Fatalf("buffer %d played %v, want silence", i, v)
			}
		}
	}
	if d := o.Dropped(); d != 0 {
		t.Errorf("%d frames counted dropped while idle", d)
	}
	o.Take(64, 100) // the records are three quarters used now
	if w := o.Wakes(); w != 1 {
		t.Errorf("records three quarters used: %d wake-ups, want 1", w)
	}
	recs := o.Records()
	if len(recs) != probeRecords*3/4 || recs[0].Filled != 64 || recs[1].Filled != 0 || recs[1].Frames != 64 || recs[1].Lost != 0 {
		t.Errorf("%d records, the first two %+v %+v: want the tail, then silence from a dry ring, nothing lost", len(recs), recs[0], recs[1])
	}
	o.SetIdle(false) // something to play, not written yet: the callback wakes Go and counts it late
	o.Take(64, 101)
	if w, d := o.Wakes(), o.Dropped(); w == 0 || d != 64 {
		t.Errorf("not idle, the ring dry: %d wake-ups and %d frames dropped, want some and 64", w, d)
	}
}

// TestInputRecordsCarryTheXrun: an input buffer's record holds where it lies in the ring, its
// capture time and PortAudio's flags, so that an overflow the host reports reaches the echo
// canceller as a jump in the capture's timeline.
func TestInputRecordsCarryTheXrun(t *testing.T) {
	o := newInputBridgeProbe(2, Mixdown, 4096)
	defer o.Free()
	o.Give(ramp(64, 2, 1), 1.5, 0)
	o.Give(ramp(64, 2, 65), 2.5, inputOverflow)
	recs := o.Records()
	if len(recs) != 2 {
		t.Fatalf("%d records for two buffers", len(recs))
	}
	for i, want := range []probeRecord{
		{At: 1.5, Pos: 0, Frames: 64, Filled: 64, Info: bufferInfo{at: 1.5}},
		{At: 2.5, Pos: 64, Frames: 64, Filled: 64, Info: bufferInfo{at: 2.5, xrun: true}},
	} {
		if recs[i] != want {
			t.Errorf("record %d: %+v, want %+v", i, recs[i], want)
		}
	}
	if got := o.Ring(64, 1); len(got) != 1 || got[0] != 130 {
		t.Errorf("the second buffer's first frame in the ring: %v, want its channels' sum [130]", got)
	}
	if w := o.Wakes(); w != 2 {
		t.Errorf("two buffers woke Go %d times", w)
	}
}

// TestInputBridgeMixesAsTheReader: an input bridge keeps one sample a frame (the sum of the
// device's channels, or the one the microphone takes), and the microphone's ring makes of it,
// with the gain, exactly what it makes of the interleaved frames themselves (ring.write, which
// mixes in Go): to the bit, for a mixdown and for each channel, at unity gain and with a gain
// that clips.
func TestInputBridgeMixesAsTheReader(t *testing.T) {
	const ch, frames = 2, 480
	rnd := rand.New(rand.NewPCG(3, 39))
	in := make([]float32, ch*frames)
	for i := range in {
		in[i] = float32(rnd.NormFloat64() / 3)
	}
	in[0], in[1] = 0.7, 0.9 // a sum over 1: clipped only after the gain
	for _, pick := range []int{Mixdown, 0, 1} {
		for _, gain := range []float32{1, 3.1623} {
			o := newInputBridgeProbe(ch, pick, 4096)
			o.Give(in, 1, 0)
			mixed := o.Ring(0, frames)
			o.Free()
			viaBridge, inGo := newRing(4096, ch, pick, gain), newRing(4096, ch, pick, gain)
			viaBridge.writeMixed(mixed)
			inGo.write(in)
			a, b := make([]float32, frames), make([]float32, frames)
			viaBridge.readFrom(a)
			inGo.readFrom(b)
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] == 0 && b[i] == 0) {
					t.Fatalf("pick %d, gain %v: frame %d is %v through the bridge, %v mixed in Go", pick, gain, i, a[i], b[i])
				}
			}
		}
	}
}

// TestMicrophoneReadsKeepThePumpAsleep: while a reply plays, a microphone that shares the echo
// reference services the speaker at each of its reads, every 100 ms (two buffers of a Pi-like
// card's 50 ms; the agent's reads while a reply plays), and the output pump keeps outputAhead
// queued: enough that the device's 25 ms buffers (a 50 ms speaker latency) never find less
// than one queued between two reads, so the callback never wakes Go for a refill. At 80 ms the
// ring ran low before every read (here, where nothing answers those wakes, the device then
// played silence).
func TestMicrophoneReadsKeepThePumpAsleep(t *testing.T) {
	const rate, ch, buf = 48000, 2, 1200 // 25 ms device buffers
	o := newBridgeProbe(ch, outputRingFrames(50*time.Millisecond, rate, buf), 64)
	defer o.Free()
	reply := func(_, out []float32, _ bufferInfo) int {
		for i := range out {
			out[i] = 0.25
		}
		return len(out) / ch
	}
	pump := newOutputPump(o.b, ch, rate, reply, outputHooks{sound: func() bool { return true }})
	at := 0.0
	take := func() {
		if played := o.Take(buf, at); played[0] == 0 && at > 0.1 {
			t.Fatalf("the device played silence at %.3f s: the pump kept too little queued", at)
		}
		at += float64(buf) / rate
	}
	take() // the device's first buffer tells the pump its size
	pump.service()
	o.Wakes()
	const reads = 50
	for range reads {
		for range 4 { // 100 ms of the device's buffers between two reads
			take()
		}
		pump.service() // the microphone's read
	}
	if w := o.Wakes(); w != 0 {
		t.Errorf("the callback woke the pump %d times in %d reads of 100 ms, want none: the ring ran low between reads", w, reads)
	}
	if d := o.Dropped(); d != 0 {
		t.Errorf("%d frames played as silence: the pump was late", d)
	}
}
