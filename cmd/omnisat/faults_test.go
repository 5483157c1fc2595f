package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// The real `omnisat run` binary, with a WAV file as its microphone and no speaker, against the
// simulator playing the faults real servers showed (issue 13). Each test asserts from the
// simulator's records: how many sessions, the waits between them, the audio that arrived.

// rampWAV writes a 16 kHz mono 32-bit float WAV whose sample i is i/2^24 (exact in float32), so
// that the simulator's record says which captured samples arrived, once each and in order.
func rampWAV(t *testing.T, seconds int) string {
	t.Helper()
	n := 16000 * seconds
	data := make([]byte, 44+4*n)
	copy(data[0:], "RIFF")
	binary.LittleEndian.PutUint32(data[4:], uint32(36+4*n))
	copy(data[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(data[16:], 16)
	binary.LittleEndian.PutUint16(data[20:], 3) // IEEE float
	binary.LittleEndian.PutUint16(data[22:], 1)
	binary.LittleEndian.PutUint32(data[24:], 16000)
	binary.LittleEndian.PutUint32(data[28:], 16000*4)
	binary.LittleEndian.PutUint16(data[32:], 4)
	binary.LittleEndian.PutUint16(data[34:], 32)
	copy(data[36:], "data")
	binary.LittleEndian.PutUint32(data[40:], uint32(4*n))
	for i := range n {
		binary.LittleEndian.PutUint32(data[44+4*i:], math.Float32bits(float32(i)/(1<<24)))
	}
	path := filepath.Join(t.TempDir(), "ramp.wav")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// faultRun is `omnisat run` on a ramp microphone, no speaker, no camera, against url.
type faultRun struct {
	t    *testing.T
	sock string
	logs *syncBuffer
	stop func()
}

// startFaultRun runs the binary; server holds extra lines of the server section ("  key: value\n"),
// extra whole sections.
func startFaultRun(t *testing.T, url, server, extra string) *faultRun {
	t.Helper()
	bin := buildOmnisat(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "control.sock")
	cfg := fmt.Sprintf("server:\n  url: %s\n  mode: audio\n%saudio:\n  input: file:%s\n  output: none\ncamera:\n  source: none\n"+
		"control:\n  socket: %s\n%s", url, server, rampWAV(t, 120), sock, extra)
	path := filepath.Join(dir, "omnisat.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, logs, stop := startOmnisat(t, bin, path, dir)
	r := &faultRun{t: t, sock: sock, logs: logs, stop: stop}
	t.Cleanup(r.halt)
	return r
}

// halt stops the binary (once).
func (r *faultRun) halt() {
	if r.stop != nil {
		r.stop()
		r.stop = nil
	}
}

// waitUntil polls cond (generously: only a hang reaches the deadline).
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, timeout)
		}
	}
}

// served returns the sessions that received audio, in order.
func served(recs []realtimetest.SessionRecord) []realtimetest.SessionRecord {
	var out []realtimetest.SessionRecord
	for _, r := range recs {
		if len(r.Appends) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// checkRampFrom asserts that got is the ramp from sample 0, without loss, repetition or reordering.
func checkRampFrom(t *testing.T, got []float32) {
	t.Helper()
	for i, v := range got {
		if want := float32(i) / (1 << 24); v != want {
			t.Fatalf("sample %d is ramp sample %d: audio was lost, repeated or reordered", i, int(v*(1<<24)))
		}
	}
}

// A server that ends every session 0.1 s after creating it (reason timeout) meets the default
// backoff: at most one session per 2 s on average, each at least backoff_min (1 s) after the one
// before, waits growing — and the log says what is wrong once, not once per attempt.
func TestFaultFlappingServer(t *testing.T) {
	sim := realtimetest.NewServer(realtimetest.Options{Faults: []realtimetest.Fault{
		{Kind: realtimetest.FaultClose, Reason: "timeout", Delay: 100 * time.Millisecond}}})
	t.Cleanup(sim.Close)
	r := startFaultRun(t, sim.URL(), "", "")
	began := time.Now()
	waitUntil(t, "two sessions", 30*time.Second, func() bool { return len(sim.Sessions()) >= 2 })
	time.Sleep(20*time.Second - time.Since(began))
	r.halt()
	elapsed := time.Since(began)
	recs := sim.Sessions()
	var gaps []time.Duration
	for i := 1; i < len(recs); i++ {
		gaps = append(gaps, recs[i].ConnectedAt.Sub(recs[i-1].ConnectedAt))
	}
	t.Logf("%d sessions in %v; waits between them %v", len(recs), elapsed.Round(time.Millisecond), gaps)
	if limit := 1 + int(elapsed/(2*time.Second)); len(recs) > limit {
		t.Errorf("%d sessions in %v: more than one per 2 s (%d)", len(recs), elapsed.Round(time.Second), limit)
	}
	for i, g := range gaps {
		if g < time.Second {
			t.Errorf("session %d came %v after the one before: shorter than backoff_min", i+1, g)
		}
	}
	if len(gaps) >= 3 && gaps[len(gaps)-1] < 2*time.Second {
		t.Errorf("waits %v do not grow", gaps)
	}
	if n := strings.Count(r.logs.String(), `msg="agent: reconnecting"`); n != 1 {
		t.Errorf("%d reconnect warnings for one cause; want it said once:\n%s", n, r.logs.String())
	}
	noRejections(t, sim)
}

// healAfter runs the binary against a server with one fault, quickly retried, until a session
// has taken five chunks; it returns every session and the binary's log. The audio waiting meanwhile
// is kept (generous buffers), so the served session must begin with the first sample.
func healAfter(t *testing.T, fault realtimetest.Fault, server string) ([]realtimetest.SessionRecord, string) {
	t.Helper()
	sim := realtimetest.NewServer(realtimetest.Options{Faults: []realtimetest.Fault{fault}})
	t.Cleanup(sim.Close)
	r := startFaultRun(t, sim.URL(), server, "session:\n  backoff_min: 500ms\n  backoff_max: 1s\n  reconnect_buffer: 30s\n  max_lag: 30s\n")
	waitUntil(t, "a served session", 60*time.Second, func() bool {
		s := served(sim.Sessions())
		return len(s) == 1 && len(s[0].Appends) >= 5
	})
	r.halt()
	noRejections(t, sim)
	recs := sim.Sessions()
	checkRampFrom(t, served(recs)[0].Audio)
	return recs, r.logs.String()
}

// A current-dialect chain whose worker answers the first sessions' init with
// session.closed{backend_error} before session.created is retried (it is transient), and the
// device heals: every sample captured meanwhile reaches the server once, in order.
func TestFaultBackendErrorBeforeCreated(t *testing.T) {
	recs, _ := healAfter(t, realtimetest.Fault{Kind: realtimetest.FaultBackendError, Count: 3}, "")
	if s := served(recs); len(recs) != 4 || s[0].Index != 3 {
		t.Fatalf("%d sessions, the first served %d (the first three refused by the backend)", len(recs), s[0].Index)
	}
}

// A server that never answers session.init: the agent gives the phase up at server.init_timeout
// and tries again, with a hint at the dialect; the audio of the wait reaches the next session.
func TestFaultStallAtInit(t *testing.T) {
	recs, logs := healAfter(t, realtimetest.Fault{Kind: realtimetest.FaultStallInit, Count: 1}, "  init_timeout: 2s\n")
	if len(recs) != 2 || len(recs[0].Appends) != 0 {
		t.Fatalf("%d sessions; the stalled one received %d chunks", len(recs), len(recs[0].Appends))
	}
	if !strings.Contains(logs, "legacy") {
		t.Errorf("the log does not hint at the dialect:\n%s", logs)
	}
}

// Rollover on a real one-worker gateway (one that jams when a queued client leaves unnoticed),
// with the default overlap: the pre-opened session is queued behind the agent's own; the agent
// keeps it as the next session (it gets the worker when ours closes) and rolls over sequentially
// from then on. Rollovers are counted, no session leaves the queue without its worker, the
// gateway is never jammed, and no sample is lost or repeated. The context fills fast (400
// tokens per second of audio against a 1024-token limit), so rollovers come every second or two.
func TestFaultRolloverOnOneWorkerGateway(t *testing.T) {
	sim := realtimetest.NewServer(realtimetest.Options{Workers: 1, LateQueueLeave: true, QueueUpdateInterval: time.Second,
		TokensPerAudioSecond: 400})
	t.Cleanup(sim.Close)
	r := startFaultRun(t, sim.URL(), "", "session:\n  context_limit: 1024\n  context_margin: 200\n  reconnect_buffer: 30s\n  max_lag: 30s\n")
	waitUntil(t, "three rollovers", 90*time.Second, func() bool { return status(t, r.sock).Rollovers >= 3 })
	st := status(t, r.sock)
	r.halt()
	recs := sim.Sessions()
	var got []float32
	queued := 0
	for _, rec := range recs {
		if len(rec.Appends) > 0 {
			got = append(got, rec.Audio...)
			if rec.Index < len(recs)-1 && (rec.CloseReason != "user_stop" || rec.EndReason == "timeout") {
				t.Errorf("session %d ended %q (client said %q): it should have been rolled over", rec.Index, rec.EndReason, rec.CloseReason)
			}
		}
		if len(rec.QueuedPositions) > 0 {
			queued++
			if rec.AssignedAt.IsZero() {
				t.Errorf("session %d left the queue without its worker (%s)", rec.Index, rec.EndReason)
			}
		}
	}
	t.Logf("%d sessions, %d of them queued, %d rollovers", len(recs), queued, st.Rollovers)
	if sim.Jammed() {
		t.Fatal("the gateway handed its worker to a queued client the agent had left: jammed")
	}
	if queued == 0 {
		t.Error("no session was ever queued: the test does not test the one-worker case")
	}
	if st.SessionsLost != 0 || st.ChunksDropped != 0 {
		t.Errorf("status: %d sessions lost, %d chunks dropped", st.SessionsLost, st.ChunksDropped)
	}
	checkRampFrom(t, got)
	noRejections(t, sim)
}

// Stopping the service while its rollover's pre-opened session waits in a one-worker gateway's
// queue: the dial does not vanish from the queue (the gateway would give the freed worker to the
// gone client); it takes the worker as the session ahead closes and hands it straight back. The
// next client gets the worker.
func TestFaultShutdownWhileQueued(t *testing.T) {
	sim := realtimetest.NewServer(realtimetest.Options{Workers: 1, LateQueueLeave: true, QueueUpdateInterval: time.Second,
		TokensPerAudioSecond: 400})
	t.Cleanup(sim.Close)
	r := startFaultRun(t, sim.URL(), "", "session:\n  context_limit: 1024\n  context_margin: 200\n")
	waitUntil(t, "a queued pre-opened session", 60*time.Second, func() bool {
		recs := sim.Sessions()
		return len(recs) > 1 && len(recs[1].QueuedPositions) > 0
	})
	r.halt()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next, err := realtime.Dial(ctx, realtime.Config{URL: sim.URL(), Mode: realtime.ModeAudio})
	if err != nil {
		t.Fatalf("the next client got no session: %v (jammed: %v)", err, sim.Jammed())
	}
	next.Close(context.Background(), "user_stop")
	if sim.Jammed() {
		t.Fatal("jammed")
	}
}

// "queued position 1 of 1" is printed as often as the server reports it, not more (the
// microphone's speech flag changing while queued used to print it again).
func TestFaultQueuePrintedPerReport(t *testing.T) {
	sim := realtimetest.NewServer(realtimetest.Options{Workers: 1, QueueUpdateInterval: 500 * time.Millisecond})
	t.Cleanup(sim.Close)
	other, err := realtime.Dial(context.Background(), realtime.Config{URL: sim.URL(), Mode: realtime.ModeAudio})
	if err != nil {
		t.Fatal(err)
	}
	r := startFaultRun(t, sim.URL(), "", "")
	waitUntil(t, "queue reports", 30*time.Second, func() bool {
		recs := sim.Sessions()
		return len(recs) > 1 && len(recs[1].QueuedPositions) >= 6
	})
	// Stopped, the agent stays in the queue to hand its worker back (the other client ends
	// meanwhile); the reports it gets then are not news.
	reports := len(sim.Sessions()[1].QueuedPositions)
	go func() {
		time.Sleep(500 * time.Millisecond)
		other.Close(context.Background(), "user_stop")
	}()
	r.halt()
	lines := strings.Count(r.logs.String(), "state queued position")
	t.Logf("%d reports from the server before the stop, %d lines printed", reports, lines)
	if lines > reports+1 || lines < reports-1 {
		t.Errorf("%d queue lines printed for %d reports", lines, reports)
	}
}

// After `ctl stop`, nothing the microphone hears reaches the server, not even at the next
// `ctl start`: the new session begins with audio captured after the start.
func TestFaultStopStartPrivacy(t *testing.T) {
	sim := realtimetest.NewServer(realtimetest.Options{})
	t.Cleanup(sim.Close)
	r := startFaultRun(t, sim.URL(), "", "")
	waitUntil(t, "audio", 30*time.Second, func() bool { return len(sim.Sessions()) == 1 && len(sim.Sessions()[0].Appends) >= 3 })
	if code, _, stderr := runCLI(t, "ctl", "--socket", r.sock, "stop"); code != 0 {
		t.Fatalf("ctl stop: %d %s", code, stderr)
	}
	waitUntil(t, "the end of the session", 30*time.Second, func() bool { return !sim.Sessions()[0].EndedAt.IsZero() })
	stoppedAt := len(sim.Sessions()[0].Audio)
	time.Sleep(4 * time.Second) // more than the 3 s reconnect buffer
	if code, _, stderr := runCLI(t, "ctl", "--socket", r.sock, "start"); code != 0 {
		t.Fatalf("ctl start: %d %s", code, stderr)
	}
	waitUntil(t, "a second session with audio", 30*time.Second, func() bool {
		recs := sim.Sessions()
		return len(recs) == 2 && len(recs[1].Appends) >= 2
	})
	r.halt()
	second := sim.Sessions()[1].Audio
	first := int(second[0] * (1 << 24))
	// The microphone ran on during the 4 s stop; anything from the first 3.5 s of it would be
	// audio heard while switched off.
	if min := stoppedAt + 16000*7/2; first < min {
		t.Fatalf("the new session begins with sample %d: captured while stopped (the old one ended at %d, stopped ~4 s)", first, stoppedAt)
	}
	t.Logf("the first session ended at sample %d; the second began at %d (%.1f s later)", stoppedAt, first, float64(first-stoppedAt)/16000)
	noRejections(t, sim)
}

// `omnisat config check` refuses a context that can never hold the prompt and the carry-over.
func TestFaultConfigCheckContextFit(t *testing.T) {
	path := writeConfig(t, "server:\n  url: ws://gw/v1/realtime\n  instructions: "+strings.Repeat("Be very verbose. ", 100)+
		"\nsession:\n  context_limit: 1024\n  context_margin: 600\n", 0o600)
	code, _, stderr := runCLI(t, "config", "check", "-c", path)
	if code != 1 || !strings.Contains(stderr, "session.context_margin") || !strings.Contains(stderr, "carry_over_chars") {
		t.Fatalf("config check: exit %d\n%s", code, stderr)
	}
	if err := (agent.Config{ContextLimit: 1024, ContextMargin: 400}).CheckContext(""); err != nil {
		t.Errorf("an empty prompt and the default carry-over (~300 tokens) leave 324 of 624 tokens: %v", err)
	}
}

// The default dialect (current) against a legacy gateway, which drops a current session.init
// without a word: the agent abandons each attempt at server.init_timeout, says once that the
// gateway may be legacy and names server.dialect, backs off between attempts, and leaves every
// socket itself so that the gateway's worker is free again.
func TestFaultWrongDialect(t *testing.T) {
	sim := realtimetest.NewServer(realtimetest.Options{Dialect: realtimetest.Legacy})
	t.Cleanup(sim.Close)
	r := startFaultRun(t, sim.URL(), "  init_timeout: 1s\n", "session:\n  backoff_min: 1s\n  backoff_max: 4s\n")
	began := time.Now()
	waitUntil(t, "three attempts", 60*time.Second, func() bool { return len(sim.Sessions()) >= 3 })
	st := status(t, r.sock)
	waitUntil(t, "a hint in the status", 30*time.Second, func() bool {
		st = status(t, r.sock)
		return strings.Contains(st.LastError, "server.dialect")
	})
	r.halt()
	elapsed := time.Since(began)
	// The server sees a socket end a moment after the client has closed it (its reader gets the
	// close frame or EOF, then records it): give it that moment, bounded, before judging.
	allLeft := func() bool {
		for _, rec := range sim.Sessions() {
			if rec.LeftAt.IsZero() && rec.EndedAt.IsZero() {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !allLeft() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	recs := sim.Sessions()
	for _, rec := range recs {
		if !rec.CreatedAt.IsZero() || len(rec.Appends) > 0 {
			t.Errorf("session %d was created or took audio: the legacy gateway ignores a current init", rec.Index)
		}
		if rec.LeftAt.IsZero() && rec.EndedAt.IsZero() {
			t.Errorf("session %d was never left: it holds the gateway's worker", rec.Index)
		}
	}
	// Each attempt waits init_timeout (1 s) and then at least backoff_min (1 s).
	if limit := 1 + int(elapsed/(2*time.Second)); len(recs) > limit {
		t.Errorf("%d attempts in %v: more than one per 2 s (%d)", len(recs), elapsed.Round(time.Second), limit)
	}
	// The warning is said once for one cause (the state lines that follow repeat the reason).
	if n := strings.Count(r.logs.String(), `msg="agent: reconnecting"`); n != 1 || !strings.Contains(r.logs.String(), "set server.dialect: legacy") {
		t.Errorf("%d reconnect warnings (want one, naming server.dialect: legacy):\n%s", n, r.logs.String())
	}
	t.Logf("%d attempts in %v; status %s: %s", len(recs), elapsed.Round(time.Millisecond), st.State, st.LastError)
}

// An OpenVoice server that does not know the configured STT model answers error{recoverable:
// false, code: model_not_found}: a configuration error, not a reason to reconnect at once. The
// device shows it (state error, the server's words, the next attempt) and tries again only at
// session.config_error_retry — so that fixing the server heals it without a visit.
func TestFaultOpenVoiceUnknownModel(t *testing.T) {
	sim := realtimetest.NewServer(realtimetest.Options{Dialect: realtimetest.OpenVoice, Models: []string{"faster-whisper-large-v3"}})
	t.Cleanup(sim.Close)
	r := startFaultRun(t, sim.URL(), "  dialect: openvoice\n  model: no-such-model\n", "session:\n  config_error_retry: 10s\n")
	var st agent.Status
	waitUntil(t, "state error", 60*time.Second, func() bool {
		st = status(t, r.sock)
		return st.State == agent.StateError
	})
	time.Sleep(3 * time.Second) // a reconnecting agent would have tried again by now
	recs := sim.Sessions()
	r.halt()
	if len(recs) != 1 {
		t.Errorf("%d sessions within seconds of a model_not_found: retried as if it were transient", len(recs))
	}
	if !strings.Contains(st.LastError, "no-such-model") && !strings.Contains(st.LastError, "model_not_found") {
		t.Errorf("last error %q does not say what the server answered", st.LastError)
	}
	if w := st.NextAttempt.Sub(st.Since); w < 7*time.Second || w > 10*time.Second {
		t.Errorf("next attempt in %v, want [0.8, 1] × config_error_retry (10 s)", w)
	}
	for _, rec := range recs {
		if len(rec.Appends) > 0 {
			t.Errorf("session %d took audio", rec.Index)
		}
	}
}

// A server that sends session.closed and leaves its socket open (OpenVoice does, and the legacy
// gateway after context_full) is left by the client: the agent closes the socket itself, opens
// the next session after its backoff, and streams on.
func TestFaultSocketLeftOpenAfterClosed(t *testing.T) {
	sim := realtimetest.NewServer(realtimetest.Options{Faults: []realtimetest.Fault{
		{Kind: realtimetest.FaultClose, Reason: "backend_error", AfterAppends: 3, KeepOpen: true, Count: 1}}})
	t.Cleanup(sim.Close)
	r := startFaultRun(t, sim.URL(), "  close_timeout: 1s\n", "session:\n  backoff_min: 500ms\n  backoff_max: 1s\n")
	waitUntil(t, "a second session with audio", 60*time.Second, func() bool {
		recs := sim.Sessions()
		return len(recs) == 2 && len(recs[1].Appends) >= 3
	})
	r.halt()
	first := sim.Sessions()[0]
	if first.LeftAt.IsZero() {
		t.Fatalf("the client never closed the socket the server left open (ended %q)", first.EndReason)
	}
	if len(sim.Sessions()) != 2 {
		t.Errorf("%d sessions, want 2", len(sim.Sessions()))
	}
	t.Logf("the server said closed; the client left %v later", first.LeftAt.Sub(first.CreatedAt))
}
