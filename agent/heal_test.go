package agent_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
			for len(announced) < 6 {
				ev := h.waitFor("reconnecting", 10*time.Second, isState(agent.StateReconnecting))
				announced = append(announced, ev.(agent.StateChanged).Status.NextAttempt)
			}
			if err := h.sim.WaitSessions(context.Background(), 7); err != nil {
				t.Fatal(err)
			}
			h.stop()
			recs := h.sim.Sessions()[:7]
			g := gaps(recs)
			t.Logf("%s: waits between sessions %v", reason, g)
			for i, at := range announced {
				if recs[i+1].ConnectedAt.Before(at) {
					t.Errorf("session %d dialled %v before its announced time", i+1, at.Sub(recs[i+1].ConnectedAt))
				}
			}
			// Waits are drawn from [c/2, c] with c doubling from 200 ms up to 800 ms: each at
			// least backoff_min, never shorter than half the one before, the last ones ≥ 400 ms.
			for i, w := range g {
				if w < 100*time.Millisecond {
					t.Errorf("wait %d: %v, shorter than backoff_min", i, w)
				}
				if i > 0 && w < g[i-1]/2 {
					t.Errorf("wait %d: %v after %v: shrinking", i, w, g[i-1])
				}
			}
			for _, w := range g[3:] {
				if w < 400*time.Millisecond {
					t.Errorf("waits %v do not reach backoff_max/2", g)
					break
				}
			}
			if st := h.sup.Status(); st.SessionsLost < 6 || st.Reconnects < 6 {
				t.Errorf("status counts %d lost sessions and %d reconnects, want ≥ 6", st.SessionsLost, st.Reconnects)
			}
		})
	}
}

// While stuck (every attempt refused), the agent says what is wrong once and then counts: one
// reconnect event and one audio_dropped event, however many attempts.
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
	for _, ev := range h.log {
		if lc, ok := ev.(agent.Lifecycle); ok {
			kinds[lc.Kind]++
		}
	}
	st := h.sup.Status()
	t.Logf("%d attempts: events %v; %d chunks dropped", len(h.sim.Sessions()), kinds, st.ChunksDropped)
	if kinds["reconnect"] != 1 || kinds["audio_dropped"] != 1 {
		t.Errorf("events %v over %d attempts: want one reconnect and one audio_dropped", kinds, len(h.sim.Sessions()))
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
	checkContiguous(t, second)
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
	h := newHarness(t, setup{speed: 1, proxy: true, cfg: agent.Config{Chunk: 250 * time.Millisecond, ReconnectBuffer: 3 * time.Second}})
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
	checkRate(t, last.Appends, 1.1)
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
	// The audio is a ramp: sample i is i/2^24 unless it was silenced. Every sample sent after the
	// mute that was captured before the unmute must be silence; the rest is the ramp.
	sentBefore := 0
	for i, v := range got {
		if v != 0 || i == 0 {
			continue
		}
		sentBefore = i
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
			if int64(i) >= unmutedAt+4000 {
				t.Fatalf("sample %d captured after the unmute is silent", i)
			}
		default:
			heard++
			if int64(i) >= int64(sentBefore) && int64(i) < unmutedAt-4000 {
				t.Fatalf("sample %d, captured before the unmute and sent after the mute, went out as heard", i)
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

// On a one-worker server the overlap rollover's next session would wait behind the agent's own:
// the agent notices the queue, leaves it, and rolls over sequentially — counted as rollovers, no
// session reaching the server's limit, no audio lost or repeated.
func TestRolloverOnOneWorkerServer(t *testing.T) {
	h := newHarness(t, setup{sim: realtimetest.Options{Workers: 1, QueueUpdateInterval: 100 * time.Millisecond},
		cfg: agent.Config{TimeLimit: 1200 * time.Millisecond, TimeMargin: 400 * time.Millisecond}})
	for range 3 {
		h.waitFor("rollover", 15*time.Second, isLifecycle("rollover"))
	}
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	time.Sleep(300 * time.Millisecond)
	h.stop()
	recs := h.sim.Sessions()
	var served, queued []realtimetest.SessionRecord
	for _, rec := range recs {
		switch {
		case len(rec.Appends) > 0:
			served = append(served, rec)
		case len(rec.QueuedPositions) > 0:
			queued = append(queued, rec)
		}
	}
	if len(queued) == 0 {
		t.Fatal("no pre-opened session was ever queued: the test does not test the one-worker case")
	}
	var got []float32
	for _, rec := range served {
		got = append(got, rec.Audio...)
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
	t.Logf("%d sessions served, %d queued pre-opens left (only the first: later rollovers go sequentially)", len(served), len(queued))
	if len(queued) > 1 {
		t.Errorf("%d pre-opened sessions queued: after the first, rollovers should be sequential", len(queued))
	}
	h.noRejections()
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
