package agent

import (
	"context"
	"sync"
	"time"
)

// pacer bounds how fast audio leaves: within each session, what has been sent after its first
// chunk never runs ahead of rate × what has been captured since the session started — the
// measure servers apply (Macaw OpenVoice answers more than 1.2× real time with
// session.rate_limit; MiniCPM-o processes input strictly in order, so a burst is only latency).
// Live capture is never held back; the audio queued by a gap (a reconnect, a sequential
// rollover) goes out at rate × real time instead of all at once; a session that has streamed a
// while catches a brief hold-up (a slow link, a busy machine) up at once, within that bound.
// Counting captured samples rather than wall time keeps it right for any source.
type pacer struct {
	rate  float64
	start int64 // captured samples when the session started
	sent  int64 // samples sent in it
	first int64 // samples of its first chunk
}

// restart begins a new session's count.
func (p *pacer) restart(captured int64) { p.start, p.sent, p.first = captured, 0, 0 }

// wait is how much more must be captured before the next chunk, of n samples, may go (0: now).
// On a device that is wall time.
func (p *pacer) wait(captured int64, n int) time.Duration {
	if p.sent == 0 {
		return 0
	}
	due := float64(p.start) + float64(p.sent-p.first+int64(n))/p.rate
	if ahead := due - float64(captured); ahead > 0 {
		return samplesToDuration(int(ahead) + 1)
	}
	return 0
}

// take accounts for a chunk of n samples that went out.
func (p *pacer) take(n int) {
	if p.sent == 0 {
		p.first = int64(n)
	}
	p.sent += int64(n)
}

// lagLimit is how old audio may be when it is handed to the connection: max_lag, plus — after a
// gap whose audio is being caught up — the age the queued audio had when the session started,
// shrinking as fast as the catch-up rate wins it back. Older audio is dropped at the moment of
// sending: a conversation is worth more live than complete.
type lagLimit struct {
	mu     sync.Mutex
	maxLag time.Duration
	gain   float64 // catch-up rate − 1: how much lag a second of catch-up wins back
	extra  time.Duration
	from   time.Time
}

// catchUp starts a catch-up of audio that is already extra old at now.
func (l *lagLimit) catchUp(now time.Time, extra time.Duration) {
	l.mu.Lock()
	l.extra, l.from = max(0, extra), now
	l.mu.Unlock()
}

func (l *lagLimit) at(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	won := time.Duration(float64(now.Sub(l.from)) * l.gain)
	return l.maxLag + max(0, l.extra-won)
}

// lazyDeadline is parent with a deadline whose runtime timer starts only if somebody waits on
// Done. A Send that finds room in the session's queue (nearly always) returns without waiting,
// and a timer started for every chunk and stopped unused still wakes the runtime and its
// monitor thread when it would have fired: once a second, just as the next chunk is handled.
type lazyDeadline struct {
	context.Context // the parent
	at              time.Time

	mu     sync.Mutex
	timed  context.Context // started by Done
	cancel context.CancelFunc
}

func withLazyDeadline(parent context.Context, at time.Time) *lazyDeadline {
	return &lazyDeadline{Context: parent, at: at}
}

func (c *lazyDeadline) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.at) {
		return d, true
	}
	return c.at, true
}

func (c *lazyDeadline) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timed == nil {
		c.timed, c.cancel = context.WithDeadline(c.Context, c.at)
	}
	return c.timed.Done()
}

func (c *lazyDeadline) Err() error {
	c.mu.Lock()
	timed := c.timed
	c.mu.Unlock()
	switch {
	case timed != nil:
		return timed.Err()
	case c.Context.Err() != nil:
		return c.Context.Err()
	case !time.Now().Before(c.at):
		return context.DeadlineExceeded
	}
	return nil
}

// release stops the timer if one was started.
func (c *lazyDeadline) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
}
