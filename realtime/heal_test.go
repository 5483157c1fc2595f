package realtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// The field findings of issue 13 on the wire: which ends are worth a retry, a deadline on every
// phase, OpenVoice's unrecoverable errors, and nothing sent after session.close.

// scriptServer runs play on each WebSocket connection it accepts and returns its URL.
func scriptServer(t testing.TB, play func(ws *websocket.Conn)) string {
	t.Helper()
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		play(ws)
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/realtime"
}

// scripted is a server that plays a fixed script: it accepts, sends queue_done (MiniCPM-o), waits
// for the client's first message (the init) and then sends frames; a frame "close:CODE" closes
// the WebSocket with that code. It answers nothing else. It stands in for servers whose exact
// answers the simulator does not play (documented codes no server sends yet, the other
// dialect's events).
func scripted(t *testing.T, queue bool, frames ...string) string {
	return scriptServer(t, func(ws *websocket.Conn) {
		if queue {
			_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.queue_done"}`))
			if _, _, err := ws.ReadMessage(); err != nil {
				return
			}
		}
		for _, f := range frames {
			if code, ok := strings.CutPrefix(f, "close:"); ok {
				var n int
				_ = json.Unmarshal([]byte(code), &n)
				_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(n, ""), time.Now().Add(time.Second))
				continue
			}
			_ = ws.WriteMessage(websocket.TextMessage, []byte(f))
		}
		for { // keep reading so pings are answered, until the client leaves
			if _, _, err := ws.ReadMessage(); err != nil {
				return
			}
		}
	})
}

func dialErr(t *testing.T, cfg realtime.Config) *realtime.Error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := realtime.Dial(ctx, cfg)
	if err == nil {
		s.Close(ctx, "user_stop")
		t.Fatal("dial succeeded")
	}
	var e *realtime.Error
	if !errors.As(err, &e) {
		t.Fatalf("dial error %T %v is not a *realtime.Error", err, err)
	}
	return e
}

// A current-dialect chain whose backend is down or busy answers the init with session.closed
// before session.created: a reason to retry, never a sign of the wrong dialect.
func TestBackendErrorBeforeCreatedIsRetryable(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultBackendError, Count: 1}}})
	cfg := fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)
	e := dialErr(t, cfg)
	if e.Class != realtime.ClassRetryable || e.Code != realtime.CodeSessionClosed || e.Reason != "backend_error" ||
		!strings.Contains(e.Error(), `"backend_error"`) || !strings.Contains(e.Error(), "previous session is still closing") {
		t.Fatalf("got %v (class %v code %s reason %q)", e, e.Class, e.Code, e.Reason)
	}
	dial(t, cfg) // the backend is back: the next attempt works

	for _, tt := range []struct {
		name    string
		dialect realtime.Dialect
		closed  string
		want    string
	}{
		{"null id, no diagnostic", realtime.DialectCurrent, `{"type":"session.closed","session_id":null,"reason":"backend_error"}`, `"backend_error"`},
		{"diagnostic string", realtime.DialectCurrent, `{"type":"session.closed","reason":"backend_error","diagnostic":"worker restarting"}`, "worker restarting"},
		{"diagnostic object", realtime.DialectCurrent, `{"type":"session.closed","session_id":null,"reason":"backend_error","diagnostic":{"message":"backend busy"}}`, "backend busy"},
		{"other reason", realtime.DialectCurrent, `{"type":"session.closed","reason":"error"}`, `"error"`},
		// A current chain answers a legacy session.update the same way: still no proof.
		{"legacy client", realtime.DialectLegacy, `{"type":"session.closed","session_id":null,"reason":"backend_error"}`, "server.dialect"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := dialErr(t, fastConfig(scripted(t, true, tt.closed), tt.dialect, realtime.ModeAudio))
			if e.Class != realtime.ClassRetryable || e.Code == realtime.CodeDialectMismatch || !strings.Contains(e.Error(), tt.want) {
				t.Fatalf("got %v (class %v code %s), want retryable naming %q", e, e.Class, e.Code, tt.want)
			}
		})
	}
}

// "The other dialect" is decided from positive evidence only.
func TestWrongDialectNeedsEvidence(t *testing.T) {
	for _, tt := range []struct {
		name    string
		dialect realtime.Dialect
		frames  []string
		class   realtime.Class
		code    string
		want    string
	}{
		{"legacy event to a current client", realtime.DialectCurrent, []string{`{"type":"response.listen","kv_cache_length":3}`},
			realtime.ClassConfig, realtime.CodeDialectMismatch, "set server.dialect: legacy"},
		{"current event to a legacy client", realtime.DialectLegacy, []string{`{"type":"response.output.delta","kind":"listen"}`},
			realtime.ClassConfig, realtime.CodeDialectMismatch, "set server.dialect: current"},
		{"unknown_event", realtime.DialectCurrent, []string{`{"type":"error","error":{"code":"unknown_event","message":"Unknown event type: session.init"}}`},
			realtime.ClassConfig, realtime.CodeDialectMismatch, "set server.dialect: legacy"},
		{"close 1003", realtime.DialectLegacy, []string{"close:1003"}, realtime.ClassConfig, realtime.CodeDialectMismatch, "set server.dialect: current"},
		{"invalid_payload then close", realtime.DialectCurrent, []string{`{"type":"error","error":{"code":"invalid_payload","message":"bad"}}`, "close:1000"},
			realtime.ClassRetryable, "invalid_payload", "invalid_payload"},
		{"normal close before created", realtime.DialectCurrent, []string{"close:1000"}, realtime.ClassRetryable, realtime.CodeWSClose, "1000"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := dialErr(t, fastConfig(scripted(t, true, tt.frames...), tt.dialect, realtime.ModeAudio))
			if e.Class != tt.class || e.Code != tt.code || !strings.Contains(e.Error(), tt.want) {
				t.Fatalf("got %v (class %v code %s), want class %v code %s containing %q", e, e.Class, e.Code, tt.class, tt.code, tt.want)
			}
		})
	}
}

// An unanswered init is abandoned after InitTimeout with a retryable error that says what to
// check; time in the queue does not count.
func TestInitDeadline(t *testing.T) {
	for _, tt := range []struct {
		name    string
		sim     realtimetest.Options
		dialect realtime.Dialect
		mode    realtime.Mode
		want    string
	}{
		{"current client, legacy gateway", realtimetest.Options{Dialect: realtimetest.Legacy}, realtime.DialectCurrent, realtime.ModeAudio,
			"no answer to session.init within 300ms: is this a legacy gateway? set server.dialect: legacy"},
		{"chat, legacy gateway", realtimetest.Options{Dialect: realtimetest.Legacy}, realtime.DialectCurrent, realtime.ModeChat,
			"a legacy gateway has no chat mode"},
		{"stalled current gateway", realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultStallInit}}}, realtime.DialectCurrent, realtime.ModeVideo,
			"no answer to session.init within 300ms"},
		{"legacy client, stalled gateway", realtimetest.Options{Dialect: realtimetest.Legacy, Faults: []realtimetest.Fault{{Kind: realtimetest.FaultStallInit}}},
			realtime.DialectLegacy, realtime.ModeAudio, "no answer to session.update within 300ms: is this a current-dialect gateway? set server.dialect: current"},
		{"openvoice never greets", realtimetest.Options{Dialect: realtimetest.OpenVoice, Faults: []realtimetest.Fault{{Kind: realtimetest.FaultStallInit}}},
			realtime.DialectOpenVoice, "", "no session.created within 300ms of connecting"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := realtimetest.NewServer(tt.sim)
			defer srv.Close()
			cfg := fastConfig(srv.URL(), tt.dialect, tt.mode)
			cfg.Model = "m"
			cfg.InitTimeout = 300 * time.Millisecond
			e := dialErr(t, cfg)
			if e.Class != realtime.ClassRetryable || e.Code != realtime.CodeInitTimeout || !strings.Contains(e.Error(), tt.want) {
				t.Fatalf("got %v (class %v code %s), want init_timeout containing %q", e, e.Class, e.Code, tt.want)
			}
			// The client gave up and left: the server's only worker is free again.
			rec, err := srv.WaitEnded(context.Background(), 0)
			if err != nil || rec.LeftAt.IsZero() {
				t.Fatalf("the client did not leave: %v %+v", err, rec)
			}
			if tt.sim.Dialect == realtimetest.Legacy && tt.sim.Faults == nil && !strings.Contains(strings.Join(rec.Rejections, " "), "ignored by the real server") {
				t.Errorf("the legacy gateway did not see a current init: %q", rec.Rejections)
			}
		})
	}

	t.Run("queue time does not count", func(t *testing.T) {
		srv := strictServer(t, realtimetest.Options{Workers: 1, QueueUpdateInterval: 20 * time.Millisecond})
		first := dial(t, fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio))
		cfg := fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)
		cfg.InitTimeout = 200 * time.Millisecond
		queued := make(chan struct{}, 1)
		cfg.OnQueue = func(realtime.QueueStatus) {
			select {
			case queued <- struct{}{}:
			default:
			}
		}
		got := make(chan error, 1)
		go func() {
			s, err := realtime.Dial(context.Background(), cfg)
			if err == nil {
				s.Close(context.Background(), "user_stop")
			}
			got <- err
		}()
		<-queued
		time.Sleep(2 * cfg.InitTimeout) // queued for longer than InitTimeout
		first.Close(context.Background(), "user_stop")
		if err := <-got; err != nil {
			t.Fatalf("queued dial: %v", err)
		}
		if w := srv.Sessions()[1].QueueWait(); w < 2*cfg.InitTimeout {
			t.Fatalf("queued only %v", w)
		}
	})
}

// Close waits for session.closed at most CloseTimeout, then drops the link itself.
func TestCloseDeadline(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultStall}}})
	cfg := fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)
	cfg.DeadLinkTimeout = time.Hour
	cfg.CloseTimeout = 100 * time.Millisecond
	s := dial(t, cfg)
	if err := s.Close(context.Background(), "user_stop"); err != nil {
		t.Fatal(err)
	}
	if rec, err := srv.WaitEnded(context.Background(), 0); err != nil || rec.LeftAt.IsZero() {
		t.Fatalf("the client did not drop the link: %v %+v", err, rec)
	}
}

// A server error during a chat turn ends the turn with the server's words, at once.
func TestChatServerErrorEndsTurn(t *testing.T) {
	url := scriptedChat(t, `{"type":"error","error":{"code":"inference_failed","message":"CUDA out of memory","type":"server_error"}}`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := realtime.Chat(ctx, fastConfig(url, realtime.DialectCurrent, realtime.ModeChat),
		realtime.ChatRequest{Messages: []realtime.ChatMessage{{Role: "user", Text: "hi"}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "CUDA out of memory") || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("chat: %v, want the server's error", err)
	}
}

// scriptedChat is a chat server that answers each input.append with reply.
func scriptedChat(t *testing.T, reply string) string { return scriptedTurn(t, reply) }

// OpenVoice: recoverable:false with a configuration code is a configuration error naming the
// setting; recoverable errors keep the session; session.closed ends it and the client closes
// the socket the server leaves open.
func TestOpenVoiceErrors(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{Dialect: realtimetest.OpenVoice, Models: []string{"faster-whisper-large-v3"}})
	cfg := fastConfig(srv.URL(), realtime.DialectOpenVoice, "")
	cfg.Model = "whisper-tiny"
	e := dialErr(t, cfg)
	if e.Class != realtime.ClassConfig || e.Code != "model_not_found" || !strings.Contains(e.Error(), "server.model") ||
		!strings.Contains(e.Error(), "whisper-tiny") {
		t.Fatalf("unknown model: %v (class %v code %s)", e, e.Class, e.Code)
	}

	t.Run("unrecoverable, not configuration", func(t *testing.T) {
		url := scripted(t, false, `{"type":"session.created","session_id":"s"}`,
			`{"type":"error","code":"internal_error","message":"Erro interno do servidor","recoverable":false}`)
		cfg := fastConfig(url, realtime.DialectOpenVoice, "")
		cfg.Model = "m"
		s := dial(t, cfg)
		var r reply
		drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Closed); return ok })
		if r.closed.Err == nil || r.closed.Err.Class != realtime.ClassRetryable || r.closed.Err.Code != "internal_error" {
			t.Fatalf("closed %+v", r.closed)
		}
	})
	t.Run("recoverable", func(t *testing.T) {
		url := scripted(t, false, `{"type":"session.created","session_id":"s"}`,
			`{"type":"error","code":"frame_too_large","message":"Frame exceeds 1MB","recoverable":true}`,
			`{"type":"transcript.final","text":"still here"}`)
		cfg := fastConfig(url, realtime.DialectOpenVoice, "")
		cfg.Model = "m"
		s := dial(t, cfg)
		var r reply
		drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Transcript); return ok })
		if len(r.errors) != 1 || r.errors[0].Class != realtime.ClassProtocol || r.errors[0].Code != "frame_too_large" || s.Err() != nil {
			t.Fatalf("errors %v, session err %v", r.errors, s.Err())
		}
	})
	t.Run("session.closed", func(t *testing.T) {
		srv := strictServer(t, realtimetest.Options{Dialect: realtimetest.OpenVoice,
			Faults: []realtimetest.Fault{{Kind: realtimetest.FaultClose, Reason: "inactivity_timeout"}}})
		cfg := fastConfig(srv.URL(), realtime.DialectOpenVoice, "")
		cfg.Model = "m"
		s := dial(t, cfg)
		var r reply
		drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Closed); return ok })
		if r.closed.Reason != "inactivity_timeout" || realtime.ClassOf(s.Err()) != realtime.ClassEnded {
			t.Fatalf("closed %+v err %v", r.closed, s.Err())
		}
		if rec, err := srv.WaitEnded(context.Background(), 0); err != nil || rec.LeftAt.IsZero() {
			t.Fatalf("the client did not close the socket the server left open: %v", err)
		}
	})
	t.Run("Close says goodbye", func(t *testing.T) {
		srv := strictServer(t, realtimetest.Options{Dialect: realtimetest.OpenVoice})
		cfg := fastConfig(srv.URL(), realtime.DialectOpenVoice, "")
		cfg.Model = "m"
		s := dial(t, cfg)
		send(t, s, realtime.Chunk{Audio: silence(1600)})
		if err := s.Close(context.Background(), "user_stop"); err != nil || s.Err() != nil {
			t.Fatalf("close: %v %v", err, s.Err())
		}
		rec, err := srv.WaitEnded(context.Background(), 0)
		if err != nil || rec.EndReason != "client_request" || rec.Received[len(rec.Received)-1] != "session.close" {
			t.Fatalf("%v: EndReason %q Received %q", err, rec.EndReason, rec.Received)
		}
	})
}
