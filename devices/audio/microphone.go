package audio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/pipeline"
)

// OutputRate is the rate Microphone.Read delivers: the model's input rate.
const OutputRate = 16000

// Mixdown, as MicConfig.Channel, averages all channels.
const Mixdown = pipeline.Mixdown

// MicConfig chooses and sets up the microphone. Start from DefaultMicConfig: the zero value's
// Channel 0 takes the first channel only instead of mixing down.
type MicConfig struct {
	// Device is "default", a PortAudio index, or part of a device name (case-insensitive);
	// see Select.
	Device string
	// Rate is the capture rate in Hz; 0 takes the device's native rate, which is what to use
	// (PulseAudio's devices delivered fewer samples than real time at other rates).
	Rate int
	// Channels to capture; 0 takes the device's maximum, up to 2.
	Channels int
	// Channel is the channel to keep (0-based), or Mixdown (-1) for the average of all.
	Channel int
	// GainDB is a gain in decibels applied before resampling, -40..+40; 0 leaves the level
	// alone. The result is clipped to [-1, 1].
	GainDB float64
	// Latency is the stream latency PortAudio is asked for; 0 takes the device's default
	// high latency, the safe choice on a small board.
	Latency time.Duration
	// FramesPerBuffer per callback; 0 takes half the latency: two device periods a buffer. Each
	// period wakes PortAudio's thread, the stream's pump and the echo canceller's thread, so
	// ALSA's own choice, four periods a buffer, cost twice the wake-ups for capture that only
	// the next chunk waits for.
	FramesPerBuffer int
	// Buffer is how much audio the capture ring holds for a slow reader; 0 means
	// defaultCaptureRing (or two latencies, if longer). When the reader falls further behind,
	// the oldest audio is dropped (and counted).
	Buffer time.Duration
	// Clean is the echo cancellation, noise suppression and gain (the zero value: none). It runs
	// on the 16 kHz stream Read delivers, after resampling, or at the capture rate when that is
	// lower: the model hears nothing above 8 kHz, so cancelling it at 48 kHz would cost three
	// times the work for sound the resampler removes anyway.
	Clean CleanConfig
}

// DefaultMicConfig is the default device at its native rate, mixed down, at unity gain.
func DefaultMicConfig() MicConfig {
	return MicConfig{Device: "default", Channel: Mixdown}
}

// Validate names the first unusable setting.
func (c MicConfig) Validate() error {
	switch {
	case c.Rate != 0 && (c.Rate < 8000 || c.Rate > 192000):
		return fmt.Errorf("microphone rate %d Hz: want 0 (native) or 8000..192000", c.Rate)
	case c.Channels < 0 || c.Channels > 32:
		return fmt.Errorf("microphone channels %d: want 0 (up to 2) or 1..32", c.Channels)
	case c.Channel < Mixdown || (c.Channels > 0 && c.Channel >= c.Channels):
		return fmt.Errorf("microphone channel %d: want -1 (mix down) or a channel below %d", c.Channel, max(c.Channels, 1))
	case math.IsNaN(c.GainDB) || c.GainDB < -40 || c.GainDB > 40:
		return fmt.Errorf("microphone gain %v dB: want -40..40", c.GainDB)
	case c.Latency < 0 || c.Latency > 2*time.Second:
		return fmt.Errorf("microphone latency %v: want 0..2s", c.Latency)
	case c.FramesPerBuffer < 0 || c.FramesPerBuffer > maxFramesPerBuffer:
		return fmt.Errorf("microphone frames per buffer %d: want 0..%d", c.FramesPerBuffer, maxFramesPerBuffer)
	case c.Buffer < 0 || c.Buffer > time.Minute:
		return fmt.Errorf("microphone buffer %v: want 0..1m", c.Buffer)
	}
	if err := c.Clean.validate(); err != nil {
		return fmt.Errorf("microphone: %w", err)
	}
	return nil
}

// Microphone captures from a PortAudio input stream at the device's native rate and delivers
// 16 kHz mono float32 through Read (agent.AudioSource). The stream's pump mixes each device
// buffer down (with the gain) into a preallocated ring of one channel; the resampling and
// cleaning happen in Read, on the reader's goroutine. The amount of audio is what the device
// delivered, counted in samples: wall time is used only to fill the gap while the device is
// lost.
//
// While the device is lost, Read returns silence at real-time pace (from the moment the device
// last delivered), so the agent's pacing and session carry on; when it is back, Read returns
// its audio again. Read returns io.EOF after Close.
type Microphone struct {
	cfg      MicConfig
	rate     int // capture rate, fixed at the first open
	channels int
	gain     float32
	link     *link
	ring     *ring
	// wake is how many frames the stream's callback lets gather before it wakes the pump
	// (ReadPatiently sets it); wakes counts the times it did.
	wake  wakeCell
	wakes atomic.Int64

	cancel context.CancelFunc
	done   chan struct{} // closed when the supervisor has stopped
	once   sync.Once

	// Read's state, under readMu.
	readMu  sync.Mutex
	rs      *pipeline.Resampler
	mono    []float32 // from the ring
	out     []float32 // resampled
	clean   *cleaner  // nil: nothing asked
	cleaned []float32
	carry   []float32 // the unread part of out (or cleaned)
	// cleanAfter: the cleaner runs on the resampled stream (the capture rate is above
	// OutputRate). Its sample indexes are then the resampled stream's: outputs of the stream the
	// resampler began at capture index k count from outFrom (k·ratio, rounded: outShift more),
	// and fedTo is the capture index the next input must have to continue that stream.
	cleanAfter     bool
	fedTo, outFrom int64
	outGiven       int64   // outputs of that stream handed to the cleaner
	outShift       float64 // outFrom − k·ratio, under a sample
	// refWaitFrom is when Read began waiting for the speaker's record of what it played (zero:
	// not waiting).
	refWaitFrom time.Time
	timer       *time.Timer
	delivered   int64

	// Loss state, under mu.
	mu           sync.Mutex
	lost         bool
	silenceFrom  time.Time
	silenceGiven int64
	silence      int64 // all silence delivered for losses
}

// readPass is the most audio Read converts and cleans at a time: a block ReadPatiently waits
// for, or what came while nothing read, is one pass and one call into the echo canceller.
const readPass = time.Second

// readPiece is how much of a pass is taken from the ring at a time where the resampler runs
// before the canceller: the pass is resampled piece by piece into one buffer at OutputRate and
// cleaned at once, so no buffer holds a whole pass at the capture rate (at 48 kHz a second is
// 192 KB; a piece is 19 KB).
const readPiece = 100 * time.Millisecond

// MicStats are the microphone's counters.
type MicStats struct {
	Rate     int   // capture rate, Hz
	Channels int   // captured channels
	Captured int64 // frames the device delivered
	Dropped  int64 // frames dropped because Read fell more than Buffer behind
	Output   int64 // 16 kHz samples Read returned, silence included
	Silence  int64 // 16 kHz samples of silence returned while the device was lost
	Losses   int64 // times the device was lost
	// Wakes counts the times the device's buffers woke the process: one per buffer, or one per
	// block while the reader reads patiently (ReadPatiently).
	Wakes int64
	Clean CleanStats
}

// OpenMicrophone opens the input device cfg names and starts capturing. onState (may be nil)
// is called from a supervising goroutine with (false, err) once when the device is lost and
// (true, nil) when it is back; log (may be nil) gets the same and the retries. The microphone
// runs until Close or until ctx ends. The first open must succeed: a device string that
// matches nothing is an error, not a loss.
func OpenMicrophone(ctx context.Context, cfg MicConfig, onState func(ok bool, err error), log *slog.Logger) (*Microphone, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("open microphone %q: %w", cfg.Device, err)
	}
	if err := paAcquire(); err != nil {
		return nil, fmt.Errorf("open microphone %q: %w", cfg.Device, err)
	}
	m := &Microphone{cfg: cfg, gain: float32(math.Pow(10, cfg.GainDB/20)), wake: newWakeCell()}
	m.link = newLink("microphone", "read", cfg.Device, log, onState)
	m.link.open = m.openStream
	m.link.lost = m.setLost
	m.link.back = m.setBack
	if err := m.link.openStream(); err != nil {
		paRelease()
		m.wake.free()
		return nil, fmt.Errorf("open microphone %q: %w", cfg.Device, err)
	}
	ctx, m.cancel = context.WithCancel(ctx)
	m.done = make(chan struct{})
	go m.link.run(ctx, m.done)
	return m, nil
}

// openStream resolves the device and opens a stream (under paDo). The first call fixes the
// rate, channel count and buffers; later calls (recovery) ask for the same.
func (m *Microphone) openStream(gen int64) (*paStream, string, error) {
	dev, err := findDevice(m.cfg.Device, true)
	if err != nil {
		return nil, "", err
	}
	if m.ring == nil {
		if err := m.setup(dev); err != nil {
			return nil, dev.name, err
		}
	}
	if m.channels > dev.maxIn {
		return nil, dev.name, fmt.Errorf("open stream on %q: it has %d input channels, the microphone uses %d", dev.name, dev.maxIn, m.channels)
	}
	lat := m.cfg.Latency
	if lat == 0 {
		lat = dev.highInLatency
	}
	r, link, rate, ref := m.ring, m.link, m.rate, m.cfg.Clean.Reference
	first := true // a new stream: a new timeline for the echo canceller
	cb := func(in, _ []float32, info bufferInfo) int {
		if link.current(gen) {
			r.writeSilence(info.lost) // lost before this buffer: silence keeps the count true
			if ref != nil {
				r.mark(ref.clock(info.at), rate, info.timeline(first))
			}
			first = false
			if info.woke {
				m.wakes.Add(1)
			}
			r.writeMixed(in)
			link.moved(gen)
		}
		return 0
	}
	s, err := paOpen(dev, true, m.channels, m.cfg.Channel, lat, m.rate, halfLatencyFrames(m.cfg.FramesPerBuffer, lat, m.rate), cb, nil, m.wake, func() { link.finished(gen) })
	if err != nil {
		return nil, dev.name, err
	}
	return s, dev.name, nil
}

// setup fixes the capture format from the first device and allocates the buffers.
func (m *Microphone) setup(dev paDevice) error {
	m.rate = m.cfg.Rate
	if m.rate == 0 {
		m.rate = int(math.Round(dev.rate))
	}
	m.channels = m.cfg.Channels
	if m.channels == 0 {
		m.channels = min(dev.maxIn, 2)
	}
	if m.cfg.Channel >= m.channels {
		return fmt.Errorf("channel %d: %q gives %d channels", m.cfg.Channel, dev.name, m.channels)
	}
	return m.initReader()
}

// defaultCaptureRing is how far the reader may fall behind the device before audio is dropped:
// the agent reads as audio comes and never waits on the network, so a second is a stall far
// beyond any it has. The bridge's ring in front holds a patient block and two buffers
// (inputRingFrames), and the ring is never smaller: the pump moves all of it at once.
const defaultCaptureRing = time.Second

// initReader allocates the ring and the reader's buffers for rate and channels.
func (m *Microphone) initReader() error {
	rs, err := pipeline.NewResampler(m.rate, OutputRate)
	if err != nil {
		return err
	}
	buf := m.cfg.Buffer
	if buf == 0 {
		buf = max(defaultCaptureRing, 2*m.cfg.Latency)
	}
	m.rs = rs
	pass := m.passFrames()
	// The stream's pump moves what the bridge gathered into the ring at once: a patient block
	// and a few buffers (inputRingFrames), which the ring must hold beside nothing else.
	m.ring = newRing(max(int(buf.Seconds()*float64(m.rate)), inputRingFrames(m.rate, 0)), m.channels, m.cfg.Channel, m.gain)
	m.out = make([]float32, 0, rs.OutputLen(pass))
	monoLen := max(1, int(readPiece.Seconds()*float64(m.rate)))
	if m.cfg.Clean.active() {
		m.cleanAfter = m.rate > OutputRate
		c, err := newCleaner(m.cfg.Clean, min(m.rate, OutputRate), m.link.log)
		if err != nil {
			return err
		}
		m.clean = c
		cleanLen := rs.OutputLen(pass)
		if !m.cleanAfter { // cleaned at the capture rate, a pass at once, before resampling
			cleanLen, monoLen = pass, pass
		}
		m.cleaned = make([]float32, 0, cleanLen+c.frame)
		m.fedTo = -1
	}
	m.mono = make([]float32, monoLen)
	m.timer = time.NewTimer(time.Hour)
	m.timer.Stop()
	return nil
}

func (m *Microphone) setLost(since time.Time, err error) {
	m.mu.Lock()
	m.lost, m.silenceFrom, m.silenceGiven = true, since, 0
	m.mu.Unlock()
	m.ring.wake()
}

func (m *Microphone) setBack() {
	m.mu.Lock()
	m.lost = false
	m.mu.Unlock()
}

// Read fills p with 16 kHz mono samples, blocking until at least one is available; see the
// type's notes for what happens while the device is lost. It returns ctx.Err() when ctx ends
// first, and io.EOF once the microphone is closed (what was still buffered is dropped).
func (m *Microphone) Read(ctx context.Context, p []float32) (int, error) {
	return m.read(ctx, p, false)
}

// ReadPatiently is Read for a reader that can wait (agent.PatientSource): it returns once p is
// full, or once it has a block of as much as it converts in one pass (PatientBlock), so that
// the device's buffers wake the reader and the echo canceller once per block rather than
// once each (a block of ten 50 ms buffers: a tenth of the wake-ups). While the device is lost
// it returns what it has, as Read does.
func (m *Microphone) ReadPatiently(ctx context.Context, p []float32) (int, error) {
	return m.read(ctx, p[:min(len(p), m.PatientBlock())], true)
}

// PatientBlock is the most ReadPatiently returns at once: a pass (readPass, whole 10 ms
// frames of the echo canceller's).
func (m *Microphone) PatientBlock() int {
	frame := OutputRate / 100
	return max(frame, int(readPass.Seconds()*OutputRate)/frame*frame)
}

// passFrames is a pass in capture frames.
func (m *Microphone) passFrames() int {
	return max(1, int(readPass.Seconds()*float64(m.rate)))
}

func (m *Microphone) read(ctx context.Context, p []float32, patient bool) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	m.readMu.Lock()
	defer m.readMu.Unlock()
	defer m.wake.set(1) // a plain Read, or anyone else, is woken at every buffer
	n := 0
	for {
		select {
		case <-m.done:
			if n > 0 {
				m.delivered += int64(n)
				return n, nil
			}
			return 0, io.EOF
		default:
		}
		n += m.fill(p[n:])
		if n == len(p) || (n > 0 && !patient) {
			m.delivered += int64(n)
			return n, nil
		}
		now := time.Now()
		k, wait := m.fillSilence(p[n:], now)
		if k > 0 || (n > 0 && m.isLost()) {
			n += k
			m.delivered += int64(n)
			return n, nil
		}
		// Frames waiting for the speaker's record of what it played (its pump is late): wait
		// for it, but not for ever (a stuck speaker is muted over, see cleaner.abandon).
		var played <-chan struct{}
		if m.clean != nil {
			if ch, ok := m.clean.waiting(); ok {
				if m.refWaitFrom.IsZero() {
					m.refWaitFrom = now
					m.clean.stats.Waits++
				}
				if left := refPatience - now.Sub(m.refWaitFrom); left > 0 {
					played = ch
					// While the device delivers, its next buffer wakes Read within tens of
					// milliseconds (and a device that stops is declared lost, which wakes it
					// too): a timer of its own, reset at every wait, would only leave the
					// runtime stale timers to wake up for.
					if !m.link.deliveredWithin(now, refPatience/4) && (wait == 0 || left < wait) {
						wait = left
					}
				} else {
					m.clean.abandon()
					m.endRefWait(now)
					continue
				}
			} else {
				m.endRefWait(now)
			}
		}
		// Sleep until the device delivers (the callback, or a loss, wakes the ring), the
		// speaker records more, or, while the device is lost, until the next block of silence
		// is due. A patient reader's callback lets the rest of its block gather first.
		m.wake.set(m.gather(len(p)-n, patient && played == nil))
		var due <-chan time.Time
		if wait > 0 {
			m.timer.Reset(wait)
			due = m.timer.C
		}
		select {
		case <-ctx.Done():
			m.timer.Stop()
			if n > 0 {
				m.delivered += int64(n)
				return n, nil
			}
			return 0, ctx.Err()
		case <-m.done:
		case <-m.ring.notify:
		case <-played:
		case <-due:
		}
		m.timer.Stop()
	}
}

// gather is how many device frames the stream's callback may let gather before it wakes the
// pump, for a reader that still wants need samples: all of them when it is patient (the
// capture has run through the resampler and the canceller up to here, so need samples take
// need·rate/OutputRate frames more), one buffer otherwise.
func (m *Microphone) gather(need int, patient bool) int64 {
	if !patient || need <= 0 {
		return 1
	}
	return max(1, int64(math.Ceil(float64(need)*float64(m.rate)/OutputRate)))
}

// isLost reports whether the device is lost (its silence stands in).
func (m *Microphone) isLost() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lost
}

// endRefWait notes that Read no longer waits for the speaker's record (now: zero for the
// current time, read only when it was waiting).
func (m *Microphone) endRefWait(now time.Time) {
	if m.refWaitFrom.IsZero() {
		return
	}
	if now.IsZero() {
		now = time.Now()
	}
	m.clean.stats.Waited += now.Sub(m.refWaitFrom)
	m.refWaitFrom = time.Time{}
}

// refPatience is how long the microphone waits for the speaker's record of what it played
// before muting the frames that need it: far beyond a late pump (milliseconds), well within
// what the capture ring holds.
const refPatience = 500 * time.Millisecond

// fill converts what the ring holds and returns how many samples it put in p. It takes all
// the ring holds (a device buffer, or a patient read's block), up to a pass, at once, so that
// the echo canceller runs once per device buffer or block; what p has no room for waits in
// carry. Called with readMu held.
func (m *Microphone) fill(p []float32) int {
	n := copy(p, m.carry)
	m.carry = m.carry[n:]
	for n < len(p) {
		var ready []float32
		var got int
		switch {
		case m.clean == nil:
			got, _, _ = m.ring.readFrom(m.mono)
			ready = m.rs.Process(m.out[:0], m.mono[:got])
			m.out = ready
		case m.cleanAfter:
			ready, got = m.resampleThenClean()
		default:
			var start int64
			var timing streamTiming
			got, start, timing = m.ring.readFrom(m.mono)
			m.cleaned = m.clean.process(m.cleaned[:0], m.mono[:got], start, timing)
			m.out = m.rs.Process(m.out[:0], m.cleaned)
			ready = m.out
		}
		if m.clean != nil && len(ready) > 0 {
			m.endRefWait(time.Time{})
		}
		if len(ready) == 0 {
			if got == 0 {
				break
			}
			continue // the resampler's delay or the speaker's record holds it back: look again
		}
		k := copy(p[n:], ready)
		n += k
		m.carry = ready[k:]
	}
	return n
}

// resampleThenClean takes up to a pass from the ring, a piece at a time, resamples it and
// cleans the result at OutputRate in one call, giving the cleaner the resampled stream's
// sample indexes and timing; got is how many capture frames it took. A gap in the capture (the
// reader fell a ring behind) ends the resampled stream there and starts another. The cleaner
// is called even when nothing came: frames it held for the speaker's record may be ready.
func (m *Microphone) resampleThenClean() (ready []float32, got int) {
	ratio := float64(OutputRate) / float64(m.rate)
	m.cleaned = m.cleaned[:0]
	m.out = m.out[:0]
	var timing streamTiming
	for len(m.out)+m.rs.OutputLen(len(m.mono)) <= cap(m.out) {
		n, start, t := m.ring.readFrom(m.mono)
		timing = t
		if n == 0 {
			break
		}
		got += n
		if start != m.fedTo {
			if len(m.out) > 0 {
				m.cleanOut(timing, ratio) // what the old stream resampled in this pass, up to the gap
			}
			if m.fedTo >= 0 {
				m.out = m.rs.Flush(m.out)
				m.cleanOut(timing, ratio)
			}
			m.fedTo, m.outGiven = start, 0
			m.outFrom = int64(math.Round(float64(start) * ratio))
			m.outShift = float64(m.outFrom) - float64(start)*ratio
		}
		m.out = m.rs.Process(m.out, m.mono[:n])
		m.fedTo += int64(n)
	}
	m.cleanOut(timing, ratio)
	return m.cleaned, got
}

// cleanOut cleans what out holds of the current resampled stream (if anything: frames the
// cleaner held for the speaker's record may be ready all the same) and empties it.
func (m *Microphone) cleanOut(timing streamTiming, ratio float64) {
	m.cleaned = m.clean.process(m.cleaned, m.out, m.outFrom+m.outGiven, m.cleanTiming(timing, ratio))
	m.outGiven += int64(len(m.out))
	m.out = m.out[:0]
}

// cleanTiming is the capture's timing in the resampled stream's samples (see Resampler: output
// j of a stream stands for the time of its first input plus j/OutputRate).
func (m *Microphone) cleanTiming(t streamTiming, ratio float64) streamTiming {
	t.base = t.base*ratio + m.outShift
	t.recent = t.recent*ratio + m.outShift
	return t
}

// lostBlock is how much silence Read hands out at a time while the device is lost: one
// wake-up per block, like a device's buffer period.
const lostBlock = OutputRate / 10

// fillSilence writes the silence due while the device is lost and returns how many samples,
// or 0 and how long to wait for the next block (0: nothing to wait for, the device is there).
func (m *Microphone) fillSilence(p []float32, now time.Time) (int, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.lost {
		return 0, 0
	}
	clock := devices.NewSampleClock(m.silenceFrom, OutputRate, 1)
	due := clock.Due(now) - m.silenceGiven
	if due < min(lostBlock, int64(len(p))) {
		return 0, max(clock.At(m.silenceGiven+min(lostBlock, int64(len(p)))).Sub(now), time.Millisecond)
	}
	n := int(min(due, int64(len(p))))
	clear(p[:n])
	m.silenceGiven += int64(n)
	m.silence += int64(n)
	return n, 0
}

// Rate is the capture rate in Hz.
func (m *Microphone) Rate() int { return m.rate }

// Name is the device's name as PortAudio gives it.
func (m *Microphone) Name() string { return m.link.deviceName() }

// Stats returns the microphone's counters.
func (m *Microphone) Stats() MicStats {
	m.readMu.Lock()
	out := m.delivered
	var clean CleanStats
	if m.clean != nil {
		clean = m.clean.counters()
	}
	m.readMu.Unlock()
	written, dropped := m.ring.counts()
	m.mu.Lock()
	defer m.mu.Unlock()
	return MicStats{Rate: m.rate, Channels: m.channels, Captured: written, Dropped: dropped,
		Output: out, Silence: m.silence, Losses: m.link.losses.Load(), Wakes: m.wakes.Load(), Clean: clean}
}

// Close stops capturing and releases the device; Read then returns io.EOF. It waits for the
// stream to close, at most a few seconds even when the device hangs. Closing twice is fine.
func (m *Microphone) Close() error {
	var err error
	m.once.Do(func() {
		m.cancel()
		select {
		case <-m.done:
		case <-time.After(closeTimeout + time.Second):
			err = errors.New("close microphone: the stream did not stop in time")
		}
		m.ring.wake()
		m.readMu.Lock() // Read sees done and returns; the cleaner's C state can go
		if err == nil { // no stream is left to read the cell (an abandoned one may: it stays)
			m.wake.free()
			m.wake = wakeCell{}
		}
		if m.clean != nil {
			st := m.clean.counters()
			m.link.log.Debug("audio: echo canceller at close", "frames", st.Frames, "muted", st.MutedFrames,
				"slips", st.Slips, "waits", st.Waits, "waited", st.Waited, "unknown", st.Unknown, "rested", st.Rested, "doubts", st.Doubts)
			m.clean.close()
		}
		m.readMu.Unlock()
	})
	return err
}

// ring is the capture buffer between the stream callback and Read: the capture mixed down to
// one channel as it is written (a stereo device's ring is half the size it would be), a fixed
// size, the oldest samples overwritten (and counted) when the reader falls behind.
type ring struct {
	mu      sync.Mutex
	buf     []float32
	r, n    int // read index and fill
	written int64
	dropped int64
	notify  chan struct{} // a token when there is something new
	fit     clockFit      // capture index at clock time 0 (when the echo canceller wants it)
	zeros   []float32     // a buffer of silence for writeSilence

	// The writer's: the capture's layout, and a buffer for the mixdown.
	channels, channel int
	gain              float32
	mixed             []float32
}

// newRing makes a ring of frames samples for a capture of channels channels, of which write
// keeps channel (or their mix: pipeline.Mixdown) at gain.
func newRing(frames, channels, channel int, gain float32) *ring {
	return &ring{buf: make([]float32, frames), notify: make(chan struct{}, 1),
		channels: max(channels, 1), channel: channel, gain: gain}
}

// writeMixed appends what the stream's bridge made of the device's frames, one sample each
// (their sum, or the channel kept: bridge.c): with the gain, and the sum divided by the
// channels, they are the samples pipeline.Float32ToMono makes of the same frames, to the bit
// (TestInputBridgeMixesAsTheReader). One goroutine writes; it does not allocate once its
// buffer has grown to the device's buffer, and holds the lock for the copy only.
func (r *ring) writeMixed(in []float32) {
	g := r.gain
	if r.channel == Mixdown && r.channels > 1 {
		g = r.gain / float32(r.channels) // as pipeline.Float32ToMono scales a mixdown
	}
	mono, err := pipeline.Float32ToMono(r.mixed, in, 1, 0, g)
	if err != nil { // cannot happen: one channel
		return
	}
	r.mixed = mono
	r.append(mono)
}

// append adds mono samples.
func (r *ring) append(in []float32) {
	if len(in) == 0 {
		return
	}
	r.mu.Lock()
	r.written += int64(len(in))
	if len(in) > len(r.buf) {
		r.dropped += int64(len(in) - len(r.buf))
		in = in[len(in)-len(r.buf):]
	}
	if over := r.n + len(in) - len(r.buf); over > 0 {
		r.r = (r.r + over) % len(r.buf)
		r.n -= over
		r.dropped += int64(over)
	}
	w := (r.r + r.n) % len(r.buf)
	k := copy(r.buf[w:], in)
	copy(r.buf, in[k:])
	r.n += len(in)
	r.mu.Unlock()
	r.wake()
}

// writeSilence appends frames of silence: frames the device captured that were lost before
// they reached the ring, so that the capture index stays true.
func (r *ring) writeSilence(frames int) {
	for frames > 0 {
		if r.zeros == nil {
			r.zeros = make([]float32, 1024)
		}
		k := min(frames, len(r.zeros))
		r.append(r.zeros[:k])
		frames -= k
	}
}

// mark stamps the frames written next: the first met the converter at clock time at; ev says
// what became of the stream's timeline before them.
func (r *ring) mark(at float64, rate int, ev timelineEvent) {
	r.mu.Lock()
	r.fit.note(ev)
	r.fit.add(r.written, at, rate)
	r.mu.Unlock()
}

// readFrom moves up to len(dst) samples into dst and returns how many, the capture index of
// the first one moved and the capture timing.
func (r *ring) readFrom(dst []float32) (n int, start int64, timing streamTiming) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start = r.written - int64(r.n)
	timing = r.fit.timing()
	n = min(len(dst), r.n)
	if n == 0 {
		return 0, start, timing
	}
	k := copy(dst[:n], r.buf[r.r:])
	copy(dst[k:n], r.buf)
	r.r = (r.r + n) % len(r.buf)
	r.n -= n
	return n, start, timing
}

// wake lets a waiting Read look again.
func (r *ring) wake() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *ring) counts() (written, dropped int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.written, r.dropped
}
