package realtimetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The faults real deployments showed (backend_error before session.created, flapping sessions,
// a gateway that never answers the init, sockets left open, a jammed one-worker queue), each as
// the real servers play it.

// pingSilent sends a WebSocket ping and reads until its pong: the connection is open, pings are
// answered, and nothing else arrived meanwhile. The connection cannot be read afterwards.
func (c *client) pingSilent() {
	c.t.Helper()
	pong := make(chan struct{})
	c.ws.SetPongHandler(func(string) error {
		close(pong)
		return c.ws.SetReadDeadline(time.Now()) // ends the read below
	})
	if err := c.ws.WriteControl(websocket.PingMessage, []byte("p"), time.Now().Add(ioTimeout)); err != nil {
		c.t.Fatal(err)
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(ioTimeout))
	_, data, err := c.ws.ReadMessage()
	if err == nil {
		c.t.Fatalf("got %.200s, want nothing but a pong", data)
	}
	select {
	case <-pong:
	default:
		c.t.Fatalf("no pong (%v): the connection is not open and alive", err)
	}
}

func TestFaultBackendErrorBeforeCreated(t *testing.T) {
	s := newSrv(t, Options{Faults: []Fault{{Kind: FaultBackendError, Count: 2}}})
	for i := range 2 {
		c := dial(t, s, "mode=audio")
		c.expect("session.queue_done")
		c.send(initMsgFor(Current, "audio", "x"))
		m := c.expect("session.closed")
		if sid, ok := m.M["session_id"]; !ok || sid != nil || m.str("reason") != "backend_error" || diag(m) == "" {
			t.Errorf("session %d: %s, want session_id null, reason backend_error, a diagnostic", i, m.Raw)
		}
		if code, _ := c.closeCode(); code != websocket.CloseNormalClosure {
			t.Errorf("close %d", code)
		}
		r := waitEnded(t, s, i)
		if r.EndReason != "fault: backend-error" || !r.CreatedAt.IsZero() || len(r.Rejections) != 0 {
			t.Errorf("session %d: EndReason %q CreatedAt %v Rejections %q", i, r.EndReason, r.CreatedAt, r.Rejections)
		}
	}
	c := dial(t, s, "mode=audio") // count=2 is spent; the worker was freed each time
	c.handshake(Current, "audio")

	if _, err := Listen("127.0.0.1:0", Options{Dialect: Legacy, Faults: []Fault{{Kind: FaultBackendError}}}); err == nil ||
		!strings.Contains(err.Error(), "only current-dialect") {
		t.Errorf("legacy backend-error: %v", err)
	}
}

func TestFaultStallInit(t *testing.T) {
	t.Run("current", func(t *testing.T) {
		s := newSrv(t, Options{Faults: []Fault{{Kind: FaultStallInit, Count: 1}}})
		c := dial(t, s, "mode=audio")
		c.expect("session.queue_done")
		c.send(initMsgFor(Current, "audio", "x"))
		c.send(map[string]any{"type": "session.close", "reason": "user_stop"}) // not answered either
		waitRecord(t, s, 0, func(r SessionRecord) bool { return len(r.Received) == 2 })
		c.pingSilent()
		c.ws.Close()
		r := waitEnded(t, s, 0)
		if r.EndReason != "fault: stall-init" || !r.CreatedAt.IsZero() || len(r.Rejections) != 0 ||
			strings.Join(r.Received, ",") != "session.init,session.close" {
			t.Errorf("EndReason %q CreatedAt %v Rejections %q Received %q", r.EndReason, r.CreatedAt, r.Rejections, r.Received)
		}
		c = dial(t, s, "mode=audio") // count=1 is spent
		c.handshake(Current, "audio")
	})
	t.Run("the session limit ends it", func(t *testing.T) {
		// Counted from the worker's assignment, as the gateway's watchdog does.
		s := newSrv(t, Options{AudioLimit: 300 * time.Millisecond, Faults: []Fault{{Kind: FaultStallInit}}})
		c := dial(t, s, "mode=audio")
		c.expect("session.queue_done")
		c.send(initMsgFor(Current, "audio", "x"))
		msgs, code := c.readUntilClose()
		if len(msgs) != 1 || msgs[0].str("reason") != "timeout" || code != websocket.CloseNormalClosure {
			t.Errorf("%d msgs (%v), close %d; want session.closed{timeout} and 1000", len(msgs), msgs, code)
		}
	})
	t.Run("openvoice never greets", func(t *testing.T) {
		s := newSrv(t, Options{Dialect: OpenVoice, Faults: []Fault{{Kind: FaultStallInit}}})
		c := dial(t, s, "model=m")
		c.pingSilent()
		c.ws.Close()
		if r := waitEnded(t, s, 0); r.EndReason != "fault: stall-init" || r.ID != "" {
			t.Errorf("EndReason %q ID %q", r.EndReason, r.ID)
		}
	})
}

// A server that ends every session a moment after creating it.
func TestFaultCloseDelay(t *testing.T) {
	const delay = 100 * time.Millisecond
	s := newSrv(t, Options{Faults: []Fault{{Kind: FaultClose, Reason: "timeout", Delay: delay}}})
	for i := range 2 {
		c := dial(t, s, "mode=audio")
		c.expect("session.queue_done")
		c.send(initMsgFor(Current, "audio", "x"))
		c.expect("session.created")
		m := c.expect("session.closed")
		if m.str("reason") != "timeout" {
			t.Errorf("closed %s", m.Raw)
		}
		// From the server's own creation time: the client may read session.created late.
		if d := time.Since(s.Sessions()[i].CreatedAt); d < delay {
			t.Errorf("closed %v after created, before the %v delay", d, delay)
		}
		c.closeCode()
		if r := waitEnded(t, s, i); r.EndReason != "fault: close" {
			t.Errorf("EndReason %q", r.EndReason)
		}
	}
}

func TestFaultCloseKeepOpen(t *testing.T) {
	s := newSrv(t, Options{InFlightGrace: time.Hour, Faults: []Fault{{Kind: FaultClose, Reason: "backend_error", AfterAppends: 1, KeepOpen: true}}})
	c := dial(t, s, "mode=audio")
	c.handshake(Current, "audio")
	c.send(appendFor(Current, silence(0.5), nil, nil))
	for m := c.next(); m.typ() != "session.closed"; m = c.next() {
	}
	c.send(appendFor(Current, silence(0.5), nil, nil)) // in flight: ignored, not answered
	waitRecord(t, s, 0, func(r SessionRecord) bool { return r.IgnoredAfterClose == 1 })
	c.pingSilent()
	if r := s.Sessions()[0]; !r.EndedAt.IsZero() {
		t.Fatalf("the server closed the socket itself: %q", r.EndReason)
	}
	c.ws.Close() // the client must close
	r := waitEnded(t, s, 0)
	if r.EndReason != "fault: close" || r.LeftAt.IsZero() || r.IgnoredAfterClose != 1 || len(r.Rejections) != 0 {
		t.Errorf("EndReason %q LeftAt %v ignored %d Rejections %q", r.EndReason, r.LeftAt, r.IgnoredAfterClose, r.Rejections)
	}
}

// Real OpenVoice answers session.close and ends sessions with session.closed, and leaves the
// socket to the client in both cases.
func TestOpenVoiceSessionClosedLeavesSocketOpen(t *testing.T) {
	t.Run("fault", func(t *testing.T) {
		s, c := dialOV(t, Options{Faults: []Fault{{Kind: FaultClose, Reason: "inactivity_timeout"}}})
		m := c.expect("session.closed")
		if m.str("reason") != "inactivity_timeout" || m.M["total_duration_ms"] == nil || m.M["segments_transcribed"] == nil {
			t.Errorf("closed %s", m.Raw)
		}
		c.pingSilent()
		c.ws.Close()
		if r := waitEnded(t, s, 0); r.EndReason != "fault: close" || r.LeftAt.IsZero() {
			t.Errorf("EndReason %q", r.EndReason)
		}
	})
	t.Run("session.close", func(t *testing.T) {
		s, c := dialOV(t, Options{})
		c.sendBinary(pcm16(silence(0.1)))
		c.send(map[string]any{"type": "session.close"})
		if m := c.expect("session.closed"); m.str("reason") != "client_request" {
			t.Errorf("closed %s", m.Raw)
		}
		c.pingSilent()
		c.ws.Close()
		r := waitEnded(t, s, 0)
		if r.EndReason != "client_request" || len(r.Rejections) != 0 || len(r.Appends) != 1 {
			t.Errorf("EndReason %q Rejections %q", r.EndReason, r.Rejections)
		}
	})
}

func TestOpenVoiceUnknownModel(t *testing.T) {
	s := newSrv(t, Options{Dialect: OpenVoice, Models: []string{"faster-whisper-large-v3"}})
	c := dial(t, s, "model=whisper-tiny")
	m := c.expect("error")
	if m.str("code") != "model_not_found" || m.M["recoverable"] != false || !strings.Contains(m.str("message"), "whisper-tiny") {
		t.Errorf("error %s", m.Raw)
	}
	if code, _ := c.closeCode(); code != websocket.ClosePolicyViolation {
		t.Errorf("close %d, want 1008", code)
	}
	if r := waitEnded(t, s, 0); r.EndReason != "refused: model_not_found" || len(r.Rejections) != 0 || r.ID != "" {
		t.Errorf("EndReason %q Rejections %q", r.EndReason, r.Rejections)
	}
	c = dial(t, s, "")
	if m := c.expect("error"); m.str("code") != "invalid_request" || m.M["recoverable"] != false {
		t.Errorf("missing model: %s", m.Raw)
	}
	c = dial(t, s, "model=faster-whisper-large-v3")
	if m := c.expect("session.created"); m.str("model") != "faster-whisper-large-v3" {
		t.Errorf("created %s", m.Raw)
	}
}

// The legacy gateway drops event types it does not know: a current-dialect client waits for a
// session.created that never comes, until the session limit.
func TestLegacyIgnoresCurrentEvents(t *testing.T) {
	s := newSrv(t, Options{Dialect: Legacy, AudioLimit: 300 * time.Millisecond})
	c := dial(t, s, "mode=audio")
	c.expect("session.queue_done")
	c.send(initMsgFor(Current, "audio", "x"))
	c.send(appendFor(Current, silence(0.5), nil, nil))
	c.send(map[string]any{"payload": map[string]any{}})
	// Nothing but the gateway's watchdog at the session limit.
	msgs, code := c.readUntilClose()
	if len(msgs) != 1 || msgs[0].str("reason") != "timeout" || code != websocket.CloseNormalClosure {
		t.Errorf("%d msgs, close %d; want only session.closed{timeout}", len(msgs), code)
	}
	r := waitEnded(t, s, 0)
	if r.EndReason != "timeout" || len(r.Rejections) != 3 || !r.CreatedAt.IsZero() {
		t.Fatalf("EndReason %q CreatedAt %v Rejections %q", r.EndReason, r.CreatedAt, r.Rejections)
	}
	for i, want := range []string{`"session.init": that is a current-dialect event`, `"input.append"`, "message has no type"} {
		if !strings.Contains(r.Rejections[i], want) || !strings.Contains(r.Rejections[i], "ignored by the real server") {
			t.Errorf("rejection %d = %q, want %q ... ignored by the real server", i, r.Rejections[i], want)
		}
	}
	// Ignored input does not spoil the session: a legacy init still works.
	c = dial(t, s, "mode=audio")
	c.expect("session.queue_done")
	c.send(initMsgFor(Current, "audio", "x"))
	c.send(initMsgFor(Legacy, "audio", "x"))
	c.expect("session.created")
}

// waitRecord polls the records until ok holds for session i.
func waitRecord(t *testing.T, s *Server, i int, ok func(SessionRecord) bool) SessionRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	if err := s.WaitSessions(ctx, i+1); err != nil {
		t.Fatal(err)
	}
	for {
		if r := s.Sessions()[i]; ok(r) {
			return r
		}
		select {
		case <-ctx.Done():
			t.Fatalf("session %d: condition not reached: %+v", i, s.Sessions()[i])
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestLateQueueLeave(t *testing.T) {
	t.Run("a client gone before the worker frees jams the gateway", func(t *testing.T) {
		s := newSrv(t, Options{LateQueueLeave: true, QueueUpdateInterval: time.Hour})
		a := dial(t, s, "mode=audio")
		a.handshake(Current, "audio")
		b := dial(t, s, "mode=audio")
		b.expect("session.queued")
		b.ws.Close() // leaves without the gateway noticing
		waitRecord(t, s, 1, func(r SessionRecord) bool { return !r.LeftAt.IsZero() })
		if s.Jammed() {
			t.Fatal("jammed before the worker was handed on")
		}
		a.send(map[string]any{"type": "session.close", "reason": "user_stop"})
		a.readUntilClose()
		if r := waitEnded(t, s, 1); !strings.HasPrefix(r.EndReason, "jammed") || !s.Jammed() {
			t.Fatalf("b EndReason %q, Jammed %v", r.EndReason, s.Jammed())
		}
		c := dial(t, s, "mode=audio")
		c.expect("session.queued")
		c.pingSilent() // no worker, ever
	})
	t.Run("a client the gateway saw leave does not", func(t *testing.T) {
		s := newSrv(t, Options{LateQueueLeave: true, QueueUpdateInterval: 20 * time.Millisecond})
		a := dial(t, s, "mode=audio")
		a.handshake(Current, "audio")
		b := dial(t, s, "mode=audio")
		b.expect("session.queued")
		b.ws.Close()
		if r := waitEnded(t, s, 1); r.EndReason != "client_gone" || r.LeftAt.IsZero() || r.QueueWait() <= 0 {
			t.Fatalf("b EndReason %q LeftAt %v QueueWait %v", r.EndReason, r.LeftAt, r.QueueWait())
		}
		a.send(map[string]any{"type": "session.close", "reason": "user_stop"})
		a.readUntilClose()
		c := dial(t, s, "mode=audio")
		c.handshake(Current, "audio")
		if s.Jammed() {
			t.Fatal("jammed")
		}
	})
}
