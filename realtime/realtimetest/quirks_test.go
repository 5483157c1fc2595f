package realtimetest

import (
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// The current-dialect quirks of real deployments, each on demand.

// speakAndReply sends a second of speech and a second of silence and returns the messages of the
// step that answers (the parrot's text and its first second of audio) and of the next one.
func speakAndReply(c *client) []msg {
	c.t.Helper()
	for _, a := range [][]float32{tone(1, 0.3), silence(1), silence(1)} {
		c.send(appendFor(Current, a, nil, nil))
	}
	c.stepMsgs(Current) // listen while the speech comes in
	return append(c.stepMsgs(Current), c.stepMsgs(Current)...)
}

func TestQuirkDuplexDone(t *testing.T) {
	s := newSrv(t, Options{DuplexDone: true, ForceListenCount: -1})
	c := dial(t, s, "mode=audio")
	c.handshake(Current, "audio")
	var kinds []string
	for _, m := range speakAndReply(c) {
		k := m.typ()
		if m.typ() == "response.output.delta" {
			k = m.str("kind")
		}
		kinds = append(kinds, k)
	}
	// text, the second of audio, then response.done where the PyTorch backend sends an extra listen.
	if got := strings.Join(kinds, ","); got != "text,audio,response.done,listen" {
		t.Fatalf("steps sent %s", got)
	}
}

func TestQuirkTimestampsAndClose(t *testing.T) {
	s := newSrv(t, Options{MillisecondTS: true, DoubleClosed: true, CloseBackendError: true})
	c := dial(t, s, "mode=audio")
	created := c.handshake(Current, "audio")
	if ts := created.num("server_send_ts"); ts < 1e12 || ts != float64(int64(ts)) {
		t.Errorf("server_send_ts %v, want integer milliseconds", created.M["server_send_ts"])
	}
	c.send(map[string]any{"type": "session.close", "reason": "user_stop"})
	msgs, code := c.readUntilClose()
	if len(msgs) != 2 || msgs[0].str("reason") != "backend_error" || msgs[1].str("reason") != "backend_error" || code != websocket.CloseNormalClosure {
		t.Fatalf("%d answers to session.close (%v), close %d: want session.closed{backend_error} twice", len(msgs), msgs, code)
	}
	if r := waitEnded(t, s, 0); r.CloseReason != "user_stop" || len(r.Rejections) != 0 {
		t.Errorf("CloseReason %q Rejections %q", r.CloseReason, r.Rejections)
	}
}

func TestFaultError(t *testing.T) {
	t.Run("inference_failed: the session goes on", func(t *testing.T) {
		for _, d := range []Dialect{Current, Legacy} {
			s := newSrv(t, Options{Dialect: d, Faults: []Fault{{Kind: FaultError, AfterAppends: 1}}})
			c := dial(t, s, "mode=audio")
			c.handshake(d, "audio")
			c.send(appendFor(d, silence(0.5), nil, nil))
			c.stepMsgs(d)
			m := c.expect("error")
			if e, _ := m.M["error"].(map[string]any); e["code"] != "inference_failed" {
				t.Errorf("%s: error %s", d, m.Raw)
			}
			c.send(appendFor(d, silence(0.5), nil, nil))
			c.stepMsgs(d)
			if r := s.Sessions()[0]; !r.EndedAt.IsZero() || len(r.Appends) != 2 {
				t.Errorf("%s: EndReason %q, %d appends", d, r.EndReason, len(r.Appends))
			}
		}
	})
	t.Run("session_failed: the gateway gives up", func(t *testing.T) {
		s := newSrv(t, Options{Faults: []Fault{{Kind: FaultError, Code: "session_failed"}}})
		c := dial(t, s, "mode=audio")
		c.handshake(Current, "audio")
		msgs, code := c.readUntilClose()
		if len(msgs) != 1 || msgs[0].typ() != "error" || code != websocket.CloseInternalServerErr {
			t.Fatalf("%v, close %d", msgs, code)
		}
		if r := waitEnded(t, s, 0); r.EndReason != "fault: error" {
			t.Errorf("EndReason %q", r.EndReason)
		}
	})
	if _, err := Listen("127.0.0.1:0", Options{Dialect: Legacy, Faults: []Fault{{Kind: FaultError, Code: "session_failed"}}}); err == nil {
		t.Error("session_failed on a legacy gateway accepted")
	}
}

func TestSetQuirk(t *testing.T) {
	var o Options
	for _, q := range Quirks {
		if err := o.SetQuirk(q); err != nil {
			t.Fatal(err)
		}
	}
	if !o.DuplexDone || !o.DoubleClosed || !o.MillisecondTS || !o.CloseBackendError {
		t.Fatalf("%+v", o)
	}
	if err := o.SetQuirk("slow"); err == nil || !strings.Contains(err.Error(), "duplex-done") {
		t.Fatalf("unknown quirk: %v", err)
	}
}
