package realtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// The client against each current-dialect quirk of real deployments (PROTOCOL-FACTS).

// speak sends a second of speech and silence until the parrot's reply has ended (stop).
func speak(t *testing.T, s realtime.Session, r *reply, stop func(realtime.Event) bool) {
	t.Helper()
	send(t, s, realtime.Chunk{Audio: tone(16000, 0.3)})
	send(t, s, realtime.Chunk{Audio: silence(16000)})
	drain(t, s, r, stop)
}

// The C++ backend ends a spoken full-duplex reply with response.done: a turn's end, no error.
func TestDuplexResponseDone(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{DuplexDone: true, ForceListenCount: -1})
	s := dial(t, fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio))
	var r reply
	speak(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.TurnDone); return ok })
	send(t, s, realtime.Chunk{Audio: silence(16000)})
	drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Listen); return ok })
	if r.turns != 1 || len(r.audio) != 24000 || len(r.errors) != 0 || s.Err() != nil {
		t.Fatalf("turns %d, %d samples, errors %v, err %v", r.turns, len(r.audio), r.errors, s.Err())
	}
}

// Integer-millisecond server_send_ts reads as seconds; a doubled session.closed, or one that says
// backend_error instead of our reason, still ends our Close cleanly.
func TestTimestampsAndCloseQuirks(t *testing.T) {
	srv := strictServer(t, realtimetest.Options{MillisecondTS: true, DoubleClosed: true, CloseBackendError: true, ForceListenCount: -1})
	s := dial(t, fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio))
	var ts float64
	var r reply
	send(t, s, realtime.Chunk{Audio: silence(16000)})
	drain(t, s, &r, func(ev realtime.Event) bool {
		m, ok := ev.(realtime.MetricsUpdate)
		ts = m.Metrics.ServerSendTS
		return ok && ts > 0
	})
	if now := float64(time.Now().Unix()); ts < now-3600 || ts > now+3600 {
		t.Fatalf("server_send_ts read as %v, now is %v", ts, now)
	}
	if err := s.Close(context.Background(), "user_stop"); err != nil || s.Err() != nil {
		t.Fatal(err, s.Err())
	}
	drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Closed); return ok })
	if r.closed.Err != nil || r.closed.Reason != "backend_error" || len(r.errors) != 0 {
		t.Fatalf("closed %+v, errors %v", r.closed, r.errors)
	}
}

// A mid-session error without a close is reported and the session goes on; session_failed ends it,
// worth a retry, under the gateway's code.
func TestMidSessionErrors(t *testing.T) {
	for _, d := range []realtime.Dialect{realtime.DialectCurrent, realtime.DialectLegacy} {
		srv := strictServer(t, realtimetest.Options{Dialect: realtimetest.Dialect(d),
			Faults: []realtimetest.Fault{{Kind: realtimetest.FaultError, AfterAppends: 1}}})
		s := dial(t, fastConfig(srv.URL(), d, realtime.ModeAudio))
		var r reply
		send(t, s, realtime.Chunk{Audio: silence(16000)})
		drain(t, s, &r, func(ev realtime.Event) bool { return len(r.errors) > 0 })
		send(t, s, realtime.Chunk{Audio: silence(16000)})
		listens := r.listens
		drain(t, s, &r, func(ev realtime.Event) bool { return r.listens > listens })
		if e := r.errors[0]; e.Code != "inference_failed" || e.Class != realtime.ClassProtocol || s.Err() != nil {
			t.Fatalf("%s: error %+v, session err %v", d, e, s.Err())
		}
	}

	srv := strictServer(t, realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultError, Code: "session_failed", AfterAppends: 1}}})
	s := dial(t, fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio))
	var r reply
	send(t, s, realtime.Chunk{Audio: silence(16000)})
	drain(t, s, &r, func(ev realtime.Event) bool { _, ok := ev.(realtime.Closed); return ok })
	if e := r.closed.Err; e == nil || e.Code != "session_failed" || e.Class != realtime.ClassRetryable {
		t.Fatalf("closed %+v", r.closed)
	}
}
