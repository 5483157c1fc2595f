package realtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// OpenVoice as the Macaw server implements it: flow control, session totals, cancel, commit.

func openVoiceConfig(url string) realtime.Config {
	cfg := fastConfig(url, realtime.DialectOpenVoice, "")
	cfg.Model = "faster-whisper-large-v3"
	return cfg
}

// The server's flow control is never ignored: session.frames_dropped reaches the caller with the
// audio lost, session.rate_limit as a RateLimit.
func TestOpenVoiceFlowControl(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{Dialect: realtimetest.OpenVoice})
	s := dial(t, openVoiceConfig(srv.URL()))
	// 20 s at once: a caller that does not pace its audio. The server drops what is over 10 s.
	for range 20 {
		send(t, s, realtime.Chunk{Audio: silence(16000)})
	}
	var dropped time.Duration
	var r reply
	drain(t, s, &r, func(ev realtime.Event) bool {
		if d, ok := ev.(realtime.FramesDropped); ok {
			dropped += d.Dropped
		}
		return dropped >= 5*time.Second
	})
	if len(r.errors) != 0 {
		t.Fatalf("errors %v", r.errors)
	}
	s.Close(context.Background(), "")
	if rec := srv.Sessions()[0]; rec.DroppedFrames == 0 || time.Duration(rec.DroppedFrames)*40*time.Millisecond < dropped {
		t.Fatalf("the server dropped %d frames; the client counted %v", rec.DroppedFrames, dropped)
	}
}

// After session.rate_limit the session holds its next audio back by the delay the server asked for.
func TestOpenVoiceRateLimitHoldsAudio(t *testing.T) {
	const delay = 300 * time.Millisecond
	got := make(chan time.Duration, 1)
	url := scriptServer(t, func(ws *websocket.Conn) {
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.created","session_id":"sess_1","model":"m","config":{}}`))
		sent := time.Now()
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.rate_limit","delay_ms":300,"message":"Client sending faster than real-time, please throttle"}`))
		for {
			mt, _, err := ws.ReadMessage()
			if err != nil {
				return
			}
			if mt == websocket.BinaryMessage {
				got <- time.Since(sent)
				return
			}
		}
	})
	s := dial(t, openVoiceConfig(url))
	var limit realtime.RateLimit
	var r reply
	drain(t, s, &r, func(ev realtime.Event) bool {
		l, ok := ev.(realtime.RateLimit)
		limit = l
		return ok
	})
	if limit.Delay != delay || limit.Message == "" {
		t.Fatalf("rate limit %+v", limit)
	}
	send(t, s, realtime.Chunk{Audio: silence(640)})
	select {
	case d := <-got:
		// A lower bound only: a busy machine can make it later, never earlier.
		if d < delay {
			t.Fatalf("audio went out %v after session.rate_limit{delay_ms:300}", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no audio arrived")
	}
}

func TestOpenVoiceCommitAndTotals(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{Dialect: realtimetest.OpenVoice})
	s := dial(t, openVoiceConfig(srv.URL()))
	send(t, s, realtime.Chunk{Audio: tone(8000, 0.3)})
	if err := s.CommitAudio(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The commit ends the segment while the speech goes on: its final comes without silence.
	var finals []realtime.Transcript
	var r reply
	drain(t, s, &r, func(ev realtime.Event) bool {
		if tr, ok := ev.(realtime.Transcript); ok && tr.Final {
			finals = append(finals, tr)
		}
		return len(finals) == 1
	})
	send(t, s, realtime.Chunk{Audio: silence(16000)})
	drain(t, s, &r, func(ev realtime.Event) bool { v, ok := ev.(realtime.VAD); return ok && !v.Speaking })
	if finals[0].SegmentID != 0 || finals[0].Duration != 500*time.Millisecond {
		t.Fatalf("final %+v", finals[0])
	}
	// Cancel, not close: the server answers session.closed{cancelled} with its totals.
	if err := s.Close(context.Background(), realtime.ReasonCancel); err != nil || s.Err() != nil {
		t.Fatal(err, s.Err())
	}
	drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Closed); return ok })
	if r.closed.Reason != "cancelled" || r.closed.Segments != 1 {
		t.Fatalf("closed %+v", r.closed)
	}
	rec, err := srv.WaitEnded(context.Background(), 0)
	if err != nil || rec.EndReason != "cancelled" || rec.Commits != 1 || rec.LeftAt.IsZero() {
		t.Fatalf("%v: EndReason %q Commits %d", err, rec.EndReason, rec.Commits)
	}
}

// A minute without binary audio ends an OpenVoice session; it is an ordinary end.
func TestOpenVoiceInactivity(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{Dialect: realtimetest.OpenVoice, OpenVoiceInactivity: 200 * time.Millisecond})
	s := dial(t, openVoiceConfig(srv.URL()))
	var r reply
	drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Closed); return ok })
	if r.closed.Reason != "inactivity_timeout" || realtime.ClassOf(s.Err()) != realtime.ClassEnded {
		t.Fatalf("closed %+v, err %v", r.closed, s.Err())
	}
}

// Speech ends are matched by request: a newer Speak cancels the one before it.
func TestOpenVoiceSpeechRequests(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{Dialect: realtimetest.OpenVoice, OpenVoiceSynthesisSpeed: 1})
	s := dial(t, openVoiceConfig(srv.URL()))
	long, err := s.Speak(context.Background(), realtime.Speech{Text: "one two three four five six seven eight"})
	if err != nil {
		t.Fatal(err)
	}
	var r reply
	drain(t, s, &r, func(ev realtime.Event) bool { return len(r.audio) > 0 })
	short, err := s.Speak(context.Background(), realtime.Speech{Text: "hi", RequestID: "mine"})
	if err != nil || short != "mine" {
		t.Fatal(short, err)
	}
	ends := map[string]realtime.TTSState{}
	drain(t, s, &r, func(ev realtime.Event) bool {
		if st, ok := ev.(realtime.TTSState); ok && !st.Speaking {
			ends[st.RequestID] = st
		}
		return len(ends) == 2
	})
	if !ends[long].Cancelled || ends[short].Cancelled {
		t.Fatalf("ends %+v", ends)
	}
}
