package realtimetest

import (
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func TestParseFault(t *testing.T) {
	tests := []struct {
		in      string
		want    Fault
		wantErr string
	}{
		{in: "drop", want: Fault{Kind: FaultDrop}},
		{in: "stall:after=3", want: Fault{Kind: FaultStall, AfterAppends: 3}},
		{in: "close:reason=timeout,after=2", want: Fault{Kind: FaultClose, Reason: "timeout", AfterAppends: 2}},
		{in: "refuse:count=2,code=queue_full", want: Fault{Kind: FaultRefuse, Count: 2, Code: "queue_full"}},
		{in: "oversize:size=20000000", want: Fault{Kind: FaultOversize, Size: 20000000}},
		{in: " invalid-json : after = 1 ", want: Fault{Kind: FaultInvalidJSON, AfterAppends: 1}},
		{in: "bad-delta:after=0,count=1", want: Fault{Kind: FaultBadDelta, Count: 1}},
		{in: "", wantErr: "missing kind"},
		{in: "explode", wantErr: `fault kind "explode" is unknown`},
		{in: "drop:", wantErr: "nothing after ':'"},
		{in: "drop:after", wantErr: "is not key=value"},
		{in: "drop:after=x", wantErr: `after="x" is not a non-negative integer`},
		{in: "drop:after=-1", wantErr: "not a non-negative integer"},
		{in: "drop:when=3", wantErr: `unknown key "when"`},
		{in: "drop:after=1,after=2", wantErr: "given twice"},
		{in: "drop:reason=x", wantErr: "reason applies only to close"},
		{in: "close:code=x", wantErr: "code applies only to refuse and error"},
		{in: "error:code=session_failed,after=2", want: Fault{Kind: FaultError, Code: "session_failed", AfterAppends: 2}},
		{in: "stall:size=5", wantErr: "size applies only to oversize"},
		{in: "close:reason=", wantErr: "empty reason"},
		{in: "close:reason=timeout,delay=100ms", want: Fault{Kind: FaultClose, Reason: "timeout", Delay: 100 * time.Millisecond}},
		{in: "close:keep-open=true,after=2", want: Fault{Kind: FaultClose, KeepOpen: true, AfterAppends: 2}},
		{in: "backend-error:count=3", want: Fault{Kind: FaultBackendError, Count: 3}},
		{in: "stall-init", want: Fault{Kind: FaultStallInit}},
		{in: "drop:delay=1s,after=1", want: Fault{Kind: FaultDrop, Delay: time.Second, AfterAppends: 1}},
		{in: "close:delay=soon", wantErr: `delay="soon" is not a non-negative duration`},
		{in: "close:delay=-1s", wantErr: "not a non-negative duration"},
		{in: "close:keep-open=maybe", wantErr: "is not true or false"},
		{in: "drop:keep-open=true", wantErr: "keep-open applies only to close"},
		{in: "backend-error:after=1", wantErr: "acts at connect"},
		{in: "stall-init:delay=1s", wantErr: "acts at connect"},
	}
	for _, tt := range tests {
		got, err := ParseFault(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseFault(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		if back, err := ParseFault(got.String()); err != nil || back != got {
			t.Errorf("ParseFault(%q.String() = %q) = %+v, %v", tt.in, got.String(), back, err)
		}
	}
}

// abnormal reports whether err is a TCP close without a WebSocket close frame.
func abnormal(err error) bool {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code == websocket.CloseAbnormalClosure
	}
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestFaultDrop(t *testing.T) {
	for _, d := range []Dialect{Current, Legacy} {
		for _, after := range []int{0, 2} {
			s := newSrv(t, Options{Dialect: d, Faults: []Fault{{Kind: FaultDrop, AfterAppends: after}}})
			c := dial(t, s, "mode=audio")
			c.handshake(d, "audio")
			for range after {
				c.send(appendFor(d, silence(0.5), nil, nil))
				c.stepMsgs(d)
			}
			if _, err := c.read(); !abnormal(err) {
				t.Errorf("%s after=%d: read err %v, want an abrupt close", d, after, err)
			}
			if r := waitEnded(t, s, 0); r.EndReason != "fault: drop" || len(r.Appends) != after {
				t.Errorf("%s after=%d: EndReason %q Appends %d", d, after, r.EndReason, len(r.Appends))
			}
		}
	}
}

func TestFaultStall(t *testing.T) {
	s := newSrv(t, Options{PingInterval: 20 * time.Millisecond, PongTimeout: 150 * time.Millisecond,
		Faults: []Fault{{Kind: FaultStall, AfterAppends: 1}}})
	c := dial(t, s, "mode=audio")
	c.handshake(Current, "audio")
	c.send(appendFor(Current, silence(0.5), nil, nil))
	c.stepMsgs(Current)
	time.Sleep(50 * time.Millisecond) // let the writer reach the stall
	pings, pongs := make(chan struct{}, 100), make(chan struct{}, 100)
	c.ws.SetPingHandler(func(string) error { pings <- struct{}{}; return nil })
	c.ws.SetPongHandler(func(string) error { pongs <- struct{}{}; return nil })
	c.send(appendFor(Current, silence(0.5), nil, nil))
	if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(400 * time.Millisecond)) // 400 ms > PingInterval+PongTimeout
	_, _, err := c.ws.ReadMessage()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read during stall: %v, want a timeout (nothing sent, connection open)", err)
	}
	if len(pings) > 1 || len(pongs) != 0 {
		t.Errorf("during the stall: %d pings, %d pongs", len(pings), len(pongs))
	}
	r := s.Sessions()[0]
	if !r.EndedAt.IsZero() || len(r.Appends) != 1 {
		t.Errorf("stalled session ended (%q) or kept processing (%d appends)", r.EndReason, len(r.Appends))
	}
	c.ws.Close() // the client gives up
	if r := waitEnded(t, s, 0); r.EndReason != "fault: stall" {
		t.Errorf("EndReason %q", r.EndReason)
	}
}

func TestFaultCarryOn(t *testing.T) {
	tests := []struct {
		name  string
		d     Dialect
		fault Fault
		check func(t *testing.T, m msg)
	}{
		{"invalid-json current", Current, Fault{Kind: FaultInvalidJSON, AfterAppends: 1}, func(t *testing.T, m msg) {
			if m.Binary || json.Valid(m.Raw) {
				t.Errorf("got valid JSON %s", m.Raw)
			}
		}},
		{"invalid-json legacy", Legacy, Fault{Kind: FaultInvalidJSON, AfterAppends: 1}, func(t *testing.T, m msg) {
			if json.Valid(m.Raw) {
				t.Errorf("got valid JSON %s", m.Raw)
			}
		}},
		{"oversize", Current, Fault{Kind: FaultOversize, AfterAppends: 1, Size: 100000}, func(t *testing.T, m msg) {
			if len(m.Raw) != 100000 || !json.Valid(m.Raw) || m.typ() != "response.output.delta" || m.str("kind") != "x_oversize" {
				t.Errorf("got %d bytes %.80s", len(m.Raw), m.Raw)
			}
		}},
		{"oversize legacy", Legacy, Fault{Kind: FaultOversize, AfterAppends: 1, Size: 50000}, func(t *testing.T, m msg) {
			if len(m.Raw) != 50000 || !json.Valid(m.Raw) || m.typ() != "x.oversize" {
				t.Errorf("got %d bytes %.80s", len(m.Raw), m.Raw)
			}
		}},
		{"bad-delta current", Current, Fault{Kind: FaultBadDelta, AfterAppends: 1}, func(t *testing.T, m msg) {
			if m.str("kind") != "audio" {
				t.Fatalf("got %s", m.Raw)
			}
			if _, err := decodeFloat32("audio", m.str("audio"), 0); err == nil {
				t.Errorf("audio %q decodes", m.str("audio"))
			}
		}},
		{"bad-delta legacy", Legacy, Fault{Kind: FaultBadDelta, AfterAppends: 1}, func(t *testing.T, m msg) {
			if m.typ() != "response.output_audio.delta" {
				t.Fatalf("got %s", m.Raw)
			}
			if _, err := decodeFloat32("audio", m.str("audio"), 0); err == nil {
				t.Errorf("audio %q decodes", m.str("audio"))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSrv(t, Options{Dialect: tt.d, NoExtraEvents: true, Faults: []Fault{tt.fault}})
			c := dial(t, s, "mode=audio")
			c.handshake(tt.d, "audio")
			c.send(appendFor(tt.d, silence(0.5), nil, nil))
			c.next() // the step's listen
			tt.check(t, c.next())
			for range 2 { // carries on normally, and fires once per session
				c.send(appendFor(tt.d, silence(0.5), nil, nil))
				if m := c.next(); m.typ() != "response.listen" && m.str("kind") != "listen" {
					t.Fatalf("after the fault: %.100s", m.Raw)
				}
			}
			if r := s.Sessions()[0]; !r.EndedAt.IsZero() || len(r.Rejections) != 0 {
				t.Errorf("EndReason %q Rejections %q", r.EndReason, r.Rejections)
			}
		})
	}
}

func TestOversizeFrame(t *testing.T) {
	for _, d := range []Dialect{Current, Legacy, OpenVoice} {
		for _, size := range []int{1, 100, 1000} {
			b := oversizeFrame(d, size)
			if !json.Valid(b) || size >= 100 && len(b) != size {
				t.Errorf("%s size %d: %d bytes, valid %v", d, size, len(b), json.Valid(b))
			}
		}
	}
	if b := oversizeFrame(Current, 0); len(b) != DefaultOversize || !strings.HasSuffix(string(b), `aaa"}`) {
		t.Errorf("default oversize: %d bytes", len(b))
	}
}

func TestFaultClose(t *testing.T) {
	t.Run("current default reason", func(t *testing.T) {
		s := newSrv(t, Options{Faults: []Fault{{Kind: FaultClose}}})
		c := dial(t, s, "mode=audio")
		c.handshake(Current, "audio")
		msgs, code := c.readUntilClose()
		if len(msgs) != 1 || msgs[0].str("reason") != "backend_error" || code != websocket.CloseNormalClosure {
			t.Errorf("%d msgs, code %d", len(msgs), code)
		}
		if r := waitEnded(t, s, 0); r.EndReason != "fault: close" {
			t.Errorf("EndReason %q", r.EndReason)
		}
	})
	t.Run("legacy timeout", func(t *testing.T) {
		s := newSrv(t, Options{Dialect: Legacy, Faults: []Fault{{Kind: FaultClose, Reason: "timeout", AfterAppends: 2}}})
		c := dial(t, s, "mode=video")
		c.handshake(Legacy, "video")
		for range 2 {
			c.send(appendFor(Legacy, silence(0.5), nil, nil))
			c.expect("response.listen")
		}
		if m := c.expect("session.closed"); m.str("reason") != "timeout" {
			t.Errorf("closed %s", m.Raw)
		}
		c.closeCode()
	})
	t.Run("legacy context_full keeps the socket", func(t *testing.T) {
		s := newSrv(t, Options{Dialect: Legacy, Faults: []Fault{{Kind: FaultClose, Reason: "context_full", AfterAppends: 1}}})
		c := dial(t, s, "mode=audio")
		c.handshake(Legacy, "audio")
		c.send(appendFor(Legacy, silence(0.5), nil, nil))
		c.expect("response.listen")
		c.expect("session.closed")
		c.send(map[string]any{"type": "session.close", "reason": "user_stop"})
		msgs, code := c.readUntilClose()
		if len(msgs) != 2 || msgs[0].str("reason") != "user_stop" || code != websocket.CloseNormalClosure {
			t.Errorf("%d msgs, code %d", len(msgs), code)
		}
	})
	t.Run("chat after one turn", func(t *testing.T) {
		s := newSrv(t, Options{Faults: []Fault{{Kind: FaultClose, Reason: "backend_error", AfterAppends: 1}}})
		c := dial(t, s, "mode=chat")
		c.handshake(Current, "chat")
		c.send(chatAppend(false, false, say("user", "hi")))
		c.expect("response.done")
		c.expect("session.closed")
		c.closeCode()
	})
}

func TestFaultRefuse(t *testing.T) {
	s := newSrv(t, Options{Faults: []Fault{{Kind: FaultRefuse, Count: 2, Code: "queue_full"}}})
	for i := range 2 {
		c := dial(t, s, "")
		m := c.expect("error")
		if e, _ := m.M["error"].(map[string]any); e["code"] != "queue_full" || e["type"] != "server_error" {
			t.Errorf("connection %d: %s", i, m.Raw)
		}
		if code, _ := c.closeCode(); code != websocket.CloseTryAgainLater {
			t.Errorf("close %d, want 1013", code)
		}
	}
	c := dial(t, s, "")
	c.handshake(Current, "video") // count=2 is spent
	if r := waitEnded(t, s, 0); r.EndReason != "fault: refuse" {
		t.Errorf("EndReason %q", r.EndReason)
	}

	s = newSrv(t, Options{Dialect: OpenVoice, Faults: []Fault{{Kind: FaultRefuse}}})
	c = dial(t, s, "model=m")
	if m := c.expect("error"); m.M["recoverable"] != false || !strings.Contains(m.str("message"), "worker_busy") {
		t.Errorf("openvoice refuse: %s", m.Raw)
	}
	if code, _ := c.closeCode(); code != websocket.CloseTryAgainLater {
		t.Errorf("close %d", code)
	}
}

func TestFaultCountAndRuntime(t *testing.T) {
	s := newSrv(t, Options{Dialect: Legacy, Faults: []Fault{{Kind: FaultDrop, AfterAppends: 1, Count: 1}}})
	a := dial(t, s, "mode=audio")
	a.handshake(Legacy, "audio")
	a.send(appendFor(Legacy, silence(0.5), nil, nil))
	a.expect("response.listen")
	if _, err := a.read(); !abnormal(err) {
		t.Fatalf("first session: %v", err)
	}
	b := dial(t, s, "mode=audio")
	b.handshake(Legacy, "audio")
	for range 3 {
		b.send(appendFor(Legacy, silence(0.5), nil, nil))
		b.expect("response.listen")
	}
	// armed at run time: past its AfterAppends already, so it fires at once
	s.AddFault(Fault{Kind: FaultClose, Reason: "server_shutdown", AfterAppends: 2})
	if m := b.expect("session.closed"); m.str("reason") != "server_shutdown" {
		t.Errorf("closed %s", m.Raw)
	}
	b.closeCode()
	if r := waitEnded(t, s, 1); r.EndReason != "fault: close" {
		t.Errorf("EndReason %q", r.EndReason)
	}
}

func TestFaultOpenVoice(t *testing.T) {
	t.Run("drop", func(t *testing.T) {
		s, c := dialOV(t, Options{Faults: []Fault{{Kind: FaultDrop, AfterAppends: 2}}})
		c.sendBinary(pcm16(silence(0.1)))
		c.sendBinary(pcm16(silence(0.1)))
		if _, err := c.read(); !abnormal(err) {
			t.Errorf("read: %v", err)
		}
		if r := waitEnded(t, s, 0); r.EndReason != "fault: drop" || len(r.Appends) != 2 {
			t.Errorf("EndReason %q", r.EndReason)
		}
	})
	t.Run("bad-delta", func(t *testing.T) {
		_, c := dialOV(t, Options{Faults: []Fault{{Kind: FaultBadDelta}}})
		if m := c.next(); !m.Binary || len(m.Raw)%2 == 0 {
			t.Errorf("got %v %d bytes, want odd-length binary", m.Binary, len(m.Raw))
		}
	})
	t.Run("close", func(t *testing.T) {
		// As the real server: session.closed, and the socket is left to the client.
		s, c := dialOV(t, Options{Faults: []Fault{{Kind: FaultClose, Reason: "worker_lost"}}})
		if m := c.expect("session.closed"); m.str("reason") != "worker_lost" {
			t.Errorf("closed %s", m.Raw)
		}
		c.pingSilent()
		c.ws.Close()
		if r := waitEnded(t, s, 0); r.EndReason != "fault: close" {
			t.Errorf("EndReason %q", r.EndReason)
		}
	})
}
