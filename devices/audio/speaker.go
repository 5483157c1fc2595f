package audio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/pipeline"
)

// InputRate is the rate Speaker.Play takes: the model's output rate.
const InputRate = 24000

// SpeakerConfig chooses and sets up the speaker. Start from DefaultSpeakerConfig: the zero
// value's Volume 0 is mute.
type SpeakerConfig struct {
	// Device is "default", a PortAudio index, or part of a device name (case-insensitive);
	// see Select.
	Device string
	// Rate is the output rate in Hz; 0 takes the device's native rate (recommended).
	Rate int
	// Channels to open; 0 tries mono and falls back to stereo (the mono signal on both).
	Channels int
	// Volume is 0 (mute) to 100 (unity gain), on a cubic curve; see SetVolume.
	Volume int
	// Latency is the stream latency PortAudio is asked for; 0 takes the device's default
	// high latency.
	Latency time.Duration
	// FramesPerBuffer per callback; 0 takes half the latency: two device periods a buffer, as
	// for the microphone. Each period wakes PortAudio's thread, also while the speaker plays
	// silence, and PortAudio's own choice on ALSA, four a latency, cost twice the wake-ups.
	// FlushAfter(0) silences the output within about the device's buffer and one of these.
	FramesPerBuffer int
	// Echo, when set, receives everything the speaker plays (after the volume), for the
	// microphone's echo canceller.
	Echo *EchoReference
	// RestAfter is how long the speaker plays only silence before it closes its stream (0:
	// never). A stream playing silence still wakes PortAudio's thread at every device period,
	// most of a satellite's day; at rest nothing wakes for the speaker, and the next Play
	// opens the stream again (15 ms on the virtual card) on the same timeline, so that the
	// echo canceller keeps its alignment and what it learnt (it verifies itself, protected, at
	// the start of what plays next: see the README). Outputs that take long to wake (HDMI
	// sinks) or click when a stream starts want 0.
	RestAfter time.Duration
}

// DefaultSpeakerConfig is the default device at its native rate and full volume.
func DefaultSpeakerConfig() SpeakerConfig {
	return SpeakerConfig{Device: "default", Volume: 100}
}

// Validate names the first unusable setting.
func (c SpeakerConfig) Validate() error {
	switch {
	case c.Rate != 0 && (c.Rate < 8000 || c.Rate > 192000):
		return fmt.Errorf("speaker rate %d Hz: want 0 (native) or 8000..192000", c.Rate)
	case c.Channels < 0 || c.Channels > 32:
		return fmt.Errorf("speaker channels %d: want 0 (mono, else stereo) or 1..32", c.Channels)
	case c.Volume < 0 || c.Volume > 100:
		return fmt.Errorf("speaker volume %d: want 0..100", c.Volume)
	case c.Latency < 0 || c.Latency > 2*time.Second:
		return fmt.Errorf("speaker latency %v: want 0..2s", c.Latency)
	case c.FramesPerBuffer < 0 || c.FramesPerBuffer > maxFramesPerBuffer:
		return fmt.Errorf("speaker frames per buffer %d: want 0..%d", c.FramesPerBuffer, maxFramesPerBuffer)
	case c.RestAfter < 0:
		return fmt.Errorf("speaker rest after %v: want 0 (never) or more", c.RestAfter)
	}
	return nil
}

// Speaker plays 24 kHz mono audio on a PortAudio output stream (agent.Speaker). Play queues into
// a pipeline.Playback; the stream callback pulls from it at the device's native rate. While the
// device is lost, the queue is consumed at real-time pace into the void, so Pending and the
// agent's turn-taking behave as if it played; when it is back, playing resumes. All methods
// are safe for concurrent use.
type Speaker struct {
	cfg      SpeakerConfig
	rate     int
	channels int
	pb       *pipeline.Playback
	link     *link
	scratch  []float32 // the callback's mono buffer for multi-channel devices

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	// While the device is lost, the queue is consumed against the clock whenever it is looked
	// at (drain, under drainMu), so nothing wakes up to play into the void.
	lost    atomic.Bool
	drainMu sync.Mutex
	drain   *devices.PlaybackClock

	// The current stream's Go side, for service; flushes counts FlushAfter(0) calls, which
	// it passes on to the stream's callback.
	out     atomic.Pointer[outputPump]
	flushes atomic.Int64

	// At rest (see SpeakerConfig.RestAfter) the stream is closed; resume says the next stream
	// opens after a rest, so its first buffer continues the timeline. Play and rest decide
	// under restMu, so that no sound is queued into a stream that is closing.
	restMu  sync.Mutex
	resting bool
	resume  bool
	// The rest timer runs while the pump has nothing to play, from idleSince (zero while
	// there is sound to play; a monotonic reading, so a clock stepped by NTP changes nothing).
	timerMu   sync.Mutex
	restTimer *time.Timer
	idleSince time.Time
}

// speakerChunk is the callback's mono scratch size in frames; bigger buffers are pulled in
// pieces.
const speakerChunk = 4096

// OpenSpeaker opens the output device cfg names and starts its stream (silent until Play).
// onState and log are as for OpenMicrophone. The speaker runs until Close or until ctx ends.
func OpenSpeaker(ctx context.Context, cfg SpeakerConfig, onState func(ok bool, err error), log *slog.Logger) (*Speaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("open speaker %q: %w", cfg.Device, err)
	}
	if err := paAcquire(); err != nil {
		return nil, fmt.Errorf("open speaker %q: %w", cfg.Device, err)
	}
	s := &Speaker{cfg: cfg}
	s.link = newLink("speaker", "play", cfg.Device, log, onState)
	s.link.open = s.openStream
	s.link.lost = s.setLost
	s.link.back = s.setBack
	s.link.poll = s.service // while idle nothing else may read its records for a while
	if cfg.RestAfter > 0 {
		s.link.rest, s.link.resumed = s.rest, s.resumed
	}
	if err := s.link.openStream(); err != nil {
		paRelease()
		return nil, fmt.Errorf("open speaker %q: %w", cfg.Device, err)
	}
	if cfg.Echo != nil {
		cfg.Echo.setSpeaker(s.service, s.wantPlayed)
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go func() {
		s.link.run(ctx, s.done)
		if cfg.Echo != nil {
			cfg.Echo.stop() // closed: nothing plays any more, the microphone need not wait for it
		}
	}()
	return s, nil
}

// openStream resolves the device and opens a stream (under paDo). The first call fixes the
// rate and channels; later calls (recovery) ask for the same.
func (s *Speaker) openStream(gen int64) (*paStream, string, error) {
	dev, err := findDevice(s.cfg.Device, false)
	if err != nil {
		return nil, "", err
	}
	if s.pb == nil {
		s.rate = s.cfg.Rate
		if s.rate == 0 {
			s.rate = int(math.Round(dev.rate))
		}
		pb, err := pipeline.NewPlayback(InputRate, s.rate)
		if err != nil {
			return nil, dev.name, err
		}
		pb.SetVolume(s.cfg.Volume)
		s.pb = pb
		if s.cfg.Echo != nil {
			s.cfg.Echo.attach(s.rate)
		}
		s.scratch = make([]float32, speakerChunk)
		s.drain = devices.NewPlaybackClock(pb, time.Now())
	}
	lat := s.cfg.Latency
	if lat == 0 {
		lat = dev.highOutLt
	}
	try := []int{s.channels}
	if s.channels == 0 {
		if s.cfg.Channels > 0 {
			try = []int{s.cfg.Channels}
		} else {
			try = []int{1, 2}
		}
	}
	var errs []error
	for _, ch := range try {
		if ch > dev.maxOut {
			errs = append(errs, fmt.Errorf("%d channels: %q has %d", ch, dev.name, dev.maxOut))
			continue
		}
		link, pb, scratch, echo := s.link, s.pb, s.scratch, s.cfg.Echo
		cb := func(_, out []float32, _ bufferInfo) int {
			if !link.current(gen) {
				clear(out)
				return 0
			}
			return fillOutput(pb, out, ch, scratch)
		}
		var mono []float32
		if echo != nil {
			mono = make([]float32, speakerChunk)
		}
		// A new stream: a new timeline for the echo canceller, or after a rest the same one.
		first, start := true, timelineNew
		if s.resume {
			start = timelineResumed
		}
		played := func(frames []float32, info bufferInfo) {
			if !link.current(gen) {
				return
			}
			link.moved(gen)
			if echo != nil {
				ev := info.timeline(first)
				if first {
					ev = start
				}
				writeEcho(echo, frames, ch, mono, info, ev)
			}
			first = false
		}
		hooks := &outputHooks{played: played, flushes: &s.flushes, sound: func() bool { return pb.Pending() > 0 }, idle: s.idleChanged}
		st, err := paOpen(dev, false, ch, 0, lat, s.rate, halfLatencyFrames(s.cfg.FramesPerBuffer, lat, s.rate), cb, hooks, wakeCell{}, func() { link.finished(gen) })
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.channels = ch
		s.resume = false
		s.out.Store(st.out)
		return st, dev.name, nil
	}
	return nil, dev.name, errors.Join(errs...)
}

// fillOutput is the stream's work: pull mono samples for out's frames and spread them over
// ch interleaved channels. It returns how many frames came from the queue (the rest is
// silence) and does not allocate.
func fillOutput(pb *pipeline.Playback, out []float32, ch int, scratch []float32) int {
	if ch == 1 {
		return pb.Pull(out)
	}
	frames, sound := len(out)/ch, 0
	for done := 0; done < frames; {
		n := min(frames-done, len(scratch))
		sound += pb.Pull(scratch[:n])
		dst := out[done*ch : (done+n)*ch]
		if ch == 2 {
			for i, v := range scratch[:n] {
				f := (*[2]float32)(dst[2*i:])
				f[0], f[1] = v, v
			}
		} else {
			for i, v := range scratch[:n] {
				for c := range ch {
					dst[i*ch+c] = v
				}
			}
		}
		done += n
	}
	clear(out[frames*ch:])
	return sound
}

// writeEcho hands what the device played (ch interleaved channels carrying one signal, as the
// bridge noted it; ev: what became of the timeline before it) to the echo reference as mono,
// using mono as room.
func writeEcho(echo *EchoReference, frames []float32, ch int, mono []float32, info bufferInfo, ev timelineEvent) {
	if ch == 1 {
		echo.play(frames, info.at, info.lost, ev)
		return
	}
	n := len(frames) / ch
	for done := 0; done < n; {
		k := min(n-done, len(mono))
		for i := range mono[:k] {
			mono[i] = frames[(done+i)*ch]
		}
		if done == 0 {
			echo.play(mono[:k], info.at, info.lost, ev)
		} else {
			echo.playMore(mono[:k])
		}
		done += k
	}
}

// setLost starts consuming the queue into the void from since, when the device last
// delivered (supervisor).
func (s *Speaker) setLost(since time.Time, _ error) {
	if s.cfg.Echo != nil {
		s.cfg.Echo.stop() // nothing plays now: the microphone need not wait for it
	}
	s.restMu.Lock()
	s.resting, s.resume = false, false // the stream that opens next is a new one
	s.restMu.Unlock()
	s.drainMu.Lock()
	s.drain.Restart(since)
	s.lost.Store(true)
	s.drainMu.Unlock()
}

// setBack hands the queue to the new stream (supervisor).
func (s *Speaker) setBack() {
	s.drainMu.Lock()
	s.drain.CatchUp(time.Now(), nil)
	s.lost.Store(false)
	s.drainMu.Unlock()
}

// catchUp consumes what a lost device would have played by now.
func (s *Speaker) catchUp() {
	if !s.lost.Load() {
		return
	}
	s.drainMu.Lock()
	if s.lost.Load() {
		s.drain.CatchUp(time.Now(), nil)
	}
	s.drainMu.Unlock()
}

// service runs the stream's Go side now (see outputPump.service): publish what the device
// played, pass a flush on, top the ring up. Its pump runs it when the callback asks; a
// microphone sharing the echo reference runs it at each of its buffers (it needs what was
// played up to now), Play when a reply starts and FlushAfter at once.
func (s *Speaker) service() {
	if o := s.out.Load(); o != nil {
		o.service()
	}
}

// wantPlayed: the microphone waits for what the device plays next (its echo reference), which
// service has not found yet: the device's next callback wakes the pump instead of waiting for
// the ring to run low.
func (s *Speaker) wantPlayed() {
	if o := s.out.Load(); o != nil {
		o.wakeNext()
	}
}

// Play queues 24 kHz mono samples (agent.Speaker); it does not wait for the device. A
// speaker at rest opens its stream again (its supervisor does, and the new stream's pump then
// takes the queue).
func (s *Speaker) Play(samples []float32) {
	s.catchUp()
	s.restMu.Lock()
	s.pb.Play(samples)
	resting := s.resting
	s.restMu.Unlock()
	if resting {
		s.link.requestResume()
		return
	}
	s.service() // a reply starting need not wait for the pump (see outputPump.service)
}

// idleChanged runs the rest timer while the pump has nothing to play (its idle hook).
func (s *Speaker) idleChanged(idle bool) {
	if s.cfg.RestAfter <= 0 {
		return
	}
	s.timerMu.Lock()
	defer s.timerMu.Unlock()
	if !idle {
		s.idleSince = time.Time{}
		if s.restTimer != nil {
			s.restTimer.Stop()
		}
		return
	}
	s.idleSince = time.Now()
	if s.restTimer == nil {
		s.restTimer = time.AfterFunc(s.cfg.RestAfter, s.link.requestRest)
	} else {
		s.restTimer.Reset(s.cfg.RestAfter)
	}
}

// rest is the supervisor's question before it closes the stream: yes when the speaker has
// had nothing to play for RestAfter. Then no sound goes to the stream from now on (its
// callbacks are retired) and Play asks for it to be opened again.
func (s *Speaker) rest() bool {
	s.restMu.Lock()
	defer s.restMu.Unlock()
	s.timerMu.Lock()
	since := s.idleSince
	s.timerMu.Unlock()
	o := s.out.Load()
	if s.resting || o == nil || since.IsZero() || time.Since(since) < s.cfg.RestAfter ||
		s.pb.Pending() > 0 || !o.isIdle() {
		return false
	}
	s.resting, s.resume = true, true
	s.timerMu.Lock()
	s.idleSince = time.Time{} // the next stream's pump starts the timer afresh
	s.timerMu.Unlock()
	s.link.retire()
	o.stop() // waits out a service under way: nothing more is published from this stream
	s.out.Store(nil)
	if s.cfg.Echo != nil {
		s.cfg.Echo.stop() // nothing plays at rest: the microphone need not wait for it
	}
	return true
}

// resumed runs when the stream has opened again after a rest: the new stream takes the queue.
func (s *Speaker) resumed() {
	s.restMu.Lock()
	s.resting = false
	s.restMu.Unlock()
	s.service()
}

// Rests is how many times the speaker's stream closed to rest.
func (s *Speaker) Rests() int64 { return s.link.rests.Load() }

// FlushAfter drops queued audio beyond keep (agent.Speaker); FlushAfter(0) silences the
// output within the device's buffer and one more buffer, with a 3 ms fade: what the stream's
// ring holds ahead of the device is faded and dropped by its callback.
func (s *Speaker) FlushAfter(keep time.Duration) {
	s.catchUp()
	if keep > 0 || s.lost.Load() {
		s.pb.FlushAfter(keep)
		return
	}
	s.pb.Cut()
	s.flushes.Add(1)
	s.service()
}

// Pending is the queued audio not yet handed to the device (agent.Speaker). The device's own
// buffer (its output latency, ~35 ms on PulseAudio) is not included.
func (s *Speaker) Pending() time.Duration {
	s.catchUp()
	return s.pb.Pending()
}

// SetVolume sets the volume live, 0..100 (clamped), ramped over 20 ms; see
// pipeline.Playback.SetVolume for the curve.
func (s *Speaker) SetVolume(v int) { s.pb.SetVolume(v) }

// Volume is the volume last set.
func (s *Speaker) Volume() int { return s.pb.Volume() }

// Position is how much queued audio has been handed to the device (or, while it was lost,
// consumed in its place) since the speaker opened; a flush may drop up to outputAhead of it
// before it is played.
func (s *Speaker) Position() time.Duration {
	s.catchUp()
	return s.pb.Position()
}

// Rate is the device rate in Hz.
func (s *Speaker) Rate() int { return s.rate }

// Name is the device's name as PortAudio gives it.
func (s *Speaker) Name() string { return s.link.deviceName() }

// Stats returns the playback queue's counters (in device-rate samples).
func (s *Speaker) Stats() pipeline.PlaybackStats {
	s.catchUp()
	return s.pb.Stats()
}

// Losses is how many times the device was lost.
func (s *Speaker) Losses() int64 { return s.link.losses.Load() }

// Close stops the stream and releases the device, waiting a few seconds at most even when the
// device hangs. Play after Close queues into nothing audible. Closing twice is fine.
func (s *Speaker) Close() error {
	var err error
	s.once.Do(func() {
		s.timerMu.Lock()
		if s.restTimer != nil {
			s.restTimer.Stop()
		}
		s.timerMu.Unlock()
		s.cancel()
		select {
		case <-s.done:
		case <-time.After(closeTimeout + time.Second):
			err = errors.New("close speaker: the stream did not stop in time")
		}
	})
	return err
}
