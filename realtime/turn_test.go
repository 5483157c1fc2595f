package realtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/omnisat/omnisat/realtime"
)

// A turn-based request never passes an empty answer off as a success.

// scriptedTurn is a chat server that answers each input.append with the frames given.
func scriptedTurn(t *testing.T, frames ...string) string {
	return scriptServer(t, func(ws *websocket.Conn) {
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.queue_done"}`))
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			switch {
			case strings.Contains(string(data), `"session.init"`):
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.created","session_id":"sess_1","mode":"turn_based"}`))
			case strings.Contains(string(data), `"input.append"`):
				for _, f := range frames {
					_ = ws.WriteMessage(websocket.TextMessage, []byte(f))
				}
			case strings.Contains(string(data), `"session.close"`):
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.closed","reason":"turn_done"}`))
				return
			}
		}
	})
}

func chatOnce(t *testing.T, url string, onEvent func(realtime.Event)) (*realtime.Reply, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return realtime.Chat(ctx, fastConfig(url, realtime.DialectCurrent, realtime.ModeChat),
		realtime.ChatRequest{Stream: true, Messages: []realtime.ChatMessage{{Role: "user", Text: "hi"}}}, onEvent)
}

func TestEmptyTurnIsAnError(t *testing.T) {
	for _, tt := range []struct {
		name   string
		frames []string
	}{
		{"done alone", []string{`{"type":"response.done","session_id":"s","response_id":"r","reason":"turn_end"}`}},
		{"empty text deltas", []string{`{"type":"response.output.delta","kind":"text","text":""}`,
			`{"type":"response.done","text":"","reason":"turn_end"}`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := chatOnce(t, scriptedTurn(t, tt.frames...), nil)
			var e *realtime.Error
			if !errors.As(err, &e) || e.Code != realtime.CodeEmptyReply || e.Event != "response.done" || e.Class != realtime.ClassRetryable {
				t.Fatalf("reply %+v, err %v: want an empty_reply error naming response.done", r, err)
			}
		})
	}
}

// A text delta without text is a protocol error naming the event; the turn still completes
// with what did come.
func TestTextDeltaWithoutText(t *testing.T) {
	var problems []*realtime.Error
	r, err := chatOnce(t, scriptedTurn(t,
		`{"type":"response.output.delta","kind":"text","response_id":"r"}`,
		`{"type":"response.output.delta","kind":"text","response_id":"r","text":"fine"}`,
		`{"type":"response.done","response_id":"r","text":"fine","reason":"turn_end"}`), func(ev realtime.Event) {
		if e, ok := ev.(realtime.ErrorEvent); ok {
			problems = append(problems, e.Err)
		}
	})
	if err != nil || r.Text != "fine" {
		t.Fatalf("reply %+v, err %v", r, err)
	}
	if len(problems) != 1 || problems[0].Event != "response.output.delta" || problems[0].Code != realtime.CodeBadField {
		t.Fatalf("problems %v", problems)
	}
}
