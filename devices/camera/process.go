// Package camera is the agent's side of omnisat's camera: the camera section's settings, the
// V4L2 device list (pure Go ioctls), and Process, which runs the camera program
// (cmd/omnisat-camera, built on devices/camera/opencv) as a child process, reads its frames
// through a pipe and keeps the newest one for the agent (agent.FrameSource). OpenCV never
// loads in the agent's process, and a camera driver that crashes or hangs takes down only the
// camera program, which is restarted with backoff. See README.md in this folder.
package camera

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/omnisat/omnisat/internal/lines"
	"github.com/omnisat/omnisat/internal/quietin"
)

// Timings of the camera program's supervision.
const (
	// stopWait is how long the program has to exit after SIGTERM before it is killed: it
	// releases the camera (OpenCV may take up to its own 3 s close wait).
	stopWait = 5 * time.Second
	// silenceLimit is how long the program may say nothing at all (no frame, no state) before
	// it counts as hung and is killed. While the camera is up frames come every 1/encode_fps;
	// while it is lost the program says so after every failed attempt (at most retry_max
	// apart); OpenCV gives up a V4L2 read after 10 s and an RTSP read after 30 s.
	silenceLimit = time.Minute
)

// Process runs the camera program and keeps its newest frame. Latest may be called from any
// goroutine.
type Process struct {
	path    string
	cfg     Config
	log     *slog.Logger
	onState func(ok bool, err error)
	staleIn time.Duration

	cancel  context.CancelFunc
	done    chan struct{} // closed when the supervisor has stopped the program
	started chan struct{} // closed at the first frame or the first loss

	// Supervision timings (fields so that tests can shorten them).
	stopWait, silenceLimit time.Duration

	mu          sync.Mutex
	latest      []byte
	at          time.Time
	state       int // 0 unknown, 1 up, -1 lost: what onState was last told
	startedOnce sync.Once
}

// StartProcess starts the camera program at path for cfg (which must be valid) and keeps it
// running until ctx ends or Close: when it exits or garbles its output it is reported lost and
// started again after a backoff (cfg.Retry doubling to cfg.RetryMax). onState (may be nil) is
// told when the camera comes up and when it is lost (with why), once per change, from the
// supervising goroutine. A program that cannot be started at all (missing, not executable) is
// an error here, not a loss.
func StartProcess(ctx context.Context, path string, cfg Config, onState func(ok bool, err error), log *slog.Logger) (*Process, error) {
	return startProcess(ctx, path, cfg, onState, log, stopWait, silenceLimit)
}

func startProcess(ctx context.Context, path string, cfg Config, onState func(ok bool, err error), log *slog.Logger,
	stopWait, silenceLimit time.Duration) (*Process, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("camera %q: %w", cfg.Source, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		if err == nil {
			err = errors.New("not an executable file")
		}
		return nil, fmt.Errorf("camera %q: the camera program %s: %w", cfg.Source, path, err)
	}
	cfg = cfg.WithDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if onState == nil {
		onState = func(bool, error) {}
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &Process{path: path, cfg: cfg, log: log.With("camera", cfg.Source), onState: onState,
		staleIn: cfg.StaleAfter(),
		cancel:  cancel, done: make(chan struct{}), started: make(chan struct{}),
		stopWait: stopWait, silenceLimit: silenceLimit}
	go p.supervise(ctx)
	return p, nil
}

// WaitStarted waits until the first frame, the first loss (the camera is not there, or the
// program died), or the end of ctx; it reports whether a frame is available.
func (p *Process) WaitStarted(ctx context.Context) bool {
	select {
	case <-p.started:
	case <-ctx.Done():
	case <-p.done:
	}
	_, ok := p.Latest()
	return ok
}

// Latest returns the newest JPEG frame, or ok=false when there is none: the camera is lost,
// the program is being restarted, or nothing came for 3 encode intervals (at least 3 s). The
// bytes are shared with other callers and must not be modified.
func (p *Process) Latest() ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.latest == nil || time.Since(p.at) > p.staleIn {
		return nil, false
	}
	return p.latest, true
}

// Close stops the program (SIGTERM, then SIGKILL after a few seconds) and waits for it.
// Closing twice is harmless.
func (p *Process) Close() error {
	p.cancel()
	<-p.done
	return nil
}

// report tells onState about a change of state, once.
func (p *Process) report(ok bool, err error) {
	s := -1
	if ok {
		s = 1
	}
	p.mu.Lock()
	changed := p.state != s
	p.state = s
	if !ok {
		p.latest = nil
	}
	p.mu.Unlock()
	if changed {
		if ok {
			p.log.Info("camera up")
		} else {
			p.log.Warn("camera lost", "err", err)
		}
		p.onState(ok, err)
	}
	// After onState: whoever WaitStarted releases finds the loss already reported.
	if !ok {
		p.startedOnce.Do(func() { close(p.started) })
	}
}

func (p *Process) supervise(ctx context.Context) {
	defer close(p.done)
	backoff := p.cfg.Retry
	for {
		began := time.Now()
		err := p.runOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		p.report(false, err)
		if time.Since(began) > 2*p.cfg.RetryMax {
			backoff = p.cfg.Retry // it ran well for a while: this is a new fault
		}
		p.log.Info("restarting the camera program", "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, p.cfg.RetryMax)
	}
}

// runOnce runs the program until it exits, garbles its output, hangs, or ctx ends, and says
// why it ended.
func (p *Process) runOnce(ctx context.Context) error {
	cmd := exec.Command(p.path, p.cfg.Args()...)
	dieWithParent(cmd)
	// The frames' pipe is read quietly (package quietin): a frame a second otherwise woke the
	// runtime's monitor thread each time.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("camera program: %w", err)
	}
	defer stdout.Close()
	cmd.Stdout = stdoutW
	stderr, err := cmd.StderrPipe()
	if err != nil {
		stdoutW.Close()
		return fmt.Errorf("camera program: %w", err)
	}
	err = cmd.Start()
	stdoutW.Close() // the program has its own copy now
	if err != nil {
		return fmt.Errorf("start the camera program: %w", err)
	}
	logged := make(chan struct{})
	go func() { defer close(logged); p.forwardLog(stderr) }()

	// Stop it when asked, or when it has said nothing for silenceLimit.
	stop := make(chan struct{})
	heard := make(chan struct{}, 1)
	var hung error
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		silence := time.NewTimer(p.silenceLimit)
		defer silence.Stop()
		for {
			select {
			case <-heard:
				silence.Reset(p.silenceLimit)
				continue
			case <-ctx.Done():
			case <-silence.C:
				hung = fmt.Errorf("camera program: silent for %v: hung; killed", p.silenceLimit)
				cmd.Process.Kill()
				return
			case <-stop:
				return
			}
			cmd.Process.Signal(syscall.SIGTERM)
			t := time.NewTimer(p.stopWait)
			select {
			case <-t.C:
				p.log.Warn("camera program did not stop; killing it", "after", p.stopWait)
				cmd.Process.Kill()
			case <-stop:
				t.Stop()
			}
			return
		}
	}()

	readErr := p.read(NewStreamReader(quietin.Reader(stdout), p.cfg.MaxFrameBytes()), heard)
	if errors.Is(readErr, ErrGarbled) {
		cmd.Process.Kill()
	}
	io.Copy(io.Discard, stdout) // until it exits: never leave it blocked on a full pipe
	<-logged
	waitErr := cmd.Wait()
	close(stop)
	<-watched
	switch {
	case hung != nil:
		return hung
	case readErr != nil && !errors.Is(readErr, io.EOF):
		return fmt.Errorf("camera program: %w", readErr)
	case waitErr != nil:
		return fmt.Errorf("camera program exited: %w", waitErr)
	}
	return errors.New("camera program exited")
}

// read takes messages until the stream ends or breaks.
func (p *Process) read(r *StreamReader, heard chan<- struct{}) error {
	for {
		m, err := r.Next()
		if err != nil {
			return err
		}
		select {
		case heard <- struct{}{}:
		default:
		}
		switch m.Kind {
		case MsgFrame:
			p.mu.Lock()
			p.latest, p.at = m.Frame, time.Now()
			p.mu.Unlock()
			p.report(true, nil)
			p.startedOnce.Do(func() { close(p.started) })
		case MsgUp:
			p.report(true, nil)
		case MsgLost:
			p.report(false, errors.New(m.Reason))
		}
	}
}

// forwardLog passes the program's log lines on: its own warnings and errors as warnings, the
// rest (OpenCV's and the drivers' chatter included) at debug level. Lines are cut at 4 KiB.
func (p *Process) forwardLog(r io.Reader) {
	lines.Each(r, func(text string) {
		if strings.Contains(text, "level=WARN") || strings.Contains(text, "level=ERROR") {
			p.log.Warn("camera program: " + text)
		} else {
			p.log.Debug("camera program: " + text)
		}
	})
}
