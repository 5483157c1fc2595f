// Package devices holds the agent's ears, eyes and mouth. This package is pure Go: the file-backed
// stand-ins (a WAV file as the microphone, a folder of JPEGs as the camera, a WAV file as the
// speaker) that tests and demos use through the same interfaces as the real devices. The PortAudio
// and OpenCV devices live in cgo subpackages.
package devices

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/pipeline"
)

// DefaultPeriod is how much audio a PacedSource delivers at a time unless told otherwise: a
// device-like buffer (the microphone's default input_latency).
const DefaultPeriod = 100 * time.Millisecond

// PacedSource plays samples as if they were being captured by a sound card: they become
// available in blocks of one period, each at the moment its last sample is due (counted
// against a SampleClock, so nothing drifts), never faster than real time (times speed). A
// reader waits on one alarm set to when the next block is due: one wake-up per period, however
// small its reads.
type PacedSource struct {
	samples []float32
	rate    int
	loop    bool
	speed   float64
	period  int64 // samples per block
	now     func() time.Time

	mu    sync.Mutex
	clock SampleClock // started by the first Read
	given int64       // samples handed out so far
	alarm alarm       // made by the first Read
}

// NewPacedSource makes a source of mono samples at rate that delivers blocks of DefaultPeriod.
// loop starts again at the end; speed > 1 compresses time (tests), 0 means 1.
func NewPacedSource(samples []float32, rate int, loop bool, speed float64) *PacedSource {
	if speed <= 0 {
		speed = 1
	}
	p := &PacedSource{samples: samples, rate: rate, loop: loop, speed: speed, now: time.Now}
	p.SetPeriod(DefaultPeriod)
	return p
}

// OpenWAVSource reads a WAV file as a microphone: mixed to mono and resampled to rate.
func OpenWAVSource(path string, rate int, loop bool, speed float64) (*PacedSource, error) {
	a, err := wav.ReadFile(path)
	if err != nil {
		return nil, err
	}
	mono := a.Mono()
	if a.Rate != rate {
		mono, err = Resample(mono, a.Rate, rate)
		if err != nil {
			return nil, fmt.Errorf("read WAV %q: %w", path, err)
		}
	}
	if len(mono) == 0 {
		return nil, fmt.Errorf("read WAV %q: no samples", path)
	}
	return NewPacedSource(mono, rate, loop, speed), nil
}

// SetPeriod sets the block size (at least one sample), as a sound card's buffer period. Call it
// before the first Read.
func (p *PacedSource) SetPeriod(d time.Duration) {
	p.mu.Lock()
	p.period = max(1, int64(d.Seconds()*float64(p.rate)))
	p.mu.Unlock()
}

// Read implements agent.AudioSource: it returns what has been delivered and not yet read, up
// to len(out), waiting for the next block when there is none.
func (p *PacedSource) Read(ctx context.Context, out []float32) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clock.Start.IsZero() {
		p.clock = NewSampleClock(p.now(), p.rate, p.speed)
		p.alarm = newAlarm()
	}
	total := int64(len(p.samples))
	if !p.loop && p.given >= total {
		return 0, io.EOF
	}
	for {
		avail := p.delivered(p.clock.Due(p.now())) - p.given
		if avail > 0 {
			n := int(min(avail, int64(len(out))))
			for got := 0; got < n; {
				got += copy(out[got:n], p.samples[(p.given+int64(got))%total:])
			}
			p.given += int64(n)
			return n, nil
		}
		// Sleep until the block holding the next sample is complete.
		next := (p.given/p.period + 1) * p.period
		if !p.loop {
			next = min(next, total)
		}
		wait := p.clock.At(next).Sub(p.now())
		p.mu.Unlock()
		err := p.alarm.wait(ctx, wait)
		p.mu.Lock()
		if err != nil {
			return 0, err
		}
	}
}

// Sleep sleeps for d on a runtime timer or until ctx ends (ctx.Err()).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// delivered is how many samples the "device" has delivered when due samples are due: whole
// blocks, and the short last block of a source that does not loop. Called with mu held.
func (p *PacedSource) delivered(due int64) int64 {
	blocks := due / p.period * p.period
	if !p.loop {
		if due >= int64(len(p.samples)) {
			return int64(len(p.samples))
		}
		return min(blocks, int64(len(p.samples)))
	}
	return blocks
}

// Started is when the first sample was asked for: the clock's zero (zero time before that).
func (p *PacedSource) Started() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clock.Start
}

// Captured is how many samples have been handed out.
func (p *PacedSource) Captured() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.given
}

// fileFlushEvery is how often a FileSpeaker that is playing brings its WAV file up to date, so
// that the file on disk lags the clock by at most this much.
const fileFlushEvery = time.Second

// FileSpeaker is a speaker without a sound card (audio.output none or file:PATH): it plays in
// real time into nothing or into a WAV file, at full volume (it has no volume control). Its
// queue is a pipeline.Playback (fades, counters, bounded memory) consumed by a PlaybackClock whenever it is looked at, so it wakes
// nobody while idle; with a file it also wakes once a second while audio is queued, to stream
// what has been played to the file. It keeps no recording: memory stays flat however long it
// plays. The file's timeline is the wall clock, silence included.
type FileSpeaker struct {
	rate int
	now  func() time.Time

	mu     sync.Mutex
	pb     *pipeline.Playback
	clock  *PlaybackClock
	file   *wav.Writer // nil: none
	err    error       // the file's first failure
	peak   float32
	timer  *time.Timer // set while a file is being written and audio is queued
	closed bool
}

// SpeakerStats are a FileSpeaker's counters: the playback queue's (in samples at its rate) and
// the loudest sample it has played.
type SpeakerStats struct {
	pipeline.PlaybackStats
	Peak float32
}

// NewFileSpeaker starts a speaker at rate that plays into nothing (path "") or streams what it
// plays into a WAV file at path. A file that cannot be created is reported by Err (and Close);
// the speaker then plays into nothing.
func NewFileSpeaker(path string, rate int) *FileSpeaker {
	pb, err := pipeline.NewPlayback(rate, rate)
	if err != nil { // cannot happen: equal rates are a copy
		panic(err)
	}
	f := &FileSpeaker{rate: rate, now: time.Now, pb: pb}
	f.clock = NewPlaybackClock(pb, f.now())
	if path != "" {
		f.file, f.err = wav.Create(path, rate, 1)
	}
	return f
}

// catchUp plays what is due by now. Called with mu held.
func (f *FileSpeaker) catchUp() {
	if f.closed {
		return
	}
	if f.file == nil {
		f.clock.CatchUpSound(f.now(), f.sink) // silence moves no peak
		return
	}
	f.clock.CatchUp(f.now(), f.sink)
}

// sink takes what the clock played. Called with mu held.
func (f *FileSpeaker) sink(block []float32) {
	f.peak = pipeline.PeakAbove(f.peak, block)
	if f.file != nil && f.err == nil {
		f.err = f.file.Write(block)
	}
}

// flushLater keeps the file up to date while audio is queued. Called with mu held.
func (f *FileSpeaker) flushLater() {
	if f.file == nil || f.timer != nil || f.closed {
		return
	}
	f.timer = time.AfterFunc(fileFlushEvery, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.timer = nil
		if f.closed {
			return
		}
		f.catchUp()
		if f.err == nil {
			f.err = f.file.Flush()
		}
		if f.pb.Pending() > 0 {
			f.flushLater()
		}
	})
}

// Play implements agent.Speaker.
func (f *FileSpeaker) Play(samples []float32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.catchUp()
	f.pb.Play(samples)
	f.flushLater()
}

// FlushAfter implements agent.Speaker. What is left within the cut's fade is played at once,
// as a sound card would already hold it in its buffer, so FlushAfter(0) leaves nothing pending.
func (f *FileSpeaker) FlushAfter(keep time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.catchUp()
	f.pb.FlushAfter(keep)
	if p := f.pb.Pending(); p > 0 && p <= pipeline.PlaybackFade {
		f.clock.Ahead(int64(p.Seconds()*float64(f.rate)+0.5), f.sink)
	}
}

// Pending implements agent.Speaker.
func (f *FileSpeaker) Pending() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.catchUp()
	return f.pb.Pending()
}

// Stats returns the counters, brought up to now.
func (f *FileSpeaker) Stats() SpeakerStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.catchUp()
	return SpeakerStats{PlaybackStats: f.pb.Stats(), Peak: f.peak}
}

// Recording brings the WAV file up to date and reads back what it holds: everything played so
// far, silence included (nothing without a file). The speaker itself keeps no samples: this is
// for tests that check what was played.
func (f *FileSpeaker) Recording() ([]float32, error) {
	f.mu.Lock()
	f.catchUp()
	var path string
	if f.file != nil && f.err == nil && !f.closed {
		f.err = f.file.Flush()
		path = f.file.Path()
	}
	err := f.err
	f.mu.Unlock()
	if err != nil || path == "" {
		return nil, err
	}
	a, err := wav.ReadFile(path)
	return a.Samples, err
}

// Err is the WAV file's first failure (nil without a file).
func (f *FileSpeaker) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Close plays what is due, stops, and completes the WAV file (if any).
func (f *FileSpeaker) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.err
	}
	f.catchUp()
	f.closed = true
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	if f.file != nil {
		if err := f.file.Close(); f.err == nil {
			f.err = err
		}
	}
	return f.err
}

// JPEGDir is a camera made of a folder of JPEG files, shown in name order at fps, looping.
type JPEGDir struct {
	frames [][]byte
	fps    float64
	start  time.Time
	now    func() time.Time
}

// OpenJPEGDir reads every *.jpg / *.jpeg file in dir.
func OpenJPEGDir(dir string, fps float64) (*JPEGDir, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("open camera folder: %w", err)
	}
	var frames [][]byte
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".jpg" && ext != ".jpeg") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("open camera folder: %w", err)
		}
		if len(b) < 4 || b[0] != 0xFF || b[1] != 0xD8 {
			return nil, fmt.Errorf("open camera folder: %s is not a JPEG file", e.Name())
		}
		frames = append(frames, b)
	}
	if len(frames) == 0 {
		return nil, fmt.Errorf("open camera folder %q: no .jpg files", dir)
	}
	if fps <= 0 {
		fps = 1
	}
	return &JPEGDir{frames: frames, fps: fps, start: time.Now(), now: time.Now}, nil
}

// Latest implements agent.FrameSource.
func (j *JPEGDir) Latest() ([]byte, bool) {
	i := int(j.now().Sub(j.start).Seconds()*j.fps) % len(j.frames)
	return j.frames[i], true
}

// ErrNoDevice is returned when a configured device cannot be found.
var ErrNoDevice = errors.New("no such device")

// Resample converts a whole clip from one rate to another with the pipeline's resampler.
func Resample(in []float32, from, to int) ([]float32, error) {
	r, err := pipeline.NewResampler(from, to)
	if err != nil {
		return nil, err
	}
	out := r.Process(make([]float32, 0, r.OutputLen(len(in))), in)
	return r.Flush(out), nil
}
