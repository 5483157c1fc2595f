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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/pipeline"
)

// PacedSource plays samples as if they were being captured: Read hands them out no faster than
// real time (times Speed), counting samples against a clock so that it never drifts.
type PacedSource struct {
	samples []float32
	rate    int
	loop    bool
	speed   float64
	now     func() time.Time

	mu    sync.Mutex
	start time.Time
	given int64 // samples handed out so far
}

// NewPacedSource makes a source of mono samples at rate. loop starts again at the end; speed > 1
// compresses time (tests), 0 means 1.
func NewPacedSource(samples []float32, rate int, loop bool, speed float64) *PacedSource {
	if speed <= 0 {
		speed = 1
	}
	return &PacedSource{samples: samples, rate: rate, loop: loop, speed: speed, now: time.Now}
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

// Read implements agent.AudioSource.
func (p *PacedSource) Read(ctx context.Context, out []float32) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	p.mu.Lock()
	if p.start.IsZero() {
		p.start = p.now()
	}
	total := int64(len(p.samples))
	if !p.loop && p.given >= total {
		p.mu.Unlock()
		return 0, io.EOF
	}
	want := int64(len(out))
	if !p.loop {
		want = min(want, total-p.given)
	}
	// Wait until the clock has reached the end of the samples we are about to hand out.
	due := p.start.Add(time.Duration(float64(p.given+want) / float64(p.rate) / p.speed * float64(time.Second)))
	p.mu.Unlock()
	if wait := due.Sub(p.now()); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range out[:want] {
		out[i] = p.samples[(p.given+int64(i))%total]
	}
	p.given += want
	return int(want), nil
}

// Started is when the first sample was asked for: the clock's zero (zero time before that).
func (p *PacedSource) Started() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.start
}

// Captured is how many samples have been handed out.
func (p *PacedSource) Captured() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.given
}

// FileSpeaker "plays" audio in real time into a WAV file: a clock consumes the queue, writing
// silence when it is empty, so the file's timeline is the wall clock and Pending is what a
// listener has not heard yet.
type FileSpeaker struct {
	rate int
	path string
	tick time.Duration

	mu      sync.Mutex
	queue   []float32
	written []float32
	closed  bool
	done    chan struct{}
	stopped chan struct{}
	started time.Time
	played  int64
}

// NewFileSpeaker starts a speaker at rate that writes what it plays to path on Close ("" keeps it
// in memory only: see Recording).
func NewFileSpeaker(path string, rate int) *FileSpeaker {
	f := &FileSpeaker{rate: rate, path: path, tick: 10 * time.Millisecond, done: make(chan struct{}), stopped: make(chan struct{})}
	go f.run()
	return f
}

func (f *FileSpeaker) run() {
	defer close(f.stopped)
	t := time.NewTicker(f.tick)
	defer t.Stop()
	f.mu.Lock()
	f.started = time.Now()
	f.mu.Unlock()
	for {
		select {
		case <-f.done:
			return
		case now := <-t.C:
			f.mu.Lock()
			due := int64(now.Sub(f.started).Seconds() * float64(f.rate))
			n := int(due - f.played)
			if n > 0 {
				take := min(n, len(f.queue))
				f.written = append(f.written, f.queue[:take]...)
				f.queue = f.queue[take:]
				f.written = append(f.written, make([]float32, n-take)...)
				f.played = due
			}
			f.mu.Unlock()
		}
	}
}

// Play implements agent.Speaker.
func (f *FileSpeaker) Play(samples []float32) {
	f.mu.Lock()
	if !f.closed {
		f.queue = append(f.queue, samples...)
	}
	f.mu.Unlock()
}

// FlushAfter implements agent.Speaker.
func (f *FileSpeaker) FlushAfter(keep time.Duration) {
	f.mu.Lock()
	n := int(keep.Seconds() * float64(f.rate))
	if n < len(f.queue) {
		f.queue = f.queue[:n]
	}
	f.mu.Unlock()
}

// Pending implements agent.Speaker.
func (f *FileSpeaker) Pending() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Duration(len(f.queue)) * time.Second / time.Duration(f.rate)
}

// Recording returns a copy of everything played so far (silence included).
func (f *FileSpeaker) Recording() []float32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.written)
}

// Close stops the clock and writes the WAV file (if a path was given).
func (f *FileSpeaker) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	close(f.done)
	<-f.stopped
	if f.path == "" {
		return nil
	}
	return wav.WriteFile(f.path, wav.Audio{Rate: f.rate, Channels: 1, Samples: f.Recording()})
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
