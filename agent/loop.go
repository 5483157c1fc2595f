package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/omnisat/omnisat/pipeline"
	"github.com/omnisat/omnisat/realtime"
)

// historyLen bounds the utterances kept for carry-over.
const historyLen = 64

// live is one open session.
type live struct {
	sess    realtime.Session
	id      string
	started time.Time
	kv      int
	planned bool // we are closing it on purpose: its end is not a loss
	retired bool // its traffic has been added to the totals

	replyOpen  bool
	replyText  strings.Builder
	replyStart time.Time
	lastDelta  time.Duration // duration of the newest reply audio delta
	// resampler brings reply audio at another rate (OpenVoice's TTS rate) to the speaker's 24 kHz.
	resampler *pipeline.Resampler

	says []*pendingSay // OpenVoice tts.speak requests waiting for tts.speaking_end, oldest first
}

// pendingSay is a Say on an OpenVoice session: it succeeds when the speech has been synthesised
// (tts.speaking_end), fails on an error before that, when the session ends, or at its deadline.
type pendingSay struct {
	id, text string
	started  bool // tts.speaking_start seen
	deadline *time.Timer
}

type sessEvent struct {
	l  *live
	ev realtime.Event
}

type attempt struct {
	cancel   context.CancelFunc
	rollover atomic.Bool // opening the next session ahead of a planned rollover
}

type dialResult struct {
	a    *attempt
	sess realtime.Session
	err  error
}

// loop is the supervisor's state machine. Only its goroutine touches these fields.
type loop struct {
	s          *Supervisor
	ctx        context.Context
	sessEvents chan sessEvent
	dialDone   chan dialResult
	wg         sync.WaitGroup

	want        bool  // a session is wanted (policy, commands)
	cur         *live // the session in use
	next        *live // a ready session waiting for the moment to switch to (rollover)
	nextReadyAt time.Time
	dialing     *attempt
	failures    int // consecutive failed attempts, for backoff
	retry       *time.Timer
	rolloverAt  time.Time // do not try another rollover dial before this
	failed      bool      // configuration error: no retries until start/restart
	lagPending  bool      // switch the backlog bound to max_lag once the replay has drained
	lastActive  time.Time // last speech either way (idle timeout)
	history     []Utterance
	reconnects  int
	rollovers   int
}

func (l *loop) run(captureErr <-chan error) error {
	s := l.s
	l.lastActive = s.now()
	if s.cfg.Policy == PolicyAlways && !s.held.Load() {
		l.start("policy always")
	} else {
		if s.held.Load() {
			s.log.Info("agent: a stop command holds the session off (ctl start or cmd/session start resumes)")
		}
		l.publish()
	}
	ticker := time.NewTicker(stateTick)
	defer ticker.Stop()
	for {
		var retryC <-chan time.Time
		if l.retry != nil {
			retryC = l.retry.C
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
		case se := <-l.sessEvents:
			l.handleSession(se)
		case dr := <-l.dialDone:
			l.handleDial(dr)
		case speaking := <-s.speechCh:
			l.handleSpeech(speaking)
		case <-retryC:
			l.retry = nil
			l.connect()
		case <-ticker.C:
			l.tick()
		}
	}
}

// publish sends the current status without changing the state.
func (l *loop) publish() { l.s.updateStatus(func(*Status) {}) }

func (l *loop) start(reason string) {
	if l.want && !l.failed {
		return
	}
	l.want, l.failed = true, false
	l.failures = 0
	l.s.backlog.counting(true)
	l.s.backlog.setLimit(durationToSamples(l.s.cfg.ReconnectBuffer))
	l.s.log.Info("agent: session wanted", "reason", reason)
	l.connect()
}

func (l *loop) stop(reason string) {
	l.want = false
	l.failed = false
	l.stopRetry()
	l.closeAll(reason)
	l.s.backlog.counting(false)
	l.s.backlog.setLimit(durationToSamples(l.s.idleBuffer()))
	l.s.setState(StateIdle, reason, func(st *Status) { l.clearSession(st) })
}

func (l *loop) restart(reason string) {
	l.stop(reason)
	l.start(reason)
}

func (l *loop) stopRetry() {
	if l.retry != nil {
		l.retry.Stop()
		l.retry = nil
	}
	if l.dialing != nil {
		l.dialing.cancel()
		l.dialing = nil
	}
}

// closeAll ends the current and the next session (not waiting).
func (l *loop) closeAll(reason string) {
	l.s.active.Store(nil)
	for _, lv := range []*live{l.cur, l.next} {
		if lv != nil {
			l.finishReply(lv)
			l.closeAsync(lv, "user_stop")
		}
	}
	if l.cur != nil {
		// Ended on purpose (stop, restart, idle, shutdown): say so, as for any other end.
		l.s.bus.publish(Lifecycle{Kind: "session_ended", SessionID: l.cur.id, Reason: reason, At: l.s.now()})
	}
	l.cur, l.next = nil, nil
}

// retire counts a session's traffic into the totals when it stops being the active one (it
// may still exchange the goodbye; that little is not counted).
func (l *loop) retire(lv *live) {
	if lv == nil || lv.retired {
		return
	}
	lv.retired = true
	t := lv.sess.Stats()
	l.s.bytesUp.Add(t.BytesSent)
	l.s.bytesDown.Add(t.BytesReceived)
}

func (l *loop) closeAsync(lv *live, reason string) {
	l.failSays(lv, "the session ended before the speech was finished")
	l.retire(lv)
	lv.planned = true
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		lv.sess.Close(ctx, reason)
	}()
}

func (l *loop) clearSession(st *Status) {
	st.SessionID, st.KVCacheLength, st.QueuePosition, st.QueueWaitS = "", 0, 0, 0
	st.NextAttempt = time.Time{}
	st.Reconnects, st.Rollovers = l.reconnects, l.rollovers
}

// connect starts a dial for the session in use, unless one is under way or none is wanted.
func (l *loop) connect() {
	if !l.want || l.failed || l.dialing != nil || l.cur != nil || l.ctx.Err() != nil {
		return
	}
	if l.next != nil { // a ready rollover session takes over at once
		l.activate(l.next)
		l.next = nil
		return
	}
	l.s.setState(StateConnecting, "", func(st *Status) { st.NextAttempt = time.Time{} })
	l.startDial(false)
}

func (l *loop) startDial(rollover bool) {
	s := l.s
	ctx, cancel := context.WithCancel(l.ctx)
	a := &attempt{cancel: cancel}
	a.rollover.Store(rollover)
	l.dialing = a
	cfg := s.server
	cfg.Init.Instructions = s.currentInstructions()
	if *s.cfg.CarryOver {
		cfg.Init.Instructions = carryOver(cfg.Init.Instructions, l.history, s.cfg.CarryOverChars)
	}
	cfg.OnQueue = func(q realtime.QueueStatus) {
		if a.rollover.Load() {
			s.log.Debug("agent: next session queued", "position", q.Position, "done", q.Done)
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
		select {
		case l.dialDone <- dialResult{a: a, sess: sess, err: err}:
		case <-l.ctx.Done():
			if sess != nil {
				cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
				sess.Close(cctx, "user_stop")
				cancel()
			}
		}
	}()
}

func (l *loop) handleDial(dr dialResult) {
	s := l.s
	if dr.a != l.dialing { // cancelled or superseded
		if dr.sess != nil {
			l.closeAsync(&live{sess: dr.sess}, "user_stop")
		}
		return
	}
	l.dialing = nil
	dr.a.cancel()
	if dr.err != nil {
		if l.ctx.Err() != nil {
			return
		}
		if realtime.ClassOf(dr.err) == realtime.ClassConfig {
			l.fail(dr.err)
			return
		}
		l.failures++
		if dr.a.rollover.Load() && l.cur != nil {
			// The old session still works: try the rollover again later.
			wait := s.backoff(l.failures)
			l.rolloverAt = s.now().Add(wait)
			s.log.Warn("agent: could not open the next session; old one continues", "err", dr.err, "retry_in", wait)
			return
		}
		l.scheduleRetry(dr.err.Error())
		return
	}
	l.failures = 0
	lv := l.adopt(dr.sess)
	if !l.want {
		l.closeAsync(lv, "user_stop")
		return
	}
	if dr.a.rollover.Load() && l.cur != nil {
		l.next, l.nextReadyAt = lv, s.now()
		s.log.Info("agent: next session ready; switching when the model listens", "session", lv.id)
		l.maybeSwitch()
		return
	}
	l.activate(lv)
}

// adopt starts forwarding a new session's events to the loop.
func (l *loop) adopt(sess realtime.Session) *live {
	lv := &live{sess: sess, id: sess.Info().ID, started: l.s.now()}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for ev := range sess.Events() {
			select {
			case l.sessEvents <- sessEvent{lv, ev}:
			case <-l.ctx.Done():
				return
			}
		}
	}()
	return lv
}

// activate makes lv the session in use: the sender feeds it from now on.
func (l *loop) activate(lv *live) {
	s := l.s
	l.s.sendMu.Lock()
	old := l.cur
	l.cur = lv
	s.active.Store(lv)
	l.s.sendMu.Unlock()
	if old != nil {
		l.finishReply(old)
		l.closeAsync(old, "user_stop")
	}
	l.lagPending = true
	l.lastActive = s.now()
	s.setState(StateListening, "", func(st *Status) {
		st.SessionID, st.KVCacheLength, st.QueuePosition, st.QueueWaitS = lv.id, 0, 0, 0
		st.NextAttempt, st.LastError = time.Time{}, ""
		st.Reconnects, st.Rollovers = l.reconnects, l.rollovers
	})
	s.bus.publish(Lifecycle{Kind: "session_started", SessionID: lv.id, At: s.now()})
}

func (l *loop) fail(err error) {
	l.failed = true
	l.s.log.Error("agent: configuration problem; not retrying", "err", err)
	l.s.setState(StateError, err.Error(), func(st *Status) { l.clearSession(st); st.LastError = err.Error() })
	l.s.bus.publish(Lifecycle{Kind: "error", Reason: err.Error(), At: l.s.now()})
}

func (l *loop) scheduleRetry(reason string) {
	s := l.s
	wait := s.backoff(l.failures)
	at := s.now().Add(wait)
	l.retry = time.NewTimer(wait)
	s.log.Warn("agent: reconnecting", "reason", reason, "attempt", l.failures, "wait", wait)
	s.setState(StateReconnecting, reason, func(st *Status) {
		l.clearSession(st)
		st.NextAttempt, st.LastError = at, reason
	})
	s.bus.publish(Lifecycle{Kind: "reconnect", Reason: reason, At: s.now()})
}

func (l *loop) handleSession(se sessEvent) {
	lv := se.l
	if lv != l.cur && lv != l.next {
		return // a session we have left behind
	}
	s := l.s
	switch ev := se.ev.(type) {
	case realtime.Closed:
		if lv == l.next {
			l.next = nil
			s.log.Warn("agent: the next session ended before the switch", "reason", ev.Reason)
			return
		}
		if lv.planned {
			return
		}
		l.sessionLost(lv, ev)
	case realtime.Listen:
		if lv == l.cur {
			l.onListen(lv)
		}
	case realtime.TextDelta:
		if lv != l.cur {
			return
		}
		l.openReply(lv)
		lv.replyText.WriteString(ev.Text)
		l.lastActive = s.now()
		s.bus.publish(TextDelta{SessionID: lv.id, Text: ev.Text})
	case realtime.AudioDelta:
		if lv != l.cur {
			return
		}
		l.openReply(lv)
		lv.lastDelta = time.Duration(len(ev.Samples)) * time.Second / time.Duration(ev.SampleRate)
		s.speaker.Play(lv.toSpeakerRate(ev, s.log))
		l.lastActive = s.now()
		l.updatePlayback()
	case realtime.TurnDone:
		if lv == l.cur {
			l.finishReply(lv)
		}
	case realtime.MetricsUpdate:
		m := ev.Metrics
		step := m.PrefillMS > 0 || m.GenerateMS > 0 || m.WallClockMS > 0
		if (m.KVCacheLength > 0 || step) && lv == l.cur {
			if m.KVCacheLength > 0 {
				lv.kv = m.KVCacheLength
			}
			s.updateStatus(func(st *Status) {
				st.KVCacheLength = lv.kv
				if step {
					st.LastStep = &StepMetrics{PrefillMS: m.PrefillMS, GenerateMS: m.GenerateMS, WallClockMS: m.WallClockMS,
						Tokens: m.NTokens, TTSTokens: m.NTTSTokens, At: s.now()}
				}
			})
		} else if m.KVCacheLength > 0 {
			lv.kv = m.KVCacheLength
		}
	case realtime.Transcript:
		u := Utterance{Role: "user", Text: ev.Text, SessionID: lv.id, End: s.now(), Partial: !ev.Final,
			Language: ev.Language, Duration: ev.Duration}
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
		if !ev.Speaking && lv.resampler != nil && lv == l.cur {
			s.speaker.Play(lv.resampler.Flush(nil)) // the tail the filter held back
		}
		l.ttsState(lv, ev.Speaking)
		l.updatePlayback()
	case realtime.FramesDropped:
		s.log.Warn("agent: the server dropped audio (it was sent faster than it takes)", "dropped", ev.Dropped)
		s.bus.publish(Lifecycle{Kind: "audio_dropped", SessionID: lv.id, At: s.now(),
			Reason: fmt.Sprintf("the server dropped %v of audio: %s", ev.Dropped, ev.Message)})
	case realtime.RateLimit:
		// The session already holds its audio back as asked.
		s.log.Debug("agent: the server asks to slow down", "delay", ev.Delay)
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
	l.updatePlayback()
}

func (l *loop) interrupted() {
	if l.cur == nil {
		return
	}
	if l.s.server.Dialect == realtime.DialectOpenVoice {
		ctx, cancel := context.WithTimeout(l.ctx, time.Second)
		if err := l.cur.sess.CancelSpeech(ctx); err != nil {
			l.s.log.Warn("agent: tts.cancel", "err", err)
		}
		cancel()
	}
	l.finishReply(l.cur)
	l.updatePlayback()
}

// sessionLost handles an end we did not ask for.
func (l *loop) sessionLost(lv *live, ev realtime.Closed) {
	s := l.s
	l.retire(lv)
	l.failSays(lv, "the session ended before the speech was finished")
	l.s.sendMu.Lock()
	s.active.CompareAndSwap(lv, nil)
	l.cur = nil
	l.s.sendMu.Unlock()
	l.finishReply(lv)
	s.backlog.setLimit(durationToSamples(s.cfg.ReconnectBuffer))
	reason := ev.Reason
	var err error
	if ev.Err != nil {
		err = ev.Err
		if reason == "" {
			reason = ev.Err.Error()
		}
	}
	s.log.Info("agent: session ended", "session", lv.id, "reason", reason)
	s.bus.publish(Lifecycle{Kind: "session_ended", SessionID: lv.id, Reason: reason, At: s.now()})
	l.reconnects++
	if !l.want {
		return
	}
	if l.next != nil { // a rollover was ready: take it now
		l.activate(l.next)
		l.next = nil
		l.rollovers++
		return
	}
	if l.dialing != nil { // a rollover dial is under way: it becomes the reconnect
		l.dialing.rollover.Store(false)
		s.setState(StateConnecting, reason, func(st *Status) { l.clearSession(st) })
		return
	}
	switch {
	case err == nil || realtime.ClassOf(err) == realtime.ClassEnded:
		// A normal end (time limit, full context): a new session at once.
		l.failures = 0
		s.bus.publish(Lifecycle{Kind: "reconnect", Reason: reason, At: s.now()})
		l.connect()
	case realtime.ClassOf(err) == realtime.ClassConfig:
		l.fail(err)
	default:
		l.failures++
		l.scheduleRetry(reason)
	}
}

func (l *loop) handleSpeech(speaking bool) {
	l.publish() // the speech flag is part of the status
	l.s.bus.publish(VoiceActivity{Source: "local", Speaking: speaking, At: l.s.now()})
	if !speaking {
		return
	}
	l.lastActive = l.s.now()
	if l.s.cfg.Policy == PolicyVoice && !l.want {
		l.start("voice activity")
	}
}

// tick runs the periodic checks: playback state, backlog bound, rollover, idle timeout.
func (l *loop) tick() {
	s := l.s
	if l.cur == nil {
		return
	}
	l.updatePlayback()
	if l.lagPending {
		if queued, _, _ := s.backlog.stats(); queued <= s.cfg.MaxLag {
			s.backlog.setLimit(durationToSamples(s.cfg.MaxLag))
			l.lagPending = false
		}
	}
	if l.needRollover(l.cur) {
		l.rollover()
	}
	l.maybeSwitch()
	if s.cfg.Policy != PolicyAlways && l.cur != nil && s.now().Sub(l.lastActive) > s.cfg.IdleTimeout && s.speaker.Pending() == 0 {
		s.log.Info("agent: idle; ending the session", "idle_timeout", s.cfg.IdleTimeout)
		l.stop("idle")
	}
}

func (l *loop) updatePlayback() {
	if l.cur == nil {
		return
	}
	st := l.s.Status()
	if st.State != StateListening && st.State != StateSpeaking {
		return
	}
	want := StateListening
	if l.s.speaker.Pending() > 0 {
		want = StateSpeaking
	}
	if st.State != want {
		l.s.setState(want, "", nil)
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

func (l *loop) needRollover(lv *live) bool {
	s := l.s
	if lv.kv > 0 && lv.kv >= s.cfg.ContextLimit-s.cfg.ContextMargin {
		return true
	}
	limit := l.timeLimit()
	return limit > 0 && s.now().Sub(lv.started) >= limit-s.cfg.TimeMargin
}

// rollover prepares the switch to a fresh session before the server's limit.
func (l *loop) rollover() {
	s := l.s
	if l.next != nil || l.dialing != nil || s.now().Before(l.rolloverAt) {
		return
	}
	if *s.cfg.Overlap {
		s.log.Info("agent: opening the next session ahead of the limit", "session", l.cur.id, "kv", l.cur.kv)
		l.startDial(true)
		return
	}
	// Sequential: close at a listening moment, then open the next (single-worker servers).
	if !l.modelIdle() {
		return
	}
	old := l.cur
	l.s.sendMu.Lock()
	s.active.Store(nil)
	l.cur = nil
	l.s.sendMu.Unlock()
	l.finishReply(old)
	l.closeAsync(old, "user_stop")
	s.backlog.setLimit(durationToSamples(s.cfg.ReconnectBuffer))
	l.rollovers++
	s.bus.publish(Lifecycle{Kind: "rollover", SessionID: old.id, Reason: l.rolloverReason(old), At: s.now()})
	l.connect()
}

func (l *loop) rolloverReason(lv *live) string {
	if lv.kv >= l.s.cfg.ContextLimit-l.s.cfg.ContextMargin && lv.kv > 0 {
		return fmt.Sprintf("context %d of %d tokens", lv.kv, l.s.cfg.ContextLimit)
	}
	return fmt.Sprintf("session age %v of %v", l.s.now().Sub(lv.started).Round(time.Second), l.timeLimit())
}

// maybeSwitch moves to the ready next session at a moment the model is listening (or when the
// wait has gone on too long).
func (l *loop) maybeSwitch() {
	s := l.s
	if l.next == nil || l.cur == nil {
		return
	}
	if !l.modelIdle() && s.now().Sub(l.nextReadyAt) < s.cfg.SwitchWait {
		return
	}
	old := l.cur
	reason := l.rolloverReason(old)
	l.rollovers++
	next := l.next
	l.next = nil
	l.activate(next) // closes old with user_stop after the sender has let go of it
	s.bus.publish(Lifecycle{Kind: "rollover", SessionID: next.id, Reason: reason + "; was " + old.id, At: s.now()})
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

// shutdown closes every session politely and waits (bounded) for the goodbyes.
func (l *loop) shutdown() {
	l.want = false
	l.stopRetry()
	l.closeAll("shutdown")
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeTimeout + time.Second):
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
		f, ok := s.frames.Latest()
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
	_, err := l.cur.sess.Speak(ctx, realtime.Speech{Text: text, Voice: voice})
	cancel()
	if err != nil {
		s.bus.publish(Answer{ID: id, Error: err.Error()})
		return
	}
	lv := l.cur
	p := &pendingSay{id: id, text: text}
	p.deadline = time.AfterFunc(turnTimeout, func() {
		s.do(func(l *loop) { l.sayTimedOut(lv, p) })
	})
	lv.says = append(lv.says, p)
}

// ttsState follows tts.speaking_start/end for the oldest pending say.
func (l *loop) ttsState(lv *live, speaking bool) {
	if len(lv.says) == 0 {
		return
	}
	p := lv.says[0]
	if speaking {
		p.started = true
		return
	}
	if !p.started {
		return // the end of something spoken before this request
	}
	lv.says = lv.says[1:]
	p.deadline.Stop()
	l.s.bus.publish(Answer{ID: p.id, Text: p.text})
}

// sayFailed: a server error while a say waits for its speech to start is that say's failure
// (a failed synthesis gives only an error).
func (l *loop) sayFailed(lv *live, msg string) {
	if len(lv.says) == 0 || lv.says[0].started {
		return
	}
	p := lv.says[0]
	lv.says = lv.says[1:]
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
					s.speaker.Play(ev.Samples)
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
			s.speaker.Play(reply.Audio)
		}
		if strings.TrimSpace(reply.Text) == "" && len(reply.Audio) == 0 {
			s.bus.publish(Answer{ID: id, Error: "the server ended the turn with no text and no audio"})
			return
		}
		s.bus.publish(Answer{ID: id, Text: reply.Text})
	}()
}
