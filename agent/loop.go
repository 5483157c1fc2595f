package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/omnisat/omnisat/internal/quiettimer"
	"github.com/omnisat/omnisat/pipeline"
	"github.com/omnisat/omnisat/realtime"
)

const (
	// historyLen bounds the utterances kept for carry-over.
	historyLen = 64
	// playbackRecheck is the least wait before looking at playback again when queued audio
	// should have ended but has not quite (a device a little behind its clock).
	playbackRecheck = 20 * time.Millisecond
)

// live is one open session.
type live struct {
	sess    realtime.Session
	id      string
	started time.Time
	kv      int
	kvShown int  // kv as last published in the status
	planned bool // we are closing it on purpose: its end is not a loss
	retired bool // its traffic has been added to the totals
	judged  bool // counted for backoff (healthy or not)
	healthy bool // lived long enough and took audio: what follows it need not wait

	// sent is what Send accepted, for a resend after an unplanned end: the newest chunks, at
	// most reconnect_buffer of audio (older ones would not be sent again anyway).
	sentMu     sync.Mutex
	sent       []chunk
	sentAudio  int    // samples in sent
	sentN      uint64 // chunks Send accepted
	counted    uint64 // delivered chunks already added to the totals
	eventsDone bool   // its Events channel is closed

	replyOpen bool
	replyResp string // the response id of the newest reply delta ("" where the server sends none)
	replyText strings.Builder
	// An interrupted reply goes on arriving for a while (the server streams what it had
	// generated): cutting drops its audio and text until the server ends that turn (listen, its
	// end of turn, a TTS event) or a delta of another response begins the next; cutResp, the
	// interrupted reply's id, keeps dropping its stragglers after that.
	cutting    bool
	cutResp    string
	replyStart time.Time
	lastDelta  time.Duration // duration of the newest reply audio delta
	// resampler brings reply audio at another rate (OpenVoice's TTS rate) to the speaker's 24 kHz.
	resampler *pipeline.Resampler

	says []*pendingSay // OpenVoice tts.speak requests waiting for tts.speaking_end, oldest first
}

// pendingSay is a Say on an OpenVoice session: it succeeds when its request's speech has been
// synthesised (tts.speaking_end not cancelled), fails when it is cancelled (tts.cancel, a newer
// say, the session's end), on an error before its speech starts, or at its deadline.
type pendingSay struct {
	id, text string
	request  string // the tts.speak request_id its TTSState events carry
	started  bool   // tts.speaking_start seen
	deadline *time.Timer
}

// sentChunk records a chunk Send accepted (called by the sender under sendMu); keep bounds the
// audio remembered for a resend. The audio of a chunk that leaves the list is referred to by
// nothing else (Send keeps none of it): its buffer goes back to bufs for capture.
func (lv *live) sentChunk(c chunk, keep int, bufs *chunkBuffers) {
	lv.sentMu.Lock()
	defer lv.sentMu.Unlock()
	lv.sentN++
	lv.sent = append(lv.sent, c)
	lv.sentAudio += len(c.audio)
	for len(lv.sent) > 1 && lv.sentAudio-len(lv.sent[0].audio) >= keep {
		lv.sentAudio -= len(lv.sent[0].audio)
		bufs.put(lv.sent[0].audio)
		lv.sent[0] = chunk{}
		lv.sent = lv.sent[1:]
	}
}

func (lv *live) accepted() uint64 {
	lv.sentMu.Lock()
	defer lv.sentMu.Unlock()
	return lv.sentN
}

// delivered is how many of its chunks reached the server: every byte acknowledged by its TCP
// stack.
func (lv *live) delivered() uint64 { return lv.sess.Stats().ChunksDelivered }

// undelivered returns the remembered chunks whose ids the session reported as never delivered,
// oldest first, and hands the others' buffers back to bufs: the session has ended and nothing
// else refers to them.
func (lv *live) undelivered(ids []uint64, bufs *chunkBuffers) []chunk {
	lv.sentMu.Lock()
	defer lv.sentMu.Unlock()
	var out []chunk
	for _, c := range lv.sent {
		if slices.Contains(ids, c.seq) {
			out = append(out, c)
		} else {
			bufs.put(c.audio)
		}
	}
	clear(lv.sent)
	lv.sent, lv.sentAudio = nil, 0
	return out
}

// release hands the buffers of the chunks the session still remembers back to bufs, once it
// has closed on purpose: nothing sends them again. Without it a rollover's new session, whose
// reconnect buffer starts empty, made a new buffer for each of its first chunks while the old
// session's went to the collector.
func (lv *live) release(bufs *chunkBuffers) {
	lv.undelivered(nil, bufs)
}

type attempt struct {
	cancel   context.CancelFunc
	rollover atomic.Bool // opening the next session ahead of a planned rollover
}

// queueLeaveWait bounds how long a dial given up in a gateway's queue waits there for a worker,
// to hand it back (realtime.Config.QueueLeaveWait). Long enough for one of our sessions to close
// (a flush and a goodbye, each within the close budget) and the gateway to free its worker; short
// enough for a stop within systemd's 20 s.
func (s *Supervisor) queueLeaveWait() time.Duration { return 2*s.closeBudget() + 2*time.Second }

// episodeQuiet is how long without a repeat ends an episode of a recurring complaint: the next
// one is news again.
const episodeQuiet = time.Minute

// episode coalesces a recurring event: the first of a session, or the first after episodeQuiet
// without one, is news (logged, published); the rest are only counted. It needs no timer: the
// quiet is measured when the next one comes.
type episode struct {
	session string
	last    time.Time
}

func (e *episode) news(lv *live, now time.Time) bool {
	fresh := e.session != lv.id || e.last.IsZero() || now.Sub(e.last) >= episodeQuiet
	e.session, e.last = lv.id, now
	return fresh
}

type dialResult struct {
	a    *attempt
	sess realtime.Session
	err  error
}

// loop is the supervisor's state machine. Only its goroutine touches these fields. It sleeps
// until something happens — a command, a server event, a dial's end, speech — or until the
// earliest deadline it keeps (a retry, the end of queued playback, a rollover, a switch, the
// idle timeout); with none, no timer runs.
type loop struct {
	s           *Supervisor
	ctx         context.Context
	dialDone    chan dialResult
	queuedAhead chan *attempt // a rollover's pre-opened session was put in the server's queue
	wg          sync.WaitGroup
	wake        *quiettimer.Timer // moved at nearly every event: see quiettimer
	wakeAt      time.Time

	want        bool  // a session is wanted (policy, commands)
	stopped     bool  // stopped by command: nothing is kept, speech does not start a session
	ended       bool  // a wanted period has ended (stop, idle) since Run began
	cur         *live // the session in use
	next        *live // a ready session waiting for the moment to switch to (rollover)
	nextReadyAt time.Time
	dialing     *attempt
	attempted   bool      // a session was dialled since start: later dials are reconnects
	failures    int       // consecutive failures (dials, sessions that ended before they were useful)
	retryAt     time.Time // the next attempt after a failure
	lastReason  string    // the configuration error last announced: say it once, then count
	// announced holds the kinds of failure said in the current run of failures (see
	// failureKind): each is said once, then counted.
	announced map[string]bool
	// rolloverNotBefore holds the next rollover back after one that came too soon (backoff).
	rolloverNotBefore time.Time
	// rolloverSince is when a sequential rollover became due (it waits for a listening moment).
	rolloverSince time.Time
	// sequential: the server queued a pre-opened session behind ours (one worker), so rollovers
	// close the old session first.
	sequential bool
	lastActive time.Time // last speech either way (idle timeout)
	// The server's flow-control complaints, said once per episode and counted.
	dropEpisode, rateEpisode episode
	history                  []Utterance
	reconnects               int // attempts after the first since start
	rollovers                int
	lost                     int // sessions that ended without being asked to
}

func newLoop(s *Supervisor, ctx context.Context) *loop {
	l := &loop{s: s, ctx: ctx, dialDone: make(chan dialResult, 2),
		queuedAhead: make(chan *attempt, 1), wake: quiettimer.New()}
	return l
}

func (l *loop) run(captureErr <-chan error) error {
	s := l.s
	defer l.wake.Close()
	l.lastActive = s.now()
	if s.cfg.Policy == PolicyAlways && !s.held.Load() {
		l.start("policy always")
	} else {
		if s.held.Load() {
			s.log.Info("agent: a stop command holds the session off (ctl start or cmd/session start resumes)")
		}
		l.publish()
	}
	for {
		l.reconcile()
		// The sessions' events are read here, with no goroutine in between.
		cur, next := l.cur, l.next
		var curEvents, nextEvents <-chan realtime.Event
		if cur != nil && !cur.eventsDone {
			curEvents = cur.sess.Events()
		}
		if next != nil && !next.eventsDone {
			nextEvents = next.sess.Events()
		}
		select {
		case <-l.ctx.Done():
			l.shutdown()
			return nil
		case err := <-captureErr:
			captureErr = nil
			if errors.Is(err, io.EOF) {
				s.log.Info("agent: audio input ended; finishing")
				l.finishInput()
				l.shutdown()
				return io.EOF
			}
			if err != nil {
				s.log.Error("agent: capture stopped", "err", err)
				l.shutdown()
				return err
			}
		case f := <-s.cmds:
			f(l)
		case ev, ok := <-curEvents:
			l.handleSession(cur, ev, ok)
		case ev, ok := <-nextEvents:
			l.handleSession(next, ev, ok)
		case dr := <-l.dialDone:
			l.handleDial(dr)
		case a := <-l.queuedAhead:
			l.handleQueuedAhead(a)
		case speaking := <-s.speechCh:
			l.handleSpeech(speaking)
		case <-s.playCh:
		case <-l.wake.C:
			// Possibly a tick from before the last move (reconcile re-arms it then).
			l.wakeAt = time.Time{}
			s.timerWakes.Add(1)
		}
	}
}

// reconcile acts on every condition and deadline that has come, then sets the wake-up for the
// earliest one still ahead.
func (l *loop) reconcile() {
	s := l.s
	now := s.now()
	if !l.retryAt.IsZero() && !now.Before(l.retryAt) {
		l.retryAt = time.Time{}
		l.connect(false)
	}
	if l.cur != nil {
		l.updatePlayback()
		if l.needRollover(l.cur, now) {
			l.rollover(now)
		}
		l.maybeSwitch(now)
	}
	if l.cur != nil && s.cfg.Policy != PolicyAlways && now.Sub(l.lastActive) >= s.cfg.IdleTimeout && s.speaker.Pending() == 0 {
		s.log.Info("agent: idle; ending the session", "idle_timeout", s.cfg.IdleTimeout)
		l.idle("idle")
	}
	at := l.nextDeadline(now)
	if at.Equal(l.wakeAt) {
		return
	}
	l.wake.Stop()
	l.wakeAt = at
	if !at.IsZero() {
		l.wake.Reset(max(at.Sub(now), time.Millisecond))
	}
}

// nextDeadline is the earliest moment something is due that no event will announce. Every
// deadline reconcile has just acted on is gone or moved ahead, so this is never in the past.
func (l *loop) nextDeadline(now time.Time) time.Time {
	s := l.s
	var at time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	consider(l.retryAt)
	cur := l.cur
	if cur == nil {
		return at
	}
	pending := s.speaker.Pending()
	if pending > 0 {
		consider(now.Add(max(pending, playbackRecheck))) // speaking → listening
	}
	switch {
	case l.next != nil:
		consider(l.nextReadyAt.Add(s.cfg.SwitchWait))
	case l.dialing == nil || l.queuedNext():
		if due := l.rolloverDue(cur, now); !due.IsZero() {
			due = later(due, l.rolloverNotBefore)
			if !l.rolloverSince.IsZero() {
				due = later(due, l.rolloverSince.Add(s.cfg.SwitchWait))
			}
			consider(due)
		}
	}
	if s.cfg.Policy != PolicyAlways && pending == 0 {
		consider(l.lastActive.Add(s.cfg.IdleTimeout))
	}
	if !at.IsZero() && !at.After(now) {
		// A deadline that reconcile did not act on would wake the loop at once, again and
		// again: never spin, whatever the bug.
		s.log.Error("agent: a deadline is in the past; checking again in a second", "at", at)
		at = now.Add(time.Second)
	}
	return at
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// publish sends the current status without changing the state.
func (l *loop) publish() { l.s.updateStatus(func(*Status) {}) }

// start wants a session from now on. Audio captured before (while stopped or idle) is not
// sent, except policy voice's pre-roll when speech is what starts it.
func (l *loop) start(reason string) { l.begin(reason, false) }

func (l *loop) begin(reason string, keepPreRoll bool) {
	if l.want {
		return
	}
	s := l.s
	if l.ended && !keepPreRoll {
		s.newEpoch()
	}
	l.want, l.stopped, l.attempted = true, false, false
	l.failures, l.lastReason = 0, ""
	clear(l.announced)
	s.backlog.counting(true)
	s.backlog.setLimit(durationToSamples(s.gapBuffer()))
	s.log.Info("agent: session wanted", "reason", reason)
	l.connect(false)
}

// stop ends the session on command and holds none until start: nothing heard meanwhile is kept.
func (l *loop) stop(reason string) { l.end(reason, true) }

// idle ends the session because nobody talks (on_demand, voice): policy voice keeps listening
// locally for speech, with its pre-roll.
func (l *loop) idle(reason string) { l.end(reason, false) }

func (l *loop) end(reason string, stopped bool) {
	s := l.s
	l.want, l.stopped, l.ended = false, stopped, true
	s.newEpoch() // what was captured until now is never sent
	l.retryAt, l.rolloverSince, l.rolloverNotBefore = time.Time{}, time.Time{}, time.Time{}
	l.closeAll(reason)
	s.backlog.counting(false)
	s.backlog.clear()
	s.backlog.setLimit(durationToSamples(s.idleBuffer(stopped)))
	s.setState(StateIdle, reason, func(st *Status) { l.clearSession(st) })
}

func (l *loop) restart(reason string) {
	l.stop(reason)
	l.start(reason)
}

// abandonDials gives up the dial under way. A gateway that notices a queued client leave only
// when it next writes to it gives a worker that frees meanwhile to the client that left, and
// loses it for good; so a dial waiting in the queue does not vanish from it: it waits (bounded,
// queueLeaveWait) for its worker and hands it straight back. The worker about to free is often
// ours (the session closed with the stop); a stranger's may free at any moment too, and a
// jammed gateway is worse for every client than a stop that takes a few seconds.
func (l *loop) abandonDials() {
	if l.dialing != nil {
		l.dialing.cancel()
		l.dialing = nil
	}
}

// closeAll ends the current and the next session (not waiting).
func (l *loop) closeAll(reason string) {
	l.abandonDials()
	l.s.sendMu.Lock()
	l.s.active.Store(nil)
	l.s.sendMu.Unlock()
	for _, lv := range []*live{l.cur, l.next} {
		if lv != nil {
			l.finishReply(lv)
			l.closeAsync(lv, "user_stop", false)
		}
	}
	if l.cur != nil {
		// Ended on purpose (stop, restart, idle, shutdown): say so, as for any other end.
		l.s.bus.publish(Lifecycle{Kind: "session_ended", SessionID: l.cur.id, Reason: reason, At: l.s.now()})
	}
	l.cur, l.next = nil, nil
}

// retire counts a session's traffic and deliveries into the totals when it stops being the
// active one (it may still exchange the goodbye; that little is not counted).
func (l *loop) retire(lv *live) {
	if lv == nil || lv.retired {
		return
	}
	lv.retired = true
	t := lv.sess.Stats()
	l.s.bytesUp.Add(t.BytesSent)
	l.s.bytesDown.Add(t.BytesReceived)
	l.count(lv, t.ChunksDelivered)
}

// count adds a session's newly delivered chunks to the total (chunks_sent), so that it only
// grows: when it stops being the active one, and again once its goodbye is done.
func (l *loop) count(lv *live, delivered uint64) {
	lv.sentMu.Lock()
	n := delivered - min(lv.counted, delivered)
	lv.counted = max(lv.counted, delivered)
	lv.sentMu.Unlock()
	l.s.delivered.Add(n)
}

// closeAsync says goodbye to a session in the background.
func (l *loop) closeAsync(lv *live, reason string, flush bool) {
	l.failSays(lv, "the session ended before the speech was finished")
	l.retire(lv)
	lv.planned = true
	drain := !lv.eventsDone
	budget := l.s.closeBudget()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		if drain {
			// Nobody reads its events any more: drain them, so its reader never waits on us.
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				for range lv.sess.Events() {
				}
			}()
		}
		began := time.Now()
		if flush {
			l.flush(lv, budget)
		}
		flushed := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		lv.sess.Close(ctx, reason)
		lv.release(l.s.chunkBufs)
		l.count(lv, lv.sess.Stats().ChunksDelivered)
		l.s.log.Debug("agent: session closed", "session", lv.id, "flush", flushed.Sub(began).Round(time.Millisecond),
			"close", time.Since(flushed).Round(time.Millisecond))
	}()
}

// flush waits (bounded) until the server has every chunk the session accepted: a session's
// Close drops what it has not written yet, and a rolled-over session's audio must all arrive.
// It checks every 10 ms, for the moment of a switch only.
func (l *loop) flush(lv *live, budget time.Duration) {
	deadline := time.Now().Add(budget)
	for lv.delivered() < lv.accepted() {
		if time.Now().After(deadline) {
			l.s.log.Warn("agent: the old session did not take all its audio in time; closing it anyway",
				"session", lv.id, "accepted", lv.accepted(), "delivered", lv.delivered())
			return
		}
		select {
		case <-lv.sess.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (l *loop) clearSession(st *Status) {
	st.SessionID, st.KVCacheLength, st.QueuePosition, st.QueueWaitS = "", 0, 0, 0
	st.NextAttempt = time.Time{}
	l.counters(st)
}

func (l *loop) counters(st *Status) {
	st.Reconnects, st.Rollovers, st.SessionsLost = l.reconnects, l.rollovers, l.lost
}

// connect starts a dial for the session in use, unless one is under way, one is scheduled, or
// none is wanted. A sequential rollover's dial is not a reconnect.
func (l *loop) connect(rollover bool) {
	if !l.want || l.dialing != nil || l.cur != nil || !l.retryAt.IsZero() || l.ctx.Err() != nil {
		return
	}
	if l.next != nil { // a ready rollover session takes over at once
		l.activate(l.next)
		l.next = nil
		return
	}
	if l.attempted && !rollover {
		l.reconnects++
	}
	l.attempted = true
	l.s.setState(StateConnecting, "", func(st *Status) { st.NextAttempt = time.Time{}; l.counters(st) })
	l.startDial(false)
}

func (l *loop) startDial(rollover bool) {
	s := l.s
	// Only abandonDials ends a dial (the shutdown too), so that it leaves a queue as it should.
	ctx, cancel := context.WithCancel(context.WithoutCancel(l.ctx))
	a := &attempt{cancel: cancel}
	a.rollover.Store(rollover)
	l.dialing = a
	cfg := s.server
	cfg.Init.Instructions = s.currentInstructions()
	if *s.cfg.CarryOver {
		cfg.Init.Instructions = carryOver(cfg.Init.Instructions, l.history, s.cfg.CarryOverChars)
	}
	cfg.QueueLeaveWait = s.queueLeaveWait
	cfg.OnQueue = func(q realtime.QueueStatus) {
		if ctx.Err() != nil {
			return // abandoned: nothing to say
		}
		if a.rollover.Load() {
			s.log.Debug("agent: next session queued", "position", q.Position, "done", q.Done)
			if !q.Done {
				select {
				case l.queuedAhead <- a:
				default:
				}
			}
			return
		}
		if q.Done {
			s.setState(StateStarting, "", func(st *Status) { st.QueuePosition, st.QueueWaitS = 0, 0 })
			return
		}
		s.setState(StateQueued, fmt.Sprintf("position %d of %d", q.Position, q.Length), func(st *Status) {
			st.QueuePosition, st.QueueWaitS = q.Position, q.EstimatedWait.Seconds()
		})
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		sess, err := s.dial(ctx, cfg)
		if sess != nil && ctx.Err() != nil {
			// Abandoned as it came up: leave before saying the dial is over.
			cctx, cancel := context.WithTimeout(context.Background(), s.closeBudget())
			sess.Close(cctx, "user_stop")
			cancel()
			sess, err = nil, ctx.Err()
		}
		select {
		case l.dialDone <- dialResult{a: a, sess: sess, err: err}:
		case <-l.ctx.Done():
			if sess != nil {
				cctx, cancel := context.WithTimeout(context.Background(), s.closeBudget())
				sess.Close(cctx, "user_stop")
				cancel()
			}
		}
	}()
}

func (l *loop) handleDial(dr dialResult) {
	s := l.s
	if dr.a != l.dialing { // abandoned or superseded
		if dr.sess != nil {
			l.closeAsync(&live{sess: dr.sess}, "user_stop", false)
		}
		return
	}
	l.dialing = nil
	dr.a.cancel()
	if dr.err != nil {
		if l.ctx.Err() != nil {
			return
		}
		if dr.a.rollover.Load() && l.cur != nil {
			l.nextFailed(dr.err, "agent: could not open the next session; the old one continues")
			return
		}
		if realtime.ClassOf(dr.err) == realtime.ClassConfig {
			l.configError(dr.err)
			return
		}
		l.failures++
		l.scheduleRetry(failureKind(dr.err, dr.err.Error()), dr.err.Error())
		return
	}
	lv := l.adopt(dr.sess)
	if !l.want {
		l.closeAsync(lv, "user_stop", false)
		return
	}
	if dr.a.rollover.Load() && l.cur != nil {
		l.next, l.nextReadyAt = lv, s.now()
		s.log.Info("agent: next session ready; switching when the model listens", "session", lv.id)
		return
	}
	l.activate(lv)
}

// nextFailed: the session opened ahead of a rollover failed (its dial, or it ended before the
// switch). The old session still works and is kept; the next try waits as a reconnect would:
// slowly after a configuration error, else the growing backoff, so that a server that fails
// or ends every next session meets growing waits, not a storm.
func (l *loop) nextFailed(err error, msg string) {
	s := l.s
	if realtime.ClassOf(err) == realtime.ClassConfig {
		l.rolloverNotBefore = s.now().Add(l.configRetryWait())
		l.announce(failureKind(err, err.Error()), err.Error(), msg, "retry_at", l.rolloverNotBefore)
		return
	}
	l.failures++
	wait := s.backoff(l.failures)
	l.rolloverNotBefore = s.now().Add(wait)
	l.announce(failureKind(err, err.Error()), err.Error(), msg, "retry_in", wait)
}

// handleQueuedAhead: the session opened ahead of a rollover waits in the server's queue — on a
// one-worker server, behind our own session, until that one ends. It stays there and becomes the
// next session when ours closes (see rollover); later rollovers close the old session first.
func (l *loop) handleQueuedAhead(a *attempt) {
	if !a.rollover.Load() || l.sequential {
		return
	}
	// The queue report may come after our session ended or after the dial got its worker (the
	// loop took those first): the server queued a session opened beside ours all the same, so
	// the next rollovers are sequential whatever became of this one.
	l.s.log.Info("agent: the next session was queued behind ours (a one-worker server?); " +
		"rollovers close the old session first from now on")
	l.sequential = true
}

// queuedNext reports whether the dial under way is a rollover's pre-opened session that waits in
// the server's queue behind ours: closing ours gives it the worker.
func (l *loop) queuedNext() bool {
	return l.dialing != nil && l.sequential && l.dialing.rollover.Load()
}

// adopt takes a new session in: the loop reads its events while it is current or next.
func (l *loop) adopt(sess realtime.Session) *live {
	return &live{sess: sess, id: sess.Info().ID, started: l.s.now()}
}

// activate makes lv the session in use: the sender feeds it from now on. After a gap, the audio
// queued meanwhile is caught up.
func (l *loop) activate(lv *live) {
	s := l.s
	now := s.now()
	s.sendMu.Lock()
	old := l.cur
	l.cur = lv
	s.active.Store(lv)
	s.sendMu.Unlock()
	select {
	case s.activeCh <- struct{}{}:
	default:
	}
	if old != nil {
		l.finishReply(old)
		l.closeAsync(old, "user_stop", true)
	} else if oldest := s.backlog.oldest(); !oldest.IsZero() {
		s.lag.catchUp(now, now.Sub(oldest))
	}
	s.backlog.setLimit(durationToSamples(s.liveBuffer()))
	s.dropping.Store(false)
	l.rolloverSince = time.Time{}
	l.lastActive = now
	s.setState(StateListening, "", func(st *Status) {
		st.SessionID, st.KVCacheLength, st.QueuePosition, st.QueueWaitS = lv.id, 0, 0, 0
		st.NextAttempt, st.LastError = time.Time{}, ""
		l.counters(st)
	})
	s.bus.publish(Lifecycle{Kind: "session_started", SessionID: lv.id, At: now})
}

// announce logs a failure at warning level the first time its kind is seen in a run of
// failures, then at debug level: a device stuck for hours says what is wrong once, and counts,
// also when two problems alternate (a busy server and a dial that times out).
func (l *loop) announce(kind, reason, msg string, args ...any) bool {
	args = append(args, "reason", reason, "failures", l.failures)
	if l.announced[kind] || len(l.announced) >= maxAnnounced {
		l.s.log.Debug(msg, args...)
		return false
	}
	if l.announced == nil {
		l.announced = map[string]bool{}
	}
	l.announced[kind] = true
	l.s.log.Warn(msg, args...)
	return true
}

// maxAnnounced bounds the kinds of failure said in one run; past it the rest are counted only.
const maxAnnounced = 16

// failureKind names a failure by what went wrong, not by its words: a dial error's message
// holds the local port, which differs on every attempt.
func failureKind(err error, reason string) string {
	var e *realtime.Error
	if errors.As(err, &e) && e.Code != "" {
		return fmt.Sprintf("%v/%s", e.Class, e.Code)
	}
	return reason
}

func (l *loop) configRetryWait() time.Duration {
	r := l.s.cfg.ConfigErrorRetry
	return r*4/5 + time.Duration(l.s.rng.Float64()*float64(r/5))
}

// configError: retrying at once will not help (authentication, wrong dialect, unknown model).
// Try again slowly, so that a fixed server or setting heals the device without a visit.
func (l *loop) configError(err error) {
	s := l.s
	msg := err.Error()
	at := s.now().Add(l.configRetryWait())
	l.retryAt = at
	if msg != l.lastReason {
		l.lastReason = msg
		s.log.Error("agent: configuration problem; trying again slowly", "err", err, "next_attempt", at)
		s.bus.publish(Lifecycle{Kind: "error", Reason: msg, At: s.now()})
	} else {
		s.log.Debug("agent: configuration problem persists", "err", err, "next_attempt", at)
	}
	s.setState(StateError, msg, func(st *Status) { l.clearSession(st); st.LastError, st.NextAttempt = msg, at })
}

func (l *loop) scheduleRetry(kind, reason string) {
	s := l.s
	wait := s.backoff(l.failures)
	at := s.now().Add(wait)
	l.retryAt = at
	if l.announce(kind, reason, "agent: reconnecting", "wait", wait) {
		s.bus.publish(Lifecycle{Kind: "reconnect", Reason: reason, At: s.now()})
	}
	s.setState(StateReconnecting, reason, func(st *Status) {
		l.clearSession(st)
		st.NextAttempt, st.LastError = at, reason
	})
}

// judge counts a session that has ended, or is being rolled over, toward backoff, once: one
// that did not live backoff_max or took no audio ended before it was useful, and what follows
// it waits as after a failed connect. A server that ends every session at once thus meets
// growing waits, never a storm.
func (l *loop) judge(lv *live) bool {
	if !lv.judged {
		lv.judged = true
		lv.healthy = l.s.now().Sub(lv.started) >= l.s.cfg.BackoffMax && lv.delivered() > 0
		if lv.healthy {
			l.failures = 0
			l.lastReason = "" // the next failure is news
			clear(l.announced)
		} else {
			l.failures++
		}
	}
	return lv.healthy
}

func (l *loop) handleSession(lv *live, ev realtime.Event, ok bool) {
	if !ok {
		lv.eventsDone = true
		return
	}
	if lv != l.cur && lv != l.next {
		return // a session we have left behind
	}
	s := l.s
	switch ev := ev.(type) {
	case realtime.Closed:
		if lv == l.next {
			l.next = nil
			l.retire(lv)
			var err error = errors.New("session ended: " + cmp.Or(ev.Reason, "no reason given"))
			if ev.Err != nil {
				err = ev.Err
			}
			l.nextFailed(err, "agent: the next session ended before the switch; the old one continues")
			return
		}
		if lv.planned {
			return
		}
		l.sessionLost(lv, ev)
	case realtime.Listen:
		if lv == l.cur {
			lv.cutting = false
			l.onListen(lv)
		}
	case realtime.TextDelta:
		if lv != l.cur || l.cut(lv, ev.ResponseID) {
			return
		}
		l.openReply(lv)
		lv.replyText.WriteString(ev.Text)
		l.lastActive = s.now()
		s.bus.publish(TextDelta{SessionID: lv.id, Text: ev.Text})
	case realtime.AudioDelta:
		if lv == l.cur && ev.SampleRate > 0 && !l.cut(lv, ev.ResponseID) {
			l.openReply(lv)
			lv.lastDelta = time.Duration(len(ev.Samples)) * time.Second / time.Duration(ev.SampleRate)
			s.queueReply(lv.toSpeakerRate(ev, s.log))
			l.lastActive = s.now()
		}
		// Played (the speaker copies) or dropped: the session may decode later audio into these.
		if r, ok := lv.sess.(realtime.AudioRecycler); ok {
			r.RecycleAudio(ev.Samples)
		}
	case realtime.TurnDone:
		if lv == l.cur {
			lv.cutting = false
			l.finishReply(lv)
		}
	case realtime.MetricsUpdate:
		m := ev.Metrics
		if m.KVCacheLength > 0 {
			lv.kv = m.KVCacheLength
		}
		step := m.PrefillMS > 0 || m.GenerateMS > 0 || m.WallClockMS > 0
		if lv != l.cur || (!step && m.KVCacheLength == 0) {
			break
		}
		edit := func(st *Status) {
			st.KVCacheLength = lv.kv
			if step {
				st.LastStep = &StepMetrics{PrefillMS: m.PrefillMS, GenerateMS: m.GenerateMS, WallClockMS: m.WallClockMS,
					Tokens: m.NTokens, TTSTokens: m.NTTSTokens, At: s.now()}
			}
		}
		// The status keeps the newest figures, but is published when the context has moved by
		// a step (1/64 of the limit), not on every server step: subscribers wake for news.
		if lv.kv >= lv.kvShown+s.cfg.ContextLimit/64 || lv.kv < lv.kvShown {
			lv.kvShown = lv.kv
			s.updateStatus(edit)
		} else {
			s.editStatus(edit)
		}
	case realtime.Transcript:
		u := Utterance{Role: "user", Text: ev.Text, SessionID: lv.id, End: s.now(), Partial: !ev.Final,
			Language: ev.Language, Duration: ev.Duration, Confidence: ev.Confidence, Segment: ev.SegmentID}
		u.Start = u.End.Add(-ev.Duration)
		if ev.Final {
			l.remember(u)
		}
		s.bus.publish(u)
	case realtime.VAD:
		if lv == l.cur {
			s.bus.publish(VoiceActivity{Source: "server", Speaking: ev.Speaking, At: s.now()})
		}
	case realtime.TTSState:
		lv.cutting = false // a synthesis ends (the cancelled one) or the next begins
		if !ev.Speaking && lv.resampler != nil && lv == l.cur {
			s.queueReply(lv.resampler.Flush(nil)) // the tail the filter held back
		}
		l.ttsState(lv, ev)
		l.updatePlayback()
	case realtime.FramesDropped:
		s.serverDropped.Add(int64(ev.Dropped))
		if l.dropEpisode.news(lv, s.now()) {
			s.log.Warn("agent: the server drops audio (it was sent faster than it takes); counting until it stops",
				"dropped", ev.Dropped, "message", ev.Message)
			s.bus.publish(Lifecycle{Kind: "audio_dropped", SessionID: lv.id, At: s.now(),
				Reason: fmt.Sprintf("the server dropped %v of audio: %s", ev.Dropped, ev.Message)})
		}
	case realtime.RateLimit:
		// The session already holds its audio back as asked: count it, say it once.
		s.rateLimits.Add(1)
		if l.rateEpisode.news(lv, s.now()) {
			s.log.Info("agent: the server asks to slow down; counting until it stops", "delay", ev.Delay, "message", ev.Message)
		}
	case realtime.ErrorEvent:
		s.log.Warn("agent: server problem (session continues)", "err", ev.Err)
		s.bus.publish(Lifecycle{Kind: "error", SessionID: lv.id, Reason: ev.Err.Error(), At: s.now()})
		l.sayFailed(lv, ev.Err.Error())
	}
}

// toSpeakerRate returns the delta's samples at the speaker's 24 kHz, resampling audio tagged
// with another rate (an OpenVoice server's TTS rate).
func (lv *live) toSpeakerRate(ev realtime.AudioDelta, log interface{ Warn(string, ...any) }) []float32 {
	if ev.SampleRate == outputRate || ev.SampleRate <= 0 {
		return ev.Samples
	}
	if lv.resampler == nil || lv.resampler.InRate() != ev.SampleRate {
		r, err := pipeline.NewResampler(ev.SampleRate, outputRate)
		if err != nil {
			log.Warn("agent: reply audio at an unplayable rate", "rate", ev.SampleRate, "err", err)
			return nil
		}
		lv.resampler = r
	}
	return lv.resampler.Process(nil, ev.Samples)
}

// cut says whether a reply delta belongs to an interrupted reply, which is not played; a delta
// of another response ends the cut: the server's next turn has begun.
func (l *loop) cut(lv *live, resp string) bool {
	if resp != "" && resp == lv.cutResp {
		return true
	}
	if lv.cutting && (resp == "" || lv.cutResp == "") {
		return true
	}
	lv.cutting = false
	if resp != "" {
		lv.replyResp = resp
	}
	return false
}

func (l *loop) openReply(lv *live) {
	if !lv.replyOpen {
		lv.replyOpen = true
		lv.replyStart = l.s.now()
		lv.replyText.Reset()
	}
}

// finishReply publishes the assistant's utterance when a reply ends.
func (l *loop) finishReply(lv *live) {
	if !lv.replyOpen {
		return
	}
	lv.replyOpen = false
	text := strings.TrimSpace(lv.replyText.String())
	lv.replyText.Reset()
	if text == "" {
		return
	}
	u := Utterance{Role: "assistant", Text: text, SessionID: lv.id, Start: lv.replyStart, End: l.s.now()}
	l.remember(u)
	l.s.bus.publish(u)
}

func (l *loop) remember(u Utterance) {
	l.history = append(l.history, u)
	if len(l.history) > historyLen {
		l.history = append(l.history[:0], l.history[len(l.history)-historyLen:]...)
	}
}

// onListen: the model listens. Audio it generated further ahead than the newest delta (plus a
// grace) is no longer meant to be heard: drop it. The newest delta itself plays out, so the end
// of a normal reply is not cut.
func (l *loop) onListen(lv *live) {
	keep := lv.lastDelta + l.s.cfg.ListenGrace
	if lv.replyOpen && l.s.speaker.Pending() > keep {
		l.s.log.Debug("agent: model listens; dropping reply audio generated ahead", "pending", l.s.speaker.Pending(), "keep", keep)
		l.s.speaker.FlushAfter(keep)
	}
	l.finishReply(lv)
}

func (l *loop) interrupted() {
	if l.cur == nil {
		return
	}
	if lv := l.cur; lv.replyOpen || l.s.speaker.Pending() > 0 {
		// What the server still sends of this reply is not played, nor what arrived between
		// the command's flush and now.
		lv.cutting, lv.cutResp = true, lv.replyResp
		l.s.speaker.FlushAfter(0)
	}
	if l.s.server.Dialect == realtime.DialectOpenVoice {
		ctx, cancel := context.WithTimeout(l.ctx, time.Second)
		if err := l.cur.sess.CancelSpeech(ctx); err != nil {
			l.s.log.Warn("agent: tts.cancel", "err", err)
		}
		cancel()
	}
	l.finishReply(l.cur)
}

// sessionLost handles an end we did not ask for.
func (l *loop) sessionLost(lv *live, ev realtime.Closed) {
	s := l.s
	l.retire(lv)
	l.failSays(lv, "the session ended before the speech was finished")
	s.sendMu.Lock()
	s.active.CompareAndSwap(lv, nil)
	l.cur = nil
	s.sendMu.Unlock()
	s.backlog.setLimit(durationToSamples(s.gapBuffer()))
	if resend := lv.undelivered(ev.Undelivered, s.chunkBufs); len(resend) > 0 {
		// What the server never got goes again, first, in the next session (as far as the
		// reconnect buffer reaches).
		if dropped := s.backlog.requeue(resend...); dropped > 0 {
			s.announceDrop("no session: keeping only the newest audio")
		}
		s.log.Info("agent: audio the lost session never received is sent again", "chunks", len(resend))
	}
	l.finishReply(lv)
	l.lost++
	reason := ev.Reason
	var err error
	if ev.Err != nil {
		err = ev.Err
		if reason == "" {
			reason = ev.Err.Error()
		}
	}
	s.log.Info("agent: session ended", "session", lv.id, "reason", reason, "age", s.now().Sub(lv.started).Round(time.Millisecond),
		"undelivered", len(ev.Undelivered))
	s.bus.publish(Lifecycle{Kind: "session_ended", SessionID: lv.id, Reason: reason, At: s.now()})
	if !l.want {
		return
	}
	healthy := l.judge(lv)
	if l.next != nil { // a rollover was ready: take it now
		l.rollovers++
		l.activate(l.next)
		l.next = nil
		return
	}
	if l.dialing != nil { // a rollover dial is under way: it becomes the reconnect
		l.dialing.rollover.Store(false)
		s.setState(StateConnecting, reason, func(st *Status) { l.clearSession(st) })
		return
	}
	class := realtime.ClassOf(err)
	switch {
	case err != nil && class == realtime.ClassConfig:
		l.configError(err)
	case healthy && (err == nil || class == realtime.ClassEnded):
		// A long, useful session ended in the normal course (time limit, full context): a new
		// session at once.
		s.bus.publish(Lifecycle{Kind: "reconnect", Reason: reason, At: s.now()})
		l.connect(false)
	default:
		l.failures = max(l.failures, 1)
		l.scheduleRetry(failureKind(err, reason), reason)
	}
}

func (l *loop) handleSpeech(speaking bool) {
	switch l.s.state() {
	case StateIdle, StateListening, StateSpeaking:
		l.publish() // the speech flag is part of the status
	default:
		// While (re)connecting or queued the flag waits for the next status: a state line
		// per report of the server, not per word.
	}
	l.s.bus.publish(VoiceActivity{Source: "local", Speaking: speaking, At: l.s.now()})
	if !speaking {
		return
	}
	l.lastActive = l.s.now()
	if l.s.cfg.Policy == PolicyVoice && !l.want && !l.stopped {
		l.begin("voice activity", true)
	}
}

// updatePlayback follows the speaker: speaking while queued reply audio plays, listening after.
func (l *loop) updatePlayback() {
	s := l.s
	st := s.state()
	if st != StateListening && st != StateSpeaking {
		return
	}
	want := StateListening
	if s.speaker.Pending() > 0 {
		want = StateSpeaking
	}
	if st != want {
		s.setState(want, "", nil)
	}
}

func (l *loop) timeLimit() time.Duration {
	s := l.s
	if s.cfg.TimeLimit > 0 {
		return s.cfg.TimeLimit
	}
	switch {
	case s.server.Dialect == realtime.DialectOpenVoice:
		return 0
	case s.server.Mode == realtime.ModeVideo:
		return 300 * time.Second
	default:
		return 600 * time.Second
	}
}

func (l *loop) contextFull(lv *live) bool {
	return lv.kv > 0 && lv.kv >= l.s.cfg.ContextLimit-l.s.cfg.ContextMargin
}

// rolloverDue is when lv should roll over: now if its context is full, else its age limit
// (zero: no limit).
func (l *loop) rolloverDue(lv *live, now time.Time) time.Time {
	if l.contextFull(lv) {
		return now
	}
	if limit := l.timeLimit(); limit > 0 {
		return lv.started.Add(limit - l.s.cfg.TimeMargin)
	}
	return time.Time{}
}

func (l *loop) needRollover(lv *live, now time.Time) bool {
	due := l.rolloverDue(lv, now)
	return !due.IsZero() && !now.Before(due)
}

// rollover prepares the switch to a fresh session before the server's limit. A session rolled
// over before it was useful holds the next rollover back by the backoff, as a reconnect would.
func (l *loop) rollover(now time.Time) {
	s := l.s
	cur := l.cur
	if l.next != nil || l.dialing != nil && !l.queuedNext() {
		return
	}
	if !cur.judged && !l.judge(cur) {
		l.rolloverNotBefore = later(l.rolloverNotBefore, now.Add(s.backoff(l.failures)))
		l.announce("rollover too soon", "rollover too soon", "agent: the session needs its rollover before it was useful; holding the next one back",
			"session", cur.id, "not_before", l.rolloverNotBefore)
	}
	if now.Before(l.rolloverNotBefore) {
		return
	}
	if *s.cfg.Overlap && !l.sequential {
		s.log.Info("agent: opening the next session ahead of the limit", "session", cur.id, "kv", cur.kv)
		l.startDial(true)
		return
	}
	// Sequential: close at a listening moment (at most switch_wait later), then open the next,
	// unless it waits in the server's queue already: closing ours gives it the worker.
	if l.rolloverSince.IsZero() {
		l.rolloverSince = now
	}
	if !l.modelIdle() && now.Sub(l.rolloverSince) < s.cfg.SwitchWait {
		return
	}
	queued := l.dialing
	s.sendMu.Lock()
	s.active.Store(nil)
	l.cur = nil
	s.sendMu.Unlock()
	s.backlog.setLimit(durationToSamples(s.gapBuffer()))
	l.finishReply(cur)
	l.closeAsync(cur, "user_stop", true)
	l.rollovers++
	l.rolloverSince = time.Time{}
	s.bus.publish(Lifecycle{Kind: "rollover", SessionID: cur.id, Reason: l.rolloverReason(cur), At: now})
	if queued == nil {
		l.connect(true)
		return
	}
	// It is the session's dial now: its queue reports and its end are the session's.
	queued.rollover.Store(false)
	s.setState(StateConnecting, "", func(st *Status) { st.NextAttempt = time.Time{}; l.counters(st) })
}

func (l *loop) rolloverReason(lv *live) string {
	if l.contextFull(lv) {
		return fmt.Sprintf("context %d of %d tokens", lv.kv, l.s.cfg.ContextLimit)
	}
	return fmt.Sprintf("session age %v of %v", l.s.now().Sub(lv.started).Round(time.Second), l.timeLimit())
}

// maybeSwitch moves to the ready next session at a moment the model is listening (or when the
// wait has gone on too long).
func (l *loop) maybeSwitch(now time.Time) {
	s := l.s
	if l.next == nil || l.cur == nil {
		return
	}
	if !l.modelIdle() && now.Sub(l.nextReadyAt) < s.cfg.SwitchWait {
		return
	}
	old := l.cur
	reason := l.rolloverReason(old)
	l.rollovers++
	next := l.next
	l.next = nil
	l.activate(next) // closes old with user_stop after the sender has let go of it
	s.bus.publish(Lifecycle{Kind: "rollover", SessionID: next.id, Reason: reason + "; was " + old.id, At: now})
}

func (l *loop) modelIdle() bool {
	return l.cur != nil && !l.cur.replyOpen && l.s.speaker.Pending() == 0
}

// finishInput lets the last captured audio go out before the end of a finite input.
func (l *loop) finishInput() {
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && l.cur != nil {
		if queued, _, _ := l.s.backlog.stats(); queued == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// shutdown leaves any queue, closes every session politely and waits (bounded) for the goodbyes.
func (l *loop) shutdown() {
	l.want = false
	l.retryAt = time.Time{}
	l.closeAll("shutdown")
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(l.s.queueLeaveWait() + l.s.closeBudget() + time.Second):
		l.s.log.Warn("agent: sessions did not close in time")
	}
}

// turnTimeout bounds a turn-based request (ask, say) from dial to the last word.
const turnTimeout = 2 * time.Minute

func (l *loop) ask(id, question string, o TurnOptions) {
	s := l.s
	if s.chatCfg.Dialect != realtime.DialectCurrent {
		s.bus.publish(Answer{ID: id, Error: fmt.Sprintf("ask needs a MiniCPM-o server of the current dialect with chat mode (server is %s)", s.chatCfg.Dialect)})
		return
	}
	msg := realtime.ChatMessage{Role: "user", Text: question}
	req := realtime.ChatRequest{Stream: true, MaxNewTokens: o.MaxNewTokens, EnableThinking: o.Thinking}
	if o.Snapshot {
		if s.frames == nil || !s.cameraOn.Load() {
			s.bus.publish(Answer{ID: id, Error: "no camera frame for the snapshot (camera off or missing)"})
			return
		}
		f, ok := s.frames.Latest() // camera there and on: checked above
		if !ok {
			s.bus.publish(Answer{ID: id, Error: "no camera frame for the snapshot yet"})
			return
		}
		msg.Images = [][]byte{f}
		// The picture is sliced as the session's video is (server.max_slice_nums).
		req.ImageMaxSliceNums = s.server.Init.MaxSliceNums
	}
	if o.Voice != "" {
		s.bus.publish(Answer{ID: id, Error: "ask answers in text: a voice applies to say"})
		return
	}
	req.Messages = []realtime.ChatMessage{msg}
	if base := s.currentInstructions(); base != "" {
		req.Messages = append([]realtime.ChatMessage{{Role: "system", Text: base}}, req.Messages...)
	}
	l.runTurn(id, req, false)
}

func (l *loop) say(id, text string, o TurnOptions) {
	s := l.s
	if strings.TrimSpace(text) == "" {
		s.bus.publish(Answer{ID: id, Error: "nothing to say"})
		return
	}
	if o.Snapshot {
		s.bus.publish(Answer{ID: id, Error: "say takes no snapshot"})
		return
	}
	if s.server.Dialect == realtime.DialectOpenVoice {
		l.speakOpenVoice(id, text, o.Voice)
		return
	}
	if s.chatCfg.Dialect != realtime.DialectCurrent {
		s.bus.publish(Answer{ID: id, Error: "say needs chat mode with TTS (current dialect)"})
		return
	}
	req := realtime.ChatRequest{Stream: true, TTS: true, MaxNewTokens: o.MaxNewTokens, EnableThinking: o.Thinking,
		TTSRefAudio: s.server.Init.TTSRefAudio, // the configured voice (server.tts_ref_audio)
		Messages:    []realtime.ChatMessage{{Role: "user", Text: "Reply with exactly: " + text}}}
	if o.Voice != "" {
		if s.voices == nil {
			s.bus.publish(Answer{ID: id, Error: fmt.Sprintf("voice %q: no named voices on this satellite", o.Voice)})
			return
		}
		ref, err := s.voices(o.Voice)
		if err != nil {
			s.bus.publish(Answer{ID: id, Error: fmt.Sprintf("voice %q: %v", o.Voice, err)})
			return
		}
		req.TTSRefAudio = ref
	}
	l.runTurn(id, req, true)
}

// speakOpenVoice sends tts.speak on the live OpenVoice session; the answer comes when the
// server says the speech is done (tts.speaking_end), or fails with the server's error.
func (l *loop) speakOpenVoice(id, text, voice string) {
	s := l.s
	if l.cur == nil {
		s.bus.publish(Answer{ID: id, Error: "no OpenVoice session to speak on"})
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
	request, err := l.cur.sess.Speak(ctx, realtime.Speech{Text: text, Voice: voice})
	cancel()
	if err != nil {
		s.bus.publish(Answer{ID: id, Error: err.Error()})
		return
	}
	lv := l.cur
	p := &pendingSay{id: id, text: text, request: request}
	p.deadline = time.AfterFunc(turnTimeout, func() {
		s.do(func(l *loop) { l.sayTimedOut(lv, p) })
	})
	lv.says = append(lv.says, p)
}

// ttsState follows tts.speaking_start/end by request id: another request's events are not a
// say's. The server runs one synthesis at a time and a newer tts.speak cancels the one running,
// so when a request's events come, every say sent before it that is still waiting has been
// superseded, whether or not its speech had begun.
func (l *loop) ttsState(lv *live, ev realtime.TTSState) {
	i := slices.IndexFunc(lv.says, func(p *pendingSay) bool { return p.request == ev.RequestID })
	if i < 0 {
		return
	}
	for _, p := range lv.says[:i] {
		p.deadline.Stop()
		l.s.bus.publish(Answer{ID: p.id, Error: "the speech was cancelled by a newer say"})
	}
	lv.says = lv.says[i:]
	p := lv.says[0]
	if ev.Speaking {
		p.started = true
		return
	}
	lv.says = lv.says[1:]
	p.deadline.Stop()
	if ev.Cancelled {
		l.s.bus.publish(Answer{ID: p.id, Error: "the speech was cancelled before it was complete"})
		return
	}
	l.s.bus.publish(Answer{ID: p.id, Text: p.text})
}

// sayFailed: a server error while a say waits for its speech to start is that say's failure
// (a failed synthesis gives only an error, and carries no request id): the newest say not yet
// speaking is the request the server just refused.
func (l *loop) sayFailed(lv *live, msg string) {
	i := len(lv.says) - 1
	if i < 0 || lv.says[i].started {
		return
	}
	p := lv.says[i]
	lv.says = lv.says[:i]
	p.deadline.Stop()
	l.s.bus.publish(Answer{ID: p.id, Error: "the server refused the speech: " + msg})
}

func (l *loop) sayTimedOut(lv *live, p *pendingSay) {
	for i, q := range lv.says {
		if q == p {
			lv.says = append(lv.says[:i], lv.says[i+1:]...)
			l.s.bus.publish(Answer{ID: p.id, Error: fmt.Sprintf("no end of speech from the server within %v", turnTimeout)})
			return
		}
	}
}

// failSays ends every say still waiting on lv.
func (l *loop) failSays(lv *live, why string) {
	for _, p := range lv.says {
		p.deadline.Stop()
		l.s.bus.publish(Answer{ID: p.id, Error: why})
	}
	lv.says = nil
}

// runTurn runs a chat request beside the duplex session; speak plays its audio as it streams.
// The text streams as AnswerDelta events; a server error ends the turn at once with the
// server's message.
func (l *loop) runTurn(id string, req realtime.ChatRequest, speak bool) {
	s := l.s
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(l.ctx, turnTimeout)
		defer cancel()
		var serverErr atomic.Pointer[realtime.Error]
		reply, err := s.chat(ctx, s.chatCfg, req, func(ev realtime.Event) {
			switch ev := ev.(type) {
			case realtime.AudioDelta:
				if speak {
					s.play(ev.Samples)
				}
			case realtime.TextDelta:
				if ev.Text != "" {
					s.bus.publish(AnswerDelta{ID: id, Text: ev.Text})
				}
			case realtime.ErrorEvent:
				if ev.Err != nil && serverErr.CompareAndSwap(nil, ev.Err) {
					cancel()
				}
			}
		})
		if e := serverErr.Load(); e != nil {
			s.bus.publish(Answer{ID: id, Error: "server error: " + e.Error()})
			return
		}
		if err != nil {
			s.bus.publish(Answer{ID: id, Error: err.Error()})
			return
		}
		if speak && len(reply.Audio) > 0 && !req.Stream {
			s.play(reply.Audio)
		}
		if strings.TrimSpace(reply.Text) == "" && len(reply.Audio) == 0 {
			s.bus.publish(Answer{ID: id, Error: "the server ended the turn with no text and no audio"})
			return
		}
		s.bus.publish(Answer{ID: id, Text: reply.Text})
	}()
}
