package audio

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/omnisat/omnisat/pipeline"
	"github.com/omnisat/omnisat/pipeline/aec"
)

// EchoMode is what the microphone does about the speaker's own sound coming back into it.
type EchoMode string

const (
	// EchoNone leaves the microphone signal alone (a headset, or a microphone that cancels the
	// echo itself).
	EchoNone EchoMode = "none"
	// EchoAEC cancels the echo with speexdsp, using what the speaker played as the reference.
	EchoAEC EchoMode = "aec"
	// EchoMute is half duplex: while the speaker plays (plus a hang-over) the microphone
	// delivers silence, the same number of samples.
	EchoMute EchoMode = "mute"
)

// refHistory is how much played audio the reference keeps for the microphone to line up with:
// more than any device buffering plus the canceller's filter.
const refHistory = 2 * time.Second

// EchoReference carries what the speaker played (after its volume, at the speaker's rate) to
// the microphone's echo canceller. Give the same reference to SpeakerConfig.Echo and
// MicConfig.Clean.Reference. Both stream callbacks stamp their buffers with PortAudio's stream
// clock, so the microphone lines each captured sample up with the sample the speaker was
// playing at that moment, by sample counts and converter timestamps rather than by when the
// callbacks happened to run. Safe for concurrent use.
type EchoReference struct {
	epoch time.Time // the stand-in clock when PortAudio gives no timestamps

	mu      sync.Mutex
	rate    int
	buf     []float32
	written int64
	fit     clockFit
}

// NewEchoReference makes an empty reference; the speaker sets its rate when it opens.
func NewEchoReference() *EchoReference { return &EchoReference{epoch: time.Now()} }

// attach sizes the reference for the speaker's rate (the first open only).
func (r *EchoReference) attach(rate int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rate == 0 {
		r.rate = rate
		r.buf = make([]float32, int(refHistory.Seconds()*float64(rate)))
	}
}

// clock is the time for a callback: PortAudio's when it gave one, else our own.
func (r *EchoReference) clock(at float64) float64 {
	if at != 0 {
		return at
	}
	return time.Since(r.epoch).Seconds()
}

// write appends played samples; at is when the first of them met the converter (0: unknown).
// It does not allocate; the lock is held for the copy only.
func (r *EchoReference) write(played []float32, at float64) {
	r.writeStamped(played, r.clock(at), true)
}

// writeMore appends samples that continue the last write.
func (r *EchoReference) writeMore(played []float32) { r.writeStamped(played, 0, false) }

func (r *EchoReference) writeStamped(played []float32, at float64, stamped bool) {
	r.mu.Lock()
	if r.buf == nil {
		r.mu.Unlock()
		return
	}
	if stamped {
		r.fit.add(r.written, at, r.rate)
	}
	for len(played) > 0 {
		w := int(r.written % int64(len(r.buf)))
		k := copy(r.buf[w:], played)
		played = played[k:]
		r.written += int64(k)
	}
	r.mu.Unlock()
}

// read copies the played samples from index from on into dst; what is not (or no longer)
// there reads as silence.
func (r *EchoReference) read(dst []float32, from int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	oldest := r.written - int64(len(r.buf))
	for i := range dst {
		j := from + int64(i)
		if j < 0 || j < oldest || j >= r.written {
			dst[i] = 0
			continue
		}
		dst[i] = r.buf[j%int64(len(r.buf))]
	}
}

// timing returns the speaker's rate and its index at clock time 0 (ok=false before the
// speaker has played anything).
func (r *EchoReference) timing() (rate int, base float64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	base, ok = r.fit.base()
	return r.rate, base, ok
}

// clockFit tracks the sample index a stream would have at clock time 0 (index − time·rate at
// each callback) as the median of the last fitWindow callbacks: PulseAudio's timestamps jitter
// by a few milliseconds with one-sided outliers, a stream's first second drifts while it
// settles, and the clocks of two devices drift apart slowly; the median ignores the outliers
// and follows the rest within about a second.
type clockFit struct {
	n    int // callbacks seen
	last [fitWindow]float64
}

const fitWindow = 63

func (f *clockFit) add(index int64, at float64, rate int) {
	f.last[f.n%fitWindow] = float64(index) - at*float64(rate)
	f.n++
}

// base is the median of the recent values; ok is false before the first callback.
func (f *clockFit) base() (float64, bool) {
	k := min(f.n, fitWindow)
	if k == 0 {
		return 0, false
	}
	var v [fitWindow]float64
	copy(v[:], f.last[:k])
	s := v[:k]
	slices.Sort(s)
	return s[k/2], true
}

// CleanConfig is what the microphone does to its signal at the capture rate, before resampling.
type CleanConfig struct {
	// Echo is the echo handling; "" is none.
	Echo EchoMode
	// Reference is what the speaker played; required for aec and mute.
	Reference *EchoReference
	// Delay is echo path delay beyond the two devices' buffers (which the timestamps cover) that
	// the reference is held back by; the canceller's filter covers the rest (0 for most rooms).
	Delay time.Duration
	// MuteHangover is how long the microphone stays silent after the speaker's sound ends (mute).
	MuteHangover time.Duration
	// Processor sets up the canceller and the noise suppression and gain, which run whenever
	// something is asked of them (aec, or Denoise or AGC). Rate and EchoCancel are set by the
	// microphone.
	Processor aec.Config
}

func (c CleanConfig) active() bool {
	return (c.Echo != "" && c.Echo != EchoNone) || c.Processor.Denoise || c.Processor.AGC
}

func (c CleanConfig) validate() error {
	switch c.Echo {
	case "", EchoNone, EchoAEC, EchoMute:
	default:
		return fmt.Errorf("echo mode %q: want aec, mute or none", c.Echo)
	}
	if (c.Echo == EchoAEC || c.Echo == EchoMute) && c.Reference == nil {
		return fmt.Errorf("echo mode %s needs the speaker's reference", c.Echo)
	}
	if c.Delay < 0 || c.Delay > time.Second {
		return fmt.Errorf("echo delay %v: want 0..1s", c.Delay)
	}
	if c.MuteHangover < 0 || c.MuteHangover > 10*time.Second {
		return fmt.Errorf("mute hang-over %v: want 0..10s", c.MuteHangover)
	}
	return nil
}

// cleaner runs on the microphone's reader: it cuts the mono capture into the processor's
// frames, fetches the reference aligned with each, and cancels, mutes or preprocesses.
type cleaner struct {
	cfg     CleanConfig
	micRate int
	frame   int
	proc    *aec.Processor // nil: mute only
	align   *echoAligner   // nil: no reference needed

	acc      []float32 // mono capture not yet a whole frame
	accStart int64     // capture index of acc[0]
	ref      []float32

	hangover int64
	loudTill int64 // capture index until which the speaker counts as playing (mute)
	learned  int64 // capture samples of speaker sound the canceller has learnt from
	learnFor int64 // learnTime in capture samples
	drift    drift
	stats    CleanStats
}

// CleanStats are the cleaner's counters.
type CleanStats struct {
	Frames      int64 // frames processed
	MutedFrames int64 // frames replaced by silence (mute)
	Slips       int64 // times the reference was re-aligned (start, drift, a device reopened)
}

func newCleaner(cfg CleanConfig, micRate int) (*cleaner, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := cfg.Processor
	p.Rate, p.EchoCancel = micRate, cfg.Echo == EchoAEC
	c := &cleaner{cfg: cfg, micRate: micRate}
	if p.EchoCancel || p.Denoise || p.AGC {
		proc, err := aec.New(p)
		if err != nil {
			return nil, err
		}
		c.proc = proc
		c.frame = proc.FrameSize()
	} else {
		c.frame = micRate / 100
	}
	if cfg.Echo == EchoAEC || cfg.Echo == EchoMute {
		c.align = &echoAligner{ref: cfg.Reference, micRate: micRate,
			delay: int64((cfg.Delay - alignLead).Seconds() * float64(micRate)), tolerance: int64(alignTolerance.Seconds() * float64(micRate))}
	}
	c.hangover = int64(cfg.MuteHangover.Seconds() * float64(micRate))
	c.learnFor = int64(learnTime.Seconds() * float64(micRate))
	c.acc = make([]float32, 0, c.frame)
	c.ref = make([]float32, c.frame)
	return c, nil
}

// process appends to dst the cleaned version of mono, whose first sample has capture index
// start, and returns it; a partial frame waits for the next call. micBase is the capture
// stream's index at clock time 0.
func (c *cleaner) process(dst, mono []float32, start int64, micBase float64, micTimed bool) []float32 {
	if len(c.acc) == 0 || c.accStart+int64(len(c.acc)) != start {
		c.acc, c.accStart = c.acc[:0], start // a gap (dropped audio): start a new frame
	}
	for len(mono) > 0 {
		k := min(c.frame-len(c.acc), len(mono))
		c.acc = append(c.acc, mono[:k]...)
		mono = mono[k:]
		if len(c.acc) < c.frame {
			break
		}
		dst = c.frameDone(dst, micBase, micTimed)
		c.accStart += int64(c.frame)
		c.acc = c.acc[:0]
	}
	return dst
}

func (c *cleaner) frameDone(dst []float32, micBase float64, micTimed bool) []float32 {
	c.stats.Frames++
	n := len(dst)
	dst = append(dst, c.acc...)
	frame := dst[n:]
	if c.align != nil {
		if !c.align.fetch(c.ref, c.accStart, micBase, micTimed) {
			clear(c.ref)
		}
	}
	loud := c.align != nil && peak(c.ref) > 1e-4 // -80 dBFS: anything audible
	if c.cfg.Echo == EchoMute && c.muteWhileLoud(frame, loud) {
		return dst
	}
	if c.proc != nil {
		c.proc.Process(frame, frame, c.ref) // cannot fail: the sizes are the processor's
	}
	if c.cfg.Echo == EchoAEC {
		if c.learned >= c.learnFor {
			c.drift.follow(c.proc, c.align, int64(c.frame), c.micRate)
		} else {
			// Until the canceller has heard learnTime of the speaker it has not converged: the
			// echo would pass nearly whole (and start a barge-in), so it is muted meanwhile, as
			// in mute mode.
			if loud {
				c.learned += int64(c.frame)
			}
			c.muteWhileLoud(frame, loud)
		}
	}
	return dst
}

// muteWhileLoud silences the frame while the speaker is audible and for the hang-over after;
// it reports whether it did.
func (c *cleaner) muteWhileLoud(frame []float32, loud bool) bool {
	if loud {
		c.loudTill = c.accStart + int64(c.frame) + c.hangover
	}
	if c.accStart >= c.loudTill {
		return false
	}
	c.stats.MutedFrames++
	clear(frame)
	return true
}

// drift keeps the echo where the canceller learnt it. When the echo slides against the
// reference (the speaker's and microphone's clocks differ, or a resampler in the path adapts
// its rate) by even 25 ppm, the canceller keeps chasing a moving echo path and its ERLE stays
// near 15 dB; so every driftPeriod the peak of its echo path estimate is compared with where it
// was at the start, and the reference is slid along by a fraction of the difference, spread
// over the next period, which matches its rate to the echo's.
type drift struct {
	since  int64   // capture samples since the last look
	origin float64 // where the echo path peaked first (after learning, a slip or a jump)
	last   float64 // where it peaked at the last look
	slips  int64   // the aligner's slips at origin
	have   bool
}

const (
	driftPeriod = 500 * time.Millisecond
	driftGain   = 0.2
	// driftMax is the fastest the reference slides (parts per million): faster is no drift.
	driftMax = 500e-6
)

func (d *drift) follow(proc *aec.Processor, a *echoAligner, frame int64, rate int) {
	period := int64(driftPeriod.Seconds() * float64(rate))
	if d.since += frame; d.since < period {
		return
	}
	d.since = 0
	peakAt, ok := proc.EchoDelay()
	if !ok {
		return
	}
	// A peak that jumped (the canceller re-learning after a slip or a change in the room)
	// is a new origin, not drift: drift moves it by well under a sample per look.
	if !d.have || d.slips != a.slips || math.Abs(peakAt-d.last) > float64(rate)/1000 {
		d.origin, d.last, d.slips, d.have = peakAt, peakAt, a.slips, true
		a.shiftRate = 0
		return
	}
	d.last = peakAt
	a.shiftRate = math.Max(-driftMax, math.Min(driftMax, driftGain*(peakAt-d.origin)/float64(period)))
}

func peak(s []float32) float32 {
	var p float32
	for _, v := range s {
		p = max(p, v, -v)
	}
	return p
}

func (c *cleaner) close() {
	if c.proc != nil {
		c.proc.Close()
	}
}

// The aligner hands the canceller the reference alignLead ahead of the computed alignment,
// so that timing errors up to alignTolerance either way keep the echo inside the canceller's
// (causal) filter; it re-aligns only beyond alignTolerance, because every jump makes the
// canceller re-learn the echo path. The converter timestamps of PulseAudio's ALSA plugin
// jitter by a few milliseconds.
const (
	// learnTime is how much speaker sound the canceller hears before its output is trusted.
	learnTime      = 2 * time.Second
	alignLead      = 15 * time.Millisecond
	alignTolerance = 10 * time.Millisecond
)

// echoAligner delivers the speaker's output lined up with the capture: for capture index k, the
// sample the speaker's converter played at the moment the microphone's converter took sample k
// (held back by the configured delay), resampled to the capture rate. It reads the reference as
// one continuous stream and re-aligns (a slip) only when the timing says it is off by more than
// tolerance: at the start, when the two clocks drift apart, and after a device was reopened.
type echoAligner struct {
	ref       *EchoReference
	micRate   int
	delay     int64
	tolerance int64

	spkRate int
	rs      *pipeline.Resampler // speaker → capture rate; nil when they are equal
	synced  bool
	next    int64 // capture-rate reference index that pending[0] stands for
	pos     int64 // next speaker-rate index to read
	raw     []float32
	pending []float32 // the reference stream from index next−margin on
	slips   int64
	// shift is how many capture samples the reference is held back by beyond the timing, and
	// shiftRate how fast it changes: the echo drifting against the reference (see drift).
	shift, shiftRate float64
}

// fetch fills dst with the reference for capture samples [k, k+len(dst)); false when there is
// no timing yet (nothing played, or no capture timestamps).
func (a *echoAligner) fetch(dst []float32, k int64, micBase float64, micTimed bool) bool {
	spkRate, spkBase, ok := a.ref.timing()
	if !ok || !micTimed {
		return false
	}
	if a.spkRate == 0 {
		a.spkRate = spkRate
		if spkRate != a.micRate {
			rs, err := pipeline.NewResampler(spkRate, a.micRate)
			if err != nil {
				return false
			}
			a.rs = rs
		}
	}
	ratio := float64(a.micRate) / float64(a.spkRate)
	// The capture sample k was taken at clock time (k − micBase)/micRate; the speaker played
	// index spkBase + that·spkRate then. In capture-rate units:
	want := int64(math.Round(spkBase*ratio+float64(k)-micBase)) - a.delay
	if !a.synced || abs64(want-a.next) > a.tolerance {
		a.synced = true
		a.slips++
		margin := a.micRate / 50
		a.next = want
		a.pos = int64(math.Round(float64(want+int64(margin)) / ratio))
		// pending starts margin samples before next (silence at first), so the drift
		// correction can reach that far either way.
		a.pending = append(a.pending[:0], make([]float32, 2*margin)...)
		a.shift, a.shiftRate = 0, 0
		if a.rs != nil {
			a.rs.Reset()
		}
	}
	margin := a.micRate / 50
	for len(a.pending) < len(dst)+2*margin {
		need := len(dst) + 2*margin - len(a.pending)
		chunk := need
		if a.rs != nil {
			chunk = int(float64(need)/ratio) + 1
		}
		if cap(a.raw) < chunk {
			a.raw = make([]float32, chunk)
		}
		raw := a.raw[:chunk]
		a.ref.read(raw, a.pos)
		a.pos += int64(chunk)
		if a.rs != nil {
			a.pending = a.rs.Process(a.pending, raw)
		} else {
			a.pending = append(a.pending, raw...)
		}
	}
	// The reference for capture sample next+i is the stream at next+i−shift, between
	// samples by linear interpolation; shift follows the drift a little every sample.
	limit := float64(margin - 1)
	for i := range dst {
		sh := math.Max(-limit, math.Min(limit, a.shift+a.shiftRate*float64(i)))
		x := float64(margin+i) - sh
		j := int(math.Floor(x))
		f := float32(x - float64(j))
		dst[i] = (1-f)*a.pending[j] + f*a.pending[j+1]
	}
	a.shift = math.Max(-limit, math.Min(limit, a.shift+a.shiftRate*float64(len(dst))))
	a.pending = append(a.pending[:0], a.pending[len(dst):]...)
	a.next += int64(len(dst))
	return true
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
