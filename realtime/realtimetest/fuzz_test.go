package realtimetest

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"testing"
)

// Fuzz tests for every decoder of client input. `go test` runs the seed corpora;
// `go test -fuzz=FuzzDecodeCurrent ./realtime/realtimetest` explores further.

var modes = []string{"video", "audio", "chat"}

func seedMessages(f *testing.F) {
	b := func(v any) []byte { d, _ := json.Marshal(v); return d }
	frame := base64.StdEncoding.EncodeToString(jpegBytes(f, 16, 16, 60))
	for _, d := range []Dialect{Current, Legacy} {
		f.Add(b(initMsgFor(d, "video", "hello")), uint8(0))
		f.Add(b(appendFor(d, tone(0.25, 0.3), []string{frame}, map[string]any{"force_listen": true, "max_slice_nums": 2})), uint8(0))
		f.Add(b(appendFor(d, silence(0.25), nil, map[string]any{"hints": map[string]any{"force_listen": true}})), uint8(1))
	}
	f.Add(b(map[string]any{"type": "session.init", "payload": map[string]any{"config": map[string]any{"force_listen_count": 2},
		"voice": map[string]any{"ref_audio_base64": f32b64(tone(0.1, 0.1)), "tts_ref_audio_base64": "AAAAAA=="}}}), uint8(0))
	f.Add(b(chatAppend(true, true, say("system", "s"), say("user", []any{map[string]any{"type": "text", "text": "hi"},
		map[string]any{"type": "image", "data": frame}}))), uint8(2))
	f.Add(b(map[string]any{"type": "session.close", "reason": "user_stop"}), uint8(0))
	f.Add([]byte(`{"type":"input.append","input":{"audio":null,"max_slice_nums":1e400}}`), uint8(0))
	f.Add([]byte(`{"type":"input.append","input":{"messages":[{"role":"user","content":[{"type":"image","data":"/9j/"}]}]}}`), uint8(2))
	f.Add([]byte(`[`), uint8(0))
	f.Add([]byte(`null`), uint8(1))
	f.Add([]byte(`{"type":"session.configure","vad":{"sensitivity":"high"},"hot_words":["a"]}`), uint8(0))
	f.Add([]byte(`{"type":"session.configure","vad_sensitivity":"low","model_tts":"k","silence_timeout_ms":1500,"enable_itn":false,"preprocessing":{"denoise":true}}`), uint8(0))
	f.Add([]byte(`{"type":["x"]}`), uint8(0))
	f.Add([]byte(`{"type":"tts.speak","text":"hello there","voice":"v"}`), uint8(0))
}

func checkAppend(t *testing.T, a *appendMsg, mode string) {
	if a == nil {
		return
	}
	if len(a.Audio) < minSamples {
		t.Fatalf("accepted %d samples", len(a.Audio))
	}
	for _, v := range a.Audio {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("accepted a non-finite sample")
		}
	}
	if len(a.Frames) > 0 && mode != "video" {
		t.Fatalf("accepted frames in mode %s", mode)
	}
	if a.MaxSliceNums < 0 || a.MaxSliceNums > 9 {
		t.Fatalf("accepted max_slice_nums %d", a.MaxSliceNums)
	}
}

func FuzzDecodeCurrent(f *testing.F) {
	seedMessages(f)
	f.Fuzz(func(t *testing.T, data []byte, m uint8) {
		mode := modes[int(m)%len(modes)]
		msg, err := decodeCurrent(data, mode)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if msg.Type == "" {
			t.Fatal("accepted a message without type")
		}
		checkAppend(t, msg.Append, mode)
		if msg.Chat != nil && (mode != "chat" || len(msg.Chat.Messages) == 0) {
			t.Fatalf("chat input accepted in mode %s with %d messages", mode, len(msg.Chat.Messages))
		}
	})
}

func FuzzDecodeLegacy(f *testing.F) {
	seedMessages(f)
	f.Fuzz(func(t *testing.T, data []byte, m uint8) {
		mode := modes[int(m)%2]
		msg, err := decodeLegacy(data, mode)
		if err != nil {
			return
		}
		checkAppend(t, msg.Append, mode)
		if msg.Chat != nil {
			t.Fatal("legacy decoded a chat message")
		}
	})
}

func FuzzDecodeOpenVoice(f *testing.F) {
	seedMessages(f)
	f.Fuzz(func(t *testing.T, data []byte, _ uint8) {
		msg, err := decodeOpenVoice(data)
		if err != nil {
			if _, ok := err.(*ovError); !ok {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		if msg.Type == evTTSSpeak && (msg.Speak == nil || msg.Speak.Text == "") {
			t.Fatal("accepted an empty tts.speak")
		}
		if msg.Type == evConfigure && msg.Configure == nil {
			t.Fatal("session.configure without its settings")
		}
	})
}

func FuzzPCM16(f *testing.F) {
	f.Add([]byte{0, 0, 0xff, 0x7f, 0, 0x80})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := pcm16ToFloat(data)
		if (err != nil) != (len(data)%2 != 0) {
			t.Fatalf("len %d: err %v", len(data), err)
		}
		for _, v := range s {
			if v < -1 || v >= 1 {
				t.Fatalf("sample %v out of range", v)
			}
		}
		if err == nil && len(floatToPCM16(s)) != len(data) {
			t.Fatal("length changed in the round trip")
		}
	})
}

func FuzzDecodeImage(f *testing.F) {
	f.Add(jpegBytes(f, 8, 8, 50), true)
	f.Add(jpegBytes(f, 3, 5, 100)[:100], false)
	f.Add([]byte("\x89PNG\r\n\x1a\n"), true)
	f.Add([]byte{0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x43, 0x00}, false)
	f.Fuzz(func(t *testing.T, data []byte, allowPNG bool) {
		if q := jpegQuality(data); q < 0 || q > 100 {
			t.Fatalf("quality %d", q)
		}
		info, err := decodeImage("frame", base64.StdEncoding.EncodeToString(data), allowPNG)
		if err == nil && (info.Width <= 0 || info.Height <= 0 || info.Bytes != len(data)) {
			t.Fatalf("info %+v", info)
		}
	})
}

func FuzzParseFault(f *testing.F) {
	for _, s := range []string{"drop", "stall:after=3", "close:reason=timeout,after=2", "refuse:count=2,code=queue_full", "oversize:size=20000000", "x:y=z", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fault, err := ParseFault(s)
		if err != nil {
			return
		}
		back, err := ParseFault(fault.String())
		if err != nil || back != fault {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, fault, fault.String(), back, err)
		}
	})
}

func TestJPEGQuality(t *testing.T) {
	for _, q := range []int{1, 10, 30, 50, 60, 75, 80, 90, 95, 100} {
		if got := jpegQuality(jpegBytes(t, 32, 32, q)); got != q {
			t.Errorf("quality %d estimated as %d", q, got)
		}
	}
	if got := jpegQuality([]byte("not a jpeg")); got != 0 {
		t.Errorf("non-JPEG quality %d", got)
	}
}
