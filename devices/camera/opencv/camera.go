// Package opencv is the camera through OpenCV (cgo, gocv): it reads a V4L2 webcam, a CSI
// camera through a GStreamer pipeline, a stream URL or a video file, and keeps the newest frame
// shrunk and encoded as a JPEG (Encoder: OpenCV's libjpeg-turbo). It runs in the camera's own
// program (cmd/omnisat-camera), never in the agent's process: see devices/camera.
//
// One thread of its own (grabber.go) owns the OpenCV capture while it streams. It grabs every
// frame the source delivers, so that the camera's queue never holds stale images, but decodes
// and encodes only EncodeFPS of them a second, and Go hears from it only for those (or, with
// OpenWriting, not at all: the thread writes them to a file descriptor itself). When the
// camera is lost it reports so once, and reopens it with exponential backoff until it is back.
// See README.md in this folder.
package opencv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/omnisat/omnisat/devices/camera"
)

// closeWait bounds how long Close (and a cancelled Open) waits for the grabber. The grabber
// only blocks inside OpenCV (a V4L2 read gives up after 10 s, an RTSP read after 30 s); if it
// is stuck there Close returns, and the grabber releases the device when OpenCV returns.
const closeWait = 3 * time.Second

// Camera is an open camera. Latest may be called from any goroutine.
type Camera struct {
	cfg     camera.Config
	src     camera.Source
	log     *slog.Logger
	onState func(ok bool, err error)

	cancel  context.CancelFunc
	done    chan struct{} // closed when the grabber has released everything
	updated chan struct{} // a token when a new frame is published

	mu      sync.Mutex
	latest  []byte
	at      time.Time
	closed  bool
	staleIn time.Duration
	outfd   int // -1: frames are published for Latest; else the grabber writes them here

	up bool // grabber goroutine only: the state last reported
}

// Open opens the camera in cfg and waits for its first frame, so that Latest has one when Open
// returns. ctx bounds the camera's whole life: cancelling it stops the grabber as Close does.
//
// onState (may be nil) is called from the grabber goroutine when the camera comes up (first
// with ok=true once Open succeeds) and when it is lost (ok=false, with the error, once per
// loss, not per retry). It must not block for long. log may be nil.
func Open(ctx context.Context, cfg camera.Config, onState func(ok bool, err error), log *slog.Logger) (*Camera, error) {
	return openWith(ctx, cfg, -1, onState, log)
}

// OpenWriting opens the camera as Open does, but the grabber's thread writes every frame it
// encodes straight to the file descriptor out, as a frame message of package camera's stream
// (devices/camera/stream.go), with an up message before the first frame of each session, so
// that the frames never pass through Go: the process does not wake for them. Latest and
// Updated have no frames then, and onState's ok=true comes after the up message is written.
// out must be a stream whose header is written (camera.StreamWriter.Begin), with no other
// writer while a session runs: write to it only from onState(false, …), which comes after the
// session's thread has ended, or while Open or OpenWriting is failing. It may be non-blocking.
// A write that fails (EPIPE: the reader is gone) ends the session as a lost camera does, with
// an error that wraps the write's errno.
func OpenWriting(ctx context.Context, cfg camera.Config, out int, onState func(ok bool, err error), log *slog.Logger) (*Camera, error) {
	if out < 0 {
		return nil, fmt.Errorf("open camera %q: no output to write the frames to", cfg.Source)
	}
	return openWith(ctx, cfg, out, onState, log)
}

func openWith(ctx context.Context, cfg camera.Config, outfd int, onState func(ok bool, err error), log *slog.Logger) (*Camera, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("open camera %q: %w", cfg.Source, err)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("open camera %q: %w", cfg.Source, context.Cause(ctx))
	}
	cfg = cfg.WithDefaults()
	src, _ := camera.ParseSource(cfg.Source) // checked by Validate
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if onState == nil {
		onState = func(bool, error) {}
	}
	enc, err := NewEncoder(cfg.JPEG())
	if err != nil {
		return nil, fmt.Errorf("open camera %q: %w", cfg.Source, err)
	}
	interval := time.Duration(float64(time.Second) / cfg.EncodeFPS)
	ctx, cancel := context.WithCancel(ctx)
	c := &Camera{
		cfg:     cfg,
		src:     src,
		log:     log.With("camera", cfg.Source),
		onState: onState,
		cancel:  cancel,
		done:    make(chan struct{}),
		updated: make(chan struct{}, 1),
		staleIn: cfg.StaleAfter(),
		outfd:   outfd,
	}
	ready := make(chan error, 1)
	go c.run(ctx, enc, interval, ready)
	select {
	case err := <-ready:
		if err != nil {
			cancel()
			<-c.done
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		err := c.Close()
		return nil, errors.Join(fmt.Errorf("open camera %q: %w", cfg.Source, context.Cause(ctx)), err)
	}
}

// Latest returns the newest JPEG frame, or ok=false when there is none: the camera is lost,
// closed, or has delivered nothing for a while (3 encode intervals, at least 3 s). The bytes
// are shared with other callers and must not be modified.
func (c *Camera) Latest() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.latest == nil || time.Since(c.at) > c.staleIn {
		return nil, false
	}
	return c.latest, true
}

// Close stops the grabber and releases the camera. It waits at most a few seconds for a
// grabber stuck inside OpenCV, and returns an error saying so. Closing twice is harmless.
func (c *Camera) Close() error {
	c.mu.Lock()
	c.closed = true
	c.latest = nil
	c.mu.Unlock()
	c.cancel()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-c.done:
		return nil
	case <-t.C:
		return fmt.Errorf("close camera %q: still blocked in OpenCV after %v; it will be released when OpenCV returns", c.cfg.Source, closeWait)
	}
}

// Updated has a token when a frame was published since it was last taken: a reader that
// wants every new frame sleeps on it instead of polling Latest.
func (c *Camera) Updated() <-chan struct{} { return c.updated }

func (c *Camera) publish(b []byte, at time.Time) {
	c.mu.Lock()
	if !c.closed || b == nil {
		c.latest, c.at = b, at
	}
	c.mu.Unlock()
	if b != nil {
		select {
		case c.updated <- struct{}{}:
		default:
		}
	}
}

// report tells onState about a change of state, once.
func (c *Camera) report(ok bool, err error) {
	if ok == c.up {
		return
	}
	c.up = ok
	if ok {
		c.log.Info("camera up")
	} else {
		c.publish(nil, time.Time{})
		c.log.Warn("camera lost; reopening with backoff", "err", err)
	}
	c.onState(ok, err)
}

// run is the grabber goroutine: it owns the capture, the frame Mat and the encoder.
// ready gets the result of the first attempt; later losses are retried with backoff.
func (c *Camera) run(ctx context.Context, enc *Encoder, interval time.Duration, ready chan<- error) {
	defer close(c.done)
	defer c.publish(nil, time.Time{}) // stopped: no frame
	defer enc.Close()

	backoff := c.cfg.Retry
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			c.log.Debug("reopening camera", "in", backoff)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, c.cfg.RetryMax)
		}
		wasUp := false
		err := c.session(ctx, enc, interval, func() {
			wasUp = true
			backoff = c.cfg.Retry
			if ready != nil {
				ready <- nil
				ready = nil
			}
			c.report(true, nil)
		})
		if ctx.Err() != nil {
			if ready != nil {
				ready <- fmt.Errorf("open camera %q: %w", c.src.Name, context.Cause(ctx))
			}
			return
		}
		if ready != nil { // the first attempt failed: Open returns the error
			ready <- err
			return
		}
		if wasUp {
			c.report(false, err)
		} else {
			c.log.Debug("camera still unavailable", "err", err)
		}
	}
}

// session opens the source and streams from it until it fails or ctx ends. up is called after
// the first frame has been published. The grabbing, pacing, encoding and a file's looping run
// on the grabber's thread (grabber.go says why); this goroutine publishes what it encodes.
func (c *Camera) session(ctx context.Context, enc *Encoder, interval time.Duration, up func()) error {
	cp, err := c.open()
	if err != nil {
		return fmt.Errorf("open camera %q: %w", c.src.Name, err)
	}
	defer cp.close()

	fps, loopFile := 0.0, "" // a file is paced at its frame rate and played in a loop
	if c.src.Kind == camera.SourceFile {
		if fps = cp.get(propFPS); !(fps > 0 && fps <= 1000) {
			c.log.Warn("video file reports no usable frame rate; playing at 30 fps", "fps", fps)
			fps = 30
		}
		loopFile = c.src.URI
	}
	sched := newSchedule(fps, interval)
	defer sched.free()
	stop, err := newStopSignal(ctx)
	if err != nil {
		return fmt.Errorf("camera %q: %w", c.src.Name, err)
	}
	defer stop.close()

	gr, err := startGrabber(cp, enc, sched, stop.fd, loopFile, c.outfd)
	if err != nil {
		return fmt.Errorf("camera %q: %w", c.src.Name, err)
	}
	defer gr.free()
	if c.outfd >= 0 {
		how := gr.nextWritten()
		if how == grabRunning {
			up()
			how = gr.nextWritten()
		}
		if how == grabStopped {
			return context.Cause(ctx)
		}
		return gr.grabError(how, c.src.Name)
	}
	for first := true; ; first = false {
		b, how := gr.next()
		if b == nil {
			if how == grabStopped {
				return context.Cause(ctx)
			}
			return gr.grabError(how, c.src.Name)
		}
		c.publish(b, time.Now())
		if first {
			up()
		}
	}
}

// stopSignal is an eventfd that becomes readable when ctx ends: the grabber's thread polls it
// between frames and sleeps on it while it paces a file.
type stopSignal struct {
	f       *os.File
	fd      int
	release func() bool
}

func newStopSignal(ctx context.Context) (*stopSignal, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	s := &stopSignal{f: os.NewFile(uintptr(fd), "camera-stop"), fd: fd}
	s.release = context.AfterFunc(ctx, s.signal)
	return s, nil
}

// signal makes the eventfd readable (it fails harmlessly once closed).
func (s *stopSignal) signal() { s.f.Write([]byte{1, 0, 0, 0, 0, 0, 0, 0}) }

func (s *stopSignal) close() {
	s.release()
	s.f.Close()
}

// open opens the source and asks for the configured mode. The error does not name the source.
func (c *Camera) open() (*capture, error) {
	// OpenCV only says "could not open": find the plain reason first.
	switch c.src.Kind {
	case camera.SourceFile, camera.SourceDevice:
		if _, err := os.Stat(c.src.URI); err != nil {
			return nil, err
		}
	case camera.SourceIndex:
		if runtime.GOOS == "linux" {
			if _, err := os.Stat(fmt.Sprintf("/dev/video%d", c.src.Index)); err != nil {
				return nil, err
			}
		}
	}
	cp, err := openCapture(c.src)
	if err != nil {
		return nil, err
	}
	if c.src.Kind == camera.SourceFile {
		return cp, nil
	}
	for _, s := range []struct {
		name string
		prop int
		v    float64
	}{
		{"width", propFrameWidth, float64(c.cfg.Width)},
		{"height", propFrameHeight, float64(c.cfg.Height)},
		{"fps", propFPS, c.cfg.FPS},
		{"buffer size", propBufferSize, 1},
	} {
		if s.v > 0 && !cp.set(s.prop, s.v) {
			c.log.Debug("camera ignored a setting", "setting", s.name, "value", s.v)
		}
	}
	c.log.Info("camera opened", "width", cp.get(propFrameWidth), "height", cp.get(propFrameHeight), "fps", cp.get(propFPS))
	return cp, nil
}

// sleep waits for d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
