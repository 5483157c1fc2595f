package audio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/internal/quiettimer"
)

// Supervision timings (fields of link, so tests can shorten them).
const (
	// startupGrace is how long a new stream may take to deliver its first buffer. PulseAudio
	// through ALSA took 1.2–1.7 s here.
	defaultStartupGrace = 5 * time.Second
	// stallTimeout is how long a running stream may go without a callback before the device
	// counts as lost. Callbacks come every 10–100 ms; a USB device unplugged stops them.
	defaultStallTimeout = 2 * time.Second
	backoffMin          = time.Second
	backoffMax          = 30 * time.Second
	// closeTimeout bounds the wait for PortAudio to close a stream of a dead device.
	closeTimeout = 5 * time.Second
)

// link supervises the stream of one device. The stream callback notes when it moves frames;
// PortAudio says when the stream stops (its finished callback: the ALSA host stops the stream
// when the device fails). The supervising goroutine sleeps until one of those, or until its
// stall check finds nothing moved for stallTimeout. When the device is
// lost link reports it once, closes the stream, and reopens it with backoff (1 s doubling to
// 30 s) until a new stream delivers, then reports the device back. A device that stops
// delivering is lost whatever the reason, so that decides where PortAudio says nothing.
type link struct {
	kind, verb string // "microphone"/"read", "speaker"/"play": for messages
	spec       string // the device string from the configuration
	log        *slog.Logger
	onState    func(ok bool, err error)

	// open resolves the device and opens and starts a stream whose callback belongs to
	// generation gen. It runs under paDo and returns the stream and the device's name.
	open func(gen int64) (*paStream, string, error)
	// lost runs when the device is declared lost; since is when it last delivered.
	lost func(since time.Time, err error)
	// back runs when a new stream delivers.
	back func()
	// poll (may be nil) brings the record of what the stream moved up to date from its Go
	// side: a speaker with nothing to play lets its callback play silence without waking Go
	// (the bridge's idle flag), and its frames count as moved only once Go reads their records.
	poll func()
	// rest (may be nil) is asked, when a rest is requested (requestRest), whether the stream
	// may close now; when it says yes, no callback of the stream touches its buffers from then
	// on (it moved the generation, see retire), and the stream stays closed until
	// requestResume. A device at rest is not watched: nothing wakes for it.
	rest func() bool
	// resumed (may be nil) runs when a stream has opened again after a rest.
	resumed func()

	startupGrace, stallTimeout time.Duration

	movedAt   atomic.Int64  // when the callbacks last moved frames (Unix ns)
	gen       atomic.Int64  // the current stream's generation: older callbacks do nothing
	delivered atomic.Int64  // the last generation whose stream has delivered
	stopped   atomic.Int64  // the last generation whose stream PortAudio stopped
	kick      chan struct{} // a token when delivered or stopped changes
	restReq   chan struct{} // a token: close the stream if rest agrees
	resumeReq chan struct{} // a token: open the resting stream again
	rests     atomic.Int64  // rests taken
	looks     atomic.Int64  // stall checks made: each is a wake-up of the process
	// check is the running watch's stall-check timer (nil between watches): moved puts it off
	// while the stream delivers.
	check atomic.Pointer[quiettimer.Timer]

	// The supervising goroutine's own state.
	stream  *paStream
	name    string // the device's name as PortAudio gives it
	losses  atomic.Int64
	pubName atomic.Pointer[string] // name, for other goroutines
}

func newLink(kind, verb, spec string, log *slog.Logger, onState func(bool, error)) *link {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if onState == nil {
		onState = func(bool, error) {}
	}
	return &link{kind: kind, verb: verb, spec: spec, log: log, onState: onState,
		startupGrace: defaultStartupGrace, stallTimeout: defaultStallTimeout, kick: make(chan struct{}, 1),
		restReq: make(chan struct{}, 1), resumeReq: make(chan struct{}, 1)}
}

// requestRest asks the supervisor to close the stream if rest agrees; requestResume to open
// it again. Neither blocks.
func (l *link) requestRest()   { token(l.restReq) }
func (l *link) requestResume() { token(l.resumeReq) }

// retire moves the generation on: the current stream's callbacks stop touching our buffers.
func (l *link) retire() { l.gen.Add(1) }

func token(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// current reports whether a callback of generation g may still touch the device's buffers.
func (l *link) current(g int64) bool { return l.gen.Load() == g }

// moved notes that a callback of generation g (the current one) moved frames; the first
// buffer of a stream wakes the supervisor. It runs on Go's side of the stream, as the pump
// reads the callbacks' records, and puts the stall check off to stallTimeout from now (see
// watch). It does not block or allocate.
func (l *link) moved(g int64) {
	l.movedAt.Store(time.Now().UnixNano())
	if l.delivered.Load() != g {
		l.delivered.Store(g)
		l.wake()
	}
	if check := l.check.Load(); check != nil {
		check.Reset(l.stallTimeout)
	}
}

// deliveredWithin reports whether the callbacks moved frames within d before now.
func (l *link) deliveredWithin(now time.Time, d time.Duration) bool {
	at := l.movedAt.Load()
	return at != 0 && now.Sub(time.Unix(0, at)) < d
}

// finished is the stream's finished callback for generation g: the supervisor looks at once.
// Closing a stream ourselves moves the generation first, so that is not a loss.
func (l *link) finished(g int64) {
	if l.current(g) {
		l.stopped.Store(g)
		l.wake()
	}
}

func (l *link) wake() { token(l.kick) }

// openStream opens a new stream (generation +1). It leaves l.stream set on success.
func (l *link) openStream() error {
	g := l.gen.Add(1)
	var s *paStream
	var name string
	err := paDo(func() error {
		var err error
		s, name, err = l.open(g)
		return err
	})
	if err != nil {
		return err
	}
	l.stream, l.name = s, name
	l.pubName.Store(&name)
	return nil
}

// deviceName is the name of the device last opened.
func (l *link) deviceName() string {
	if p := l.pubName.Load(); p != nil {
		return *p
	}
	return ""
}

// closeStream stops and closes the current stream, giving up after closeTimeout (a dead
// device can make PortAudio hang; the device then counts as closed anyway).
func (l *link) closeStream() {
	s := l.stream
	l.stream = nil
	l.gen.Add(1) // its callbacks stop touching our buffers now
	if s == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		paClose(s)
	}()
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-done:
		if s.lost > 0 { // an output's count includes the silence it started with
			l.log.Info("audio: frames lost between the device and the pump", "device", l.kind, "frames", s.lost)
		}
		// The process's count, not the stream's: alsawait.c cannot tell streams apart.
		l.log.Debug("audio: stream closed", "device", l.kind, "name", l.name, "denied_readiness_in_process", deniedReadiness())
	case <-t.C:
		// Its goroutine ends if PortAudio ever returns; paClose keeps PortAudio initialised
		// meanwhile, and other devices are not blocked by it.
		l.log.Error("audio: closing the stream hangs; abandoning it", "device", l.kind, "name", l.name)
	}
}

// run supervises until ctx ends, then closes the stream and releases PortAudio. The first
// stream is open already. A stream whose device rests (see rest) is closed meanwhile and
// opened again when wanted; one that cannot be is a loss.
func (l *link) run(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	defer func() {
		l.closeStream()
		paRelease() // PortAudio stays initialised while an abandoned close still runs
	}()
	for {
		since, err := l.watch(ctx)
		if err == errRest {
			l.closeStream()
			l.rests.Add(1)
			l.log.Debug("audio: device at rest", "device", l.kind, "name", l.name)
			switch err = l.restUntilWanted(ctx); err {
			case nil:
				return
			case errResumed:
				continue
			}
			since = time.Now() // nothing was due to play while it rested
		}
		if err == nil {
			return
		}
		l.closeStream()
		l.losses.Add(1)
		l.log.Warn("audio: device lost", "device", l.kind, "name", l.name, "err", err)
		l.lost(since, err)
		l.onState(false, err)
		if !l.recover(ctx) {
			return
		}
		l.log.Info("audio: device back", "device", l.kind, "name", l.name)
		l.back()
		l.onState(true, nil)
	}
}

// errRest is watch's answer when the stream may rest (closed by run).
var errRest = errors.New("at rest")

// restUntilWanted waits, with the stream closed, until it is wanted again and opens it: nil
// when ctx ended first, errResumed once the new stream is open (it is watched from then on as
// any new stream: it has the startup grace to deliver), or why it could not be opened (a
// loss: run reopens with backoff).
func (l *link) restUntilWanted(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-l.resumeReq:
	}
	if err := l.openStream(); err != nil {
		return fmt.Errorf("%s %s %q: open again after a rest: %w", l.verb, l.kind, l.name, err)
	}
	l.log.Debug("audio: device resumed", "device", l.kind, "name", l.name)
	if l.resumed != nil {
		l.resumed()
	}
	return errResumed
}

// errResumed: restUntilWanted opened the stream again; not a loss.
var errResumed = errors.New("resumed")

// watch waits until the stream stops delivering (returning when it last did, and why) or ctx
// ends (nil error). It wakes when PortAudio reports the stream stopped, and for a stall check:
// has the frame count moved (and, when it has not for half of stallTimeout, does PortAudio
// still run the stream)? A stream that delivers is not checked: every delivery Go reads puts
// the check off to stallTimeout from then (moved), so it comes only once Go has seen nothing
// for that long, and a device that hangs without PortAudio noticing is found stallTimeout
// after its last buffer. Until its first buffer the stream is checked every half
// stallTimeout. The timer is a quiettimer: a runtime timer put off this way still woke the
// process, and the runtime's monitor thread with its naps, when it was first due (every
// stallTimeout, for nothing).
func (l *link) watch(ctx context.Context) (time.Time, error) {
	g := l.gen.Load()
	check := quiettimer.New()
	check.Reset(l.stallTimeout / 2)
	l.check.Store(check)
	defer func() {
		l.check.CompareAndSwap(check, nil)
		check.Close()
	}()
	opened := time.Now()
	// last is when the stream last delivered (its opening until it has).
	last := func() time.Time {
		if l.delivered.Load() != g {
			return opened
		}
		return time.Unix(0, l.movedAt.Load())
	}
	for {
		select {
		case <-ctx.Done():
			return last(), nil
		case <-l.restReq:
			select {
			case <-l.resumeReq: // from before: only a request after rest agrees counts
			default:
			}
			if l.rest != nil && l.rest() {
				return last(), errRest
			}
		case <-l.kick:
			if l.stopped.Load() == g {
				return last(), fmt.Errorf("%s %s %q: the stream stopped: device unplugged or its sound server gone", l.verb, l.kind, l.name)
			}
		case <-check.C:
			// A tick may come early (moved put the check off meanwhile): what follows judges
			// by when the stream last delivered, and sets the next check from it.
			now := time.Now()
			l.looks.Add(1)
			if l.poll != nil && !l.deliveredWithin(now, l.stallTimeout/2) {
				l.poll()
			}
			// A stream that delivered lately runs: asking PortAudio is a call into C, which
			// wakes the runtime's monitor thread (and its naps) for nothing.
			if !l.deliveredWithin(now, l.stallTimeout/2) && !l.streamActive() {
				return last(), fmt.Errorf("%s %s %q: the stream stopped: device unplugged or its sound server gone", l.verb, l.kind, l.name)
			}
			at, delivered := last(), l.delivered.Load() == g
			switch {
			case !delivered && now.Sub(at) > l.startupGrace:
				return at, fmt.Errorf("%s %s %q: no audio within %v of starting the stream", l.verb, l.kind, l.name, l.startupGrace)
			case delivered && now.Sub(at) >= l.stallTimeout:
				return at, fmt.Errorf("%s %s %q: no audio for %v: device unplugged or stalled", l.verb, l.kind, l.name, l.stallTimeout)
			}
			next := l.stallTimeout / 2
			if delivered {
				// Not less than a sixteenth: the wall clock the delivery times are kept in
				// may be slewed, and a look that came a hair early must not spin.
				next = max(l.stallTimeout-now.Sub(at), l.stallTimeout/16)
			}
			check.Reset(next)
		}
	}
}

// streamActive asks PortAudio whether the stream still runs (its ALSA thread stops it when the
// device fails). It does not wait for PortAudio's lock: when that is busy it says yes, and the
// frame count decides.
func (l *link) streamActive() bool {
	if l.stream == nil || !pa.mu.TryLock() {
		return true
	}
	defer pa.mu.Unlock()
	return pa.inited && l.stream.active()
}

// recover reopens the device with backoff until a stream delivers (true) or ctx ends.
func (l *link) recover(ctx context.Context) bool {
	backoff := backoffMin
	for {
		if devices.Sleep(ctx, backoff) != nil {
			return false
		}
		paRescan()
		err := l.openStream()
		if err == nil {
			if err = l.waitFirst(ctx); err == nil {
				return true
			}
			l.closeStream()
		}
		if ctx.Err() != nil {
			return false
		}
		backoff = min(2*backoff, backoffMax)
		l.log.Info("audio: reopen failed", "device", l.kind, "spec", l.spec, "err", err, "retry_in", backoff)
	}
}

// waitFirst waits until the new stream has delivered: the callback wakes it.
func (l *link) waitFirst(ctx context.Context) error {
	g := l.gen.Load()
	t := time.NewTimer(l.startupGrace)
	defer t.Stop()
	for l.delivered.Load() != g {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return fmt.Errorf("%s %s %q: no audio within %v of reopening", l.verb, l.kind, l.name, l.startupGrace)
		case <-l.kick:
		}
	}
	return nil
}
