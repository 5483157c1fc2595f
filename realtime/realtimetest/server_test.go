package realtimetest

import (
	"context"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func TestNotFound(t *testing.T) {
	s := newSrv(t, Options{})
	for _, path := range []string{"/", "/v1/realtime/x", "/v2/realtime"} {
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 404", path, resp.StatusCode)
		}
	}
	if !strings.HasPrefix(s.URL(), "ws://127.0.0.1:") || !strings.HasSuffix(s.URL(), "/v1/realtime") {
		t.Errorf("URL() = %q", s.URL())
	}
}

func TestListenErrors(t *testing.T) {
	if _, err := Listen("127.0.0.1:0", Options{Dialect: "klingon"}); err == nil || !strings.Contains(err.Error(), "klingon") {
		t.Errorf("bad dialect: err = %v", err)
	}
	if _, err := Listen("127.0.0.1:0", Options{Faults: []Fault{{Kind: "explode"}}}); err == nil {
		t.Error("bad fault: no error")
	}
	if _, err := Listen("256.0.0.1:1", Options{}); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("bad addr: err = %v", err)
	}
	for _, d := range []Dialect{Current, Legacy, OpenVoice} {
		if got, err := ParseDialect(string(d)); got != d || err != nil {
			t.Errorf("ParseDialect(%q) = %q, %v", d, got, err)
		}
	}
	if _, err := ParseDialect("v2"); err == nil {
		t.Error("ParseDialect(v2): no error")
	}
	s := newSrv(t, Options{})
	s.AddFault(Fault{Kind: "explode"}) // logged and ignored
	c := dial(t, s, "")
	c.handshake(Current, "video")
}

func TestModes(t *testing.T) {
	tests := []struct {
		name      string
		opts      Options
		query     string
		wantCode  int    // 0: session works
		wantMode  string // recorded public mode
		wantError bool   // an error event precedes the close
	}{
		{"current default video", Options{}, "", 0, "video", false},
		{"current audio", Options{}, "mode=audio", 0, "audio", false},
		{"current chat", Options{}, "mode=chat", 0, "chat", false},
		{"current unknown mode", Options{}, "mode=karaoke", websocket.ClosePolicyViolation, "karaoke", false},
		{"current chat disabled", Options{ChatDisabled: true}, "mode=chat", websocket.ClosePolicyViolation, "chat", false},
		{"legacy video", Options{Dialect: Legacy}, "mode=video", 0, "video", false},
		{"legacy chat is audio", Options{Dialect: Legacy}, "mode=chat", 0, "audio", false},
		{"legacy unknown is audio", Options{Dialect: Legacy}, "mode=karaoke", 0, "audio", false},
		{"openvoice missing model", Options{Dialect: OpenVoice}, "", websocket.ClosePolicyViolation, "openvoice", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSrv(t, tt.opts)
			c := dial(t, s, tt.query)
			if tt.wantCode == 0 {
				c.expect("session.queue_done")
				c.send(initMsgFor(s.opts.Dialect, tt.wantMode, "hi"))
				c.expect("session.created")
			} else {
				if tt.wantError {
					m := c.expect("error")
					if m.M["recoverable"] != false || !strings.Contains(m.str("message"), "model") {
						t.Errorf("error = %s", m.Raw)
					}
				}
				code, text := c.closeCode()
				if code != tt.wantCode || text == "" {
					t.Errorf("close %d %q, want %d with a reason", code, text, tt.wantCode)
				}
				r := waitEnded(t, s, 0)
				if !strings.HasPrefix(r.EndReason, "refused: ") || len(r.Rejections) != 1 {
					t.Errorf("EndReason %q Rejections %q", r.EndReason, r.Rejections)
				}
			}
			if got := s.Sessions()[0].Mode; got != tt.wantMode {
				t.Errorf("Mode = %q, want %q", got, tt.wantMode)
			}
		})
	}
}

func TestCreatedCurrent(t *testing.T) {
	s := newSrv(t, Options{Workers: 3})
	for _, mode := range []string{"video", "audio", "chat"} {
		c := dial(t, s, "mode="+mode)
		m := c.handshake(Current, mode)
		if !regexp.MustCompile(`^sess_[0-9a-f]{12}$`).MatchString(m.str("session_id")) {
			t.Errorf("session_id %q", m.str("session_id"))
		}
		want := "full_duplex"
		if mode == "chat" {
			want = "turn_based"
		}
		if m.str("mode") != want {
			t.Errorf("mode=%s: created.mode %q, want %q", mode, m.str("mode"), want)
		}
		if _, ok := m.M["metrics"].(map[string]any); !ok {
			t.Errorf("metrics missing: %s", m.Raw)
		}
		if ts := m.num("server_send_ts"); ts < 1e9 || ts > 1e11 {
			t.Errorf("server_send_ts %v is not float seconds", ts)
		}
		c.ws.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	if err := s.WaitSessions(ctx, 3); err != nil {
		t.Fatal(err)
	}
	recs := s.Sessions()
	for i, r := range recs {
		if r.Index != i || r.ID == "" || r.Init.Type != "session.init" || r.CreatedAt.IsZero() || r.AssignedAt.IsZero() {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	if recs[0].Init.Instructions != "You are a test." || recs[0].Init.ForceListenCount != 3 {
		t.Errorf("Init = %+v", recs[0].Init)
	}
}

func TestCreatedLegacy(t *testing.T) {
	s := newSrv(t, Options{Dialect: Legacy})
	c := dial(t, s, "mode=video")
	c.expect("session.queue_done")
	c.send(map[string]any{"type": "session.update", "session": map[string]any{
		"instructions": strings.Repeat("x", 400), "max_slice_nums": 4,
		"ref_audio": f32b64(tone(0.5, 0.2)), "tts_ref_audio": f32b64(tone(0.25, 0.2))}})
	m := c.expect("session.created")
	if !regexp.MustCompile(`^rt_\d{13}$`).MatchString(m.str("session_id")) {
		t.Errorf("session_id %q", m.str("session_id"))
	}
	if m.num("prompt_length") != 100 {
		t.Errorf("prompt_length %v, want 100", m.M["prompt_length"])
	}
	in := s.Sessions()[0].Init
	if in.RefAudioSamples != 8000 || in.TTSRefAudioSamples != 4000 || in.MaxSliceNums != 4 || in.Type != "session.update" {
		t.Errorf("Init = %+v", in)
	}
}

func TestCurrentInitRecord(t *testing.T) {
	s := newSrv(t, Options{})
	c := dial(t, s, "mode=audio")
	c.expect("session.queue_done")
	c.send(map[string]any{"type": "session.init", "payload": map[string]any{
		"instructions": "alias", "config": map[string]any{"length_penalty": 1.1, "force_listen_count": 1, "nested": []any{map[string]any{"a": 1}}},
		"voice": map[string]any{"ref_audio_base64": f32b64(tone(1, 0.1)), "tts_ref_audio_base64": f32b64(tone(0.5, 0.1))}}})
	c.expect("session.created")
	r := s.Sessions()[0]
	if r.Init.Instructions != "alias" || r.Init.RefAudioSamples != 16000 || r.Init.TTSRefAudioSamples != 8000 || r.Init.ForceListenCount != 1 {
		t.Errorf("Init = %+v", r.Init)
	}
	if r.Init.Config["length_penalty"] != 1.1 {
		t.Errorf("Config = %v", r.Init.Config)
	}
	// deep copy: changing the snapshot changes nothing in the server
	r.Init.Config["nested"].([]any)[0].(map[string]any)["a"] = 2.0
	r.Received[0] = "changed"
	r2 := s.Sessions()[0]
	if r2.Init.Config["nested"].([]any)[0].(map[string]any)["a"] != 1.0 || r2.Received[0] != "session.init" {
		t.Errorf("Sessions() is not a deep copy: %v %v", r2.Init.Config, r2.Received)
	}
	// config.force_listen_count=1: the second chunk can already answer
	c.send(appendFor(Current, tone(1, 0.3), nil, nil))
	c.stepMsgs(Current)
	c.send(appendFor(Current, silence(1), nil, nil))
	got := c.stepMsgs(Current)
	if got[0].str("kind") != "text" {
		t.Errorf("second chunk after speech: %s, want a text delta", got[0].Raw)
	}
}

func TestQueue(t *testing.T) {
	s := newSrv(t, Options{Workers: 1, MaxQueue: 2, QueueUpdateInterval: 50 * time.Millisecond})
	a := dial(t, s, "mode=audio")
	a.expect("session.queue_done")
	b := dial(t, s, "mode=audio")
	q := b.expect("session.queued")
	if q.num("position") != 1 || q.num("queue_length") != 1 || q.num("estimated_wait_s") <= 0 ||
		!regexp.MustCompile(`^q_[0-9a-f]{12}$`).MatchString(q.str("ticket_id")) {
		t.Errorf("queued = %s", q.Raw)
	}
	cc := dial(t, s, "mode=audio")
	if q := cc.expect("session.queued"); q.num("position") != 2 || q.num("queue_length") != 2 {
		t.Errorf("queued = %s", q.Raw)
	}
	// the queue is full: error{queue_full} then 1013
	d := dial(t, s, "mode=audio")
	e := d.expect("error")
	if em, _ := e.M["error"].(map[string]any); em["code"] != "queue_full" || em["type"] != "server_error" || em["message"] == "" {
		t.Errorf("error = %s", e.Raw)
	}
	if code, _ := d.closeCode(); code != websocket.CloseTryAgainLater {
		t.Errorf("queue full close code %d, want 1013", code)
	}
	// periodic updates while waiting
	u := b.expect("session.queue_update")
	if u.num("position") != 1 || u.M["ticket_id"] != nil {
		t.Errorf("queue_update = %s", u.Raw)
	}
	// a frees its worker: b is assigned, c moves to position 1 at once
	a.send(map[string]any{"type": "session.close", "reason": "user_stop"})
	for {
		m := b.next()
		if m.typ() == "session.queue_done" {
			break
		}
		if m.typ() != "session.queue_update" {
			t.Fatalf("b got %s while waiting", m.Raw)
		}
	}
	for {
		m := cc.next()
		if m.typ() == "session.queue_update" && m.num("position") == 1 {
			break
		}
		if m.typ() != "session.queue_update" || m.num("position") != 2 {
			t.Fatalf("c got %s", m.Raw)
		}
	}
	b.handshake2()
	b.ws.Close() // b leaves without session.close: c gets the worker
	for {
		m := cc.next()
		if m.typ() == "session.queue_done" {
			break
		}
		if m.typ() != "session.queue_update" {
			t.Fatalf("c got %s", m.Raw)
		}
	}
	cc.send(initMsgFor(Current, "audio", "x"))
	cc.expect("session.created")

	recs := s.Sessions()
	if len(recs[1].QueuedPositions) < 2 || recs[1].QueuedPositions[0] != 1 || recs[1].AssignedAt.IsZero() {
		t.Errorf("b QueuedPositions %v AssignedAt %v", recs[1].QueuedPositions, recs[1].AssignedAt)
	}
	if p := recs[2].QueuedPositions; p[0] != 2 || p[len(p)-1] != 1 {
		t.Errorf("c QueuedPositions %v", p)
	}
	if r := waitEnded(t, s, 3); r.EndReason != "queue_full" || !r.AssignedAt.IsZero() {
		t.Errorf("d EndReason %q", r.EndReason)
	}
	if r := waitEnded(t, s, 1); r.EndReason != "client_gone" {
		t.Errorf("b EndReason %q", r.EndReason)
	}
}

// handshake2 finishes a handshake after session.queue_done was already read.
func (c *client) handshake2() {
	c.t.Helper()
	c.send(initMsgFor(Current, "audio", "x"))
	c.expect("session.created")
}

func TestQueueNoWaiting(t *testing.T) {
	s := newSrv(t, Options{MaxQueue: -1})
	a := dial(t, s, "")
	a.expect("session.queue_done")
	b := dial(t, s, "")
	b.expect("error")
	if code, _ := b.closeCode(); code != websocket.CloseTryAgainLater {
		t.Errorf("close %d, want 1013", code)
	}
}

func TestQueueLeaveWhileWaiting(t *testing.T) {
	s := newSrv(t, Options{QueueUpdateInterval: time.Hour})
	a := dial(t, s, "")
	a.expect("session.queue_done")
	b := dial(t, s, "")
	b.expect("session.queued")
	c := dial(t, s, "")
	c.expect("session.queued")
	b.ws.Close()
	if u := c.expect("session.queue_update"); u.num("position") != 1 || u.num("queue_length") != 1 {
		t.Errorf("after b left: %s", u.Raw)
	}
	a.ws.Close()
	c.expect("session.queue_done")
}

func TestMessageWhileQueued(t *testing.T) {
	s := newSrv(t, Options{QueueUpdateInterval: time.Hour})
	a := dial(t, s, "")
	a.expect("session.queue_done")
	b := dial(t, s, "")
	b.expect("session.queued")
	b.send(initMsgFor(Current, "video", "eager"))
	m := b.expect("session.closed")
	if m.str("reason") != "backend_error" || !strings.Contains(diag(m), "before session.queue_done") {
		t.Errorf("closed = %s", m.Raw)
	}
	b.closeCode()
	r := waitEnded(t, s, 1)
	if !hasRejection(r, "session.init sent before session.queue_done") {
		t.Errorf("Rejections %q", r.Rejections)
	}
	// the worker is still a's; a third client waits at position 1
	c := dial(t, s, "")
	if q := c.expect("session.queued"); q.num("position") != 1 {
		t.Errorf("queued %s", q.Raw)
	}
}

func diag(m msg) string {
	d, _ := m.M["diagnostic"].(map[string]any)
	s, _ := d["message"].(string)
	return s
}

func TestCloseEcho(t *testing.T) {
	for _, d := range []Dialect{Current, Legacy} {
		t.Run(string(d), func(t *testing.T) {
			s := newSrv(t, Options{Dialect: d})
			c := dial(t, s, "mode=audio")
			created := c.handshake(d, "audio")
			c.send(map[string]any{"type": "session.close", "reason": "user_stop"})
			msgs, code := c.readUntilClose()
			want := 1
			if d == Legacy {
				want = 2
			}
			if len(msgs) != want {
				t.Fatalf("got %d messages, want %d session.closed", len(msgs), want)
			}
			for _, m := range msgs {
				if m.typ() != "session.closed" || m.str("reason") != "user_stop" || m.str("session_id") != created.str("session_id") {
					t.Errorf("got %s", m.Raw)
				}
			}
			if code != websocket.CloseNormalClosure {
				t.Errorf("close code %d", code)
			}
			r := waitEnded(t, s, 0)
			if r.CloseReason != "user_stop" || r.EndReason != "user_stop" || len(r.Rejections) != 0 {
				t.Errorf("CloseReason %q EndReason %q Rejections %q", r.CloseReason, r.EndReason, r.Rejections)
			}
		})
	}
}

func TestTimeLimit(t *testing.T) {
	for _, d := range []Dialect{Current, Legacy} {
		for _, mode := range []string{"video", "audio"} {
			t.Run(string(d)+"/"+mode, func(t *testing.T) {
				opts := Options{Dialect: d, VideoLimit: time.Hour, AudioLimit: time.Hour}
				if mode == "video" {
					opts.VideoLimit = 150 * time.Millisecond
				} else {
					opts.AudioLimit = 150 * time.Millisecond
				}
				s := newSrv(t, opts)
				c := dial(t, s, "mode="+mode)
				c.handshake(d, mode)
				for {
					c.send(appendFor(d, silence(0.25), nil, nil))
					m := c.next()
					if m.typ() == "session.closed" {
						if m.str("reason") != "timeout" {
							t.Errorf("closed %s", m.Raw)
						}
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				c.closeCode()
				r := waitEnded(t, s, 0)
				if r.EndReason != "timeout" || r.EndedAt.Sub(r.AssignedAt) < 150*time.Millisecond {
					t.Errorf("EndReason %q after %v", r.EndReason, r.EndedAt.Sub(r.AssignedAt))
				}
			})
		}
	}
}

func TestContextFullLegacy(t *testing.T) {
	// instructions 40 chars = kv 10; 25/s audio: 10+25+25+25 = 85, +25 = 110 >= 100
	newSess := func(t *testing.T) (*Server, *client) {
		s := newSrv(t, Options{Dialect: Legacy, ContextLimit: 100})
		c := dial(t, s, "mode=audio")
		c.expect("session.queue_done")
		c.send(initMsgFor(Legacy, "audio", strings.Repeat("x", 40)))
		c.expect("session.created")
		for i := range 3 {
			c.send(appendFor(Legacy, silence(1), nil, nil))
			if m := c.expect("response.listen"); m.kv() != 10+25*(i+1) {
				t.Errorf("kv %d, want %d", m.kv(), 10+25*(i+1))
			}
		}
		c.send(appendFor(Legacy, silence(1), nil, nil))
		if m := c.expect("response.listen"); m.kv() != 110 {
			t.Errorf("kv %d", m.kv())
		}
		if m := c.expect("session.closed"); m.str("reason") != "context_full" {
			t.Errorf("closed %s", m.Raw)
		}
		// the socket stays open: nothing more arrives, and pings still get answered
		_ = c.ws.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, _, err := c.ws.ReadMessage(); err == nil {
			t.Fatal("message after context_full")
		} else if !strings.Contains(err.Error(), "timeout") {
			t.Fatalf("socket closed after context_full: %v", err)
		}
		return s, c
	}
	t.Run("socket stays open", func(t *testing.T) {
		s, c := newSess(t)
		r := s.Sessions()[0]
		if !r.EndedAt.IsZero() || r.KVCacheLength != 110 {
			t.Errorf("session ended (%q) or kv %d", r.EndReason, r.KVCacheLength)
		}
		c.ws.Close() // the client must close
		if r := waitEnded(t, s, 0); r.EndReason != "context_full" {
			t.Errorf("EndReason %q", r.EndReason)
		}
	})
	t.Run("session.close answered", func(t *testing.T) {
		s := newSrv(t, Options{Dialect: Legacy, ContextLimit: 30})
		c := dial(t, s, "mode=audio")
		c.handshake(Legacy, "audio") // kv 3 +25 = 28, +25 = 53
		c.send(appendFor(Legacy, silence(1), nil, nil))
		c.expect("response.listen")
		c.send(appendFor(Legacy, silence(1), nil, nil))
		c.expect("response.listen")
		c.expect("session.closed")
		c.send(map[string]any{"type": "session.close", "reason": "rollover"})
		msgs, code := c.readUntilClose()
		if len(msgs) != 2 || msgs[0].str("reason") != "rollover" || code != websocket.CloseNormalClosure {
			t.Errorf("after session.close: %d msgs, code %d", len(msgs), code)
		}
		if r := waitEnded(t, s, 0); r.EndReason != "context_full" || r.CloseReason != "rollover" || len(r.Rejections) != 0 {
			t.Errorf("EndReason %q CloseReason %q Rejections %q", r.EndReason, r.CloseReason, r.Rejections)
		}
	})
	t.Run("input in flight is ignored", func(t *testing.T) {
		s := newSrv(t, Options{Dialect: Legacy, ContextLimit: 30})
		c := dial(t, s, "mode=audio")
		c.handshake(Legacy, "audio")
		for range 2 {
			c.send(appendFor(Legacy, silence(1), nil, nil))
			c.expect("response.listen")
		}
		c.expect("session.closed")
		c.send(appendFor(Legacy, silence(1), nil, nil))
		c.send(map[string]any{"type": "session.close", "reason": "user_stop"})
		c.expect("session.closed")
		if r := waitEnded(t, s, 0); len(r.Rejections) != 0 || r.IgnoredAfterClose != 1 {
			t.Errorf("Rejections %q ignored %d", r.Rejections, r.IgnoredAfterClose)
		}
	})
	t.Run("more input is a violation", func(t *testing.T) {
		s := newSrv(t, Options{Dialect: Legacy, ContextLimit: 30, InFlightGrace: -1})
		c := dial(t, s, "mode=audio")
		c.handshake(Legacy, "audio")
		for range 2 {
			c.send(appendFor(Legacy, silence(1), nil, nil))
			c.expect("response.listen")
		}
		c.expect("session.closed")
		c.send(appendFor(Legacy, silence(1), nil, nil))
		m := c.expect("session.closed")
		if m.str("reason") != "backend_error" || !strings.Contains(diag(m), "context_full") {
			t.Errorf("closed %s", m.Raw)
		}
		c.closeCode()
		if r := waitEnded(t, s, 0); !hasRejection(r, "after session.closed{reason:context_full}") {
			t.Errorf("Rejections %q", r.Rejections)
		}
	})
}

func TestContextCapCurrent(t *testing.T) {
	s := newSrv(t, Options{ContextLimit: 60, NoExtraEvents: true})
	c := dial(t, s, "mode=audio")
	c.handshake(Current, "audio")
	for i := range 5 {
		c.send(appendFor(Current, silence(1), nil, nil))
		m := c.expectDelta("listen")
		// "You are a test." is 15 characters: kv starts at 3
		if want := min(3+25*(i+1), 60); m.kv() != want {
			t.Errorf("step %d: kv %d, want %d", i+1, m.kv(), want)
		}
	}
	r := s.Sessions()[0]
	if !r.EndedAt.IsZero() || r.KVCacheLength != 60 {
		t.Errorf("ended %v kv %d", r.EndedAt, r.KVCacheLength)
	}
}

func TestPingAndDeadClient(t *testing.T) {
	s := newSrv(t, Options{PingInterval: 25 * time.Millisecond, PongTimeout: 300 * time.Millisecond})
	// a client that reads gets pings and answers them (gorilla answers in its read loop)
	c := dial(t, s, "")
	pings := make(chan struct{}, 100)
	c.ws.SetPingHandler(func(d string) error {
		pings <- struct{}{}
		return c.ws.WriteControl(websocket.PongMessage, []byte(d), time.Now().Add(time.Second))
	})
	pongs := make(chan struct{}, 10)
	c.ws.SetPongHandler(func(string) error { pongs <- struct{}{}; return nil })
	c.expect("session.queue_done")
	if err := c.ws.WriteControl(websocket.PingMessage, []byte("hi"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, _, err := c.ws.ReadMessage(); err != nil {
				return
			}
		}
	}()
	deadline := time.After(ioTimeout)
	for n := 0; n < 16; n++ { // 16 pings = 400 ms: longer than the dead timeout
		select {
		case <-pings:
		case <-deadline:
			t.Fatal("no pings from the server")
		}
	}
	select {
	case <-pongs:
	case <-deadline:
		t.Fatal("the server did not answer the client's ping")
	}
	if r := s.Sessions()[0]; !r.EndedAt.IsZero() {
		t.Fatalf("a responsive client was dropped: %s", r.EndReason)
	}

	// a client that never reads never answers pings: dropped
	d := dial(t, s, "")
	_ = d
	r := waitEnded(t, s, 1)
	if r.EndReason != "ping_timeout" {
		t.Errorf("EndReason %q, want ping_timeout", r.EndReason)
	}
}

func TestReadLimit(t *testing.T) {
	s := newSrv(t, Options{ReadLimit: 1000})
	c := dial(t, s, "")
	c.expect("session.queue_done")
	c.sendText([]byte(`{"type":"session.init","payload":{"system_prompt":"` + strings.Repeat("x", 2000) + `"}}`))
	if code, _ := c.closeCode(); code != websocket.CloseMessageTooBig {
		t.Errorf("close %d, want 1009", code)
	}
	if r := waitEnded(t, s, 0); !strings.Contains(r.EndReason, "read limit") || len(r.Rejections) != 1 {
		t.Errorf("EndReason %q Rejections %q", r.EndReason, r.Rejections)
	}
}

func TestWaitSessionsContext(t *testing.T) {
	s := newSrv(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.WaitSessions(ctx, 1); err == nil || !strings.Contains(err.Error(), "have 0") {
		t.Errorf("err = %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.WaitSessions(context.Background(), 2) }()
	dial(t, s, "")
	dial(t, s, "")
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(ioTimeout):
		t.Fatal("WaitSessions did not return")
	}
}

func TestCloseStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	s := NewServer(Options{Workers: 1, QueueUpdateInterval: 10 * time.Millisecond, PingInterval: 10 * time.Millisecond,
		Faults: []Fault{{Kind: FaultStall, AfterAppends: 1, Count: 1}}})
	stalled := dial(t, s, "mode=audio")
	stalled.handshake(Current, "audio")
	stalled.send(appendFor(Current, silence(1), nil, nil))
	queued := dial(t, s, "")
	// the server's pings queue up unread; answering a stale one after the server has
	// gone would fail the read before the close frame is reached
	queued.ws.SetPingHandler(func(string) error { return nil })
	queued.expect("session.queued")
	ov := dial(t, s, "mode=chat") // queued as well
	_ = ov
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	if err := s.WaitSessions(ctx, 3); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	s.Close() // idempotent
	for _, r := range s.Sessions() {
		if r.EndedAt.IsZero() {
			t.Errorf("session %d not ended", r.Index)
		}
	}
	if code, txt := queued.closeCode(); code != websocket.CloseGoingAway {
		t.Errorf("queued client got close %d %s, want 1001", code, txt)
	}
	stalled.ws.Close()
	queued.ws.Close()
	ov.ws.Close()
	// all goroutines of the server are gone (allow the test client's to finish)
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before+1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+1 {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines: %d before, %d after Close\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
	if _, _, err := websocket.DefaultDialer.Dial(s.URL(), nil); err == nil {
		t.Error("dial after Close succeeded")
	}
}
