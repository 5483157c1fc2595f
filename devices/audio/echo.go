package audio

import (
	"context"
	"fmt"
	"log/slog"
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
// more than the capture ring a reader may fall behind by (defaultCaptureRing), any device
// buffering and the canceller's filter. A frame whose reference is older than that (a
// microphone reader far behind) is muted rather than guessed.
const refHistory = defaultCaptureRing + 500*time.Millisecond

// EchoReference carries what the speaker played (after its volume, at the speaker's rate) to
// the microphone's echo canceller. Give the same reference to SpeakerConfig.Echo and
// MicConfig.Clean.Reference. It holds what the device played sample for sample — including the
// silence played when the speaker's pump was late — so that its index advances exactly with the
// speaker's own sample clock, whatever the timing of the callbacks; PortAudio's converter
// timestamps only place the two streams against each other (see echoAligner). Safe for
// concurrent use.
type EchoReference struct {
	epoch time.Time // the stand-in clock when PortAudio gives no timestamps

	mu      sync.Mutex
	rate    int
	buf     []float32
	written int64
	fit     clockFit
	// stopped: the speaker is lost, so nothing plays beyond written until a new stream writes.
	stopped bool
	// advanced is closed (and replaced) when written grows or the speaker stops, once someone
	// asked to watch it: the microphone waits on it for a speaker whose pump is late.
	advanced chan struct{}
	watched  bool
	// service brings the reference up to what the device has played (Speaker.service), so
	// that the microphone need not wait for the speaker's pump to wake; wanted asks for the
	// next buffer the device plays as soon as it has (Speaker.wantPlayed). nil: no speaker yet.
	service, wanted func()
}

// NewEchoReference makes an empty reference; the speaker sets its rate when it opens.
func NewEchoReference() *EchoReference {
	return &EchoReference{epoch: time.Now(), advanced: make(chan struct{})}
}

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

// play appends what one device buffer played: first lost samples of silence (played with
// nothing recorded), then played, whose first sample met the converter at at (0: unknown).
// ev says what became of the speaker's timeline before played (see timelineEvent). It does not
// allocate unless someone watches; the lock is held for the copy only.
func (r *EchoReference) play(played []float32, at float64, lost int, ev timelineEvent) {
	at = r.clock(at)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.buf == nil {
		return
	}
	if ev == timelineResumed {
		// Nothing played while the speaker rested: the silence between goes in, as much as
		// the timeline before the rest says was due by now, so that the index keeps step with
		// the clock and the alignment held before the rest holds after it.
		lost += r.fit.due(r.written, at, r.rate)
	}
	r.appendSilenceLocked(lost)
	r.fit.note(ev)
	r.fit.add(r.written, at, r.rate)
	r.stopped = false
	r.appendLocked(played, len(played))
}

// playMore appends samples that continue the last play.
func (r *EchoReference) playMore(played []float32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.buf != nil {
		r.appendLocked(played, len(played))
	}
}

// appendSilenceLocked appends n samples of silence: past the ring's length, all of it is.
func (r *EchoReference) appendSilenceLocked(n int) {
	if n > len(r.buf) {
		r.written += int64(n - len(r.buf)) // the ring's length of it clears the whole ring
		n = len(r.buf)
	}
	r.appendLocked(nil, n)
}

// appendLocked appends n samples of s (nil: silence) and wakes a watcher.
func (r *EchoReference) appendLocked(s []float32, n int) {
	if n == 0 {
		return
	}
	for n > 0 {
		w := int(r.written % int64(len(r.buf)))
		k := min(n, len(r.buf)-w)
		if s == nil {
			clear(r.buf[w : w+k])
		} else {
			copy(r.buf[w:w+k], s[:k])
			s = s[k:]
		}
		n -= k
		r.written += int64(k)
	}
	r.wakeLocked()
}

func (r *EchoReference) wakeLocked() {
	if r.watched {
		close(r.advanced)
		r.advanced, r.watched = make(chan struct{}), false
	}
}

// stop says the speaker is lost or rests: until a stream plays again, nothing plays beyond
// what was written, so the microphone need not wait for it.
func (r *EchoReference) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	r.wakeLocked()
}

// setSpeaker sets what refresh runs and what watch asks for (the speaker does, when it opens).
func (r *EchoReference) setSpeaker(service, wanted func()) {
	r.mu.Lock()
	r.service, r.wanted = service, wanted
	r.mu.Unlock()
}

// refresh brings the reference up to what the device has played by now, if a speaker is
// attached. Called without r.mu held: the speaker writes the reference.
func (r *EchoReference) refresh() {
	r.mu.Lock()
	f := r.service
	r.mu.Unlock()
	if f != nil {
		f()
	}
}

// watch returns a channel that is closed when more has been played (or the speaker stopped),
// and asks the speaker for what it plays next as soon as it has played it.
func (r *EchoReference) watch() <-chan struct{} {
	r.mu.Lock()
	r.watched = true
	ch, wanted := r.advanced, r.wanted
	r.mu.Unlock()
	if wanted != nil {
		wanted()
	}
	return ch
}

// refState is whether a stretch of the reference can be known.
type refState int

const (
	refReady   refState = iota // all of it: played, or nothing was playing
	refPending                 // not all played yet (the speaker's pump is late): wait for it
	refGone                    // partly overwritten already: unknown
)

// read copies the played samples from index from on into dst. Before the speaker's first
// sample and beyond the end of a stopped speaker it is silence (nothing played); when some of
// it is not played yet, it copies nothing and says refPending.
func (r *EchoReference) read(dst []float32, from int64) refState {
	r.mu.Lock()
	defer r.mu.Unlock()
	if from+int64(len(dst)) > r.written && !r.stopped {
		return refPending
	}
	oldest := r.written - int64(len(r.buf))
	state := refReady
	// What lies outside the stream, and what the ring no longer holds, is zeros (the latter
	// gone); the rest is copied from the ring, in at most two stretches.
	end := from + int64(len(dst))
	if max(from, 0) < min(end, r.written, oldest) {
		state = refGone
	}
	lo, hi := max(from, oldest, 0), min(end, r.written)
	if lo >= hi {
		lo, hi = from, from
	}
	clear(dst[:lo-from])
	for k := lo; k < hi; {
		k += int64(copy(dst[k-from:hi-from], r.buf[k%int64(len(r.buf)):]))
	}
	clear(dst[hi-from:])
	return state
}

// peak is the loudest of the samples [from, from+n) played so far (0 for what is not there).
func (r *EchoReference) peak(from int64, n int) float32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	lo, hi := max(from, r.written-int64(len(r.buf)), 0), min(from+int64(n), r.written)
	if lo >= hi {
		return 0
	}
	// At most two stretches of the ring: to its end, then from its start.
	start, count := int(lo%int64(len(r.buf))), int(hi-lo)
	first := r.buf[start:min(start+count, len(r.buf))]
	return pipeline.PeakAbove(pipeline.PeakAbove(0, first), r.buf[:count-len(first)])
}

// timing returns the speaker's rate and the timing of its current timeline.
func (r *EchoReference) timing() (int, streamTiming) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rate, r.fit.timing()
}

// streamTiming places a stream's sample index on PortAudio's clock: index base at time 0 (and
// so index base + t·rate at time t). era counts the stream's timelines: it changes when a new
// stream opens.
type streamTiming struct {
	base float64
	era  int64
	// resumes counts the stream's rests within the era (timelineResumed): each is a timeline
	// carried over by the clock, which the canceller verifies.
	resumes int64
	ok      bool // false before the first callback of the era
	// firm: measured over enough callbacks since the era began or the host's last xrun for a
	// late callback or two not to decide the median.
	firm bool
	// recent is the median of the latest hintWindow values alone: quick to show a step, and
	// as quick to be disturbed; a hint, never a reason to re-align.
	recent float64
}

// timelineEvent is what a device buffer says about its stream's timeline.
type timelineEvent int

const (
	timelineGoesOn timelineEvent = iota
	// timelineNew: a new stream (the first open or a reopened device): nothing measured
	// before says anything about it, so the echo is aligned afresh.
	timelineNew
	// timelineXrun: the host reported an xrun. It may have moved the timeline by samples
	// nobody counted — or not (PulseAudio's plugin reports them while its own stream plays
	// on): the timing is measured afresh, and only a measured move is acted on, as evidence
	// (see echoAligner).
	timelineXrun
	// timelineResumed: a stream opened again after the speaker rested (see
	// SpeakerConfig.RestAfter): the same device, so the same echo path. The silence of the
	// rest is counted in by the clock, and the timing is measured afresh, as after an xrun:
	// only a measured move is acted on.
	timelineResumed
)

// clockFit tracks the sample index a stream would have at clock time 0 (index − time·rate at
// each callback) as the median of the last fitWindow callbacks: PulseAudio's timestamps jitter
// by a few milliseconds with one-sided outliers, which the median ignores, and a step (a stream
// restarted, or the timestamps themselves shifted by a late callback) shows within about
// eight callbacks, so that a dispute with the held alignment (see echoAligner) is raised before
// much echo can pass.
type clockFit struct {
	n       int // callbacks seen in this era
	era     int64
	resumes int64
	last    [fitWindow]float64
}

const fitWindow = 15

func (f *clockFit) add(index int64, at float64, rate int) {
	f.last[f.n%fitWindow] = float64(index) - at*float64(rate)
	f.n++
}

// fitFirm is how many callbacks make a median firm (more than half the window).
const fitFirm = fitWindow/2 + 1

// note starts measuring afresh after a new stream (a new era) or an xrun (the same era).
func (f *clockFit) note(ev timelineEvent) {
	switch ev {
	case timelineNew:
		f.n, f.era = 0, f.era+1
	case timelineXrun:
		f.n = 0
	case timelineResumed:
		f.n = 0
		f.resumes++
	}
}

// due is how many samples beyond written the timeline measured so far puts at clock time at
// (0 when it has measured nothing, or puts at no later).
func (f *clockFit) due(written int64, at float64, rate int) int {
	t := f.timing()
	if !t.ok {
		return 0
	}
	return int(max(0, math.Round(t.base+at*float64(rate))-float64(written)))
}

// timing is the median of the recent values of this era.
func (f *clockFit) timing() streamTiming {
	k := min(f.n, fitWindow)
	if k == 0 {
		return streamTiming{era: f.era, resumes: f.resumes}
	}
	var v [fitWindow]float64
	copy(v[:], f.last[:k])
	s := v[:k]
	slices.Sort(s)
	t := streamTiming{base: s[k/2], era: f.era, resumes: f.resumes, ok: true, firm: f.n >= fitFirm, recent: s[k/2]}
	if k >= hintWindow {
		var r [hintWindow]float64
		for i := range r {
			r[i] = f.last[(f.n-1-i)%fitWindow]
		}
		slices.Sort(r[:])
		t.recent = r[hintWindow/2]
	}
	return t
}

// hintWindow is how many of the latest callbacks give the first hint of a move: a step shows
// after two of them, a single late callback does not.
const hintWindow = 3

// CleanConfig is what the microphone does to its signal: at 16 kHz after resampling, or at the
// capture rate when that is lower (see MicConfig.Clean).
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
// frames, fetches the reference aligned with each, and cancels, mutes or preprocesses a whole
// device buffer of frames in one call. It never guesses the reference: frames whose reference
// the speaker has not recorded yet wait for it (see waiting), and a stretch that can no longer
// be known is muted.
//
// The alignment is held in sample counts once made (echoAligner); when the timestamps then say
// it moved, the canceller is the judge: if it still cancels, the timestamps were disturbed (a
// late callback) and the alignment is kept; if it does not, the reference is re-aligned. Either
// way, until the matter is settled, and while the canceller learns after any re-alignment, the
// microphone is muted while the speaker is audible (by the old alignment or the new), so the
// echo never reaches the barge-in detector or the server; the user is muted only while the
// model talks, and only until the canceller shows it cancels.
type cleaner struct {
	cfg     CleanConfig
	log     *slog.Logger
	micRate int
	frame   int
	proc    *aec.Processor // nil: mute only
	align   *echoAligner   // nil: no reference needed

	acc      []float32 // mono capture not yet cleaned: whole frames waiting for their reference, then a partial one
	accStart int64     // capture index of acc[0]
	ref      []float32 // the reference for acc's whole frames
	frames   []frameInfo
	giveUp   bool // the speaker's record is overdue: frames still without a reference are muted

	hangover int64
	loudTill int64 // capture index until which the speaker counts as playing (mute)
	heard    bool  // the reference was audible since the last alignment: a re-alignment now costs learning
	learned  int64 // capture samples of speaker sound the canceller has learnt from since the last alignment or doubt
	learnFor int64 // learnTime in capture samples
	settled  bool  // the canceller is trusted: it measurably cancelled, and has not stopped since
	doubting bool  // learning again because the canceller stopped cancelling (not because the alignment moved)
	// relearns counts the times in a row the canceller was started afresh because it did not
	// come to cancel; each doubles how long it is given next (see judge).
	relearns int
	suspect  bool // the timestamps say the alignment moved; the canceller has not judged it yet
	// suspectFor counts the capture samples of speaker sound since the dispute began.
	suspectFor int64
	erle       erleMeter
	talk       talkDetector
	drift      drift
	stats      CleanStats
}

// frameInfo is what the cleaner knows of one frame before it is processed.
type frameInfo struct {
	loud    bool    // the speaker is audible in its reference (as aligned)
	loudAlt bool    // ... or by the timestamps' alignment, while the two disagree
	unknown bool    // its reference could not be had: it is muted
	micE    float64 // its energy as captured
	refE    float64 // its reference's energy
}

// CleanStats are the cleaner's counters.
type CleanStats struct {
	Frames      int64         // frames processed
	MutedFrames int64         // frames replaced by silence: mute mode, learning, a disputed alignment, an unknown reference
	Slips       int64         // times the reference was (re-)aligned: the start, a stream restarted, an echo that moved
	Kept        int64         // times the timestamps moved but the canceller showed the echo had not: alignment kept
	Waits       int64         // times the microphone waited for the speaker's record of what it played
	Waited      time.Duration // how long it waited in all
	Unknown     int64         // frames whose reference never came or was overwritten (muted)
	Wary        int64         // frames protected because the latest timestamps hinted at a move
	Rested      int64         // frames the canceller was left out of: the speaker silent for its filter's length and 2 s (pipeline/aec)
	Doubts      int64         // times the canceller stopped cancelling with the timestamps saying the echo had not moved
}

func newCleaner(cfg CleanConfig, micRate int, log *slog.Logger) (*cleaner, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := cfg.Processor
	p.Rate, p.EchoCancel = micRate, cfg.Echo == EchoAEC
	c := &cleaner{cfg: cfg, log: log, micRate: micRate}
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
		c.align = newEchoAligner(cfg.Reference, micRate, cfg.Delay)
	}
	c.hangover = int64(cfg.MuteHangover.Seconds() * float64(micRate))
	c.learnFor = int64(learnTime.Seconds() * float64(micRate))
	return c, nil
}

// process appends to dst the cleaned version of mono, whose first sample has capture index
// start (mic is the capture's timing), and returns it. Whole frames are cleaned as soon as
// their reference is there; the rest waits in the cleaner for the next call (mono may be empty:
// the reference came).
func (c *cleaner) process(dst, mono []float32, start int64, mic streamTiming) []float32 {
	if c.align != nil {
		c.align.ref.refresh() // what the speaker played up to now, without waiting for its pump
	}
	if len(mono) > 0 {
		if c.accStart+int64(len(c.acc)) != start {
			// A gap (the reader fell behind the device's buffer): what waits cannot wait for
			// more; a partial frame is dropped.
			dst = c.run(dst, mic, true)
			c.acc, c.accStart = c.acc[:0], start
		}
		c.acc = append(c.acc, mono...)
	}
	return c.run(dst, mic, c.giveUp)
}

// waiting reports whether whole frames wait for the speaker's record of what it played, and a
// channel closed when more has been recorded.
func (c *cleaner) waiting() (<-chan struct{}, bool) {
	if c.align == nil || len(c.acc) < c.frame {
		return nil, false
	}
	return c.align.ref.watch(), true
}

// abandon stops waiting: frames whose reference is still not there are muted (the speaker's
// pump is stuck; the device supervision will find out why).
func (c *cleaner) abandon() { c.giveUp = true }

// run cleans the whole frames of acc whose reference can be had (all of them if force).
func (c *cleaner) run(dst []float32, mic streamTiming, force bool) []float32 {
	f := c.frame
	whole := len(c.acc) / f
	if whole == 0 {
		return dst
	}
	if cap(c.ref) < whole*f {
		c.ref = make([]float32, whole*f)
		c.frames = make([]frameInfo, whole)
	}
	ref, info := c.ref[:whole*f], c.frames[:whole]
	aligned := false
	if c.align != nil {
		aligned = c.judge(mic)
	}
	n := whole
	for i := range whole {
		r, k := ref[i*f:(i+1)*f], c.accStart+int64(i*f)
		st := refReady
		if aligned {
			st = c.align.fetch(r, k)
		} else {
			clear(r)
		}
		if st == refPending && !force {
			n = i
			break
		}
		info[i] = frameInfo{unknown: st != refReady, micE: energy(c.acc[i*f : (i+1)*f])}
		if st != refReady {
			clear(r)
			continue
		}
		info[i].refE = energy(r)
		info[i].loud = aligned && pipeline.PeakAbove(0, r) > audible
		info[i].loudAlt = aligned && c.align.disputed() && c.align.altPeak(k, f) > audible
	}
	if n == 0 {
		if force {
			c.giveUp = false
		}
		return dst
	}
	if force || n == whole {
		c.giveUp = false
	}
	at := len(dst)
	dst = append(dst, c.acc[:n*f]...)
	out := dst[at:]
	if c.proc != nil {
		if c.cfg.Echo == EchoAEC && c.drift.dueWithin(int64(n*f), c.micRate) {
			c.proc.WantEchoDelay() // read on the canceller's thread: no call into C from Go
		}
		c.proc.Process(out, out, ref[:n*f]) // cannot fail: whole frames, the sizes match
	}
	for i := range n {
		c.frameDone(out[i*f:(i+1)*f], info[i], c.accStart+int64(i*f))
	}
	c.acc = append(c.acc[:0], c.acc[n*f:]...)
	c.accStart += int64(n * f)
	return dst
}

// audible is the reference level above which the speaker counts as playing: -80 dBFS.
const audible = 1e-4

// frameDone decides about one processed frame: the learning mute, protection while the
// alignment is disputed, mute mode, and the canceller's drift.
func (c *cleaner) frameDone(frame []float32, fi frameInfo, k int64) {
	c.stats.Frames++
	n := int64(c.frame)
	if fi.unknown {
		c.stats.Unknown++
		c.mute(frame, true, k)
		return
	}
	loud := fi.loud || fi.loudAlt
	if fi.loud {
		c.heard = true
	}
	switch c.cfg.Echo {
	case EchoMute:
		c.muteWhileLoud(frame, loud, k)
	case EchoAEC:
		outE := energy(frame)
		near, echoOnly := c.talk.frame(fi, outE, c.settled && !c.suspect, n, c.micRate)
		if fi.loud && echoOnly {
			echo, known := c.talk.echo(fi.refE, c.micRate)
			c.erle.add(fi.micE, outE, n, c.micRate)
			if known {
				c.erle.expect(echo, n)
			}
		} else {
			// The user's voice says nothing about how well the echo is cancelled.
			c.erle.quiet(n, c.micRate)
		}
		wary := c.align.hinted && !c.suspect
		switch {
		case c.doubting && !echoOnly || near && (!c.settled || c.suspect || wary):
			// The user talks over the model, louder than its echo can be: let them through (the
			// barge-in) rather than mute them until the canceller has judged or learnt. While
			// the canceller is doubted, what is 3 dB over the echo passes as well: the alignment
			// did not move, so the room's loss predicts the echo well, and the doubt may have
			// been the user all along. (After a re-alignment it may not predict it well enough,
			// and 3 dB let the echo through on the virtual card: there only 6 dB passes.)
			if fi.loud {
				c.learned += n
				c.suspectFor += n
			}
		case !c.settled:
			// Until the canceller measurably cancels the echo would pass and start a barge-in:
			// the microphone is muted while the speaker plays, as in mute mode.
			if fi.loud {
				c.learned += n
			}
			if c.trusts() {
				c.settled, c.relearns, c.doubting = true, 0, false
				c.log.Debug("audio: the echo canceller cancels", "erle_db", math.Round(c.erle.db()),
					"after_ms", c.learned*1000/int64(c.micRate))
			}
			c.muteWhileLoud(frame, loud, k)
		case c.suspect:
			if fi.loud {
				c.suspectFor += n
			}
			c.muteWhileLoud(frame, loud, k)
		case c.erle.enough(c.micRate) && c.erle.db() < cancelsDB && c.erle.onlyEcho(c.micRate):
			// The canceller stopped cancelling while the timestamps say the echo did not move,
			// and the microphone holds no more than the echo the room's loss predicts (not the
			// user talking at the echo's level; while that loss is not known, no doubt): the
			// room's own delay changed (a sound server in the path raised its latency) or the
			// filter went astray. It learns again, protected as at the start, without forgetting
			// what it knew: a speaker that only moved needs an adjustment, and a doubt that was
			// the user after all costs nothing learnt.
			c.settled, c.learned, c.doubting = false, 0, true
			c.stats.Doubts++
			level := slog.LevelDebug
			if c.stats.Doubts&(c.stats.Doubts-1) == 0 { // the 1st, 2nd, 4th, 8th...: a room that keeps doing it does not flood the log
				level = slog.LevelInfo
			}
			c.log.Log(context.Background(), level, "audio: the echo canceller no longer cancels; muted while the speaker plays until it does again",
				"erle_db", math.Round(c.erle.db()), "doubts", c.stats.Doubts)
			c.muteWhileLoud(frame, loud, k)
		case wary:
			// The latest timestamps hint at a move the firm ones do not show yet: the echo may
			// pass from now until they do; protect meanwhile, without judging anything.
			c.stats.Wary++
			c.muteWhileLoud(frame, loud, k)
			c.drift.follow(c.proc, c.align, n, c.micRate)
		default:
			c.drift.follow(c.proc, c.align, n, c.micRate)
		}
	}
}

// trusts says whether the canceller, learning, has shown that it cancels: by convergedDB after
// a quarter of learnTime of speaker sound, or after learnTime by trustDB or an output too quiet
// to be taken for anybody (quietDBFS: a microphone that does not hear the speaker, as with
// headphones, has no echo to take down).
func (c *cleaner) trusts() bool {
	if !c.erle.enough(c.micRate) || c.learned < c.learnFor/4 {
		return false
	}
	db := c.erle.db()
	return db >= convergedDB || (c.learned >= c.learnFor && (db >= trustDB || c.erle.outDBFS() <= quietDBFS))
}

// muteWhileLoud silences the frame while the speaker is audible and for the hang-over after.
func (c *cleaner) muteWhileLoud(frame []float32, loud bool, k int64) {
	if loud {
		c.loudTill = k + int64(c.frame) + c.hangover
	}
	c.mute(frame, k < c.loudTill, k)
}

func (c *cleaner) mute(frame []float32, on bool, k int64) {
	if on {
		c.loudTill = max(c.loudTill, k+int64(c.frame))
		c.stats.MutedFrames++
		clear(frame)
	}
}

// The canceller's verdict on a disputed alignment: it cancels (the echo is where it was) or it
// does not (the echo moved), measured as ERLE over the last half second of speaker sound.
const (
	convergedDB = 20 // learning is over sooner when the canceller reaches this
	trustDB     = 15 // ... and is over after learnTime only at this or better
	cancelsDB   = 10 // below this, the canceller does not cancel: the echo moved, or its filter went astray
	// quietDBFS: what the canceller lets through is this quiet or quieter, 15 dB under the
	// barge-in detector's default level: nothing there to protect anybody from.
	quietDBFS = -50
)

// judge brings the alignment up to date with the timestamps before a buffer is processed and
// settles a dispute between them and the held alignment; false while there is no alignment.
func (c *cleaner) judge(mic streamTiming) bool {
	a := c.align
	ok, restarted, resumed := a.look(mic)
	if resumed {
		c.verifyAfterRest()
	}
	switch {
	case !ok:
		return false
	case restarted:
		// The first alignment, or a device was reopened: a new origin.
		c.newOrigin()
		if a.slips > 1 {
			c.log.Info("audio: echo reference re-aligned: a device stream was reopened", "slips", a.slips)
		}
		return true
	case c.cfg.Echo == EchoAEC && !c.settled && c.learned >= c.learnFor<<(1+c.relearns):
		// Twice learnTime of speaker sound (then four, eight and sixteen times) and the
		// canceller still does not cancel: its filter, or the alignment, is astray. It starts
		// afresh at the timestamps' alignment, whether or not they dispute the held one.
		c.relearns = min(c.relearns+1, 3)
		c.relign(fmt.Sprintf("the canceller did not come to cancel (%.0f dB)", c.erle.db()))
		return true
	case !a.disputed():
		c.suspect = false
		return true
	case c.doubting:
		// The canceller stopped cancelling, and now the timestamps say why: the echo moved.
		c.relign("the canceller stopped cancelling")
		return true
	case !c.heard:
		// Nothing at stake: the speaker was silent since the last alignment (a stream's timing
		// settles during its first second).
		c.log.Debug("audio: echo reference re-aligned while the speaker was silent", "moved_ms", math.Round(a.disagree/float64(c.micRate)*10000)/10)
		a.resync()
		return true
	case c.cfg.Echo != EchoAEC || !c.settled:
		// Mute mode has no judge, and a canceller still learning is no judge yet: both mute
		// while the speaker is audible by either alignment.
		return true
	case !c.suspect:
		// Fresh evidence, gathered from now on while protected: before the dispute the echo
		// may already have moved.
		c.log.Debug("audio: echo timing moved; the canceller judges", "moved_ms", math.Round(a.disagree/float64(c.micRate)*10000)/10)
		c.suspect, c.suspectFor = true, 0
		c.erle.reset()
		return true
	case !c.erle.enough(c.micRate):
		if c.suspectFor >= c.learnFor {
			// No verdict after learnTime of speaker sound (the user talked all along): the
			// timestamps win, and the canceller learns afresh.
			c.relign("no verdict from the canceller")
		}
		return true
	}
	if db := c.erle.db(); db >= cancelsDB {
		c.log.Debug("audio: echo timing moved but the canceller still cancels; alignment kept",
			"moved_ms", math.Round(a.disagree/float64(c.micRate)*10000)/10, "erle_db", math.Round(db))
		a.accept()
		c.stats.Kept++
		c.suspect = false
		return true
	}
	c.relign(fmt.Sprintf("the canceller no longer cancels (%.0f dB)", c.erle.db()))
	return true
}

// verifyAfterRest: the speaker's stream opened again after a rest, its timeline carried over
// by the clock. The echo is where it was to within the timestamps' precision, which on a
// sound server is a few milliseconds: enough to stop a canceller cancelling. A trusted
// canceller learns again from the first frame, protected as at the start (only the user
// clearly over the echo gets through; a doubt's 3 dB let the echo through here), without
// forgetting what it knew, and is trusted again as soon as it shows it cancels: within a
// second of the model's speech where the timestamps are exact (the test rig's), in 2–5 s on
// the virtual card, whose PulseAudio put the echo 0.3–3.7 ms off.
func (c *cleaner) verifyAfterRest() {
	if c.cfg.Echo != EchoAEC || !c.settled {
		return
	}
	c.settled, c.learned, c.doubting = false, 0, false
	c.erle.reset()
	c.log.Debug("audio: the speaker resumed after a rest; the canceller verifies it still cancels")
}

// relign moves the alignment to the timestamps' and starts learning again.
func (c *cleaner) relign(why string) {
	c.log.Info("audio: echo reference re-aligned", "moved_ms", math.Round(c.align.disagree/float64(c.micRate)*10000)/10, "why", why)
	c.align.resync()
	c.newOrigin()
}

// newOrigin forgets what the canceller learnt: the echo is somewhere else in the reference now.
func (c *cleaner) newOrigin() {
	if c.proc != nil && c.heard {
		c.proc.Reset()
	}
	c.heard, c.learned, c.settled, c.suspect, c.doubting = false, 0, false, false, false
	c.erle.reset()
	c.drift = drift{}
}

// stats returns the counters.
func (c *cleaner) counters() CleanStats {
	s := c.stats
	if c.align != nil {
		s.Slips = c.align.slips
	}
	if c.proc != nil {
		s.Rested = c.proc.Skipped()
	}
	return s
}

// erleMeter is the canceller's echo return loss enhancement (what it removed, in dB) over the
// recent frames in which the speaker was audible: energies before and after, summed with a
// half-second memory that fades through silence too, so old evidence does not count.
type erleMeter struct {
	in, out, weight float64 // fading sums; weight counts the audible samples in them
	// echo sums the echo the room's loss predicts for the same frames, over those where it
	// is known (echoWeight samples): a microphone louder than that holds the user too.
	echo, echoWeight float64
}

const erleMemory = 500 * time.Millisecond

func (e *erleMeter) fade(n int64, rate int) {
	d := math.Exp(-float64(n) / (erleMemory.Seconds() * float64(rate)))
	e.in, e.out, e.weight = e.in*d, e.out*d, e.weight*d
	e.echo, e.echoWeight = e.echo*d, e.echoWeight*d
}

// expect adds the predicted echo of the n-sample frame add just counted.
func (e *erleMeter) expect(echo float64, n int64) {
	e.echo, e.echoWeight = e.echo+echo, e.echoWeight+float64(n)
}

// onlyEcho: over the frames counted, the microphone held no more than 1 dB above the echo the
// room's loss predicts (more is the user talking at about the echo's level, which the talk
// detector cannot tell from it); false while that prediction covers too little of them.
func (e *erleMeter) onlyEcho(rate int) bool {
	return e.echoWeight >= 0.2*float64(rate) && e.in <= 1.26*e.echo
}

// add counts an audible frame of n samples: its energy before and after the canceller.
func (e *erleMeter) add(in, out float64, n int64, rate int) {
	e.fade(n, rate)
	e.in, e.out, e.weight = e.in+in, e.out+out, e.weight+float64(n)
}

// quiet lets n samples of silence pass.
func (e *erleMeter) quiet(n int64, rate int) { e.fade(n, rate) }
func (e *erleMeter) reset()                  { *e = erleMeter{} }

// enough: the speaker was audible for a quarter second or more of the last half second.
func (e *erleMeter) enough(rate int) bool { return e.weight >= 0.2*float64(rate) }

// outDBFS is the level of what the canceller let through in the frames counted.
func (e *erleMeter) outDBFS() float64 { return 10 * math.Log10(e.out/max(e.weight, 1)+1e-12) }

func (e *erleMeter) db() float64 { return 10 * math.Log10((e.in+1e-12)/(e.out+1e-12)) }

// talkDetector tells the user's voice from the echo without the canceller (whose output
// holds both): the echo at the microphone is the speaker's sound through the room, some echo
// return loss (ERL) below the reference, whatever the alignment; a microphone much louder than
// that is someone talking. The ERL is learnt from frames the canceller cancelled well (only echo
// there), so it is known after the first convergence and stays across re-alignments (the room
// did not change). Energies are summed over a short memory, longer than the echo's delay
// against the reference.
type talkDetector struct {
	mic, ref       float64 // short fading sums
	erlMic, erlRef float64 // long fading sums of mic and ref over well-cancelled frames
	samples        float64 // well-cancelled samples in them (fading)
}

const (
	talkMemory = 100 * time.Millisecond
	erlMemory  = 2 * time.Second
	// nearFactor: the user counts as talking when the microphone is this much (6 dB) above the
	// echo the ERL predicts; echoOnlyFactor: below this (3 dB) the microphone holds the echo
	// alone, and tells how well the canceller cancels.
	nearFactor     = 4
	echoOnlyFactor = 2
	// wellCancelled: a frame whose energy the canceller took down by 20 dB is echo only.
	wellCancelled = 100
)

// frame takes one frame (its energies as captured, of its reference and after the canceller;
// learn: the canceller is trusted now) and says whether the user is talking in it (near) and
// whether it holds nothing but the echo (echoOnly; always, while the ERL is not known).
func (d *talkDetector) frame(fi frameInfo, outE float64, learn bool, n int64, rate int) (near, echoOnly bool) {
	f := math.Exp(-float64(n) / (talkMemory.Seconds() * float64(rate)))
	d.mic, d.ref = d.mic*f+fi.micE, d.ref*f+fi.refE
	if learn && fi.loud && outE*wellCancelled < fi.micE {
		g := math.Exp(-float64(n) / (erlMemory.Seconds() * float64(rate)))
		d.erlMic, d.erlRef, d.samples = d.erlMic*g+d.mic, d.erlRef*g+d.ref, d.samples*g+float64(n)
	}
	if !d.known(rate) {
		return false, true
	}
	echo := d.erlMic / d.erlRef * d.ref
	return d.mic > nearFactor*echo, d.mic <= echoOnlyFactor*echo
}

// echo is the echo the ERL predicts for a frame whose reference has energy refE; known is
// false while the ERL is not.
func (d *talkDetector) echo(refE float64, rate int) (echo float64, known bool) {
	if !d.known(rate) {
		return 0, false
	}
	return d.erlMic / d.erlRef * refE, true
}

// known: the ERL was measured over a quarter second or more.
func (d *talkDetector) known(rate int) bool { return d.samples >= 0.25*float64(rate) && d.erlRef > 0 }

func energy(s []float32) float64 {
	var e float64
	for _, v := range s {
		e += float64(v) * float64(v)
	}
	return e
}

func (c *cleaner) close() {
	if c.proc != nil {
		c.proc.Close()
	}
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

// dueWithin says whether follow may look at the echo path within the next samples (it looks
// once driftPeriod of frames have been followed since the last look).
func (d *drift) dueWithin(samples int64, rate int) bool {
	return d.since+samples >= driftSamples(rate)
}

func driftSamples(rate int) int64 { return int64(driftPeriod.Seconds() * float64(rate)) }

const (
	driftPeriod = 500 * time.Millisecond
	driftGain   = 0.2
	// driftMax is the fastest the reference slides (parts per million): faster is no drift.
	driftMax = 500e-6
)

func (d *drift) follow(proc *aec.Processor, a *echoAligner, frame int64, rate int) {
	if d.since += frame; d.since < driftSamples(rate) {
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
		a.offsetRate = 0
		return
	}
	d.last = peakAt
	// An echo that arrives later than where it was learnt (the peak moved up) wants an older
	// reference: the offset falls.
	a.offsetRate = -math.Max(-driftMax, math.Min(driftMax, driftGain*(peakAt-d.origin)/float64(driftSamples(rate))))
}

// The aligner hands the canceller the reference alignLead ahead of the computed alignment, so
// that timing errors up to alignTolerance either way keep the echo inside the canceller's
// (causal) filter. The converter timestamps of PulseAudio's ALSA plugin jitter by a few
// milliseconds, and a late callback can shift all that follow by its lateness.
const (
	// learnTime is how much speaker sound the canceller hears before its output is trusted
	// (less when it measurably cancels sooner).
	learnTime      = 2 * time.Second
	alignLead      = 15 * time.Millisecond
	alignTolerance = 10 * time.Millisecond
)

// echoAligner delivers the speaker's output lined up with the capture: for capture index k, the
// sample the speaker's converter played at the moment the microphone's converter took sample k
// (held back by the configured delay), resampled to the rate the microphone cleans at (micRate
// here; capture indexes and timing are at that rate too).
//
// The timestamps make the alignment; sample counts keep it. Both streams count every sample
// their devices moved (the speaker's silence included), so once the two are lined up the
// reference for capture sample k+n is n samples on, whatever the timing
// of the callbacks. The timestamps are watched all along but are evidence, not orders: a late
// callback under load can shift every timestamp after it by its lateness while not one sample
// moved. So the aligner re-aligns on its own only when a new stream opens; when the timestamps disagree with the held alignment by more than
// alignTolerance it reports the dispute (disputed, disagree) and the cleaner decides: re-align
// (resync) or keep (accept). Drift the timestamps cannot see is followed from the canceller
// (offsetRate, see drift).
type echoAligner struct {
	ref       *EchoReference
	micRate   int
	delay     float64 // capture samples the reference is held back by (Delay − alignLead)
	tolerance float64

	spkRate int
	ratio   float64             // capture rate / speaker rate
	rs      *pipeline.Resampler // speaker → capture rate; nil when they are equal
	frac    *pipeline.FractionalDelay

	synced         bool
	fresh          bool // the stream below starts anew at the next fetch
	spkEra, micEra int64
	spkResumes     int64 // the speaker's rests seen (streamTiming.resumes)
	// The reference for capture sample k is the capture-rate stream's sample k+offset, between
	// samples by linear interpolation; offset moves by offsetRate per sample (drift).
	offset, offsetRate float64
	// disagree is how far the timestamps' alignment is from offset (capture samples) at the
	// last look, beyond bias: a disagreement found harmless.
	disagree, bias float64
	// hinted: the latest few callbacks alone put the echo elsewhere (see streamTiming.recent).
	hinted bool
	slips  int64

	// The stream: the reference at the capture rate, stream sample head+i in pending[i].
	head         int64
	pos          int64 // next speaker-rate index to read
	raw, pending []float32
}

func newEchoAligner(ref *EchoReference, micRate int, delay time.Duration) *echoAligner {
	return &echoAligner{ref: ref, micRate: micRate, delay: (delay - alignLead).Seconds() * float64(micRate),
		tolerance: alignTolerance.Seconds() * float64(micRate), frac: pipeline.NewFractionalDelay()}
}

// look compares the timestamps with the held alignment, aligning afresh when there is none yet
// or a stream's timeline restarted (restarted). ok is false while there is no alignment.
// resumed: the speaker's stream opened again after a rest since the last look, its timeline
// carried over by the clock (never with restarted: a new alignment has nothing to verify).
func (a *echoAligner) look(mic streamTiming) (ok, restarted, resumed bool) {
	spkRate, spk := a.ref.timing()
	resumed = a.synced && spk.era == a.spkEra && spk.resumes != a.spkResumes
	a.spkResumes = spk.resumes
	if !spk.ok || !mic.ok {
		return a.synced, false, resumed
	}
	if a.spkRate == 0 {
		rs, err := pipeline.NewResampler(spkRate, a.micRate)
		if err != nil {
			return false, false, false
		}
		if spkRate != a.micRate {
			a.rs = rs
		}
		a.spkRate, a.ratio = spkRate, float64(a.micRate)/float64(spkRate)
	}
	// The capture sample k was taken at clock time (k − micBase)/micRate; the speaker played
	// index spkBase + that·spkRate then. In capture-rate units that is k + want.
	want := spk.base*a.ratio - mic.base - a.delay
	if !a.synced || spk.era != a.spkEra || mic.era != a.micEra {
		a.spkEra, a.micEra = spk.era, mic.era
		a.sync(want)
		return true, true, false
	}
	recent := spk.recent*a.ratio - mic.recent - a.delay
	a.hinted = math.Abs(recent-a.offset-a.bias) > a.tolerance
	if !spk.firm || !mic.firm {
		// Too few callbacks since an xrun to tell a move from a late callback: no evidence yet.
		a.disagree = 0
		return true, false, resumed
	}
	a.disagree = want - a.offset - a.bias
	return true, false, resumed
}

// disputed: the timestamps put the echo elsewhere than the held alignment does.
func (a *echoAligner) disputed() bool { return math.Abs(a.disagree) > a.tolerance }

// resync moves the alignment to the timestamps'.
func (a *echoAligner) resync() { a.sync(a.offset + a.bias + a.disagree) }

// accept keeps the alignment: the timestamps' disagreement so far is theirs, not the echo's.
func (a *echoAligner) accept() { a.bias, a.disagree = a.bias+a.disagree, 0 }

func (a *echoAligner) sync(offset float64) {
	a.synced, a.fresh = true, true
	a.slips++
	a.offset, a.offsetRate, a.bias, a.disagree = offset, 0, 0, 0
}

// margin is how much of the stream is kept either side of what a frame needs.
func (a *echoAligner) margin() int64 { return int64(a.micRate / 50) }

// fetch fills dst with the reference for capture samples [k, k+len(dst)): refReady, or
// refPending (nothing consumed: ask again once the speaker has recorded more), or refGone.
func (a *echoAligner) fetch(dst []float32, k int64) refState {
	margin := a.margin()
	if a.fresh {
		a.fresh = false
		a.pos = int64(math.Floor((math.Floor(float64(k)+a.offset) - float64(margin)) / a.ratio))
		a.head = int64(math.Round(float64(a.pos) * a.ratio))
		a.pending = a.pending[:0]
		if a.rs != nil {
			a.rs.Reset()
		}
	}
	n := len(dst)
	first := float64(k) + a.offset
	last := first + float64(n-1)*(1+a.offsetRate)
	// The interpolator reads FractionalBefore samples before a position and the rest after it.
	ahead := int64(pipeline.FractionalTaps - pipeline.FractionalBefore - 1)
	lo, hi := int64(math.Floor(min(first, last))), int64(math.Floor(max(first, last)))+ahead
	// Drop what lies more than margin behind what this frame needs.
	if drop := min(lo-margin-a.head, int64(len(a.pending))); drop > 0 {
		a.pending = append(a.pending[:0], a.pending[drop:]...)
		a.head += drop
	}
	state := refReady
	for have := a.head + int64(len(a.pending)); have <= hi; have = a.head + int64(len(a.pending)) {
		chunk := int(hi + 1 - have)
		if a.rs != nil {
			chunk = int(float64(chunk)/a.ratio) + 1
		}
		if cap(a.raw) < chunk {
			a.raw = make([]float32, chunk)
		}
		raw := a.raw[:chunk]
		switch a.ref.read(raw, a.pos) {
		case refPending:
			return refPending
		case refGone:
			state = refGone
		}
		a.pos += int64(chunk)
		switch {
		case a.rs != nil && pipeline.PeakAbove(0, raw) == 0: // the speaker played silence
			a.pending = a.rs.Silence(a.pending, len(raw))
		case a.rs != nil:
			a.pending = a.rs.Process(a.pending, raw)
		default:
			a.pending = append(a.pending, raw...)
		}
	}
	// Silence in, silence out: every window this frame reads is in the stream and silent.
	if from, to := lo-pipeline.FractionalBefore-a.head, hi+1-a.head; from >= 0 && to <= int64(len(a.pending)) &&
		pipeline.PeakAbove(0, a.pending[from:to]) == 0 {
		clear(dst)
		a.offset += a.offsetRate * float64(n)
		return state
	}
	// Between samples the reference is read with a windowed sinc, not a straight line: linear
	// interpolation is a low-pass that changes with the fraction (16 dB down near the top of a
	// 16 kHz stream's band halfway between samples), an echo path the canceller would have to
	// learn again whenever the drift moves the fraction.
	var edge [pipeline.FractionalTaps]float32
	for i := range dst {
		x := first + float64(i)*(1+a.offsetRate)
		j := int64(math.Floor(x))
		from := j - pipeline.FractionalBefore - a.head
		window := edge[:]
		if from >= 0 && from+pipeline.FractionalTaps <= int64(len(a.pending)) {
			window = a.pending[from:]
		} else { // at the stream's edges: nothing there is silence
			for t := range edge {
				edge[t] = 0
				if p := from + int64(t); p >= 0 && p < int64(len(a.pending)) {
					edge[t] = a.pending[p]
				}
			}
		}
		dst[i] = a.frac.At(window, x-float64(j))
	}
	a.offset += a.offsetRate * float64(n)
	return state
}

// altPeak is how loud the speaker was for capture samples [k, k+n) by the timestamps'
// alignment (the disputed one), read straight from what it played.
func (a *echoAligner) altPeak(k int64, n int) float32 {
	from := (float64(k) + a.offset + a.bias + a.disagree) / a.ratio
	return a.ref.peak(int64(math.Floor(from)), int(float64(n)/a.ratio)+2)
}
