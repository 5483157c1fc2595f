package realtimetest

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func chatAppend(streaming, tts bool, msgs ...map[string]any) map[string]any {
	list := make([]any, len(msgs))
	for i, m := range msgs {
		list[i] = m
	}
	return map[string]any{"type": "input.append", "input": map[string]any{
		"messages": list, "streaming": streaming, "tts": map[string]any{"enabled": tts},
		"generation": map[string]any{"max_new_tokens": 64, "length_penalty": 1.1}}}
}

func say(role string, content any) map[string]any {
	return map[string]any{"role": role, "content": content}
}

// readTurn reads one chat turn up to response.done.
func readTurn(t *testing.T, c *client) (texts []string, audio []float32, done msg) {
	t.Helper()
	for {
		m := c.next()
		switch {
		case m.typ() == "response.done":
			return texts, audio, m
		case m.typ() == "response.output.delta" && m.str("kind") == "text":
			texts = append(texts, m.str("text"))
		case m.typ() == "response.output.delta" && m.str("kind") == "audio":
			if len(texts) == 0 {
				t.Errorf("audio before text")
			}
			audio = append(audio, decodeAudio(t, m.str("audio"))...)
		default:
			t.Fatalf("unexpected %s", m.Raw)
		}
	}
}

func TestChat(t *testing.T) {
	tests := []struct {
		name       string
		streaming  bool
		tts        bool
		msgs       []map[string]any
		wantText   string
		wantPieces []string // streaming text deltas
	}{
		{"reply exactly", true, false, []map[string]any{say("user", "Reply with exactly: hello  world again ")},
			"hello  world again", []string{"hello", "  world", " again"}},
		{"echo", true, false, []map[string]any{say("user", "How are you?")}, "How are you?", []string{"How", " are", " you?"}},
		{"case-sensitive prefix", true, false, []map[string]any{say("user", "reply with exactly: no")}, "reply with exactly: no", nil},
		{"last user message", true, false, []map[string]any{say("system", "be brief"), say("user", "first"),
			say("assistant", "ok"), say("user", "Reply with exactly: second")}, "second", []string{"second"}},
		{"non-streaming", false, false, []map[string]any{say("user", "Reply with exactly: test")}, "test", nil},
		{"streaming tts", true, true, []map[string]any{say("user", "Reply with exactly: one two three")}, "one two three", []string{"one", " two", " three"}},
		{"non-streaming tts", false, true, []map[string]any{say("user", "Reply with exactly: a b c d e")}, "a b c d e", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSrv(t, Options{})
			c := dial(t, s, "mode=chat")
			c.handshake(Current, "chat")
			c.send(chatAppend(tt.streaming, tt.tts, tt.msgs...))
			texts, audio, done := readTurn(t, c)
			if done.str("text") != tt.wantText || done.str("reason") != "turn_end" || done.M["metrics"] == nil {
				t.Errorf("response.done = %.200s, want text %q", done.Raw, tt.wantText)
			}
			if !tt.streaming && (len(texts) != 0 || len(audio) != 0) {
				t.Errorf("non-streaming sent deltas: %q", texts)
			}
			if tt.streaming {
				if strings.Join(texts, "") != tt.wantText {
					t.Errorf("deltas %q do not add up to %q", texts, tt.wantText)
				}
				if tt.wantPieces != nil && strings.Join(texts, "|") != strings.Join(tt.wantPieces, "|") {
					t.Errorf("deltas %q, want %q", texts, tt.wantPieces)
				}
			}
			words := len(strings.Fields(tt.wantText))
			if !tt.streaming && tt.tts {
				audio = decodeAudio(t, done.str("audio"))
			} else if done.M["audio"] != nil {
				t.Errorf("response.done has audio: %.100s", done.Raw)
			}
			wantAudio := 0
			if tt.tts {
				wantAudio = words * 6000
			}
			if len(audio) != wantAudio {
				t.Errorf("%d audio samples, want %d", len(audio), wantAudio)
			}
			if tt.tts {
				peak := 0.0
				for _, v := range audio {
					peak = math.Max(peak, math.Abs(float64(v)))
				}
				if math.Abs(peak-0.3) > 0.01 {
					t.Errorf("synthetic voice peak %v, want 0.3", peak)
				}
			}
			r := s.Sessions()[0]
			if len(r.ChatRequests) != 1 || r.ChatRequests[0].Reply != tt.wantText || r.ChatRequests[0].Streaming != tt.streaming ||
				r.ChatRequests[0].TTS != tt.tts || r.ChatRequests[0].Generation["max_new_tokens"] != 64.0 {
				t.Errorf("ChatRequests = %+v", r.ChatRequests)
			}
		})
	}
}

func TestChatStreamingDefault(t *testing.T) {
	s := newSrv(t, Options{})
	c := dial(t, s, "mode=chat")
	c.handshake(Current, "chat")
	c.send(map[string]any{"type": "input.append", "input": map[string]any{"messages": []any{say("user", "Reply with exactly: yes")}}})
	texts, _, _ := readTurn(t, c)
	if len(texts) != 1 {
		t.Errorf("streaming is not the default: %q", texts)
	}
}

func TestChatImagesAndTurns(t *testing.T) {
	s := newSrv(t, Options{})
	c := dial(t, s, "mode=chat")
	c.handshake(Current, "chat")
	in := chatAppend(true, false, say("user", []any{
		map[string]any{"type": "text", "text": "Describe this image"},
		map[string]any{"type": "image", "data": jpegB64(t, 32, 24, 90)},
		map[string]any{"type": "image", "data": pngB64(t, 10, 20)},
		map[string]any{"type": "text", "text": "briefly"},
	}))
	in["input"].(map[string]any)["image"] = map[string]any{"max_slice_nums": 2}
	in["input"].(map[string]any)["enable_thinking"] = true
	c.send(in)
	_, _, done := readTurn(t, c)
	if done.str("text") != "Describe this image\nbriefly" {
		t.Errorf("echo %q", done.str("text"))
	}
	ids := []string{done.str("response_id")}
	// further turns on the same session
	for _, w := range []string{"two", "three"} {
		c.send(chatAppend(true, false, say("user", "Reply with exactly: "+w)))
		_, _, done := readTurn(t, c)
		if done.str("text") != w {
			t.Errorf("turn %s: %q", w, done.str("text"))
		}
		ids = append(ids, done.str("response_id"))
	}
	if ids[0] == ids[1] || ids[1] == ids[2] {
		t.Errorf("response ids repeat: %q", ids)
	}
	c.send(map[string]any{"type": "session.close", "reason": "turn_done"})
	msgs, code := c.readUntilClose()
	if len(msgs) != 1 || msgs[0].str("reason") != "turn_done" || code != websocket.CloseNormalClosure {
		t.Errorf("close: %d msgs, code %d", len(msgs), code)
	}
	r := waitEnded(t, s, 0)
	if len(r.ChatRequests) != 3 || r.EndReason != "turn_done" || len(r.Rejections) != 0 {
		t.Fatalf("ChatRequests %d EndReason %q Rejections %q", len(r.ChatRequests), r.EndReason, r.Rejections)
	}
	q := r.ChatRequests[0]
	m := q.Messages[0]
	if m.Role != "user" || len(m.Images) != 2 || !q.EnableThinking || q.MaxSliceNums != 2 {
		t.Fatalf("request = %+v", q)
	}
	if i := m.Images[0]; i.Width != 32 || i.Height != 24 || i.Format != "jpeg" || i.Quality != 90 {
		t.Errorf("jpeg = %+v", i)
	}
	if i := m.Images[1]; i.Width != 10 || i.Height != 20 || i.Format != "png" || i.Quality != 0 {
		t.Errorf("png = %+v", i)
	}
	if r.Mode != "chat" || r.Init.Instructions != "" {
		t.Errorf("Mode %q Init %+v", r.Mode, r.Init)
	}
}

func TestChatNoTimeLimit(t *testing.T) {
	s := newSrv(t, Options{VideoLimit: 10 * time.Millisecond, AudioLimit: 10 * time.Millisecond})
	c := dial(t, s, "mode=chat")
	c.handshake(Current, "chat")
	time.Sleep(50 * time.Millisecond) // past both limits
	c.send(chatAppend(false, false, say("user", "Reply with exactly: still here")))
	if _, _, done := readTurn(t, c); done.str("text") != "still here" {
		t.Errorf("text %q", done.str("text"))
	}
}

func TestWordPieces(t *testing.T) {
	for _, s := range []string{"", "a", " a", "a ", "a  b", "  lead and trail  ", "tab\tsep\nline", "x"} {
		p := wordPieces(s)
		if strings.Join(p, "") != s {
			t.Errorf("wordPieces(%q) = %q", s, p)
		}
		if n := len(strings.Fields(s)); n > 0 && len(p) != n {
			t.Errorf("wordPieces(%q) = %q: %d pieces, want %d", s, p, len(p), n)
		}
	}
}
