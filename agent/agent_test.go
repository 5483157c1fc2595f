package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/internal/faultproxy"
	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// The agent is tested end to end: a paced audio source, the real realtime client over real
// sockets, the protocol-faithful simulator, and (for link faults) a TCP proxy between them.

// ramp is audio whose every sample says where it came from: sample i is i/2^24, exact in float32,
// so the simulator's record proves which samples arrived, once each and in order.
func ramp(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(i) / (1 << 24)
	}
	return s
}

func tone(n int, amp float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(amp * math.Sin(2*math.Pi*440*float64(i)/16000))
	}
	return s
}

// testLogger discards the agent's log unless OMNISAT_TEST_LOG is set (then: debug to stderr).
func testLogger() *slog.Logger {
	if os.Getenv("OMNISAT_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type harness struct {
	t       testing.TB
	sim     *realtimetest.Server
	proxy   *faultproxy.Proxy
	source  *devices.PacedSource
	speaker *devices.FileSpeaker
	sup     *agent.Supervisor
	events  <-chan agent.Event
	cancel  context.CancelFunc
	done    chan error

	mu  sync.Mutex
	log []agent.Event
}

type setup struct {
	sim      realtimetest.Options
	cfg      agent.Config
	server   func(*realtime.Config)
	audio    []float32
	speed    float64
	proxy    bool
	noStart  bool
	frames   agent.FrameSource
	dialWrap func(agent.DialFunc) agent.DialFunc
	// unchecked skips the configuration's range checks (minutes compressed into milliseconds).
	unchecked bool
	chatWrap  func(agent.ChatFunc) agent.ChatFunc
	// speakerWrap stands between the agent and the harness's speaker.
	speakerWrap func(agent.Speaker) agent.Speaker
	// source replaces the paced ramp as the microphone; audioHold is Options.AudioHold.
	source    agent.AudioSource
	audioHold time.Duration
}

func newHarness(t testing.TB, su setup) *harness {
	t.Helper()
	h := &harness{t: t, done: make(chan error, 1)}
	if su.sim.Logger == nil {
		su.sim.Logger = testLogger()
	}
	h.sim = realtimetest.NewServer(su.sim)
	t.Cleanup(h.sim.Close)
	serverURL := h.sim.URL()
	if su.proxy {
		p, err := faultproxy.New(h.sim.Addr())
		if err != nil {
			t.Fatal(err)
		}
		h.proxy = p
		t.Cleanup(p.Close)
		serverURL = strings.Replace(serverURL, h.sim.Addr(), p.Addr(), 1)
	}
	if su.audio == nil {
		su.audio = ramp(16000 * 60)
	}
	if su.speed == 0 {
		su.speed = 4
	}
	h.source = devices.NewPacedSource(su.audio, 16000, false, su.speed)
	h.speaker = devices.NewFileSpeaker(filepath.Join(t.TempDir(), "speaker.wav"), 24000)
	t.Cleanup(func() { h.speaker.Close() })
	mode := realtime.ModeAudio
	if su.frames != nil {
		mode = realtime.ModeVideo
	}
	d := su.sim.Dialect
	if d == "" {
		d = realtimetest.Current
	}
	server := realtime.Config{URL: serverURL, Dialect: realtime.Dialect(d), Mode: mode, Model: "test-model",
		PingInterval: 500 * time.Millisecond, DeadLinkTimeout: 8 * time.Second, DialTimeout: 5 * time.Second,
		Init: realtime.Init{Instructions: "You are a test."}, Logger: testLogger()}
	if su.server != nil {
		su.server(&server)
	}
	cfg := su.cfg
	if cfg.Chunk == 0 {
		cfg.Chunk = 250 * time.Millisecond
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin, cfg.BackoffMax = 50*time.Millisecond, 400*time.Millisecond
	}
	dial := agent.DialFunc(realtime.Dial)
	if su.dialWrap != nil {
		dial = su.dialWrap(dial)
	}
	chat := agent.ChatFunc(realtime.Chat)
	if su.chatWrap != nil {
		chat = su.chatWrap(chat)
	}
	newSupervisor := agent.New
	if su.unchecked {
		newSupervisor = agent.NewUnchecked
	}
	var speaker agent.Speaker = h.speaker
	if su.speakerWrap != nil {
		speaker = su.speakerWrap(speaker)
	}
	var source agent.AudioSource = h.source
	if su.source != nil {
		source = su.source
	}
	sup, err := newSupervisor(agent.Options{Config: cfg, Server: server, Audio: source, AudioHold: su.audioHold, Speaker: speaker, Frames: su.frames,
		Dial: dial, Chat: chat, Rand: rand.New(rand.NewPCG(1, 2)), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	h.sup = sup
	events, _ := sup.Subscribe(100000)
	h.events = events
	if !su.noStart {
		h.start()
	}
	return h
}

func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.sup.Run(ctx) }()
	h.t.Cleanup(h.stop)
}

// stop shuts the agent down and waits for Run to return.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil && !errors.Is(err, io.EOF) {
			h.t.Errorf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		h.t.Error("Run did not return within 20 s of cancel")
	}
}

// waitFor reads events until match returns true. The timeout is only there to end a test that
// hangs: it is stretched (×4, at least 20 s) so that a busy machine never reaches it.
func (h *harness) waitFor(what string, timeout time.Duration, match func(agent.Event) bool) agent.Event {
	h.t.Helper()
	timeout = max(4*timeout, 20*time.Second)
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-h.events:
			if !ok {
				h.t.Fatalf("event stream closed while waiting for %s", what)
			}
			h.mu.Lock()
			h.log = append(h.log, ev)
			h.mu.Unlock()
			if match(ev) {
				return ev
			}
		case <-deadline:
			h.t.Fatalf("no %s within %v; status %+v", what, timeout, h.sup.Status())
		}
	}
}

func isState(s agent.State) func(agent.Event) bool {
	return func(ev agent.Event) bool {
		sc, ok := ev.(agent.StateChanged)
		return ok && sc.Status.State == s
	}
}

func isLifecycle(kind string) func(agent.Event) bool {
	return func(ev agent.Event) bool {
		lc, ok := ev.(agent.Lifecycle)
		return ok && lc.Kind == kind
	}
}

// received concatenates the audio every session received, in session order.
func (h *harness) received() []float32 {
	var all []float32
	for _, rec := range h.sim.Sessions() {
		all = append(all, rec.Audio...)
	}
	return all
}

// checkRamp asserts that got is the ramp from 0 without loss, duplication or reordering.
func checkRamp(t *testing.T, got []float32) {
	t.Helper()
	for i, v := range got {
		if want := float32(i) / (1 << 24); v != want {
			t.Fatalf("sample %d is ramp sample %d: audio was lost, repeated or reordered", i, int(v*(1<<24)))
		}
	}
}

// explain logs what happened, for a test about to fail on the audio received.
func (h *harness) explain() {
	st := h.sup.Status()
	h.t.Logf("status: %d chunks sent, %d dropped, %d rollovers, %d lost", st.ChunksSent, st.ChunksDropped, st.Rollovers, st.SessionsLost)
	for _, rec := range h.sim.Sessions() {
		if len(rec.Audio) > 0 {
			h.t.Logf("session %d: samples %d..%d, end %q", rec.Index, int(rec.Audio[0]*(1<<24)), int(rec.Audio[len(rec.Audio)-1]*(1<<24)), rec.EndReason)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range h.log {
		if lc, ok := ev.(agent.Lifecycle); ok {
			h.t.Logf("%s %s %s %s", lc.At.Format("05.000"), lc.Kind, lc.SessionID, lc.Reason)
		}
	}
}

func isRamp(got []float32) bool {
	for i, v := range got {
		if v != float32(i)/(1<<24) {
			return false
		}
	}
	return true
}

func (h *harness) noRejections() {
	h.t.Helper()
	for _, rec := range h.sim.Sessions() {
		if len(rec.Rejections) > 0 {
			h.t.Errorf("session %d: simulator rejected the agent's input: %v", rec.Index, rec.Rejections)
		}
	}
}

func TestAlwaysConnectsAndStreams(t *testing.T) {
	h := newHarness(t, setup{})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	deadline := time.Now().Add(5 * time.Second)
	for len(h.received()) < 16000*2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	h.stop()
	rec := h.sim.Sessions()[0]
	if rec.Init.Instructions != "You are a test." {
		t.Errorf("instructions %q", rec.Init.Instructions)
	}
	if rec.CloseReason != "user_stop" {
		t.Errorf("shutdown did not send session.close user_stop (got %q)", rec.CloseReason)
	}
	got := h.received()
	if len(got) < 16000*2 {
		t.Fatalf("only %d samples arrived", len(got))
	}
	checkRamp(t, got)
	for i, a := range rec.Appends {
		if a.Samples != 4000 {
			t.Fatalf("chunk %d has %d samples, want 4000 (250 ms)", i, a.Samples)
		}
	}
	st := h.sup.Status()
	if st.State != agent.StateStopped {
		t.Errorf("final state %s", st.State)
	}
	// Every sample went up as base64 float32 (4 bytes → 5⅓ characters), so at least that much.
	if min := uint64(len(got)) * 4 * 4 / 3; st.BytesUp < min || st.BytesDown == 0 {
		t.Errorf("traffic up %d (want ≥ %d), down %d", st.BytesUp, min, st.BytesDown)
	}
	h.noRejections()
}

// Chunks leave at the pace they are captured, never faster; what queued up before the session
// was ready goes out at no more than catch_up_rate × what is captured meanwhile. Judged by
// counts (what had been captured at each Send), not by arrival times, which a busy machine
// scatters.
func TestPacing(t *testing.T) {
	// The session is ready a second after the dial: that second's audio waits, then is caught up.
	sends := sendLog{ready: time.Second}
	h := newHarness(t, setup{speed: 1, noStart: true, dialWrap: sends.wrap})
	sends.sup = h.sup
	h.start()
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	for deadline := time.Now().Add(20 * time.Second); len(h.sim.Sessions()[0].Appends) < 12 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	h.stop()
	rec := h.sim.Sessions()[0]
	if len(rec.Appends) < 12 {
		t.Fatalf("%d chunks in 20 s", len(rec.Appends))
	}
	got := sends.all()
	if len(got) < 12 || got[0].captured-got[0].first < 16000 {
		t.Fatalf("%d sends recorded, the first with %d samples captured after its start: nothing to catch up", len(got), got[0].captured-got[0].first)
	}
	checkPace(t, got)
	h.noRejections()
}

// checkPace asserts the catch-up bound on one session's sends: the first chunk goes at once;
// what follows it never runs ahead of 1.1 × what has been captured since the session's count
// began (at its first chunk), and live audio goes only once captured. The real server's limit
// is 1.2 × real time from its first frame.
func checkPace(t *testing.T, sends []sendRecord) {
	t.Helper()
	after, caughtUp := 0, -1
	for i, sd := range sends[1:] {
		after += sd.samples
		if allowed := 1.1*float64(sd.captured-sd.start) + 1; float64(after) > allowed {
			t.Fatalf("send %d: %d samples after the first chunk with %d captured since the session began: faster than 1.1× capture",
				i+1, after, sd.captured-sd.start)
		}
		if sd.first+sd.samples > sd.captured {
			t.Fatalf("send %d holds audio up to sample %d, but only %d were captured", i+1, sd.first+sd.samples, sd.captured)
		}
		if caughtUp < 0 && sd.captured-(sd.first+sd.samples) < 4000 {
			caughtUp = i + 1
		}
	}
	t.Logf("the first chunk went %.2f s after its capture; live again from send %d of %d", float64(sends[0].captured-sends[0].first)/16000, caughtUp, len(sends))
}

// lastSession returns the sends of the newest session (the pacer restarts its count for each).
func (l *sendLog) lastSession() []sendRecord {
	all := l.all()
	i := len(all)
	for i > 0 && all[i-1].start == all[len(all)-1].start {
		i--
	}
	return all[i:]
}

// sendLog records every chunk the agent hands to its session: where its audio begins in the
// source (ramp audio), what had been captured then, and where the pacer began counting.
type sendLog struct {
	sup   *agent.Supervisor
	ready time.Duration // how long each session takes to be ready after its dial
	mu    sync.Mutex
	sends []sendRecord
}

type sendRecord struct{ first, samples, captured, start int }

func (l *sendLog) wrap(d agent.DialFunc) agent.DialFunc {
	return func(ctx context.Context, cfg realtime.Config) (realtime.Session, error) {
		s, err := d(ctx, cfg)
		if err != nil {
			return nil, err
		}
		time.Sleep(l.ready)
		return loggedSession{s, l}, nil
	}
}

func (l *sendLog) all() []sendRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sends)
}

type loggedSession struct {
	realtime.Session
	log *sendLog
}

// Send runs on the agent's sender, which owns the pacer.
func (s loggedSession) Send(ctx context.Context, c realtime.Chunk) error {
	start, captured := agent.PaceForTest(s.log.sup)
	r := sendRecord{samples: len(c.Audio), captured: int(captured), start: int(start)}
	if len(c.Audio) > 0 {
		r.first = int(math.Round(float64(c.Audio[0]) * (1 << 24)))
	}
	s.log.mu.Lock()
	s.log.sends = append(s.log.sends, r)
	s.log.mu.Unlock()
	return s.Session.Send(ctx, c)
}

func TestQueueStates(t *testing.T) {
	h := newHarness(t, setup{sim: realtimetest.Options{Workers: 1, QueueUpdateInterval: 50 * time.Millisecond}, noStart: true})
	// Someone else holds the only worker.
	other, err := realtime.Dial(context.Background(), realtime.Config{URL: h.sim.URL(), Mode: realtime.ModeAudio})
	if err != nil {
		t.Fatal(err)
	}
	h.start()
	ev := h.waitFor("queued", 5*time.Second, isState(agent.StateQueued))
	if st := ev.(agent.StateChanged).Status; st.QueuePosition != 1 || !strings.Contains(st.Detail, "position 1") {
		t.Fatalf("queued status %+v", st)
	}
	other.Close(context.Background(), "user_stop")
	h.waitFor("starting", 5*time.Second, isState(agent.StateStarting))
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	h.noRejections()
}

// Whatever the reason, a session that ended before it was useful (here after half a second of
// audio, shorter than backoff_max) is followed by a new one only after a backoff; a long, useful
// session that ends in the normal course (time limit, full context) is followed at once, and one
// that ends with an error after a backoff again.
func TestCloseReasons(t *testing.T) {
	for _, tt := range []struct {
		reason  string
		dialect realtimetest.Dialect
		long    bool // the session lived longer than backoff_max and took audio
		backoff bool
	}{
		{"timeout", realtimetest.Current, false, true},
		{"context_full", realtimetest.Legacy, false, true},
		{"backend_error", realtimetest.Current, false, true},
		{"server_shutdown", realtimetest.Legacy, false, true},
		{"something_new", realtimetest.Current, false, true},
		{"timeout", realtimetest.Current, true, false},
		{"context_full", realtimetest.Legacy, true, false},
		{"backend_error", realtimetest.Current, true, true},
	} {
		t.Run(fmt.Sprintf("%s long=%v", tt.reason, tt.long), func(t *testing.T) {
			after := 2 // 0.5 s of audio, ~125 ms at 4× speed
			if tt.long {
				after = 24 // 6 s of audio, 1.5 s at 4× speed
			}
			h := newHarness(t, setup{
				sim: realtimetest.Options{Dialect: tt.dialect, Faults: []realtimetest.Fault{{Kind: realtimetest.FaultClose, Reason: tt.reason, AfterAppends: after, Count: 1}}},
				cfg: agent.Config{BackoffMin: 300 * time.Millisecond, BackoffMax: 600 * time.Millisecond},
			})
			ev := h.waitFor("session_ended", 15*time.Second, isLifecycle("session_ended"))
			if lc := ev.(agent.Lifecycle); lc.Reason != tt.reason {
				t.Fatalf("ended with %q, want %q", lc.Reason, tt.reason)
			}
			// The next state says whether the agent waits, and until when.
			ev = h.waitFor("next state", 5*time.Second, func(ev agent.Event) bool {
				sc, ok := ev.(agent.StateChanged)
				return ok && (sc.Status.State == agent.StateReconnecting || sc.Status.State == agent.StateConnecting)
			})
			st := ev.(agent.StateChanged).Status
			if waited := st.State == agent.StateReconnecting; waited != tt.backoff {
				t.Fatalf("after the end: state %s (%q), want a backoff: %v", st.State, st.Detail, tt.backoff)
			}
			if tt.backoff {
				// The first wait after a failure is drawn from [backoff_min, 2·backoff_min].
				if w := st.NextAttempt.Sub(st.Since); w < 300*time.Millisecond || w > 600*time.Millisecond {
					t.Errorf("next attempt in %v, want 300ms..600ms", w)
				}
			}
			h.waitFor("listening again", 10*time.Second, isState(agent.StateListening))
			if err := h.sim.WaitSessions(context.Background(), 2); err != nil {
				t.Fatal(err)
			}
			if recs := h.sim.Sessions(); tt.backoff && recs[1].ConnectedAt.Before(st.NextAttempt) {
				t.Errorf("dialled at %v, before the announced next attempt %v", recs[1].ConnectedAt, st.NextAttempt)
			}
			if st := h.sup.Status(); st.Reconnects != 1 || st.SessionsLost != 1 {
				t.Errorf("reconnects %d, sessions lost %d; want 1 and 1", st.Reconnects, st.SessionsLost)
			}
			h.noRejections()
		})
	}
}

func TestBusyBackoff(t *testing.T) {
	h := newHarness(t, setup{
		sim: realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultRefuse, Count: 5}}},
		cfg: agent.Config{BackoffMin: 40 * time.Millisecond, BackoffMax: 2 * time.Second},
	})
	var waits []time.Duration
	var at []time.Time
	for len(waits) < 5 {
		ev := h.waitFor("reconnecting", 10*time.Second, isState(agent.StateReconnecting))
		st := ev.(agent.StateChanged).Status
		if !strings.Contains(st.Detail, "worker_busy") || !strings.Contains(st.LastError, "1013") {
			t.Fatalf("reconnect detail %q / %q does not say why", st.Detail, st.LastError)
		}
		waits = append(waits, st.NextAttempt.Sub(st.Since))
		at = append(at, st.NextAttempt)
	}
	h.waitFor("listening", 10*time.Second, isState(agent.StateListening))
	// Each wait lies in [c/2, c], c doubling per attempt from 2·backoff_min: never shrinking.
	for i, w := range waits {
		ceil := 80 * time.Millisecond << i
		if w < ceil/2 || w > ceil {
			t.Errorf("attempt %d waited %v, want %v..%v", i+1, w, ceil/2, ceil)
		}
	}
	// No dial came before its announced time.
	for i, rec := range h.sim.Sessions()[1:6] {
		if rec.ConnectedAt.Before(at[i]) {
			t.Errorf("attempt %d dialled %v before its announced time", i+2, at[i].Sub(rec.ConnectedAt))
		}
	}
	t.Logf("backoff waits: %v", waits)
	h.noRejections()
}

func TestBackoffCeiling(t *testing.T) {
	// The backoff distribution itself, many draws: within [c/2, c], spread over it, capped.
	h := newHarness(t, setup{noStart: true, cfg: agent.Config{BackoffMin: time.Second, BackoffMax: 30 * time.Second}})
	for n := 1; n <= 8; n++ {
		ceil := min(time.Second<<n, 30*time.Second)
		lo, hi := ceil, time.Duration(0)
		for range 2000 {
			w := agent.BackoffForTest(h.sup, n)
			if w < ceil/2 || w > ceil {
				t.Fatalf("attempt %d: %v outside [%v, %v]", n, w, ceil/2, ceil)
			}
			lo, hi = min(lo, w), max(hi, w)
		}
		if hi < ceil*95/100 || lo > ceil*55/100 {
			t.Errorf("attempt %d: 2000 draws span %v..%v of [%v, %v]: not spread", n, lo, hi, ceil/2, ceil)
		}
	}
}

// A configuration error (here: the server answers HTTP 404, a wrong URL) is not final: the agent
// says why and when it tries again, tries again slowly, and heals once the server is fixed (here:
// the route is back).
func TestConfigErrorRetriedSlowly(t *testing.T) {
	var dials atomic.Int32
	h := newHarness(t, setup{unchecked: true,
		cfg: agent.Config{ConfigErrorRetry: 500 * time.Millisecond},
		dialWrap: func(d agent.DialFunc) agent.DialFunc {
			return func(ctx context.Context, cfg realtime.Config) (realtime.Session, error) {
				if dials.Add(1) <= 2 {
					cfg.URL = strings.Replace(cfg.URL, "/v1/realtime", "/v1/moved", 1)
				}
				return d(ctx, cfg)
			}
		}})
	var errs []agent.Status
	for len(errs) < 2 {
		ev := h.waitFor("error", 10*time.Second, isState(agent.StateError))
		st := ev.(agent.StateChanged).Status
		if !strings.Contains(st.Detail, "404") || st.LastError != st.Detail {
			t.Fatalf("error detail %q / last error %q does not say what the server answered", st.Detail, st.LastError)
		}
		// Tried again after [0.8, 1] × config_error_retry.
		if w := st.NextAttempt.Sub(st.Since); w < 400*time.Millisecond || w > 500*time.Millisecond {
			t.Fatalf("next attempt in %v, want 400ms..500ms", w)
		}
		errs = append(errs, st)
	}
	h.waitFor("listening", 10*time.Second, isState(agent.StateListening))
	if n := dials.Load(); n != 3 {
		t.Fatalf("%d dials, want 2 refused and 1 that worked", n)
	}
	if got := h.sim.Sessions()[0].ConnectedAt; got.Before(errs[1].NextAttempt) {
		t.Errorf("retried %v before the announced time", errs[1].NextAttempt.Sub(got))
	}
	h.noRejections()
}

func TestCutLinkRecovers(t *testing.T) {
	h := newHarness(t, setup{proxy: true, cfg: agent.Config{ReconnectBuffer: 3 * time.Second}})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	time.Sleep(300 * time.Millisecond)
	h.proxy.Cut()
	cut := time.Now()
	ev := h.waitFor("session_ended", 3*time.Second, isLifecycle("session_ended"))
	if lc := ev.(agent.Lifecycle); !strings.Contains(lc.Reason, "cut") && !strings.Contains(lc.Reason, "closed") {
		t.Errorf("reason %q", lc.Reason)
	}
	h.waitFor("listening again", 5*time.Second, isState(agent.StateListening))
	t.Logf("cut link: back to listening %v after the cut", time.Since(cut))
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if recs := h.sim.Sessions(); len(recs) > 1 && len(recs[1].Appends) >= 4 {
			break
		}
	}
	h.stop()
	// Audio captured while reconnecting was kept and sent first: the second session begins where
	// the first one's last delivered chunk ended, except for chunks in flight when the link died.
	recs := h.sim.Sessions()
	first, second := recs[0].Audio, recs[1].Audio
	checkRamp(t, first)
	if len(second) == 0 {
		t.Fatal("nothing reached the new session")
	}
	start := int(second[0] * (1 << 24))
	lost := start - len(first)
	if lost < 0 || lost > 16000 {
		t.Fatalf("new session starts at sample %d, old ended at %d: %d samples lost", start, len(first), lost)
	}
	for i, v := range second {
		if want := float32(start+i) / (1 << 24); v != want {
			t.Fatalf("second session: sample %d is not contiguous", i)
		}
	}
	t.Logf("cut link: %d samples (%.2f s) lost in flight", lost, float64(lost)/16000)
	h.noRejections()
}

func TestSilentLinkDetected(t *testing.T) {
	h := newHarness(t, setup{proxy: true})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	h.proxy.Stall()
	stalled := time.Now()
	// DeadLinkTimeout is 8 s in this harness; a loaded machine may take longer to notice.
	ev := h.waitFor("session_ended", 20*time.Second, isLifecycle("session_ended"))
	detected := time.Since(stalled)
	if lc := ev.(agent.Lifecycle); !strings.Contains(lc.Reason, "dead") {
		t.Errorf("reason %q does not say the link is dead", lc.Reason)
	}
	h.proxy.Resume()
	h.waitFor("listening again", 10*time.Second, isState(agent.StateListening))
	t.Logf("silent link: detected after %v", detected)
}

// Planned rollover, by time and by context: the next session opens ahead, the switch happens while
// the model listens, and not one sample is lost or sent twice.
func TestPlannedRolloverLosesNothing(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cfg     agent.Config
		sim     realtimetest.Options
		overlap bool
	}{
		{"time", agent.Config{TimeLimit: 1200 * time.Millisecond, TimeMargin: 400 * time.Millisecond}, realtimetest.Options{Workers: 2}, true},
		{"context", agent.Config{ContextLimit: 1024, ContextMargin: 200}, realtimetest.Options{Workers: 2, TokensPerAudioSecond: 400}, true},
		{"context legacy", agent.Config{ContextLimit: 1024, ContextMargin: 200}, realtimetest.Options{Dialect: realtimetest.Legacy, Workers: 2, TokensPerAudioSecond: 400}, true},
		{"sequential single worker", agent.Config{TimeLimit: 1200 * time.Millisecond, TimeMargin: 400 * time.Millisecond, Overlap: new(bool)},
			realtimetest.Options{Workers: 1}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Audio is only ever dropped by design (too old for max_lag, beyond the buffers):
			// with generous bounds, any loss here is a rollover's fault, however busy the machine.
			tt.cfg.MaxLag, tt.cfg.ReconnectBuffer = 30*time.Second, 30*time.Second
			h := newHarness(t, setup{cfg: tt.cfg, sim: tt.sim})
			for range 3 {
				h.waitFor("rollover", 10*time.Second, isLifecycle("rollover"))
			}
			h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
			// A sequential rollover's gap is caught up at 1.1× the pace of capture: wait until
			// what arrived is within two chunks of what was captured.
			deadline := time.Now().Add(15 * time.Second)
			for h.source.Captured()-int64(len(h.received())) > 4000*2 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			h.stop()
			recs := h.sim.Sessions()
			if len(recs) < 4 {
				t.Fatalf("%d sessions", len(recs))
			}
			got := h.received()
			if !isRamp(got) {
				h.explain()
			}
			checkRamp(t, got)
			if st := h.sup.Status(); st.ChunksDropped != 0 {
				t.Errorf("%d chunks dropped", st.ChunksDropped)
			}
			// What was still on its way at the stop is not a loss: the stop discards it.
			t.Logf("%.2f s of audio received, %.2f s on its way at the stop", float64(len(got))/16000,
				float64(h.source.Captured()-int64(len(got)))/16000)
			for _, rec := range recs[:len(recs)-1] {
				if rec.CloseReason != "user_stop" {
					t.Errorf("session %d closed with %q, want user_stop", rec.Index, rec.CloseReason)
				}
				if rec.EndReason == "timeout" || rec.EndReason == "context_full" {
					t.Errorf("session %d reached the server's limit (%s) before the rollover", rec.Index, rec.EndReason)
				}
			}
			if tt.overlap {
				// The next session was ready before the old one closed.
				for i := 1; i < len(recs); i++ {
					if !recs[i].CreatedAt.Before(recs[i-1].EndedAt) {
						t.Errorf("session %d was created after session %d ended: no overlap", i, i-1)
					}
				}
			}
			h.noRejections()
		})
	}
}

// A session closed at a rollover hands its chunks' buffers back to capture: the next session's
// reconnect buffer, which starts empty, fills with them instead of with new memory (a new buffer
// for each of its first chunks, while the old session's went to the collector, was about a
// quarter of a megabyte at each rollover of a satellite's default 1 s chunks).
func TestRolloverReusesChunkBuffers(t *testing.T) {
	// Five chunks remembered per session, the old session's come back with room to spare (the
	// free list keeps eight).
	cfg := agent.Config{TimeLimit: 1200 * time.Millisecond, TimeMargin: 400 * time.Millisecond, ReconnectBuffer: time.Second}
	h := newHarness(t, setup{cfg: cfg, sim: realtimetest.Options{Workers: 2}})
	for range 2 {
		h.waitFor("rollover", 10*time.Second, isLifecycle("rollover"))
	}
	before := agent.ChunkBuffersMadeForTest(h.sup)
	const rollovers = 4
	for range rollovers {
		h.waitFor("rollover", 10*time.Second, isLifecycle("rollover"))
	}
	made := agent.ChunkBuffersMadeForTest(h.sup) - before
	t.Logf("%d chunk buffers made before, %d over %d rollovers", before, made, rollovers)
	// Without the old sessions' buffers every rollover makes about five; a close slower than the
	// new session's first five chunks may make a few until the free list has a surplus.
	if made > 5 {
		t.Errorf("%d chunk buffers made over %d rollovers; want at most 5", made, rollovers)
	}
	h.stop()
	h.noRejections()
}

// Carry-over: the next session's instructions carry what was said.
func TestCarryOver(t *testing.T) {
	// The input lasts longer than the waits below may take on a loaded machine: its end would
	// end the agent's run.
	audio := slices.Concat(make([]float32, 16000), tone(16000, 0.3), make([]float32, 16000*180))
	h := newHarness(t, setup{audio: audio, speed: 2, sim: realtimetest.Options{Workers: 2, ForceListenCount: -1},
		cfg: agent.Config{TimeLimit: 4 * time.Second, TimeMargin: time.Second}})
	h.waitFor("assistant utterance", 10*time.Second, func(ev agent.Event) bool {
		u, ok := ev.(agent.Utterance)
		return ok && u.Role == "assistant"
	})
	h.waitFor("rollover", 10*time.Second, isLifecycle("rollover"))
	recs := h.sim.Sessions()
	next := recs[len(recs)-1].Init.Instructions
	if !strings.HasPrefix(next, "You are a test.") || !strings.Contains(next, "Assistant: I heard 1.0 seconds of speech") {
		t.Fatalf("next instructions %q", next)
	}
}

func TestInterrupt(t *testing.T) {
	audio := slices.Concat(make([]float32, 4000), tone(32000, 0.3), make([]float32, 16000*30))
	h := newHarness(t, setup{audio: audio, speed: 1, sim: realtimetest.Options{ForceListenCount: -1}})
	h.waitFor("speaking", 10*time.Second, isState(agent.StateSpeaking))
	asked := time.Now()
	h.sup.Interrupt()
	if p := h.speaker.Pending(); p != 0 {
		t.Fatalf("playback not flushed: %v pending", p)
	}
	h.waitFor("listening", 3*time.Second, isState(agent.StateListening))
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, a := range h.sim.Sessions()[0].Appends {
			if a.ForceListen {
				t.Logf("interrupt: force_listen chunk of %d samples reached the server %v after the command", a.Samples, a.At.Sub(asked))
				h.stop()
				h.noRejections()
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no chunk with force_listen reached the server")
}

// playLog is a speaker that remembers every sample handed to it, in order.
type playLog struct {
	agent.Speaker
	mu     sync.Mutex
	played []float32
}

func (p *playLog) Play(samples []float32) {
	p.mu.Lock()
	p.played = append(p.played, samples...)
	p.mu.Unlock()
	p.Speaker.Play(samples)
}

func (p *playLog) all() []float32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.played)
}

// An interrupted reply stops at once: what the server still streams of the interrupted turn
// after the force_listen (real gateways go on for a while) is not played, and the next turn
// plays again. Tried with each way a server ends a spoken turn.
func TestInterruptDropsTheRestOfTheTurn(t *testing.T) {
	// The reply's samples say where they are in it: (i+1)/2^20, exact in float32.
	reply := make([]float32, 24000*8)
	for i := range reply {
		reply[i] = float32(i+1) / (1 << 20)
	}
	user := slices.Concat(make([]float32, 4000), tone(16000, 0.3), make([]float32, 16000*6))
	audio := slices.Concat(user, user, make([]float32, 16000*30))
	for _, c := range []struct {
		name    string
		dialect realtimetest.Dialect
		done    bool
	}{{"current", realtimetest.Current, false}, {"current-response.done", realtimetest.Current, true}, {"legacy", realtimetest.Legacy, false}} {
		t.Run(c.name, func(t *testing.T) {
			spk := &playLog{}
			// max_lag and the dead-link timeout are out of the way: on a loaded machine they
			// would (rightly) drop the second phrase or the session this test needs.
			h := newHarness(t, setup{audio: audio, speed: 1,
				sim:         realtimetest.Options{Dialect: c.dialect, ForceListenCount: -1, Reply: reply, InterruptLag: 3, DuplexDone: c.done},
				cfg:         agent.Config{BargeIn: agent.BargeInConfig{Enabled: new(bool)}, MaxLag: 30 * time.Second},
				server:      func(rc *realtime.Config) { rc.DeadLinkTimeout = 30 * time.Second },
				speakerWrap: func(s agent.Speaker) agent.Speaker { spk.Speaker = s; return spk }})
			h.waitFor("speaking", 10*time.Second, isState(agent.StateSpeaking))
			h.sup.Interrupt()
			// Until the second reply (to the second phrase) has begun to play.
			var played []float32
			for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				played = spk.all()
				if i := slices.IndexFunc(played, func(v float32) bool { return v == reply[0] }); i >= 0 && slices.Contains(played[i+1:], reply[0]) {
					break
				}
			}
			h.stop()
			rec := h.sim.Sessions()[0]
			if len(rec.Interrupts) == 0 {
				t.Fatal("no interrupt reached the server")
			}
			cut := rec.Interrupts[0]
			if cut >= len(reply) || len(rec.ReplyAudio) < cut+3*24000 {
				t.Fatalf("the server sent %d reply samples, interrupted at %d: the test needs a reply that goes on after it", len(rec.ReplyAudio), cut)
			}
			// Walk what was played: the first reply up to the interrupt, then the next from its start.
			late, turns := 0, 1
			prev := float32(0)
			for _, v := range played {
				if v <= prev {
					turns++
				}
				prev = v
				if turns == 1 && int(math.Round(float64(v)*(1<<20)))-1 >= cut {
					late++
				}
			}
			t.Logf("interrupted at reply sample %d of %d sent; %d samples played in all, %d of them late, %d turns", cut, len(rec.ReplyAudio), len(played), late, turns)
			if late > 0 {
				t.Errorf("%d samples (%.2f s) of the interrupted reply sent after the interrupt were played", late, float64(late)/24000)
			}
			if turns < 2 {
				t.Errorf("the next reply never played: the interrupted turn's drop did not end (the server sent %d reply samples, %d of them after the interrupted reply's %d)",
					len(rec.ReplyAudio), len(rec.ReplyAudio)-min(len(rec.ReplyAudio), cut+3*24000), cut+3*24000)
			}
			h.noRejections()
		})
	}
}

func TestOnDemandPolicy(t *testing.T) {
	h := newHarness(t, setup{cfg: agent.Config{Policy: agent.PolicyOnDemand, IdleTimeout: 600 * time.Millisecond}})
	time.Sleep(300 * time.Millisecond)
	if n := len(h.sim.Sessions()); n != 0 {
		t.Fatalf("on_demand connected %d times before any command", n)
	}
	h.sup.Start()
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	// Nobody talks: the session ends by itself and frees the server's worker.
	ended := h.waitFor("session_ended", 5*time.Second, isLifecycle("session_ended"))
	if lc := ended.(agent.Lifecycle); lc.Reason != "idle" || lc.SessionID == "" {
		t.Fatalf("session_ended %+v, want reason idle", lc)
	}
	ev := h.waitFor("idle", 5*time.Second, isState(agent.StateIdle))
	if d := ev.(agent.StateChanged).Status.Detail; d != "idle" {
		t.Fatalf("idle detail %q", d)
	}
	rec, err := h.sim.WaitEnded(context.Background(), 0)
	if err != nil || rec.CloseReason != "user_stop" {
		t.Fatalf("session not closed politely: %v %+v", err, rec.CloseReason)
	}
	h.noRejections()
}

// Policy voice: speech opens the session and the pre-roll reaches the server, so the first words
// are not lost.
func TestVoicePolicyPreRoll(t *testing.T) {
	speech := tone(16000, 0.3)
	audio := slices.Concat(make([]float32, 16000*2), speech, make([]float32, 16000*20))
	h := newHarness(t, setup{audio: audio, speed: 1, cfg: agent.Config{Policy: agent.PolicyVoice, PreRoll: time.Second, IdleTimeout: 5 * time.Second}})
	h.waitFor("listening", 8*time.Second, isState(agent.StateListening))
	// Until the pre-roll and the speech have arrived.
	for deadline := time.Now().Add(20 * time.Second); len(h.sim.Sessions()[0].Audio) < 16000*2+8000 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	h.stop()
	recs := h.sim.Sessions()
	if len(recs) != 1 {
		t.Fatalf("%d sessions", len(recs))
	}
	got := recs[0].Audio
	// The very first sample of the speech must be in what the server received.
	onset := -1
	for i, v := range got {
		if v != 0 {
			onset = i
			break
		}
	}
	if onset < 0 || got[onset] != speech[0] && got[onset] != speech[1] {
		t.Fatalf("speech onset not found in %d received samples", len(got))
	}
	if !slices.Equal(got[onset-1:onset-1+8000], speech[:8000]) && !slices.Equal(got[onset:onset+8000], speech[1:8001]) {
		t.Fatal("the start of the speech was not sent intact")
	}
	t.Logf("voice policy: %d samples (%.2f s) of pre-roll before the speech", onset, float64(onset)/16000)
	h.noRejections()
}

func TestAskAndSay(t *testing.T) {
	// Ask and Say open a chat session beside the duplex one: the server needs a second worker.
	h := newHarness(t, setup{sim: realtimetest.Options{Workers: 2}})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	h.sup.Ask("q1", "Reply with exactly: forty-two", agent.TurnOptions{})
	ev := h.waitFor("answer", 5*time.Second, func(ev agent.Event) bool { _, ok := ev.(agent.Answer); return ok })
	if a := ev.(agent.Answer); a.ID != "q1" || a.Text != "forty-two" || a.Error != "" {
		t.Fatalf("answer %+v", a)
	}
	h.sup.Ask("q2", "what do you see?", agent.TurnOptions{Snapshot: true})
	ev = h.waitFor("answer", 5*time.Second, func(ev agent.Event) bool { _, ok := ev.(agent.Answer); return ok })
	if a := ev.(agent.Answer); a.ID != "q2" || !strings.Contains(a.Error, "camera") {
		t.Fatalf("snapshot without camera: %+v", a)
	}
	h.sup.Say("s1", "good evening", agent.TurnOptions{})
	ev = h.waitFor("said", 5*time.Second, func(ev agent.Event) bool { _, ok := ev.(agent.Answer); return ok })
	if a := ev.(agent.Answer); a.ID != "s1" || a.Error != "" {
		t.Fatalf("say %+v", a)
	}
	// The speech is either still queued or already played.
	if h.speaker.Pending() == 0 && h.speaker.Stats().Peak < 0.1 {
		t.Fatal("say produced no audio on the speaker")
	}
	h.noRejections()
}

func TestOpenVoice(t *testing.T) {
	audio := slices.Concat(make([]float32, 8000), tone(16000, 0.3), make([]float32, 16000*20))
	h := newHarness(t, setup{audio: audio, speed: 1, sim: realtimetest.Options{Dialect: realtimetest.OpenVoice}})
	ev := h.waitFor("user transcript", 10*time.Second, func(ev agent.Event) bool {
		u, ok := ev.(agent.Utterance)
		return ok && u.Role == "user" && !u.Partial
	})
	if u := ev.(agent.Utterance); !strings.Contains(u.Text, "speech") {
		t.Fatalf("transcript %+v", u)
	}
	h.sup.Say("s1", "hello there", agent.TurnOptions{})
	h.waitFor("speaking", 5*time.Second, isState(agent.StateSpeaking))
	h.noRejections()
}

// slowSession makes Send wait while the gate is shut, as a link that has fallen behind does.
type slowSession struct {
	realtime.Session
	open *atomic.Bool
}

func (s slowSession) Send(ctx context.Context, c realtime.Chunk) error {
	for !s.open.Load() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return s.Session.Send(ctx, c)
}

// slowDial wraps every session in a slowSession gated by open.
func slowDial(open *atomic.Bool) func(agent.DialFunc) agent.DialFunc {
	return func(d agent.DialFunc) agent.DialFunc {
		return func(ctx context.Context, cfg realtime.Config) (realtime.Session, error) {
			s, err := d(ctx, cfg)
			if err != nil {
				return nil, err
			}
			return slowSession{s, open}, nil
		}
	}
}

// A link that falls behind: audio beyond max_lag is dropped (and counted), memory stays bounded,
// and what is sent afterwards is the newest audio, in order.
func TestMaxLagDrops(t *testing.T) {
	var open atomic.Bool
	open.Store(true)
	h := newHarness(t, setup{speed: 4, cfg: agent.Config{MaxLag: 500 * time.Millisecond},
		dialWrap: slowDial(&open)})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	time.Sleep(500 * time.Millisecond)
	open.Store(false)
	h.waitFor("audio_dropped", 5*time.Second, isLifecycle("audio_dropped"))
	time.Sleep(500 * time.Millisecond)
	open.Store(true)
	time.Sleep(500 * time.Millisecond)
	h.stop()
	st := h.sup.Status()
	if st.ChunksDropped == 0 {
		t.Fatal("no drops counted")
	}
	// What arrived is in order with one gap: the oldest audio was dropped, nothing repeated.
	got := h.received()
	gaps := 0
	for i := 1; i < len(got); i++ {
		d := int((got[i] - got[i-1]) * (1 << 24))
		if d <= 0 {
			t.Fatalf("sample %d goes backwards: repeated or reordered audio", i)
		}
		if d > 1 {
			gaps++
		}
	}
	if gaps == 0 {
		t.Fatal("no gap in the received audio although chunks were dropped")
	}
	t.Logf("slow link: %d chunks (%.2f s) dropped in %d gap(s)", st.ChunksDropped, st.SecondsDropped, gaps)
	h.noRejections()
}

func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		cfg  agent.Config
		want string
	}{
		{agent.Config{Policy: "sometimes"}, `session.policy: "sometimes"`},
		{agent.Config{Chunk: 100 * time.Millisecond}, "session.chunk: 100ms is outside 250ms..1s"},
		{agent.Config{Chunk: 2 * time.Second}, "session.chunk"},
		{agent.Config{MaxLag: 100 * time.Millisecond}, "session.max_lag"},
		{agent.Config{BackoffMin: time.Minute, BackoffMax: time.Second}, "session.backoff_max"},
		{agent.Config{ContextLimit: 1000, ContextMargin: 1000}, "session.context_margin"},
		{agent.Config{TimeLimit: time.Second, TimeMargin: 2 * time.Second}, "session.time_margin"},
	} {
		err := tt.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: got %v, want %q", tt.cfg, err, tt.want)
		}
	}
	if err := (agent.Config{}).WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
}

// A long outage: only the newest reconnect_buffer of audio is kept and sent first; what could not
// be kept is counted.
func TestLongOutageKeepsNewest(t *testing.T) {
	// max_lag is out of the way: this is about the reconnect buffer, and on a loaded machine a
	// stall of the sender would otherwise drop (rightly) audio grown too old on the way.
	h := newHarness(t, setup{proxy: true, speed: 4, cfg: agent.Config{ReconnectBuffer: time.Second, MaxLag: 30 * time.Second,
		BackoffMin: 100 * time.Millisecond, BackoffMax: 200 * time.Millisecond}})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	h.proxy.Refuse(true)
	h.proxy.Cut()
	h.waitFor("reconnecting", 5*time.Second, isState(agent.StateReconnecting))
	time.Sleep(1500 * time.Millisecond) // 6 s of audio at speed 4, against a 1 s buffer
	h.proxy.Refuse(false)
	h.waitFor("listening again", 5*time.Second, isState(agent.StateListening))
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if recs := h.sim.Sessions(); len(recs[len(recs)-1].Appends) >= 2 {
			break
		}
	}
	h.stop()
	st := h.sup.Status()
	if st.ChunksDropped == 0 || st.SecondsDropped < 3 {
		t.Fatalf("outage of ~6 s with a 1 s buffer: %d chunks (%.2f s) counted as dropped", st.ChunksDropped, st.SecondsDropped)
	}
	recs := h.sim.Sessions()
	last := recs[len(recs)-1].Audio
	if len(last) == 0 {
		t.Fatal("nothing reached the new session")
	}
	for i := 1; i < len(last); i++ {
		if int((last[i]-last[i-1])*(1<<24)) != 1 {
			t.Fatalf("new session's audio is not contiguous at %d", i)
		}
	}
	t.Logf("long outage: %d chunks (%.2f s) dropped, %d kept", st.ChunksDropped, st.SecondsDropped, len(last))
	h.noRejections()
}

func TestDeviceState(t *testing.T) {
	h := newHarness(t, setup{frames: staticFrames{}})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	h.sup.DeviceState("camera", true, nil)
	h.sup.DeviceState("camera", false, errors.New(`read camera "/dev/video0": no such device`))
	ev := h.waitFor("device_lost", 2*time.Second, isLifecycle("device_lost"))
	if lc := ev.(agent.Lifecycle); !strings.Contains(lc.Reason, "/dev/video0") {
		t.Fatalf("reason %q", lc.Reason)
	}
	st := h.sup.Status()
	if st.CameraOn || !strings.Contains(st.Devices["camera"], "no such device") || st.State != agent.StateListening {
		t.Fatalf("status after camera loss %+v", st)
	}
	h.sup.DeviceState("camera", true, nil)
	h.waitFor("device_back", 2*time.Second, isLifecycle("device_back"))
	if st := h.sup.Status(); !st.CameraOn || st.Devices["camera"] != "ok" {
		t.Fatalf("status after camera back %+v", st)
	}
}

// staticFrames is a camera that always has the same small JPEG.
type staticFrames struct{}

func (staticFrames) Latest() ([]byte, bool) { return tinyJPEG, true }

// tinyJPEG is a valid 8×8 JPEG (gray).
var tinyJPEG = func() []byte {
	var b bytes.Buffer
	jpeg.Encode(&b, image.NewGray(image.Rect(0, 0, 8, 8)), nil)
	return b.Bytes()
}()

// mode=video: each chunk carries frames_per_chunk frames; with the camera off, none.
func TestVideoFrames(t *testing.T) {
	h := newHarness(t, setup{frames: staticFrames{}, cfg: agent.Config{FramesPerChunk: 2}})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	waitAppends := func(n int) {
		for deadline := time.Now().Add(20 * time.Second); len(h.sim.Sessions()[0].Appends) < n && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitAppends(3)
	h.sup.Camera(false)
	// Audio the source hands out from here on is captured after the command: its chunks carry
	// no frame, whatever the load.
	after := int(h.source.Captured())
	n := len(h.sim.Sessions()[0].Appends)
	waitAppends(n + 4)
	h.stop()
	appends := h.sim.Sessions()[0].Appends
	// Chunks built before the camera went off carry two frames, every later one none; the
	// chunk being captured when it went off carries the frame sampled before (its first frame
	// point), not the second. The switch comes after the chunks received before the command,
	// and no later than the first chunk that begins with audio captured after it.
	firstAfter, pos := len(appends), 0
	for i, a := range appends {
		if pos >= after {
			firstAfter = i
			break
		}
		pos += a.Samples
	}
	off := slices.IndexFunc(appends, func(a realtimetest.AppendRecord) bool { return len(a.Frames) < 2 })
	if off < 3 || off > firstAfter || len(appends)-off < 2 {
		t.Fatalf("camera off from chunk %d of %d (3 received before the command, %d begun before it)", off, len(appends), firstAfter)
	}
	if len(appends[off].Frames) == 1 {
		off++ // the camera went off between its two frame points
	}
	for i, a := range appends[:off] {
		if len(a.Frames) == 0 || a.Frames[0].Width != 8 {
			t.Fatalf("chunk %d: %d frames %+v before the camera went off", i, len(a.Frames), a.Frames)
		}
	}
	for i, a := range appends[off:] {
		if len(a.Frames) != 0 {
			t.Fatalf("chunk %d after camera off has %d frames", off+i, len(a.Frames))
		}
	}
	h.noRejections()
}

// mode=video with no camera at all (camera.source: none): chunks carry audio only, from the
// first frame point on, and capture goes on (it once dereferenced the missing camera there).
func TestVideoModeWithoutCamera(t *testing.T) {
	h := newHarness(t, setup{cfg: agent.Config{FramesPerChunk: 2},
		server: func(c *realtime.Config) { c.Mode = realtime.ModeVideo }})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	if st := h.sup.Status(); st.CameraOn {
		t.Fatalf("status with no camera says the camera is on: %+v", st)
	}
	h.sup.Camera(true) // asked for, still nothing to take frames from
	for deadline := time.Now().Add(20 * time.Second); len(h.sim.Sessions()[0].Appends) < 6 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	h.stop()
	appends := h.sim.Sessions()[0].Appends
	if len(appends) < 6 {
		h.explain()
		t.Fatalf("%d chunks received, want 6", len(appends))
	}
	for i, a := range appends {
		if len(a.Frames) != 0 {
			t.Fatalf("chunk %d carries %d frames with no camera", i, len(a.Frames))
		}
	}
	checkRamp(t, h.received())
	h.noRejections()
}

// Barge-in: the user speaking while the reply plays stops it (force_listen, playback flushed);
// with barge-in off the same audio interrupts nothing.
// capSession records the capacity and length of every chunk's audio the agent sends.
type capSession struct {
	realtime.Session
	mu         *sync.Mutex
	caps, lens *[]int
}

func (s capSession) Send(ctx context.Context, c realtime.Chunk) error {
	s.mu.Lock()
	*s.caps, *s.lens = append(*s.caps, cap(c.Audio)), append(*s.lens, len(c.Audio))
	s.mu.Unlock()
	return s.Session.Send(ctx, c)
}

// A chunk cut short where speech may start over the reply (and the force_listen chunk after
// it), and a chunk held open over a possible onset, are sent from whole chunk buffers, as every
// chunk is, so that their buffers go back to capture: before, a cut chunk's buffer was clipped
// and a held-open chunk moved into a new array, and capture allocated a new buffer at every
// barge-in (the heap grew into fresh pages).
func TestCutChunksKeepWholeBuffers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chunk time.Duration
		pause int // samples between the user's phrase and the talk over the reply
		want  func(n, chunk int) bool
	}{
		// The onset sits 750 ms into a 1 s chunk: the chunk is cut just before it.
		{"cut", time.Second, 56000, func(n, chunk int) bool { return n < chunk }},
		// 250 ms chunks are the server's minimum: the chunk holding the onset stays open.
		{"held_open", 250 * time.Millisecond, 26240, func(n, chunk int) bool { return n > chunk }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The user speaks, the parrot answers, the user talks over it.
			audio := slices.Concat(make([]float32, 4000), tone(48000, 0.3), make([]float32, tc.pause), tone(16000, 0.3), make([]float32, 16000*2))
			var mu sync.Mutex
			var caps, lens []int
			h := newHarness(t, setup{audio: audio, speed: 1, sim: realtimetest.Options{ForceListenCount: -1},
				cfg: agent.Config{Chunk: tc.chunk},
				dialWrap: func(d agent.DialFunc) agent.DialFunc {
					return func(ctx context.Context, cfg realtime.Config) (realtime.Session, error) {
						s, err := d(ctx, cfg)
						if err != nil {
							return nil, err
						}
						return capSession{Session: s, mu: &mu, caps: &caps, lens: &lens}, nil
					}
				}})
			for deadline := time.Now().Add(30 * time.Second); len(h.sim.Sessions()) == 0 || len(h.sim.Sessions()[0].Audio) < len(audio)-16000; {
				if time.Now().After(deadline) {
					t.Fatal("the server did not get the audio within 30 s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			h.stop()
			mu.Lock()
			defer mu.Unlock()
			whole, chunk := slices.Max(caps), int(tc.chunk.Seconds()*16000)
			odd := 0
			for i, c := range caps {
				if tc.want(lens[i], chunk) {
					odd++
				}
				if c != whole {
					t.Errorf("chunk %d: %d samples in a buffer of %d, not a whole chunk buffer of %d", i, lens[i], c, whole)
				}
			}
			t.Logf("chunk lengths %v, every one in a buffer of %d samples", lens, whole)
			if odd == 0 {
				t.Fatalf("no chunk was %s", tc.name)
			}
		})
	}
}

func TestBargeIn(t *testing.T) {
	// 3 s of "user" tone, 1.64 s pause (the parrot's 3 s reply starts), then the user talks
	// again. The second onset sits 870 ms into a 1 s chunk, so the speech is confirmed (min
	// speech 150 ms) just after the next chunk boundary: the worst case for how long the
	// force_listen chunk must grow to the server's minimum.
	const secondOnset = 4000 + 48000 + 26240
	audio := slices.Concat(make([]float32, 4000), tone(48000, 0.3), make([]float32, 26240), tone(16000, 0.3), make([]float32, 16000*20))
	for _, enabled := range []bool{true, false} {
		t.Run(fmt.Sprint("enabled=", enabled), func(t *testing.T) {
			h := newHarness(t, setup{audio: audio, speed: 1, sim: realtimetest.Options{ForceListenCount: -1},
				cfg: agent.Config{BargeIn: agent.BargeInConfig{Enabled: &enabled}}})
			h.waitFor("speaking", 10*time.Second, isState(agent.StateSpeaking))
			// Until the server has the second phrase and half a second after it.
			for deadline := time.Now().Add(20 * time.Second); len(h.sim.Sessions()[0].Audio) < secondOnset+24000 && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			h.stop()
			forced, pos, forcedEnd := 0, 0, -1
			sess := h.sim.Sessions()[0]
			for _, a := range sess.Appends {
				pos += a.Samples
				if a.ForceListen {
					forced++
					forcedEnd = pos
				}
			}
			bargeIns := 0
			for drained := false; !drained; {
				select {
				case ev, open := <-h.events:
					drained = !open
					if lc, ok := ev.(agent.Lifecycle); ok && lc.Kind == "barge_in" {
						bargeIns++
					}
				default:
					drained = true
				}
			}
			t.Logf("barge-in %v: %d barge_in events, %d force_listen chunks", enabled, bargeIns, forced)
			if enabled && (bargeIns != 1 || forced != 1) {
				t.Errorf("barge-in on: %d barge_in events and %d force_listen chunks, want 1 and 1", bargeIns, forced)
			}
			if enabled && forced == 1 {
				// The upstream audio is the capture sample for sample, so the onset is where the
				// second tone starts in it; the force_listen chunk must end within the server's
				// minimum chunk (plus a capture block and a detector frame) of it.
				onset := -1
				for i := secondOnset - 8000; i < len(sess.Audio); i++ {
					if sess.Audio[i] != 0 && onset < 0 {
						onset = i
					}
				}
				late := forcedEnd - onset
				t.Logf("force_listen chunk ends %d samples (%.0f ms) after the onset", late, float64(late)/16)
				if onset < 0 || late < 0 || late > realtime.MinChunkSamples+2*320 {
					t.Errorf("force_listen chunk ends %d samples after the onset (at %d), want 0..%d", late, onset, realtime.MinChunkSamples+2*320)
				}
			}
			if !enabled && (bargeIns != 0 || forced != 0) {
				t.Errorf("barge-in off: %d barge_in events and %d force_listen chunks, want none", bargeIns, forced)
			}
			h.noRejections()
		})
	}
}

// agentReadBlock is the agent's read block (readBlock): 100 ms at 16 kHz; agentPatientBlock
// its patient block (patientBlock): a second.
const (
	agentReadBlock    = 1600
	agentPatientBlock = 16000
)

// patientRecorder is a PatientSource over the paced ramp that notes which kind of read the
// agent made each time (true: patient), how much it asked for, and when.
type patientRecorder struct {
	agent.AudioSource
	mu    sync.Mutex
	calls []bool
	asked []int
	at    []time.Time
}

func (r *patientRecorder) note(patient bool, asked int) {
	r.mu.Lock()
	r.calls = append(r.calls, patient)
	r.asked = append(r.asked, asked)
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
}

// patientFrom returns when the patient reads from read `from` on were asked for.
func (r *patientRecorder) patientFrom(from int) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var at []time.Time
	for i := from; i < len(r.calls); i++ {
		if r.calls[i] {
			at = append(at, r.at[i])
		}
	}
	return at
}

func (r *patientRecorder) Read(ctx context.Context, p []float32) (int, error) {
	r.note(false, len(p))
	return r.AudioSource.Read(ctx, p)
}

func (r *patientRecorder) ReadPatiently(ctx context.Context, p []float32) (int, error) {
	r.note(true, len(p))
	return r.AudioSource.Read(ctx, p)
}

// after waits until n reads have been made after the first `from`, and returns those (and how
// much each asked for).
func (r *patientRecorder) after(t *testing.T, from, n int) ([]bool, []int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		if len(r.calls) >= from+n {
			got, asked := slices.Clone(r.calls[from:from+n]), slices.Clone(r.asked[from:from+n])
			r.mu.Unlock()
			return got, asked
		}
		r.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("only %d reads after %d", len(r.calls)-from, from)
		}
	}
}

func (r *patientRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// A source that can hold its capture back for a block (a PortAudio microphone) is read
// patiently only while nothing needs the audio sooner: not before a session streams, not while
// muted, not until a block can no longer reach back before the unmute (a block that may hold
// audio from before it goes as silence whole). While a reply plays (barge-in looks at every
// buffer) it may wait for a read block, two buffers of a 50 ms device, but no longer. The read in
// flight when a condition changes may be of either kind; the ones after it must follow the
// condition.
func TestPatientReadsOnlyWhenNothingWaits(t *testing.T) {
	src := &patientRecorder{AudioSource: devices.NewPacedSource(ramp(16000*60), 16000, false, 4)}
	h := newHarness(t, setup{source: src})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	if first, _ := src.after(t, 0, 1); first[0] {
		t.Error("the first read, before any session, was patient")
	}
	checkBlocks := func(what string, want bool, most int) {
		t.Helper()
		from := src.count() + 1 // the read in flight decided before the change
		calls, asked := src.after(t, from, 6)
		for i, patient := range calls {
			if patient != want || asked[i] > most {
				t.Fatalf("%s: read %d after the change was patient=%v for %d samples, want patient=%v for at most %d",
					what, i, patient, asked[i], want, most)
			}
		}
	}
	check := func(what string, want bool) { t.Helper(); checkBlocks(what, want, agentPatientBlock) }
	check("streaming, the speaker silent", true)
	h.sup.Mute(true)
	check("muted", false)
	from := src.count()
	unmuted := time.Now()
	h.sup.Mute(false)
	// The harness's audio hold (100 ms: one read block) and a patient block (a second): a block
	// asked for before then could hold audio captured before the unmute.
	settled := unmuted.Add(100*time.Millisecond + agentPatientBlock*time.Second/16000)
	time.Sleep(time.Until(settled))
	check("unmuted, a block later", true)
	for _, at := range src.patientFrom(from) {
		if at.Before(settled) {
			t.Errorf("a patient read %v after the unmute, want none before %v", at.Sub(unmuted), settled.Sub(unmuted))
		}
	}
	h.speaker.Play(make([]float32, 3*24000)) // three seconds to play, at the speaker's real time
	checkBlocks("a reply playing", true, agentReadBlock)
	h.stop()
}

// gatheringSource is a PatientSource whose patient reads of more than a read block (100 ms),
// once limit samples have come, wait as a microphone gathering a block does, and here for
// ever: only the agent can end such a read, through its context. Other reads go on as the
// paced source delivers (a microphone's patient read of a read block waits for no more).
type gatheringSource struct {
	agent.AudioSource
	limit int

	mu      sync.Mutex
	given   int
	cut     chan struct{} // closed when a waiting patient read was ended by its context
	cutOnce sync.Once
	after   int // reads since that went on
}

func (g *gatheringSource) Read(ctx context.Context, p []float32) (int, error) {
	n, err := g.AudioSource.Read(ctx, p)
	g.mu.Lock()
	g.given += n
	select {
	case <-g.cut:
		g.after++
	default:
	}
	g.mu.Unlock()
	return n, err
}

func (g *gatheringSource) ReadPatiently(ctx context.Context, p []float32) (int, error) {
	g.mu.Lock()
	waits := g.given >= g.limit && len(p) > agentReadBlock
	g.mu.Unlock()
	if !waits {
		return g.Read(ctx, p)
	}
	<-ctx.Done()
	g.cutOnce.Do(func() { close(g.cut) })
	return 0, ctx.Err()
}

func (g *gatheringSource) plainAfterCut() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.after
}

// Reply audio ends a patient read in flight: from the reply's start, barge-in looks at every
// read block. Here the read would otherwise wait for ever (a microphone's waits up to a
// block, half a second into the reply); the agent must end it, go on reading as the source
// delivers, and play the reply.
func TestReplyEndsPatientRead(t *testing.T) {
	// The user's phrase and the harness's 250 ms chunk of silence after it, which the parrot
	// answers; then the source holds its patient reads back.
	audio := slices.Concat(make([]float32, 4000), tone(16000, 0.3), make([]float32, 16000*30))
	src := &gatheringSource{AudioSource: devices.NewPacedSource(audio, 16000, false, 1), limit: 4000 + 16000 + 4000,
		cut: make(chan struct{})}
	h := newHarness(t, setup{source: src, sim: realtimetest.Options{ForceListenCount: -1}})
	select {
	case <-src.cut:
	case <-time.After(30 * time.Second):
		t.Fatal("no patient read was ended within 30 s (the reply should end the one waiting)")
	}
	h.waitFor("speaking", 10*time.Second, isState(agent.StateSpeaking))
	for deadline := time.Now().Add(10 * time.Second); src.plainAfterCut() < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d reads after the patient one was ended, want the capture to go on", src.plainAfterCut())
		}
	}
	h.stop()
}
