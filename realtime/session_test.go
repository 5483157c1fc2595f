package realtime_test

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"net"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// These tests run the client against the protocol-faithful simulator over real WebSocket
// connections on loopback. The simulator rejects anything a real server would choke on, so a
// test also fails when the client sends something wrong (see strictServer).

// strictServer starts a simulator and, at the end of the test, fails it if the simulator found
// any protocol violation that the test did not expect.
func strictServer(t *testing.T, opts realtimetest.Options) *realtimetest.Server {
	t.Helper()
	srv := realtimetest.NewServer(opts)
	t.Cleanup(func() {
		srv.Close()
		for _, rec := range srv.Sessions() {
			if len(rec.Rejections) > 0 {
				t.Errorf("session %d: the simulator rejected what the client sent: %v", rec.Index, rec.Rejections)
			}
		}
	})
	return srv
}

func fastConfig(url string, d realtime.Dialect, m realtime.Mode) realtime.Config {
	return realtime.Config{URL: url, Dialect: d, Mode: m, PingInterval: 200 * time.Millisecond, DeadLinkTimeout: time.Second,
		WriteTimeout: time.Second, DialTimeout: 2 * time.Second}
}

func dial(t *testing.T, cfg realtime.Config) realtime.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := realtime.Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background(), "user_stop") })
	return s
}

func silence(n int) []float32 { return make([]float32, n) }

func tone(n int, amp float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(amp * math.Sin(2*math.Pi*440*float64(i)/16000))
	}
	return s
}

func testJPEG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{uint8(x), uint8(y), 128, 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 80}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// reply gathers what the server said until stop returns true or the deadline passes.
type reply struct {
	text    strings.Builder
	audio   []float32
	listens int
	turns   int
	kv      int
	errors  []*realtime.Error
	closed  *realtime.Closed
}

func (r *reply) add(ev realtime.Event) {
	switch ev := ev.(type) {
	case realtime.TextDelta:
		r.text.WriteString(ev.Text)
	case realtime.AudioDelta:
		r.audio = append(r.audio, ev.Samples...)
	case realtime.Listen:
		r.listens++
	case realtime.TurnDone:
		r.turns++
	case realtime.MetricsUpdate:
		r.kv = ev.Metrics.KVCacheLength
	case realtime.ErrorEvent:
		r.errors = append(r.errors, ev.Err)
	case realtime.Closed:
		r.closed = &ev
	}
}

func drain(t *testing.T, s realtime.Session, r *reply, stop func(realtime.Event) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				return
			}
			r.add(ev)
			if stop(ev) {
				return
			}
		case <-deadline:
			t.Fatalf("timed out; so far text %q, %d samples, %d listens", r.text.String(), len(r.audio), r.listens)
		}
	}
}

func send(t *testing.T, s realtime.Session, c realtime.Chunk) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Send(ctx, c); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// The parrot round trip in both MiniCPM-o dialects and both duplex modes: what we send arrives
// sample for sample, and the reply comes back as text, audio, end of turn and metrics.
func TestDuplexParrot(t *testing.T) {
	for _, tt := range []struct {
		dialect realtime.Dialect
		sim     realtimetest.Dialect
		mode    realtime.Mode
	}{
		{realtime.DialectCurrent, realtimetest.Current, realtime.ModeVideo},
		{realtime.DialectCurrent, realtimetest.Current, realtime.ModeAudio},
		{realtime.DialectLegacy, realtimetest.Legacy, realtime.ModeVideo},
		{realtime.DialectLegacy, realtimetest.Legacy, realtime.ModeAudio},
	} {
		t.Run(string(tt.dialect)+"/"+string(tt.mode), func(t *testing.T) {
			srv := strictServer(t, realtimetest.Options{Dialect: tt.sim})
			cfg := fastConfig(srv.URL(), tt.dialect, tt.mode)
			cfg.Init = realtime.Init{Instructions: "You are a parrot.", RefAudio: tone(16000, 0.1), TTSRefAudio: tone(8000, 0.1), MaxSliceNums: 1}
			s := dial(t, cfg)
			if s.Info().ID == "" {
				t.Fatal("no session id")
			}
			var frames [][]byte
			if tt.mode == realtime.ModeVideo {
				frames = [][]byte{testJPEG(t, 64, 48)}
			}
			var sent []float32
			chunks := [][]float32{silence(16000), silence(16000), silence(16000), tone(16000, 0.3), tone(16000, 0.3), silence(16000)}
			for _, a := range chunks {
				send(t, s, realtime.Chunk{Audio: a, Frames: frames})
				sent = append(sent, a...)
			}
			var r reply
			// Each further chunk lets the parrot play one more second of its reply.
			go func() {
				for i := 0; i < 4; i++ {
					if s.Send(context.Background(), realtime.Chunk{Audio: silence(16000), Frames: frames}) != nil {
						return
					}
				}
			}()
			drain(t, s, &r, func(ev realtime.Event) bool { return len(r.audio) >= 48000 && r.turns+r.listens > 3 })
			want := "I heard 2.0 seconds of speech"
			if tt.mode == realtime.ModeVideo {
				want += " and saw a 64x48 frame"
			}
			if r.text.String() != want {
				t.Errorf("text %q, want %q", r.text.String(), want)
			}
			if r.kv <= 0 {
				t.Errorf("kv_cache_length never reported")
			}
			if len(r.errors) > 0 {
				t.Errorf("protocol errors: %v", r.errors)
			}
			if err := s.Close(context.Background(), "user_stop"); err != nil {
				t.Fatal(err)
			}
			if s.Err() != nil {
				t.Fatalf("clean close reported %v", s.Err())
			}
			rec := srv.Sessions()[0]
			if rec.CloseReason != "user_stop" {
				t.Errorf("server saw close reason %q", rec.CloseReason)
			}
			if rec.Init.Instructions != "You are a parrot." || rec.Init.RefAudioSamples != 16000 || rec.Init.TTSRefAudioSamples != 8000 {
				t.Errorf("init record %+v", rec.Init)
			}
			if !reflect.DeepEqual(rec.Audio[:len(sent)], sent) {
				t.Errorf("the server did not receive the audio sample for sample")
			}
			if n := min(len(r.audio), len(rec.ReplyAudio)); n < 48000 || !reflect.DeepEqual(r.audio[:n], rec.ReplyAudio[:n]) {
				t.Errorf("the reply audio did not arrive sample for sample (%d of %d samples compared)", n, len(rec.ReplyAudio))
			}
			if tt.mode == realtime.ModeVideo && (len(rec.Appends[0].Frames) != 1 || rec.Appends[0].Frames[0].Width != 64) {
				t.Errorf("frames %+v", rec.Appends[0].Frames)
			}
		})
	}
}

func TestForceListenStopsReply(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{Dialect: realtimetest.Current, ForceListenCount: -1})
	s := dial(t, fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio))
	for _, a := range [][]float32{tone(16000, 0.3), tone(16000, 0.3), tone(16000, 0.3), silence(16000), silence(16000)} {
		send(t, s, realtime.Chunk{Audio: a})
	}
	var r reply
	drain(t, s, &r, func(realtime.Event) bool { return len(r.audio) >= 24000 })
	send(t, s, realtime.Chunk{Audio: silence(16000), ForceListen: true})
	listensBefore := r.listens
	drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Listen); return ok && r.listens > listensBefore })
	rec := srv.Sessions()[0]
	if !rec.Appends[len(rec.Appends)-1].ForceListen {
		t.Fatal("force_listen did not reach the server")
	}
}

func TestQueue(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{Workers: 1, QueueUpdateInterval: 50 * time.Millisecond})
	first := dial(t, fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio))

	var mu sync.Mutex
	var reports []realtime.QueueStatus
	cfg := fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)
	cfg.OnQueue = func(q realtime.QueueStatus) { mu.Lock(); reports = append(reports, q); mu.Unlock() }
	got := make(chan realtime.Session, 1)
	go func() {
		s, err := realtime.Dial(context.Background(), cfg)
		if err != nil {
			t.Errorf("queued dial: %v", err)
		}
		got <- s
	}()
	// Let a few queue updates arrive, then free the worker.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(reports)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	first.Close(context.Background(), "user_stop")
	second := <-got
	if second == nil {
		t.FailNow()
	}
	defer second.Close(context.Background(), "user_stop")
	mu.Lock()
	defer mu.Unlock()
	if len(reports) < 3 || reports[0].Position != 1 || !strings.HasPrefix(reports[0].Ticket, "q_") || !reports[len(reports)-1].Done {
		t.Fatalf("queue reports %+v", reports)
	}
	// The record shows each session's wait: the second waited behind the first.
	if recs := srv.Sessions(); recs[0].QueueWait() >= recs[1].QueueWait() || recs[1].QueuedPositions[0] != 1 {
		t.Fatalf("queue waits %v, %v; positions %v", recs[0].QueueWait(), recs[1].QueueWait(), recs[1].QueuedPositions)
	}
	// The second client must not have sent anything before queue_done: strictServer checks.
}

func TestDialFailures(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := ln.Addr().String()
	ln.Close()

	for _, tt := range []struct {
		name  string
		opts  realtimetest.Options
		cfg   func(url string) realtime.Config
		class realtime.Class
		code  string
		msg   string
	}{
		{"queue full", realtimetest.Options{Workers: 1, MaxQueue: -1}, nil, realtime.ClassRetryable, "queue_full", "1013"},
		{"worker busy", realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultRefuse}}}, nil, realtime.ClassRetryable, "worker_busy", "1013"},
		{"chat disabled", realtimetest.Options{ChatDisabled: true}, func(u string) realtime.Config {
			return fastConfig(u, realtime.DialectCurrent, realtime.ModeChat)
		}, realtime.ClassConfig, realtime.CodeWSClose, "1008"},
		// A legacy gateway ignores session.init: only the init deadline ends the wait.
		{"current client, legacy server", realtimetest.Options{Dialect: realtimetest.Legacy}, func(u string) realtime.Config {
			cfg := fastConfig(u, realtime.DialectCurrent, realtime.ModeAudio)
			cfg.InitTimeout = 300 * time.Millisecond
			return cfg
		}, realtime.ClassRetryable, realtime.CodeInitTimeout, "set server.dialect: legacy"},
		// A current gateway answers an unknown event with backend_error, as it does when its
		// backend is busy: no proof of the dialect, so retryable, with a hint.
		{"legacy client, current server", realtimetest.Options{}, func(u string) realtime.Config {
			return fastConfig(u, realtime.DialectLegacy, realtime.ModeAudio)
		}, realtime.ClassRetryable, realtime.CodeSessionClosed, "check server.dialect"},
		{"wrong path", realtimetest.Options{}, func(u string) realtime.Config {
			return fastConfig(strings.Replace(u, "/v1/realtime", "/nope", 1), realtime.DialectCurrent, realtime.ModeAudio)
		}, realtime.ClassConfig, realtime.CodeHandshake, "HTTP 404"},
		{"nothing listening", realtimetest.Options{}, func(string) realtime.Config {
			return fastConfig("ws://"+deadAddr+"/v1/realtime", realtime.DialectCurrent, realtime.ModeAudio)
		}, realtime.ClassRetryable, realtime.CodeDial, "connect ws://" + deadAddr},
		{"bad config", realtimetest.Options{}, func(u string) realtime.Config {
			return fastConfig(u, realtime.DialectCurrent, "vidoe")
		}, realtime.ClassConfig, realtime.CodeConfig, `"vidoe" is not one of`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := realtimetest.NewServer(tt.opts)
			defer srv.Close()
			var holder realtime.Session
			if tt.opts.MaxQueue < 0 {
				holder = dial(t, fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio))
				defer holder.Close(context.Background(), "user_stop")
			}
			cfg := fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)
			if tt.cfg != nil {
				cfg = tt.cfg(srv.URL())
			}
			if e := dialErr(t, cfg); e.Class != tt.class || e.Code != tt.code || !strings.Contains(e.Error(), tt.msg) {
				t.Fatalf("got %v (%#v), want class %v code %s containing %q", e, e, tt.class, tt.code, tt.msg)
			}
		})
	}
}

// Each fault of the simulator, seen from the client: the right end (or none) and a clear error.
func TestFaults(t *testing.T) {
	for _, tt := range []struct {
		name    string
		dialect realtimetest.Dialect
		fault   realtimetest.Fault
		ends    bool
		class   realtime.Class
		code    string
		reason  string
		errCode string // for faults that do not end the session: the protocol error seen
	}{
		{name: "drop", fault: realtimetest.Fault{Kind: realtimetest.FaultDrop, AfterAppends: 1}, ends: true, class: realtime.ClassRetryable, code: realtime.CodeLinkLost},
		{name: "stall", fault: realtimetest.Fault{Kind: realtimetest.FaultStall, AfterAppends: 1}, ends: true, class: realtime.ClassRetryable, code: realtime.CodeDeadLink},
		{name: "oversize", fault: realtimetest.Fault{Kind: realtimetest.FaultOversize, AfterAppends: 1, Size: 2 << 20}, ends: true, class: realtime.ClassRetryable, code: realtime.CodeFrameTooLarge},
		{name: "close timeout", fault: realtimetest.Fault{Kind: realtimetest.FaultClose, AfterAppends: 1, Reason: "timeout"}, ends: true, class: realtime.ClassEnded, code: realtime.CodeSessionClosed, reason: "timeout"},
		{name: "close backend_error", fault: realtimetest.Fault{Kind: realtimetest.FaultClose, AfterAppends: 1, Reason: "backend_error"}, ends: true, class: realtime.ClassRetryable, code: realtime.CodeSessionClosed, reason: "backend_error"},
		{name: "legacy context_full keeps socket", dialect: realtimetest.Legacy, fault: realtimetest.Fault{Kind: realtimetest.FaultClose, AfterAppends: 1, Reason: "context_full"}, ends: true, class: realtime.ClassEnded, code: realtime.CodeSessionClosed, reason: "context_full"},
		{name: "invalid json", fault: realtimetest.Fault{Kind: realtimetest.FaultInvalidJSON, AfterAppends: 1}, errCode: realtime.CodeInvalidJSON},
		{name: "bad delta", fault: realtimetest.Fault{Kind: realtimetest.FaultBadDelta, AfterAppends: 1}, errCode: realtime.CodeBadField},
		{name: "legacy bad delta", dialect: realtimetest.Legacy, fault: realtimetest.Fault{Kind: realtimetest.FaultBadDelta, AfterAppends: 1}, errCode: realtime.CodeBadField},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.dialect
			if d == "" {
				d = realtimetest.Current
			}
			srv := strictServer(t, realtimetest.Options{Dialect: d, Faults: []realtimetest.Fault{tt.fault}})
			cfg := fastConfig(srv.URL(), realtime.Dialect(d), realtime.ModeAudio)
			cfg.MaxFrameBytes = 1 << 20
			s := dial(t, cfg)
			start := time.Now()
			send(t, s, realtime.Chunk{Audio: silence(16000)})
			var r reply
			if !tt.ends {
				// The session survives: the next chunks still get answers.
				drain(t, s, &r, func(realtime.Event) bool { return len(r.errors) > 0 })
				if r.errors[0].Code != tt.errCode || r.errors[0].Class != realtime.ClassProtocol || r.errors[0].Event == "" {
					t.Fatalf("error %#v, want %s naming the event", r.errors[0], tt.errCode)
				}
				listens := r.listens
				send(t, s, realtime.Chunk{Audio: silence(16000)})
				drain(t, s, &r, func(realtime.Event) bool { return r.listens > listens })
				if s.Err() != nil {
					t.Fatalf("session ended: %v", s.Err())
				}
				return
			}
			drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Closed); return ok })
			if r.closed == nil || r.closed.Err == nil {
				t.Fatalf("closed %+v", r.closed)
			}
			e := r.closed.Err
			if e.Class != tt.class || e.Code != tt.code || r.closed.Reason != tt.reason {
				t.Fatalf("end %v (class %v code %s reason %q), want class %v code %s reason %q", e, e.Class, e.Code, r.closed.Reason, tt.class, tt.code, tt.reason)
			}
			if !errors.Is(s.Err(), e) && s.Err().Error() != e.Error() {
				t.Fatalf("Err() %v differs from Closed %v", s.Err(), e)
			}
			if tt.fault.Kind == realtimetest.FaultStall && time.Since(start) > cfg.DeadLinkTimeout+2*time.Second {
				t.Fatalf("dead link noticed after %v (deadline %v)", time.Since(start), cfg.DeadLinkTimeout)
			}
			if err := s.Send(context.Background(), realtime.Chunk{Audio: silence(16000)}); !errors.Is(err, realtime.ErrClosed) {
				t.Fatalf("send after end: %v", err)
			}
			if tt.reason == "context_full" {
				// The legacy gateway leaves the socket open: the client must close it.
				rec, err := srv.WaitEnded(context.Background(), 0)
				if err != nil || rec.EndedAt.IsZero() {
					t.Fatalf("socket not closed by the client: %v %+v", err, rec)
				}
			}
		})
	}
}

func TestSessionTimeLimit(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{AudioLimit: time.Second})
	// The limit counts from worker assignment: on a machine so busy that a second passes before
	// session.created, the limit ends the set-up instead (retryable); try again.
	var s realtime.Session
	for attempt := 0; s == nil; attempt++ {
		var err error
		s, err = realtime.Dial(context.Background(), fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio))
		var e *realtime.Error
		if err != nil && (attempt == 2 || !errors.As(err, &e) || e.Reason != "timeout") {
			t.Fatalf("dial: %v", err)
		}
	}
	defer s.Close(context.Background(), "")
	var r reply
	drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Closed); return ok })
	if r.closed.Reason != "timeout" || realtime.ClassOf(s.Err()) != realtime.ClassEnded {
		t.Fatalf("closed %+v err %v", r.closed, s.Err())
	}
}

func TestContextFullLegacy(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{Dialect: realtimetest.Legacy, ContextLimit: 200, TokensPerAudioSecond: 100})
	s := dial(t, fastConfig(srv.URL(), realtime.DialectLegacy, realtime.ModeAudio))
	var r reply
	go func() {
		for i := 0; i < 5; i++ {
			if s.Send(context.Background(), realtime.Chunk{Audio: silence(16000)}) != nil {
				return
			}
		}
	}()
	drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Closed); return ok })
	if r.closed.Reason != "context_full" || realtime.ClassOf(s.Err()) != realtime.ClassEnded || r.kv < 100 {
		t.Fatalf("closed %+v err %v kv %d", r.closed, s.Err(), r.kv)
	}
}

// Send never blocks forever: a stalled server fills the queue, and ctx (or the session's end) frees the caller.
func TestSendBounded(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultStall}}})
	cfg := fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)
	cfg.SendQueue = 1
	cfg.DeadLinkTimeout = 3 * time.Second
	s := dial(t, cfg)
	big := realtime.Chunk{Audio: silence(16000 * 60)}
	// The stalled peer may keep draining its socket, so the link is only found dead after
	// DeadLinkTimeout: keep sending well past it rather than for a fixed count.
	var err error
	for giveUp := time.Now().Add(20 * time.Second); err == nil && time.Now().Before(giveUp); {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err = s.Send(ctx, big)
		cancel()
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, realtime.ErrClosed) {
		t.Fatalf("send into a stalled link: %v", err)
	}
}

func TestChat(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{})
	cfg := fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeChat)
	img := testJPEG(t, 32, 16)
	for _, tt := range []struct {
		name   string
		req    realtime.ChatRequest
		text   string
		audio  bool
		deltas bool
	}{
		{"exact streaming", realtime.ChatRequest{Stream: true, Messages: []realtime.ChatMessage{{Role: "user", Text: "Reply with exactly: hello there"}}}, "hello there", false, true},
		{"echo non-streaming", realtime.ChatRequest{Messages: []realtime.ChatMessage{{Role: "system", Text: "sys"}, {Role: "user", Text: "ping pong"}}}, "ping pong", false, false},
		{"tts streaming", realtime.ChatRequest{Stream: true, TTS: true, Messages: []realtime.ChatMessage{{Role: "user", Text: "Reply with exactly: two words"}}}, "two words", true, true},
		{"tts whole", realtime.ChatRequest{TTS: true, Messages: []realtime.ChatMessage{{Role: "user", Text: "Reply with exactly: one"}}}, "one", true, false},
		{"image", realtime.ChatRequest{Stream: true, Messages: []realtime.ChatMessage{{Role: "user", Text: "Describe this", Images: [][]byte{img}}}}, "Describe this", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			deltas := 0
			r, err := realtime.Chat(context.Background(), cfg, tt.req, func(ev realtime.Event) {
				if _, ok := ev.(realtime.TextDelta); ok {
					deltas++
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if r.Text != tt.text || (len(r.Audio) > 0) != tt.audio || (deltas > 0) != tt.deltas || r.SampleRate != 24000 {
				t.Fatalf("reply %q, %d samples, %d deltas", r.Text, len(r.Audio), deltas)
			}
		})
	}
	recs := srv.Sessions()
	if last := recs[len(recs)-1]; last.CloseReason != "turn_done" || len(last.ChatRequests[0].Messages[0].Images) != 1 {
		t.Fatalf("last chat record %+v", last)
	}
	if _, err := realtime.Chat(context.Background(), fastConfig(srv.URL(), realtime.DialectLegacy, realtime.ModeChat), realtime.ChatRequest{}, nil); realtime.ClassOf(err) != realtime.ClassConfig {
		t.Fatalf("legacy chat: %v", err)
	}
}

func TestOpenVoice(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{Dialect: realtimetest.OpenVoice, OpenVoiceTTSRate: 22050})
	cfg := fastConfig(srv.URL(), realtime.DialectOpenVoice, "")
	cfg.Model = "faster-whisper-large-v3"
	cfg.OpenVoiceTTSRate = 22050
	itn := false
	cfg.Init = realtime.Init{VADSensitivity: "high", Language: "pt", HotWords: []string{"omnisat"}, TTSModel: "kokoro-v1",
		SilenceTimeout: 2 * time.Second, HoldTimeout: 10 * time.Minute, EnableITN: &itn}
	s := dial(t, cfg)
	for _, a := range [][]float32{tone(16000, 0.3), silence(16000)} {
		send(t, s, realtime.Chunk{Audio: a})
	}
	var final *realtime.Transcript
	var r reply
	drain(t, s, &r, func(ev realtime.Event) bool {
		if tr, ok := ev.(realtime.Transcript); ok && tr.Final {
			final = &tr
			return true
		}
		return false
	})
	// The real server sends no duration: it comes from the segment's bounds.
	if final.Text == "" || final.Duration != time.Second || final.Language != "pt" || len(final.Words) == 0 {
		t.Fatalf("final transcript %+v", final)
	}
	id, err := s.Speak(context.Background(), realtime.Speech{Text: "hello from omnisat"})
	if err != nil || id == "" {
		t.Fatal(id, err)
	}
	var start realtime.TTSState
	drain(t, s, &r, func(ev realtime.Event) bool {
		if st, ok := ev.(realtime.TTSState); ok && st.Speaking {
			start = st
		}
		return len(r.audio) > 0
	})
	if start.RequestID != id {
		t.Fatalf("tts.speaking_start for %q, want %q", start.RequestID, id)
	}
	if err := s.CancelSpeech(context.Background()); err != nil {
		t.Fatal(err)
	}
	var end realtime.TTSState
	drain(t, s, &r, func(ev realtime.Event) bool {
		st, ok := ev.(realtime.TTSState)
		end = st
		return ok && !st.Speaking
	})
	if end.RequestID != id {
		t.Fatalf("end %+v", end)
	}
	s.Close(context.Background(), "")
	rec := srv.Sessions()[0]
	in := rec.Init
	if in.VADSensitivity != "high" || in.TTSModel != "kokoro-v1" || in.SilenceTimeoutMS != 2000 || in.HoldTimeoutMS != 600000 ||
		in.EnableITN == nil || *in.EnableITN || rec.Language != "pt" || len(rec.Audio) != 32000 {
		t.Fatalf("record init %+v, language %q, %d samples", in, rec.Language, len(rec.Audio))
	}
	// The server's VAD judges each frame whole: 1 s chunks go out as 40 ms frames.
	if len(rec.Appends) != 50 || rec.Appends[0].Samples != 640 {
		t.Fatalf("%d frames of %d samples, want 50 of 640", len(rec.Appends), rec.Appends[0].Samples)
	}
	// Round trip through PCM16 keeps the signal within one quantisation step.
	if d := math.Abs(float64(rec.Audio[100] - tone(16000, 0.3)[100])); d > 1.0/16000 {
		t.Fatalf("pcm16 error %v", d)
	}

	synth, err := realtime.Synthesize(context.Background(), cfg, realtime.Speech{Text: "three short words", Voice: "af_heart"}, nil)
	if err != nil || len(synth.Audio) != 3*5512 || synth.SampleRate != 22050 {
		t.Fatalf("synthesize: %v: %d samples at %d Hz", err, len(synth.Audio), synth.SampleRate)
	}
	if q := srv.Sessions()[1].TTSRequests; len(q) != 1 || q[0].Voice != "af_heart" || q[0].Model != "kokoro-v1" || q[0].Outcome != "spoken" {
		t.Fatalf("TTS requests %+v", q)
	}
}

// Sessions dialled with the same Buffers take turns with one set of message buffers: a session
// that follows another (a rollover, a reconnect) reads, builds, writes and decodes in the
// buffers the first one grew, and makes none of its own.
func TestSessionsShareTheirBuffers(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{})
	cfg := fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)
	cfg.Buffers = realtime.NewBuffers()
	var first realtime.BuffersMadeForTest
	for i := range 3 {
		s := dial(t, cfg)
		var deltas, answers atomic.Int64
		events := make(chan struct{})
		go func() { // the speaker's part: done with each delta, it hands the samples back
			defer close(events)
			for ev := range s.Events() {
				switch ev := ev.(type) {
				case realtime.AudioDelta:
					s.(realtime.AudioRecycler).RecycleAudio(ev.Samples)
					deltas.Add(1)
					answers.Add(1)
				case realtime.Listen:
					answers.Add(1)
				}
			}
		}()
		sent := uint64(0)
		// One at a time: a message's buffer is kept, and the server's answer to it (a listen or
		// a reply delta) handed back, before the next goes. A delta still held while the next
		// is decoded needs a second buffer, which would make the count depend on timing.
		sendOne := func(a []float32) {
			sent++
			send(t, s, realtime.Chunk{ID: sent, Audio: a})
			for deadline := time.Now().Add(10 * time.Second); s.Stats().ChunksDelivered < sent || answers.Load() < int64(sent); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("session %d: %d of %d chunks delivered, %d answered", i, s.Stats().ChunksDelivered, sent, answers.Load())
				}
			}
		}
		for _, a := range [][]float32{tone(16000, 0.3), tone(16000, 0.3), silence(16000)} {
			sendOne(a)
		}
		// Each further chunk lets the parrot say more; two deltas, so that one is decoded
		// into the buffer the other was handed back in.
		for deadline := time.Now().Add(10 * time.Second); deltas.Load() < 2; {
			if time.Now().After(deadline) {
				t.Fatalf("session %d: %d reply deltas", i, deltas.Load())
			}
			sendOne(silence(16000))
		}
		if err := s.Close(context.Background(), "user_stop"); err != nil {
			t.Fatalf("session %d: close: %v", i, err)
		}
		<-events
		made := realtime.MadeForTest(cfg.Buffers)
		t.Logf("after session %d: made %+v", i, made)
		if i == 0 {
			if made.Write != 1 || made.Read != 1 || made.Messages != 1 || made.Samples < 1 {
				t.Fatalf("the first session made %+v; want one of each (samples: at least one)", made)
			}
			first = made
			continue
		}
		if made != first {
			t.Fatalf("after session %d the sessions made %+v; the first alone made %+v", i, made, first)
		}
	}
}

// Closing never hangs and leaves no goroutines behind, even when the consumer stops reading.
func TestCloseNoLeak(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{ForceListenCount: -1})
	before := runtime.NumGoroutine()
	for i := 0; i < 5; i++ {
		cfg := fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)
		cfg.EventBuffer = 1
		s, err := realtime.Dial(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 4; j++ {
			send(t, s, realtime.Chunk{Audio: silence(16000)}) // replies pile up unread
		}
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		s.Close(context.Background(), "user_stop")
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("close took %v", d)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// The client pings only a server that has been silent for a ping interval: a quiet server gets
// a ping an interval, a server that speaks (here its own pings, as the real gateway's every
// 20 s, or its answer to every chunk) gets none, since a ping and its pong would only wake
// both ends.
func TestPingOnlyWhenServerSilent(t *testing.T) {
	const interval, run = 100 * time.Millisecond, 1500 * time.Millisecond
	pings := func(serverPings time.Duration) int {
		srv := strictServer(t, realtimetest.Options{Dialect: realtimetest.Current, PingInterval: serverPings})
		cfg := fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)
		cfg.PingInterval, cfg.DeadLinkTimeout = interval, 10*time.Second
		s := dial(t, cfg)
		time.Sleep(run)
		s.Close(context.Background(), "user_stop")
		return srv.Sessions()[0].ClientPings
	}
	// Fourteen intervals: a quiet server gets a ping for most of them even on a busy machine.
	if n := pings(time.Hour); n < 5 {
		t.Errorf("a silent server got %d pings in %v at one per %v", n, run, interval)
	}
	// The server pings every 10 ms: only a stall of ten of them lets a client ping through.
	if n := pings(10 * time.Millisecond); n > 2 {
		t.Errorf("a server that spoke every 10 ms got %d pings in %v", n, run)
	}
}

// A dial given up in a one-worker gateway's queue, on a gateway that notices a queued client
// leave only when it next writes to it (here: never, before the worker frees). With a wait, the
// dial stays for the worker and hands it straight back; without one it leaves at once, and a
// worker freed before the gateway notices is lost (what the wait is for).
func TestDialGivenUpInTheQueue(t *testing.T) {
	for _, tt := range []struct {
		name   string
		wait   time.Duration
		jammed bool
	}{
		{"waits for the worker and hands it back", 10 * time.Second, false},
		{"leaves at once", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := strictServer(t, realtimetest.Options{Workers: 1, LateQueueLeave: true, QueueUpdateInterval: time.Hour})
			first := dial(t, fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio))
			cfg := fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)
			cfg.QueueLeaveWait = func() time.Duration { return tt.wait }
			ctx, cancel := context.WithCancel(context.Background())
			cfg.OnQueue = func(q realtime.QueueStatus) {
				if !q.Done {
					cancel() // given up as soon as it is queued
				}
			}
			got := make(chan error, 1)
			go func() {
				s, err := realtime.Dial(ctx, cfg)
				if s != nil {
					s.Close(context.Background(), "user_stop")
				}
				got <- err
			}()
			<-ctx.Done()
			if tt.wait == 0 {
				if err := <-got; err == nil {
					t.Fatal("a dial given up returned a session")
				}
				// The worker frees once the server has seen the client go (and, late-leave, not
				// noticed it in its queue): the gateway loses it.
				for deadline := time.Now().Add(10 * time.Second); srv.Sessions()[1].LeftAt.IsZero(); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the server never saw the client go")
					}
				}
			}
			first.Close(context.Background(), "user_stop") // the worker frees
			if tt.wait > 0 {
				if err := <-got; !errors.Is(err, context.Canceled) {
					t.Fatalf("Dial: %v; want the caller's cancellation", err)
				}
			}
			rec, err := srv.WaitEnded(context.Background(), 1)
			if err != nil {
				t.Fatal(err)
			}
			if srv.Jammed() != tt.jammed {
				t.Fatalf("jammed %v, want %v (the dial's record: %+v)", srv.Jammed(), tt.jammed, rec.EndReason)
			}
			if tt.jammed {
				return
			}
			if rec.AssignedAt.IsZero() || rec.CloseReason != "user_stop" || rec.Init.Type != "" {
				t.Fatalf("the dial given up: assigned %v, closed %q (%s), init %q; want the worker handed back before any init",
					!rec.AssignedAt.IsZero(), rec.CloseReason, rec.EndReason, rec.Init.Type)
			}
			dial(t, fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)) // the next client gets the worker
		})
	}

	t.Run("the worker never comes", func(t *testing.T) {
		srv := strictServer(t, realtimetest.Options{Workers: 1, QueueUpdateInterval: time.Hour})
		dial(t, fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio))
		cfg := fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)
		const wait = 300 * time.Millisecond
		cfg.QueueLeaveWait = func() time.Duration { return wait }
		ctx, cancel := context.WithCancel(context.Background())
		cfg.OnQueue = func(realtime.QueueStatus) { cancel() }
		began := time.Now()
		if _, err := realtime.Dial(ctx, cfg); !errors.Is(err, context.Canceled) {
			t.Fatalf("Dial: %v; want the caller's cancellation", err)
		}
		if waited := time.Since(began); waited < wait {
			t.Fatalf("left the queue after %v, before the %v wait was over", waited, wait)
		}
		if rec, err := srv.WaitEnded(context.Background(), 1); err != nil || !rec.AssignedAt.IsZero() {
			t.Fatalf("the dial given up: %v, assigned %v", err, !rec.AssignedAt.IsZero())
		}
	})
}
