package realtime_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// While the server answers the stream, the link's watchdogs are pushed back at every message and
// every write and never expire: no ping, no deadline check, nothing that wakes the process. The
// stream runs for three ping intervals, counted from the first answer (the set-up before it may
// have been slow on a busy machine, and a ping then is right); a run in which the machine held
// the answers back for half an interval proves nothing and is run again.
func TestWatchdogsQuietWhileStreaming(t *testing.T) {
	const ping = time.Second
	for attempt := 1; ; attempt++ {
		srv := strictServer(t, realtimetest.Options{})
		cfg := fastConfig(srv.URL(), realtime.DialectCurrent, realtime.ModeAudio)
		cfg.PingInterval, cfg.DeadLinkTimeout, cfg.WriteTimeout = ping, 3*ping, 10*time.Second
		s := dial(t, cfg)
		var r reply
		answered := func() {
			send(t, s, realtime.Chunk{Audio: silence(4000)})
			listens := r.listens
			drain(t, s, &r, func(realtime.Event) bool { return r.listens > listens })
		}
		answered()
		silence0, stall0 := realtime.WatchdogWakesForTest(s)
		last, maxGap := time.Now(), time.Duration(0)
		for start := time.Now(); time.Since(start) < 3*ping; {
			time.Sleep(50 * time.Millisecond)
			answered()
			maxGap, last = max(maxGap, time.Since(last)), time.Now()
		}
		silenceWakes, stallWakes := realtime.WatchdogWakesForTest(s)
		silenceWakes, stallWakes = silenceWakes-silence0, stallWakes-stall0
		if maxGap < ping/2 {
			if silenceWakes != 0 || stallWakes != 0 {
				t.Fatalf("the watchdogs woke the process %d and %d times while the server answered every chunk (longest silence %v)", silenceWakes, stallWakes, maxGap)
			}
			return
		}
		if attempt == 5 {
			t.Fatalf("the server's answers came %v apart or more in five runs", maxGap)
		}
		t.Logf("run %d: answers came up to %v apart; again", attempt, maxGap)
	}
}

// A server that stops reading fills the socket: the write under way ends the session after
// WriteTimeout with a write error, however long the link may otherwise stay silent.
func TestWriteStallEndsSession(t *testing.T) {
	url := goesSilent(t)
	cfg := realtime.Config{URL: url, Dialect: realtime.DialectCurrent, Mode: realtime.ModeAudio,
		PingInterval: 30 * time.Minute, DeadLinkTimeout: time.Hour, WriteTimeout: 300 * time.Millisecond, DialTimeout: 5 * time.Second}
	s := dial(t, cfg)
	go func() {
		for s.Send(context.Background(), realtime.Chunk{Audio: silence(160000)}) == nil {
		}
	}()
	var r reply
	deadline := time.After(time.Minute)
	for r.closed == nil {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				t.Fatal("events ended without Closed")
			}
			r.add(ev)
		case <-deadline:
			t.Fatal("a write stalled for a minute and the session did not end")
		}
	}
	e := r.closed.Err
	if e == nil || e.Code != realtime.CodeWriteFailed || e.Class != realtime.ClassRetryable || !errors.Is(e, os.ErrDeadlineExceeded) {
		t.Fatalf("ended with %v, want a retryable %s (deadline exceeded)", e, realtime.CodeWriteFailed)
	}
}

// A dead link ends the session even when nothing reads: the consumer has stopped taking events
// (the reader waits to hand one over) and a write is stuck behind the silent server. The session
// must still end at DeadLinkTimeout, not when the write's own bound (a minute here) runs out.
func TestDeadLinkEndsSessionNobodyReads(t *testing.T) {
	delta := `{"type":"response.output.delta","kind":"text","session_id":"sess_1","response_id":"r","text":"hi"}`
	url := goesSilent(t, delta, delta, delta, delta, delta, delta, delta, delta)
	cfg := realtime.Config{URL: url, Dialect: realtime.DialectCurrent, Mode: realtime.ModeAudio, EventBuffer: 1,
		PingInterval: 500 * time.Millisecond, DeadLinkTimeout: 2 * time.Second, WriteTimeout: time.Minute, DialTimeout: 5 * time.Second}
	s := dial(t, cfg)
	go func() {
		for s.Send(context.Background(), realtime.Chunk{Audio: silence(160000)}) == nil {
		}
	}()
	select {
	case <-s.Done():
	case <-time.After(40 * time.Second):
		t.Fatal("a dead link with a stuck write and an unread event did not end the session")
	}
	if len(s.Events()) != cap(s.Events()) {
		t.Fatalf("the reader was not held up (%d of %d events buffered): the test proves nothing", len(s.Events()), cap(s.Events()))
	}
	var e *realtime.Error
	if !errors.As(s.Err(), &e) || e.Code != realtime.CodeDeadLink || e.Class != realtime.ClassRetryable {
		t.Fatalf("ended with %v, want a retryable %s", s.Err(), realtime.CodeDeadLink)
	}
}

// goesSilent is a current-dialect server that creates the session, sends frames, and then
// neither says nor reads anything more (its kernel still takes bytes until the socket is full).
func goesSilent(t *testing.T, frames ...string) string {
	release := make(chan struct{})
	url := scriptServer(t, func(ws *websocket.Conn) {
		ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.queue_done"}`))
		if _, _, err := ws.ReadMessage(); err != nil { // the init
			return
		}
		ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.created","session_id":"sess_1"}`))
		for _, f := range frames {
			ws.WriteMessage(websocket.TextMessage, []byte(f))
		}
		<-release
	})
	t.Cleanup(func() { close(release) }) // before the server's Close, which waits for this handler
	return url
}
