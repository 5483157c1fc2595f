package agent_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// The agent heals from every fault and never spins: these tests drive it against misbehaving
// servers and assert from the simulator's records (sessions, waits between them, audio).

// gaps returns the waits between consecutive connections.
func gaps(recs []realtimetest.SessionRecord) []time.Duration {
	var g []time.Duration
	for i := 1; i < len(recs); i++ {
		g = append(g, recs[i].ConnectedAt.Sub(recs[i-1].ConnectedAt))
	}
	return g
}

// A server that ends every session as soon as it is created (with a "normal" reason) meets
// growing waits, never a reconnect storm: each new session follows a backoff at least as long
// as the one before, up to backoff_max, and no dial comes before the time the status announced.
func TestFlappingServerBacksOff(t *testing.T) {
	for _, reason := range []string{"timeout", "backend_error"} {
		t.Run(reason, func(t *testing.T) {
			h := newHarness(t, setup{
				sim: realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultClose, Reason: reason}}},
				cfg: agent.Config{BackoffMin: 100 * time.Millisecond, BackoffMax: 800 * time.Millisecond},
			})
			var announced []time.Time
			var waits []time.Duration
			for len(announced) < 6 {
				st := h.waitFor("reconnecting", 10*time.Second, isState(agent.StateReconnecting)).(agent.StateChanged).Status
				announced = append(announced, st.NextAttempt)
				waits = append(waits, st.NextAttempt.Sub(st.Since))
			}
			if err := h.sim.WaitSessions(context.Background(), 7); err != nil {
				t.Fatal(err)
			}
			h.stop()
			recs := h.sim.Sessions()[:7]
			g := gaps(recs)
			t.Logf("%s: announced waits %v; between sessions %v", reason, waits, g)
			for i, at := range announced {
				if recs[i+1].ConnectedAt.Before(at) {
					t.Errorf("session %d dialled %v before its announced time", i+1, at.Sub(recs[i+1].ConnectedAt))
				}
			}
			for i, w := range g {
				if w < 100*time.Millisecond {
					t.Errorf("session %d came %v after the one before: shorter than backoff_min", i+1, w)
				}
			}
			// Waits are drawn from [c/2, c] with c doubling from 200 ms up to 800 ms: never
			// shorter than half the one before, the later ones ≥ backoff_max/2.
			for i, w := range waits {
				if i > 0 && w < waits[i-1]/2 {
					t.Errorf("wait %d: %v after %v: shrinking", i, w, waits[i-1])
				}
				if i >= 2 && w < 400*time.Millisecond {
					t.Errorf("wait %d: %v; from the third on they reach backoff_max/2", i, w)
				}
			}
			if st := h.sup.Status(); st.SessionsLost < 6 || st.Reconnects < 6 {
				t.Errorf("status counts %d lost sessions and %d reconnects, want ≥ 6", st.SessionsLost, st.Reconnects)
			}
		})
	}
}

// While stuck (every attempt refused), the agent says what is wrong once and then counts: one
// reconnect event and one audio_dropped event, however many attempts. On a loaded machine an
// attempt can also fail otherwise (a dial that times out): that is another kind of failure,
// said once too, and saying it does not make the refusal news again.
func TestStuckSaysItOnce(t *testing.T) {
	h := newHarness(t, setup{
		sim: realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultRefuse}}},
		cfg: agent.Config{BackoffMin: 20 * time.Millisecond, BackoffMax: 40 * time.Millisecond, ReconnectBuffer: 500 * time.Millisecond},
	})
	if err := h.sim.WaitSessions(context.Background(), 12); err != nil {
		t.Fatal(err)
	}
	h.stop()
	kinds := map[string]int{}
	for drained := false; !drained; {
		select {
		case ev, ok := <-h.events:
			if !ok {
				drained = true
				break
			}
			h.log = append(h.log, ev)
		default:
			drained = true
		}
	}
	other := map[string]int{} // reconnect reasons other than the refusal, digits (ports) aside
	for _, ev := range h.log {
		if lc, ok := ev.(agent.Lifecycle); ok {
			kinds[lc.Kind]++
			if lc.Kind == "reconnect" && !strings.Contains(lc.Reason, "worker_busy") {
				other[strings.Map(func(r rune) rune {
					if unicode.IsDigit(r) {
						return -1
					}
					return r
				}, lc.Reason)]++
			}
		}
	}
	st := h.sup.Status()
	t.Logf("%d attempts: events %v; %d chunks dropped; other failures %v", len(h.sim.Sessions()), kinds, st.ChunksDropped, other)
	refusals := kinds["reconnect"] - len(other)
	for reason, n := range other {
		refusals -= n - 1
		if n > 1 {
			t.Errorf("%q said %d times", reason, n)
		}
	}
	if refusals != 1 || kinds["audio_dropped"] != 1 {
		t.Errorf("events %v over %d attempts: want one reconnect for the refusal and one audio_dropped", kinds, len(h.sim.Sessions()))
	}
	if st.ChunksDropped == 0 || st.Reconnects < 11 {
		t.Errorf("status %d chunks dropped, %d reconnects: the counting goes on", st.ChunksDropped, st.Reconnects)
	}
}

// Rollovers back off as reconnects do: with a prompt that fills the context as soon as a
// session starts (a combination New refuses, forced here), sessions do not storm.
func TestRolloverStormBacksOff(t *testing.T) {
	prompt := strings.Repeat("You are a very verbose assistant. ", 90) // ~3000 characters: ~750 tokens
	cfg := agent.Config{ContextLimit: 1024, ContextMargin: 200, BackoffMin: 100 * time.Millisecond, BackoffMax: 800 * time.Millisecond}
	if err := cfg.CheckContext(prompt); err == nil || !strings.Contains(err.Error(), "session.context_margin") {
		t.Fatalf("CheckContext: %v", err)
	}
	h := newHarness(t, setup{unchecked: true, cfg: cfg, sim: realtimetest.Options{Workers: 2},
		server: func(c *realtime.Config) { c.Init.Instructions = prompt }})
	if err := h.sim.WaitSessions(context.Background(), 6); err != nil {
		t.Fatal(err)
	}
	h.stop()
	g := gaps(h.sim.Sessions()[:6])
	t.Logf("waits between rollover sessions: %v", g)
	for i, w := range g {
		if w < 100*time.Millisecond {
			t.Errorf("session %d opened %v after the one before: shorter than backoff_min", i+1, w)
		}
	}
	if g[len(g)-1] < 400*time.Millisecond {
		t.Errorf("waits %v do not grow toward backoff_max", g)
	}
}

// Nothing heard while stopped, or between a stop and the next start, leaves the device.
func TestStopStartSendsNothingFromTheStop(t *testing.T) {
	audio := ramp(16000 * 60)
	audio[0] = 1.0 / (1 << 24) // no sample is 0: a zero can only be silence the agent made
	h := newHarness(t, setup{audio: audio})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	time.Sleep(300 * time.Millisecond)
	h.sup.Stop()
	h.waitFor("idle", 5*time.Second, isState(agent.StateIdle))
	time.Sleep(700 * time.Millisecond) // ~3 s of audio at 4× speed, more than reconnect_buffer
	startedAt := h.source.Captured()
	h.sup.Start()
	h.waitFor("listening again", 5*time.Second, isState(agent.StateListening))
	time.Sleep(300 * time.Millisecond)
	h.stop()
	recs := h.sim.Sessions()
	if len(recs) != 2 {
		t.Fatalf("%d sessions", len(recs))
	}
	second := recs[1].Audio
	if len(second) == 0 {
		t.Fatal("nothing reached the second session")
	}
	first := int64(second[0] * (1 << 24))
	if first < startedAt {
		t.Fatalf("the second session begins with sample %d, captured %.2f s before the start command (position %d)",
			first, float64(startedAt-first)/16000, startedAt)
	}
	for i := 1; i < len(second); i++ {
		if second[i] <= second[i-1] {
			t.Fatalf("sample %d of the second session goes backwards", i)
		}
	}
	h.noRejections()
}

// checkContiguous asserts that got is a run of consecutive ramp samples.
func checkContiguous(t *testing.T, got []float32) {
	t.Helper()
	for i := 1; i < len(got); i++ {
		if d := int((got[i] - got[i-1]) * (1 << 24)); d != 1 {
			t.Fatalf("sample %d: step %d from the one before: audio was lost, repeated or reordered", i, d)
		}
	}
}

// After an unplanned gap, the audio kept meanwhile reaches the new session — not as a burst, but
// at no more than catch_up_rate × real time — and nothing is lost or repeated.
func TestReplayIsPacedAfterReconnect(t *testing.T) {
	var sends sendLog
	h := newHarness(t, setup{speed: 1, proxy: true, noStart: true, dialWrap: sends.wrap,
		cfg: agent.Config{Chunk: 250 * time.Millisecond, ReconnectBuffer: 3 * time.Second, MaxLag: 30 * time.Second}})
	sends.sup = h.sup
	h.start()
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	time.Sleep(600 * time.Millisecond)
	h.proxy.Refuse(true)
	h.proxy.Cut()
	h.waitFor("reconnecting", 5*time.Second, isState(agent.StateReconnecting))
	time.Sleep(1500 * time.Millisecond)
	h.proxy.Refuse(false)
	h.waitFor("listening again", 10*time.Second, isState(agent.StateListening))
	time.Sleep(3 * time.Second)
	h.stop()
	recs := h.sim.Sessions()
	last := recs[len(recs)-1]
	if len(last.Appends) < 8 {
		t.Fatalf("%d chunks reached the new session", len(last.Appends))
	}
	checkContiguous(t, last.Audio)
	// More than a second of audio waited for the new session …
	if back := time.Since(h.source.Started()).Seconds() - float64(int(last.Audio[0]*(1<<24)))/16000; back < 1 {
		t.Fatalf("the new session began with audio only %.2f s old", back)
	}
	// … and came at the catch-up rate.
	checkPace(t, sends.lastSession())
	h.noRejections()
}

// Muting silences what was captured before the mute and is still waiting to go out, and
// everything captured while muted; unmuting lets the microphone through again.
func TestMuteSilencesUnsentAudio(t *testing.T) {
	var open atomic.Bool
	open.Store(true)
	h := newHarness(t, setup{speed: 4, cfg: agent.Config{MaxLag: 3 * time.Second},
		dialWrap: slowDial(&open)})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	time.Sleep(300 * time.Millisecond)
	open.Store(false) // the link falls behind: chunks wait
	time.Sleep(200 * time.Millisecond)
	mutedAt := h.source.Captured()
	h.sup.Mute(true)
	time.Sleep(200 * time.Millisecond)
	h.sup.Mute(false)
	unmutedAt := h.source.Captured()
	open.Store(true)
	time.Sleep(500 * time.Millisecond)
	h.stop()
	got := h.received()
	// The audio is a ramp: a heard sample says where it was captured (its index in what arrived
	// says so only while nothing was dropped: a loaded machine may drop stale chunks by
	// max_lag). Every sample sent after the mute that was captured before the unmute must be
	// silence; the rest is the ramp.
	sentBefore := 0
	for i, v := range got {
		if v != 0 || i == 0 {
			continue
		}
		sentBefore = int(math.Round(float64(got[i-1])*(1<<24))) + 1 // where the silence begins
		break
	}
	if sentBefore == 0 {
		t.Fatal("nothing was silenced")
	}
	silent, heard := 0, 0
	for i, v := range got {
		switch {
		case v == 0 && i > 0:
			silent++
			// Its capture position is at least its index (drops only move audio earlier). A
			// block read within the default AudioHold (100 ms) and its own length (≤ 100 ms)
			// after the unmute may have been captured before it: silent too (at 4× speed).
			if int64(i) >= unmutedAt+4000+16000*4/5 {
				t.Fatalf("sample %d captured after the unmute is silent", i)
			}
		default:
			heard++
			if pos := int64(math.Round(float64(v) * (1 << 24))); pos >= int64(sentBefore) && pos < unmutedAt-4000 {
				t.Fatalf("sample %d (ramp sample %d), captured before the unmute and sent after the mute, went out as heard", i, pos)
			}
		}
	}
	t.Logf("mute at sample %d, unmute at %d; silenced from %d: %d samples silent", mutedAt, unmutedAt, sentBefore, silent)
	// The link was stalled for ~0.8 s of audio before the mute: at least a chunk of it was
	// still queued, and went out as silence.
	if int64(sentBefore) > mutedAt-4000 {
		t.Errorf("silence began at sample %d, at most a chunk before the mute at %d: the queued audio before it was sent as heard", sentBefore, mutedAt)
	}
}

// On a one-worker server the overlap rollover's next session waits behind the agent's own: the
// agent notices the queue, keeps that session as the next one (it gets the worker when ours
// closes) and rolls over sequentially from then on — counted as rollovers, no session reaching
// the server's limit, none leaving the queue without its worker, no audio lost or repeated.
func TestRolloverOnOneWorkerServer(t *testing.T) {
	// Generous buffers: audio is dropped by design when a busy machine falls behind; any loss
	// here must be the rollover's.
	h := newHarness(t, setup{sim: realtimetest.Options{Workers: 1, QueueUpdateInterval: 100 * time.Millisecond, LateQueueLeave: true},
		cfg: agent.Config{TimeLimit: 1200 * time.Millisecond, TimeMargin: 400 * time.Millisecond, ReconnectBuffer: 30 * time.Second, MaxLag: 30 * time.Second}})
	for range 3 {
		h.waitFor("rollover", 15*time.Second, isLifecycle("rollover"))
	}
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	time.Sleep(300 * time.Millisecond)
	h.stop()
	recs := h.sim.Sessions()
	var served, queued []realtimetest.SessionRecord
	for _, rec := range recs {
		if len(rec.Appends) > 0 {
			served = append(served, rec)
		}
		if len(rec.QueuedPositions) > 0 {
			queued = append(queued, rec)
			if rec.AssignedAt.IsZero() {
				t.Errorf("session %d left the queue without its worker (%s)", rec.Index, rec.EndReason)
			}
		}
	}
	if len(queued) == 0 {
		t.Fatal("no pre-opened session was ever queued: the test does not test the one-worker case")
	}
	var got []float32
	for _, rec := range served {
		got = append(got, rec.Audio...)
	}
	if !isRamp(got) {
		h.explain()
	}
	checkRamp(t, got)
	for _, rec := range served[:len(served)-1] {
		if rec.CloseReason != "user_stop" || rec.EndReason == "timeout" {
			t.Errorf("session %d ended %q (client said %q): it should have been rolled over", rec.Index, rec.EndReason, rec.CloseReason)
		}
	}
	st := h.sup.Status()
	if st.Rollovers < 3 || st.SessionsLost != 0 || st.ChunksDropped != 0 {
		t.Errorf("status: %d rollovers, %d sessions lost, %d chunks dropped", st.Rollovers, st.SessionsLost, st.ChunksDropped)
	}
	t.Logf("%d sessions served, %d of %d sessions waited in the queue", len(served), len(queued), len(recs))
	if h.sim.Jammed() {
		t.Error("the gateway handed its worker to the queued session the agent had left: jammed")
	}
	h.noRejections()
}

// Shutting down while a dial of ours waits in a one-worker gateway's queue behind our own
// session: the gateway reads nothing from waiting clients, so the dial does not vanish from the
// queue; the session ahead closes, the dial gets the worker and hands it straight back. The next
// client gets the worker.
func TestShutdownWhileQueuedBehindOurselves(t *testing.T) {
	shutdownWhileQueued(t, nil)
}

// The same stop, made before the agent has read the server's queue report (on a busy machine
// the report is still in the socket when the server has queued the dial): the server holds the
// dial in its queue all the same. Here the reports never reach the agent at all.
func TestShutdownBeforeTheQueueReportIsRead(t *testing.T) {
	shutdownWhileQueued(t, func(d agent.DialFunc) agent.DialFunc {
		return func(ctx context.Context, cfg realtime.Config) (realtime.Session, error) {
			cfg.OnQueue = nil // the reports stay unread
			return d(ctx, cfg)
		}
	})
}

// shutdownWhileQueued stops the agent while the gateway holds its pre-opened session in the
// queue (dialWrap, if any, stands between the agent and its dials). The speaker never runs dry,
// so the agent waits for a listening moment (switch_wait, 15 s) to close its session, and the
// pre-opened one waits behind it until the stop.
func shutdownWhileQueued(t *testing.T, dialWrap func(agent.DialFunc) agent.DialFunc) {
	h := newHarness(t, setup{sim: realtimetest.Options{Workers: 1, QueueUpdateInterval: 500 * time.Millisecond, LateQueueLeave: true},
		cfg: agent.Config{TimeLimit: 1200 * time.Millisecond, TimeMargin: 400 * time.Millisecond}, dialWrap: dialWrap,
		speakerWrap: func(s agent.Speaker) agent.Speaker { return busySpeaker{s} }})
	rec := waitQueued(t, h, "the pre-opened session", func(rec realtimetest.SessionRecord) bool { return rec.Index == 1 })
	stopWhileQueued(t, h, rec.Index)
}

// waitQueued waits (20 s at most) for a session that waits in the queue and matches which.
func waitQueued(t *testing.T, h *harness, what string, which func(realtimetest.SessionRecord) bool) realtimetest.SessionRecord {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		for _, rec := range h.sim.Sessions() {
			if which(rec) && len(rec.QueuedPositions) > 0 && rec.AssignedAt.IsZero() && rec.EndedAt.IsZero() {
				return rec
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never waited in the queue", what)
		}
	}
}

// stopWhileQueued stops the agent while its dial (session index) waits in a one-worker
// gateway's queue and checks what the gateway is left with: not jammed, the next client gets
// the worker, and the dial did not vanish from the queue: it took its worker only to close at
// once with session.close (before or during its set-up), sending no audio.
func stopWhileQueued(t *testing.T, h *harness, index int) {
	t.Helper()
	h.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	next, err := realtime.Dial(ctx, realtime.Config{URL: h.sim.URL(), Mode: realtime.ModeAudio})
	if err != nil {
		t.Fatalf("the next client got no session: %v (jammed: %v)", err, h.sim.Jammed())
	}
	next.Close(context.Background(), "user_stop")
	if h.sim.Jammed() {
		t.Fatal("jammed: the queued dial vanished from the queue as the worker ahead of it freed")
	}
	if rec := h.sim.Sessions()[index]; rec.AssignedAt.IsZero() || rec.CloseReason != "user_stop" || rec.Appends != nil {
		t.Errorf("the abandoned dial: assigned %v, closed %q (%s), %d chunks; want its worker handed back with session.close",
			!rec.AssignedAt.IsZero(), rec.CloseReason, rec.EndReason, len(rec.Appends))
	}
	h.noRejections()
}

// Stopping while a sequential rollover's dial waits in a one-worker gateway's queue behind the
// session the agent has just closed: that session's worker frees as its goodbye completes, and
// a gateway that has not noticed the dial leave hands the worker to it and loses it. The agent
// must not vanish from the queue then; the next client gets the worker. The old session's
// goodbye is slowed (a real worker takes a while to stop) so that the stop lands in the wait.
func TestShutdownWhileTheSequentialDialIsQueued(t *testing.T) {
	h := newHarness(t, setup{sim: realtimetest.Options{Workers: 1, QueueUpdateInterval: 3 * time.Second, LateQueueLeave: true},
		cfg: agent.Config{TimeLimit: 1200 * time.Millisecond, TimeMargin: 400 * time.Millisecond},
		dialWrap: func(d agent.DialFunc) agent.DialFunc {
			return func(ctx context.Context, cfg realtime.Config) (realtime.Session, error) {
				s, err := d(ctx, cfg)
				if err != nil {
					return nil, err
				}
				return slowGoodbye{Session: s, delay: 1500 * time.Millisecond}, nil
			}
		}})
	rec := waitQueued(t, h, "a sequential rollover's dial", func(rec realtimetest.SessionRecord) bool { return rec.Index >= 2 })
	stopWhileQueued(t, h, rec.Index)
}

// Stopping while queued behind another client's session on a one-worker gateway, which that
// client ends just after: the dial waits in the queue for the worker and hands it back, so the
// gateway is not jammed (had it left at once, the worker would have gone to it, gone).
func TestShutdownWhileQueuedBehindAnotherClient(t *testing.T) {
	h := newHarness(t, setup{sim: realtimetest.Options{Workers: 1, QueueUpdateInterval: 3 * time.Second, LateQueueLeave: true},
		noStart: true})
	other, err := realtime.Dial(context.Background(), realtime.Config{URL: h.sim.URL(), Mode: realtime.ModeAudio})
	if err != nil {
		t.Fatal(err)
	}
	h.start()
	rec := waitQueued(t, h, "the agent's session", func(rec realtimetest.SessionRecord) bool { return rec.Index == 1 })
	go func() {
		time.Sleep(500 * time.Millisecond) // the other client ends while the gateway has not noticed
		other.Close(context.Background(), "user_stop")
	}()
	stopWhileQueued(t, h, rec.Index)
}

// busySpeaker always has a second of audio still to play.
type busySpeaker struct{ agent.Speaker }

func (busySpeaker) Pending() time.Duration { return time.Second }

// slowGoodbye is a session whose goodbye takes a while to begin.
type slowGoodbye struct {
	realtime.Session
	delay time.Duration
}

func (s slowGoodbye) Close(ctx context.Context, reason string) error {
	time.Sleep(s.delay)
	return s.Session.Close(ctx, reason)
}

// "queued position 1 of 1" is published as often as the server reports it, not more.
func TestQueueReportedAsOftenAsTheServerSays(t *testing.T) {
	h := newHarness(t, setup{sim: realtimetest.Options{Workers: 1, QueueUpdateInterval: 50 * time.Millisecond}, noStart: true,
		audio: slices.Concat(make([]float32, 16000), tone(16000, 0.3), make([]float32, 16000*30))})
	other, err := realtime.Dial(context.Background(), realtime.Config{URL: h.sim.URL(), Mode: realtime.ModeAudio})
	if err != nil {
		t.Fatal(err)
	}
	h.start()
	h.waitFor("queued", 5*time.Second, isState(agent.StateQueued))
	time.Sleep(1500 * time.Millisecond)
	other.Close(context.Background(), "user_stop")
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	queuedEvents := 0
	for _, ev := range h.log {
		if sc, ok := ev.(agent.StateChanged); ok && sc.Status.State == agent.StateQueued {
			queuedEvents++
		}
	}
	reports := len(h.sim.Sessions()[1].QueuedPositions)
	t.Logf("%d queue reports from the server, %d queued states published", reports, queuedEvents)
	if queuedEvents > reports {
		t.Errorf("%d queued states published for %d reports", queuedEvents, reports)
	}
}

// blackHole stands between the agent and a real session: once closed, it accepts chunks and
// forwards none; cut then ends the session as a dead link does, reporting the swallowed chunks
// as undelivered (realtime's Closed.Undelivered), as the real client does for what the peer's
// TCP stack never acknowledged.
type blackHole struct {
	realtime.Session
	events chan realtime.Event
	mu     sync.Mutex
	closed bool
	held   []uint64
	cutC   chan struct{}
}

func newBlackHole(s realtime.Session) *blackHole {
	b := &blackHole{Session: s, events: make(chan realtime.Event, 256), cutC: make(chan struct{})}
	go func() {
		defer close(b.events)
		in := s.Events()
		for {
			select {
			case ev, ok := <-in:
				if !ok {
					return
				}
				b.events <- ev
			case <-b.cutC:
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				s.Close(ctx, "user_stop")
				cancel()
				b.mu.Lock()
				held := slices.Clone(b.held)
				b.mu.Unlock()
				b.events <- realtime.Closed{Undelivered: held, Err: &realtime.Error{Class: realtime.ClassRetryable,
					Code: realtime.CodeDeadLink, Message: "test: the link is dead"}}
				return
			}
		}
	}()
	return b
}

func (b *blackHole) Send(ctx context.Context, c realtime.Chunk) error {
	b.mu.Lock()
	if b.closed {
		b.held = append(b.held, c.ID)
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	return b.Session.Send(ctx, c)
}

func (b *blackHole) Events() <-chan realtime.Event { return b.events }

func (b *blackHole) swallow() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

func (b *blackHole) swallowed() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}

// A dead link: what the lost session accepted but the server never got is sent again, first, in
// the next session, so the server gets every sample once; chunks_sent counts only what arrived.
func TestUndeliveredAudioIsSentAgain(t *testing.T) {
	var holes []*blackHole
	var mu sync.Mutex
	h := newHarness(t, setup{speed: 2, cfg: agent.Config{Chunk: 250 * time.Millisecond, ReconnectBuffer: 30 * time.Second, MaxLag: 30 * time.Second},
		dialWrap: func(d agent.DialFunc) agent.DialFunc {
			return func(ctx context.Context, cfg realtime.Config) (realtime.Session, error) {
				s, err := d(ctx, cfg)
				if err != nil {
					return nil, err
				}
				b := newBlackHole(s)
				mu.Lock()
				holes = append(holes, b)
				mu.Unlock()
				return b, nil
			}
		}})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	first := holes[0]
	mu.Unlock()
	first.swallow()
	for deadline := time.Now().Add(5 * time.Second); first.swallowed() < 4 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	close(first.cutC)
	ended := h.waitFor("session_ended", 10*time.Second, isLifecycle("session_ended")).(agent.Lifecycle)
	h.waitFor("a new session", 10*time.Second, func(ev agent.Event) bool {
		sc, ok := ev.(agent.StateChanged)
		return ok && sc.Status.State == agent.StateListening && sc.Status.SessionID != ended.SessionID
	})
	// Wait until the new session has caught up with a second of audio captured after it began.
	target := h.source.Captured() + 16000
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if recs := h.sim.Sessions(); len(recs) == 2 && len(recs[1].Audio) > 0 && int64(recs[1].Audio[len(recs[1].Audio)-1]*(1<<24)) >= target {
			break
		}
	}
	h.stop()
	recs := h.sim.Sessions()
	if len(recs) != 2 || len(recs[1].Audio) == 0 {
		t.Fatalf("%d sessions; the last received %d samples", len(recs), len(recs[len(recs)-1].Audio))
	}
	t.Logf("%d chunks swallowed; the first session received %.2f s, the second began at %.2f s", first.swallowed(),
		float64(len(recs[0].Audio))/16000, float64(recs[1].Audio[0]*(1<<24))/16000)
	checkRamp(t, h.received())
	appends := len(recs[0].Appends) + len(recs[1].Appends)
	if st := h.sup.Status(); st.ChunksSent > uint64(appends) || st.ChunksSent+2 < uint64(appends) || st.ChunksDropped != 0 {
		t.Errorf("chunks_sent %d, chunks_dropped %d; the server received %d chunks", st.ChunksSent, st.ChunksDropped, appends)
	}
	h.noRejections()
}

// ageSession records how old each chunk's newest sample was when Send accepted it.
type ageSession struct {
	realtime.Session
	start func() time.Time
	speed float64
	mu    *sync.Mutex
	ages  *[]time.Duration
}

func (s ageSession) Send(ctx context.Context, c realtime.Chunk) error {
	err := s.Session.Send(ctx, c)
	if err == nil && len(c.Audio) > 0 && c.Audio[len(c.Audio)-1] != 0 {
		last := float64(c.Audio[len(c.Audio)-1] * (1 << 24))
		captured := s.start().Add(time.Duration((last + 1) / 16000 / s.speed * float64(time.Second)))
		s.mu.Lock()
		*s.ages = append(*s.ages, time.Since(captured))
		s.mu.Unlock()
	}
	return err
}

// max_lag holds end to end: a link that falls behind never gets audio older than max_lag, even
// a chunk that was waiting for room when it grew too old.
func TestNothingOlderThanMaxLagIsSent(t *testing.T) {
	var open atomic.Bool
	open.Store(true)
	var mu sync.Mutex
	var ages []time.Duration
	var h *harness
	h = newHarness(t, setup{speed: 1, noStart: true, cfg: agent.Config{Chunk: 250 * time.Millisecond, MaxLag: 500 * time.Millisecond},
		dialWrap: func(d agent.DialFunc) agent.DialFunc {
			slow := slowDial(&open)(d)
			return func(ctx context.Context, cfg realtime.Config) (realtime.Session, error) {
				s, err := slow(ctx, cfg)
				if err != nil {
					return nil, err
				}
				// The gate sits outside the age record: a chunk is "sent" when the real Send took it.
				return slowSession{ageSession{s.(slowSession).Session, func() time.Time { return h.source.Started() }, 1, &mu, &ages}, &open}, nil
			}
		}})
	h.start()
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	time.Sleep(700 * time.Millisecond)
	open.Store(false)
	time.Sleep(3 * time.Second)
	open.Store(true)
	time.Sleep(1200 * time.Millisecond)
	h.stop()
	mu.Lock()
	defer mu.Unlock()
	if len(ages) < 4 {
		t.Fatalf("only %d chunks sent", len(ages))
	}
	worst := slices.Max(ages)
	t.Logf("%d chunks; oldest when sent: %v", len(ages), worst)
	// A Send that waits for room gives up when the chunk reaches max_lag (a chunk used to wait
	// the whole second of the sender's timeout, and again); half a second covers the gate's
	// polling and a busy machine.
	if worst > 500*time.Millisecond+500*time.Millisecond {
		t.Errorf("a chunk %v old was sent; max_lag is 500ms", worst)
	}
	if st := h.sup.Status(); st.ChunksDropped == 0 {
		t.Error("nothing dropped although the link stood still for 1.5 s")
	}
}

// The state loop sleeps when nothing is due: an idle on_demand agent and a live session with
// nothing playing and its rollover minutes away fire no timer; a reply that plays wakes it once
// when the playback ends.
func TestNothingDueNoTimer(t *testing.T) {
	h := newHarness(t, setup{cfg: agent.Config{Policy: agent.PolicyOnDemand}})
	time.Sleep(time.Second)
	if n := agent.TimerWakesForTest(h.sup); n != 0 {
		t.Errorf("idle on_demand agent: %d timer wake-ups in a second", n)
	}
	h.sup.Start()
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	before := agent.TimerWakesForTest(h.sup)
	time.Sleep(time.Second)
	if n := agent.TimerWakesForTest(h.sup) - before; n != 0 {
		t.Errorf("live session, nothing due: %d timer wake-ups in a second", n)
	}
	h.stop()

	// A reply plays: the state follows the playback through one deadline at its end.
	audio := slices.Concat(make([]float32, 4000), tone(16000, 0.3), make([]float32, 16000*30))
	h = newHarness(t, setup{audio: audio, speed: 1, sim: realtimetest.Options{ForceListenCount: -1}})
	h.waitFor("speaking", 10*time.Second, isState(agent.StateSpeaking))
	before = agent.TimerWakesForTest(h.sup)
	h.waitFor("listening after the reply", 10*time.Second, isState(agent.StateListening))
	if n := agent.TimerWakesForTest(h.sup) - before; n < 1 || n > 10 {
		t.Errorf("%d timer wake-ups for the end of one reply's playback", n)
	}
}

// heldDevice is a microphone that captures 100 ms every 100 ms of real time and hands it to the
// reader, unless the test holds it: then the audio piles up in its buffer, as in a device with
// a long input buffer (or a driver that delivers late), and goes to the reader at release.
type heldDevice struct {
	mu      sync.Mutex
	buf     []float32 // captured, not yet read
	held    bool
	pos     int // samples captured so far: sample i's value is ramp(i)
	wake    chan struct{}
	stopped chan struct{}
}

func newHeldDevice(t *testing.T) *heldDevice {
	d := &heldDevice{wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
			case <-d.stopped:
				return
			}
			d.mu.Lock()
			for i := range 1600 {
				d.buf = append(d.buf, float32(d.pos+i)/(1<<24))
			}
			d.pos += 1600
			d.mu.Unlock()
			select {
			case d.wake <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { close(d.stopped) })
	return d
}

// hold keeps what is captured until release.
func (d *heldDevice) hold() { d.setHeld(true) }

func (d *heldDevice) release() { d.setHeld(false) }

func (d *heldDevice) setHeld(on bool) {
	d.mu.Lock()
	d.held = on
	d.mu.Unlock()
}

func (d *heldDevice) captured() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pos
}

func (d *heldDevice) Read(ctx context.Context, p []float32) (int, error) {
	for {
		d.mu.Lock()
		if !d.held && len(d.buf) > 0 {
			n := copy(p, d.buf)
			d.buf = d.buf[n:]
			d.mu.Unlock()
			return n, nil
		}
		d.mu.Unlock()
		select {
		case <-d.wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Mute is judged by when audio was captured, not by when it was read: audio the device
// captured while muted and handed over only after the unmute (a long input buffer, a late
// driver) goes out as silence; what is captured after the unmute is heard.
func TestMuteJudgedByCaptureTime(t *testing.T) {
	dev := newHeldDevice(t)
	h := newHarness(t, setup{source: dev, audioHold: time.Second,
		cfg: agent.Config{MaxLag: 30 * time.Second, ReconnectBuffer: 30 * time.Second}})
	h.waitFor("listening", 10*time.Second, isState(agent.StateListening))
	waitCond(t, "audio at the server", 30*time.Second, func() bool { return len(h.received()) >= 8000 })
	dev.hold()
	time.Sleep(200 * time.Millisecond)
	mutedFrom := dev.captured() + 1600 // every sample from here on was captured after the mute
	h.sup.Mute(true)
	time.Sleep(400 * time.Millisecond)
	mutedTo := dev.captured() // every sample before this was captured before the unmute
	h.sup.Mute(false)
	time.Sleep(200 * time.Millisecond)
	dev.release() // what was held goes to the agent now, after the unmute
	unmuted := dev.captured() + 16000*2
	waitCond(t, "audio from after the unmute", 60*time.Second, func() bool {
		got := h.received()
		return len(got) > 0 && int(math.Round(float64(got[len(got)-1])*(1<<24))) >= unmuted
	})
	h.stop()
	heardAfter := false
	for i, v := range h.received() {
		pos := int(math.Round(float64(v) * (1 << 24)))
		if v != 0 && pos >= mutedFrom && pos < mutedTo {
			t.Fatalf("sample %d (captured at %d, muted from %d to %d) was sent as heard", i, pos, mutedFrom, mutedTo)
		}
		heardAfter = heardAfter || pos > mutedTo+16000
	}
	if !heardAfter {
		t.Error("nothing captured a second after the unmute was heard")
	}
	t.Logf("muted for samples %d..%d", mutedFrom, mutedTo)
	h.noRejections()
}

// waitCond polls cond until it holds; only a hang reaches the deadline.
func waitCond(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, timeout)
		}
	}
}

// A session opened ahead of a rollover that ends before the switch is a failed attempt at the
// next session: the next try waits the backoff, growing, as after a failed dial of it. (It
// followed at once: a server ending every next session met a dial storm while the old one ran.)
func TestNextSessionEndingAtOnceBacksOff(t *testing.T) {
	const backoffMin, backoffMax = 50 * time.Millisecond, 400 * time.Millisecond
	fs := &fakeServer{}
	sup, err := agent.NewUnchecked(agent.Options{
		Config: agent.Config{Chunk: 250 * time.Millisecond, BackoffMin: backoffMin, BackoffMax: backoffMax,
			ContextLimit: 1024, ContextMargin: 200, SwitchWait: time.Minute},
		Server: realtime.Config{URL: "ws://fake/v1/realtime", Mode: realtime.ModeAudio, CloseTimeout: 50 * time.Millisecond},
		Audio:  &periodSource{samples: make([]float32, 16000), period: 1600}, Speaker: &clockSpeaker{}, Dial: fs.dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	defer func() { cancel(); <-done }()
	dials := func() []dialRecord {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		return slices.Clone(fs.dials)
	}
	waitDials := func(n int) []dialRecord {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if d := dials(); len(d) >= n {
				return d
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d dials in 20 s, want %d", len(dials()), n)
			}
		}
	}
	waitDials(1)
	// The first session lives past backoff_max (a useful session), then its context is full
	// while the model is replying: the next session waits for the model to listen (switch_wait
	// is long), and each one ends before that.
	time.Sleep(backoffMax + 100*time.Millisecond)
	const ending = 6
	fs.mu.Lock()
	fs.endAtOnce = ending
	first := fs.sessions[0]
	fs.mu.Unlock()
	first.emit(realtime.TextDelta{Text: "a long answer "})
	first.emit(realtime.MetricsUpdate{Metrics: realtime.Metrics{KVCacheLength: 1000}})
	d := waitDials(2 + ending)
	var g []time.Duration
	for i := 2; i < len(d); i++ {
		g = append(g, d[i].at.Sub(d[i-1].at))
	}
	t.Logf("waits between next-session dials: %v", g)
	for i, w := range g[:ending] {
		if w < backoffMin-time.Millisecond {
			t.Errorf("dial %d came %v after the one before: shorter than backoff_min", i+2, w)
		}
	}
	// Waits are drawn from [c/2, c] with c doubling up to backoff_max: the later ones reach
	// backoff_max/2.
	for i, w := range g[3:ending] {
		if w < backoffMax/2-time.Millisecond {
			t.Errorf("dial %d came %v after the one before: the waits do not grow toward backoff_max", i+5, w)
		}
	}
}
