package realtimetest

import (
	"encoding/base64"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func TestViolations(t *testing.T) {
	good := f32b64(silence(0.5))
	bad := func(d Dialect, field string, v any) map[string]any { // append with one field replaced
		m := appendFor(d, silence(0.5), nil, nil)
		if d == Legacy {
			m[field] = v
		} else {
			m["input"].(map[string]any)[field] = v
		}
		return m
	}
	nan := silence(0.5)
	nan[100] = float32(math.NaN())
	inf := silence(0.5)
	inf[7] = float32(math.Inf(-1))
	wav := base64.StdEncoding.EncodeToString(wavBytes(8000))
	chat := func(in map[string]any) map[string]any { return map[string]any{"type": "input.append", "input": in} }
	user := func(content any) map[string]any {
		return chat(map[string]any{"messages": []any{map[string]any{"role": "user", "content": content}}})
	}

	tests := []struct {
		name    string
		dialect Dialect
		mode    string
		init    bool   // handshake before sending
		raw     string // sent as a text frame if set
		binary  []byte // sent as a binary frame if set
		msg     map[string]any
		want    string // in the diagnostic and the recorded rejection
	}{
		{name: "invalid json", raw: `{"type":`, want: "not valid JSON"},
		{name: "json array", raw: `[1,2]`, want: "not valid JSON"},
		{name: "missing type", raw: `{"payload":{}}`, want: "message has no type"},
		{name: "type not a string", raw: `{"type":7}`, want: "message.type must be a string"},
		{name: "binary frame", binary: []byte{1, 2, 3, 4}, want: "binary frame (4 bytes)"},
		{name: "binary frame legacy", dialect: Legacy, binary: []byte{1, 2}, want: "binary frame"},
		{name: "append before init", msg: appendFor(Current, silence(0.5), nil, nil), want: "input.append before session.created"},
		{name: "append before update legacy", dialect: Legacy, msg: appendFor(Legacy, silence(0.5), nil, nil), want: "input_audio_buffer.append before session.created: send session.update"},
		{name: "second init", init: true, msg: initMsgFor(Current, "video", "again"), want: "second session.init"},
		{name: "second update legacy", dialect: Legacy, init: true, msg: initMsgFor(Legacy, "video", "again"), want: "second session.update"},
		{name: "legacy event to current", msg: initMsgFor(Legacy, "video", "x"), want: `unknown event type "session.update": that is a legacy-dialect event`},
		{name: "legacy append to current", init: true, msg: appendFor(Legacy, silence(0.5), nil, nil), want: "legacy-dialect event"},
		{name: "unknown event", init: true, msg: map[string]any{"type": "response.create"}, want: `unknown event type "response.create"`},
		{name: "missing payload", msg: map[string]any{"type": "session.init"}, want: "session.init has no payload object"},
		{name: "null payload", msg: map[string]any{"type": "session.init", "payload": nil}, want: "no payload object"},
		{name: "payload not object", msg: map[string]any{"type": "session.init", "payload": "You are nice"}, want: "payload must be a JSON object"},
		{name: "payload array", msg: map[string]any{"type": "session.init", "payload": []any{}}, want: "payload must be a JSON object"},
		{name: "system_prompt not string", msg: map[string]any{"type": "session.init", "payload": map[string]any{"system_prompt": 5}}, want: "system_prompt must be a string"},
		{name: "ref audio at top level", msg: map[string]any{"type": "session.init", "payload": map[string]any{"ref_audio": good}}, want: "payload.voice.ref_audio_base64"},
		{name: "ref audio wav", msg: map[string]any{"type": "session.init", "payload": map[string]any{"voice": map[string]any{"ref_audio_base64": wav}}}, want: "RIFF/WAV header"},
		{name: "tts ref audio wav", msg: map[string]any{"type": "session.init", "payload": map[string]any{"voice": map[string]any{"tts_ref_audio_base64": wav}}}, want: "voice.tts_ref_audio_base64 starts with a RIFF/WAV header"},
		{name: "ref audio wav legacy", dialect: Legacy, msg: map[string]any{"type": "session.update", "session": map[string]any{"instructions": "x", "ref_audio": wav}}, want: "session.ref_audio starts with a RIFF/WAV header"},
		{name: "tts ref audio odd legacy", dialect: Legacy, msg: map[string]any{"type": "session.update", "session": map[string]any{"instructions": "x", "tts_ref_audio": "AAAAAAA="}}, want: "not a whole number of float32"},
		{name: "ref audio not base64", msg: map[string]any{"type": "session.init", "payload": map[string]any{"voice": map[string]any{"ref_audio_base64": "%%%"}}}, want: "not valid base64"},
		{name: "legacy missing instructions", dialect: Legacy, msg: map[string]any{"type": "session.update", "session": map[string]any{}}, want: "session.instructions is required"},
		{name: "legacy missing session", dialect: Legacy, msg: map[string]any{"type": "session.update"}, want: "session.update has no session object"},
		{name: "init max_slice_nums 0", msg: map[string]any{"type": "session.init", "payload": map[string]any{"max_slice_nums": 0}}, want: "max_slice_nums is 0: must be 1..9"},
		{name: "negative force_listen_count", msg: map[string]any{"type": "session.init", "payload": map[string]any{"config": map[string]any{"force_listen_count": -2}}}, want: "force_listen_count is -2"},
		{name: "missing input", init: true, msg: map[string]any{"type": "input.append"}, want: "input.append has no input object"},
		{name: "input not object", init: true, msg: map[string]any{"type": "input.append", "input": "AAAA"}, want: "input must be a JSON object"},
		{name: "missing audio", init: true, msg: map[string]any{"type": "input.append", "input": map[string]any{}}, want: "input.audio is required"},
		{name: "missing audio legacy", dialect: Legacy, init: true, msg: map[string]any{"type": "input_audio_buffer.append"}, want: "input_audio_buffer.append.audio is required"},
		{name: "audio not base64", init: true, msg: bad(Current, "audio", "not base64!"), want: "audio is not valid base64"},
		{name: "audio url base64", init: true, msg: bad(Current, "audio", strings.NewReplacer("+", "-", "/", "_").Replace(f32b64(tone(0.5, 0.9)))), want: "audio is not valid base64"},
		{name: "audio not float32", init: true, msg: bad(Current, "audio", base64.StdEncoding.EncodeToString(make([]byte, 16002))), want: "16002 bytes, not a whole number of float32 samples"},
		{name: "audio too short", init: true, msg: bad(Current, "audio", f32b64(silence(0.2))), want: "3200 samples; at least 4000"},
		{name: "audio too short legacy", dialect: Legacy, init: true, msg: bad(Legacy, "audio", f32b64(silence(0.1))), want: "at least 4000"},
		{name: "audio NaN", init: true, msg: bad(Current, "audio", f32b64(nan)), want: "sample 100 is NaN"},
		{name: "audio Inf legacy", dialect: Legacy, init: true, msg: bad(Legacy, "audio", f32b64(inf)), want: "sample 7 is -Inf"},
		{name: "audio wav", init: true, msg: bad(Current, "audio", wav), want: "RIFF/WAV header"},
		{name: "audio not a string", init: true, msg: bad(Current, "audio", []float64{0.1}), want: "audio must be a string"},
		{name: "video in audio mode", mode: "audio", init: true, msg: bad(Current, "video_frames", []string{jpegB64(t, 8, 8, 80)}), want: "video_frames sent in mode=audio"},
		{name: "video in audio mode legacy", dialect: Legacy, mode: "audio", init: true, msg: bad(Legacy, "video_frames", []string{jpegB64(t, 8, 8, 80)}), want: "mode=audio"},
		{name: "frame not jpeg", init: true, msg: bad(Current, "video_frames", []string{pngB64(t, 8, 8)}), want: "video_frames[0] is not a JPEG image"},
		{name: "frame corrupt jpeg", init: true, msg: bad(Current, "video_frames", []string{base64.StdEncoding.EncodeToString(jpegBytes(t, 64, 64, 80)[:300])}), want: "does not decode as jpeg"},
		{name: "frame not base64", init: true, msg: bad(Current, "video_frames", []string{"@@@"}), want: "video_frames[0] is not valid base64"},
		{name: "frames not array", init: true, msg: bad(Current, "video_frames", "abc"), want: "video_frames must be an array"},
		{name: "frame not string", dialect: Legacy, init: true, msg: bad(Legacy, "video_frames", []int{1}), want: "video_frames[0] must be a base64 string"},
		{name: "max_slice_nums 10", init: true, msg: bad(Current, "max_slice_nums", 10), want: "max_slice_nums is 10: must be 1..9"},
		{name: "max_slice_nums 0 legacy", dialect: Legacy, init: true, msg: bad(Legacy, "max_slice_nums", 0), want: "max_slice_nums is 0"},
		{name: "max_slice_nums float", init: true, msg: bad(Current, "max_slice_nums", 1.5), want: "max_slice_nums must be an integer"},
		{name: "force_listen not bool", init: true, msg: bad(Current, "force_listen", "yes"), want: "force_listen must be a boolean"},
		{name: "hints not object", init: true, msg: bad(Current, "hints", true), want: "hints must be a JSON object"},
		{name: "close reason not string", init: true, msg: map[string]any{"type": "session.close", "reason": 3}, want: "session.close.reason must be a string"},
		// chat mode
		{name: "chat no messages", mode: "chat", init: true, msg: chat(map[string]any{}), want: "messages is required"},
		{name: "chat empty messages", mode: "chat", init: true, msg: chat(map[string]any{"messages": []any{}}), want: "non-empty array"},
		{name: "chat bad role", mode: "chat", init: true, msg: chat(map[string]any{"messages": []any{map[string]any{"role": "tool", "content": "x"}}}), want: `role is "tool": must be system, user or assistant`},
		{name: "chat no content", mode: "chat", init: true, msg: chat(map[string]any{"messages": []any{map[string]any{"role": "user"}}}), want: "content is required"},
		{name: "chat content number", mode: "chat", init: true, msg: user(42), want: "content must be a string or a list of parts"},
		{name: "chat unknown part", mode: "chat", init: true, msg: user([]any{map[string]any{"type": "audio", "data": good}}), want: `content[0].type is "audio": must be text or image`},
		{name: "chat image garbage", mode: "chat", init: true, msg: user([]any{map[string]any{"type": "image", "data": base64.StdEncoding.EncodeToString([]byte("GIF89a...."))}}), want: "is not a JPEG or PNG image"},
		{name: "chat image data url", mode: "chat", init: true, msg: user([]any{map[string]any{"type": "image", "data": "data:image/png;base64," + pngB64(t, 4, 4)}}), want: "not valid base64"},
		{name: "chat image missing data", mode: "chat", init: true, msg: user([]any{map[string]any{"type": "image"}}), want: "data is required"},
		{name: "chat text part missing text", mode: "chat", init: true, msg: user([]any{map[string]any{"type": "text"}}), want: "text is required"},
		{name: "chat streaming not bool", mode: "chat", init: true, msg: chat(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x"}}, "streaming": "yes"}), want: "streaming must be a boolean"},
		{name: "chat slice nums", mode: "chat", init: true, msg: chat(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x"}}, "image": map[string]any{"max_slice_nums": 12}}), want: "image.max_slice_nums is 12"},
		{name: "chat duplex input", mode: "chat", init: true, msg: appendFor(Current, silence(0.5), nil, nil), want: "messages is required"},
		{name: "chat before init", mode: "chat", msg: user("hi"), want: "input.append before session.created"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.dialect
			if d == "" {
				d = Current
			}
			mode := tt.mode
			if mode == "" {
				mode = "video"
			}
			s := newSrv(t, Options{Dialect: d})
			c := dial(t, s, "mode="+mode)
			if tt.init {
				c.handshake(d, mode)
			} else {
				c.expect("session.queue_done")
			}
			switch {
			case tt.binary != nil:
				c.sendBinary(tt.binary)
			case tt.raw != "":
				c.sendText([]byte(tt.raw))
			default:
				c.send(tt.msg)
			}
			m := c.expect("session.closed")
			if m.str("reason") != "backend_error" || !strings.Contains(diag(m), tt.want) {
				t.Errorf("session.closed = %s\nwant reason backend_error with diagnostic containing %q", m.Raw, tt.want)
			}
			if code, _ := c.closeCode(); code != websocket.CloseNormalClosure {
				t.Errorf("close code %d, want 1000", code)
			}
			r := waitEnded(t, s, 0)
			if len(r.Rejections) != 1 || !strings.Contains(r.Rejections[0], tt.want) {
				t.Errorf("Rejections = %q, want one containing %q", r.Rejections, tt.want)
			}
			if !strings.HasPrefix(r.EndReason, "rejected: ") {
				t.Errorf("EndReason = %q", r.EndReason)
			}
		})
	}
}

func TestTextAfterClose(t *testing.T) {
	for _, d := range []Dialect{Current, Legacy} {
		t.Run(string(d), func(t *testing.T) {
			// fast pings: the server must keep listening for the close answer regardless
			s := newSrv(t, Options{Dialect: d, PingInterval: 5 * time.Millisecond})
			c := dial(t, s, "mode=audio")
			c.handshake(d, "audio")
			c.send(map[string]any{"type": "session.close", "reason": "user_stop"})
			time.Sleep(30 * time.Millisecond) // several ping intervals pass before the client's next frame
			c.send(appendFor(d, silence(0.5), nil, nil))
			c.readUntilClose()
			r := waitEnded(t, s, 0)
			if !hasRejection(r, "after session.close") || r.EndReason != "user_stop" {
				t.Errorf("Rejections %q EndReason %q", r.Rejections, r.EndReason)
			}
		})
	}
}

// A well-behaved full session leaves no rejections and records everything.
func TestRecordsCleanSession(t *testing.T) {
	s := newSrv(t, Options{NoExtraEvents: true})
	c := dial(t, s, "mode=video")
	c.handshake(Current, "video")
	c.send(appendFor(Current, tone(0.5, 0.2), []string{jpegB64(t, 64, 48, 75)}, map[string]any{"max_slice_nums": 2}))
	c.next()
	c.send(appendFor(Current, silence(0.25), []string{}, map[string]any{"hints": map[string]any{"force_listen": true}}))
	c.next()
	c.send(map[string]any{"type": "session.close", "reason": "user_stop"})
	c.readUntilClose()
	r := waitEnded(t, s, 0)
	if len(r.Rejections) != 0 || len(r.Appends) != 2 || len(r.Audio) != 12000 {
		t.Fatalf("Rejections %q Appends %d Audio %d", r.Rejections, len(r.Appends), len(r.Audio))
	}
	a := r.Appends[0]
	if a.Samples != 8000 || a.MaxSliceNums != 2 || len(a.Frames) != 1 || a.ForceListen {
		t.Errorf("append 0 = %+v", a)
	}
	if f := a.Frames[0]; f.Width != 64 || f.Height != 48 || f.Quality != 75 || f.Bytes == 0 || f.Format != "jpeg" {
		t.Errorf("frame = %+v", f)
	}
	if !r.Appends[1].ForceListen {
		t.Error("hints.force_listen not recorded")
	}
	wantRecv := []string{"session.init", "input.append", "input.append", "session.close"}
	if strings.Join(r.Received, ",") != strings.Join(wantRecv, ",") {
		t.Errorf("Received = %q", r.Received)
	}
	wantSent := []string{"session.queue_done", "session.created", "response.output.delta", "response.output.delta", "session.closed"}
	if strings.Join(r.Sent, ",") != strings.Join(wantSent, ",") {
		t.Errorf("Sent = %q", r.Sent)
	}
	// kv: 3 (prompt) + 12.5 (0.5 s) + 192 (frame at max_slice_nums 2) + 6.25 (0.25 s)
	if r.KVCacheLength != 213 {
		t.Errorf("KVCacheLength = %d, want 213", r.KVCacheLength)
	}
}
