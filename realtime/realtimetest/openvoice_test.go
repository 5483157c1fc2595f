package realtimetest

import (
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func dialOV(t *testing.T, opts Options) (*Server, *client) {
	t.Helper()
	opts.Dialect = OpenVoice
	s := newSrv(t, opts)
	c := dial(t, s, "model=faster-whisper-large-v3")
	m := c.expect("session.created")
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(m.str("session_id")) {
		t.Errorf("session_id %q", m.str("session_id"))
	}
	return s, c
}

// sendPCM sends audio as PCM16 frames of 100 ms at rate.
func sendPCM(c *client, s []float32, rate int) {
	frame := rate / 10
	for len(s) > 0 {
		k := min(frame, len(s))
		c.sendBinary(pcm16(s[:k]))
		s = s[k:]
	}
}

func TestOpenVoiceVAD(t *testing.T) {
	tests := []struct {
		name      string
		configure map[string]any
		speech    []float32
		silence   float64
		want      []string // "type text" of the expected events, in order
	}{
		{"normal", nil, tone(1, 0.3), 0.6, []string{"vad.speech_start", "transcript.partial speech 0.5s",
			"transcript.partial speech 1.0s", "transcript.final heard 1.0 seconds of speech", "vad.speech_end"}},
		{"short utterance", map[string]any{"language": "de"}, tone(0.3, 0.3), 0.5, []string{"vad.speech_start",
			"transcript.final heard 0.3 seconds of speech", "vad.speech_end"}},
		{"low sensitivity ignores quiet speech", map[string]any{"vad": map[string]any{"sensitivity": "low"}}, tone(1, 0.02), 0.6, nil},
		{"normal hears quiet speech", map[string]any{"vad": map[string]any{"sensitivity": "normal"}}, tone(0.6, 0.02), 0.6, []string{"vad.speech_start",
			"transcript.partial speech 0.5s", "transcript.final heard 0.6 seconds of speech", "vad.speech_end"}},
		{"high needs less silence", map[string]any{"vad": map[string]any{"sensitivity": "high"}}, tone(0.4, 0.3), 0.35, []string{"vad.speech_start",
			"transcript.final heard 0.4 seconds of speech", "vad.speech_end"}},
		{"normal needs 0.4 s of silence", nil, tone(0.4, 0.3), 0.35, []string{"vad.speech_start"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := dialOV(t, Options{})
			if tt.configure != nil {
				m := map[string]any{"type": "session.configure"}
				for k, v := range tt.configure {
					m[k] = v
				}
				c.send(m)
			}
			sendPCM(c, append(append(silence(0.2), tt.speech...), silence(tt.silence)...), 16000)
			c.send(map[string]any{"type": "tts.speak", "text": "done"}) // marks the end of the audio
			var got []string
			var final, start, end msg
			for {
				m := c.next()
				if m.typ() == "tts.speaking_start" {
					break
				}
				e := m.typ()
				if x := m.str("text"); x != "" {
					e += " " + x
				}
				got = append(got, e)
				switch m.typ() {
				case "transcript.final":
					final = m
				case "vad.speech_start":
					start = m
				case "vad.speech_end":
					end = m
				}
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("events:\n%q\nwant\n%q", got, tt.want)
			}
			if start.M != nil && start.num("timestamp") != 0.2 {
				t.Errorf("speech_start timestamp %v, want 0.2", start.M["timestamp"])
			}
			if final.M != nil {
				lang := "en"
				if l, ok := tt.configure["language"].(string); ok {
					lang = l
				}
				dur := float64(len(tt.speech)) / 16000
				if final.str("language") != lang || final.num("duration") != dur {
					t.Errorf("final = %s", final.Raw)
				}
				if math.Abs(end.num("timestamp")-(0.2+dur)) > 1e-9 {
					t.Errorf("speech_end = %s", end.Raw)
				}
			}
			r := s.Sessions()[0]
			want := len(tt.speech) + int((0.2+tt.silence)*16000)
			if len(r.Audio) != want || len(r.Rejections) != 0 {
				t.Errorf("Audio %d samples (want %d), Rejections %q", len(r.Audio), want, r.Rejections)
			}
		})
	}
}

func TestOpenVoiceConfigureAndRate(t *testing.T) {
	s, c := dialOV(t, Options{OpenVoiceInputRate: 48000})
	c.send(map[string]any{"type": "session.configure", "vad": map[string]any{"sensitivity": "high"}, "language": "pt",
		"hot_words": []string{"Macaw", "OpenVoice"}, "tts_model": "kokoro-v1"})
	c.sendBinary(pcm16(make([]float32, 4800)))
	c.sendBinary(pcm16(make([]float32, 43200)))
	c.send(map[string]any{"type": "tts.cancel"}) // nothing to cancel: ignored
	c.send(map[string]any{"type": "session.configure", "language": "es"})
	c.send(map[string]any{"type": "tts.speak", "text": "x"})
	c.expect("tts.speaking_start")
	r := s.Sessions()[0]
	in := r.Init
	if in.Type != "session.configure" || in.Configures != 2 || in.VADSensitivity != "high" || in.Language != "es" ||
		strings.Join(in.HotWords, ",") != "Macaw,OpenVoice" || in.TTSModel != "kokoro-v1" {
		t.Errorf("Init = %+v", in)
	}
	if len(r.Appends) != 2 || r.Appends[0].Samples != 4800 || len(r.Audio) != 16000 {
		t.Errorf("Appends %+v, Audio %d (want 1 s at 16 kHz)", r.Appends, len(r.Audio))
	}
	if r.Model != "faster-whisper-large-v3" || r.Mode != "openvoice" || !r.AssignedAt.IsZero() {
		t.Errorf("Model %q Mode %q", r.Model, r.Mode)
	}
}

func TestOpenVoiceViolations(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		binary []byte
		want   string
	}{
		{"unknown configure field", `{"type":"session.configure","model":"x"}`, nil, `unknown field "model"`},
		{"unknown vad field", `{"type":"session.configure","vad":{"threshold":0.5}}`, nil, `vad has unknown field "threshold"`},
		{"bad sensitivity", `{"type":"session.configure","vad":{"sensitivity":"max"}}`, nil, `sensitivity is "max"`},
		{"hot words not strings", `{"type":"session.configure","hot_words":[1]}`, nil, "hot_words[0] must be a string"},
		{"language not string", `{"type":"session.configure","language":["en"]}`, nil, "language must be a string"},
		{"unknown type", `{"type":"input.append"}`, nil, `unknown event type "input.append"`},
		{"invalid json", `{"type":"tts.speak",`, nil, "not valid JSON"},
		{"odd pcm", "", []byte{1, 2, 3}, "binary frame of 3 bytes"},
		{"voice not string", `{"type":"tts.speak","text":"hi","voice":3}`, nil, "voice must be a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := dialOV(t, Options{})
			if tt.binary != nil {
				c.sendBinary(tt.binary)
			} else {
				c.sendText([]byte(tt.raw))
			}
			m := c.expect("error")
			if m.M["recoverable"] != false || !strings.Contains(m.str("message"), tt.want) {
				t.Errorf("error = %s, want unrecoverable with %q", m.Raw, tt.want)
			}
			if code, _ := c.closeCode(); code != websocket.ClosePolicyViolation {
				t.Errorf("close %d, want 1008", code)
			}
			if r := waitEnded(t, s, 0); !hasRejection(r, tt.want) || !strings.HasPrefix(r.EndReason, "rejected: ") {
				t.Errorf("Rejections %q EndReason %q", r.Rejections, r.EndReason)
			}
		})
	}
}

// readTTS reads binary frames until tts.speaking_end and returns the PCM bytes.
func readTTS(t *testing.T, c *client, maxFrame int) int {
	t.Helper()
	total := 0
	for {
		m := c.next()
		switch {
		case m.Binary:
			if len(m.Raw) > maxFrame || len(m.Raw)%2 != 0 {
				t.Errorf("TTS frame of %d bytes (max %d)", len(m.Raw), maxFrame)
			}
			total += len(m.Raw)
		case m.typ() == "tts.speaking_end":
			return total
		default:
			t.Fatalf("unexpected %s during TTS", m.Raw)
		}
	}
}

func TestOpenVoiceTTS(t *testing.T) {
	for _, rate := range []int{24000, 16000} {
		s, c := dialOV(t, Options{OpenVoiceTTSRate: rate})
		start := time.Now()
		c.send(map[string]any{"type": "tts.speak", "text": "one two three", "voice": "default"})
		c.expect("tts.speaking_start")
		got := readTTS(t, c, rate/10*2)
		if want := 3 * rate / 4 * 2; got != want {
			t.Errorf("rate %d: %d bytes of TTS, want %d", rate, got, want)
		}
		if d := time.Since(start); d < 600*time.Millisecond {
			t.Errorf("rate %d: 0.75 s of speech sent in %v: not paced at real time", rate, d)
		}
		if r := s.Sessions()[0]; len(r.Rejections) != 0 || r.Sent[1] != "tts.speaking_start" || r.Sent[2] != "binary" {
			t.Errorf("Rejections %q Sent %q", r.Rejections, r.Sent)
		}
	}
}

func TestOpenVoiceTTSCancel(t *testing.T) {
	_, c := dialOV(t, Options{})
	long := strings.Repeat("word ", 40) // 10 s
	c.send(map[string]any{"type": "tts.speak", "text": long})
	c.expect("tts.speaking_start")
	if m := c.next(); !m.Binary {
		t.Fatalf("got %s, want audio", m.Raw)
	}
	c.send(map[string]any{"type": "tts.cancel"})
	if got := readTTS(t, c, 4800); got > 24000*2*2 {
		t.Errorf("%d bytes after cancel", got)
	}
	// a new tts.speak cancels the current one
	c.send(map[string]any{"type": "tts.speak", "text": long})
	c.expect("tts.speaking_start")
	c.next()
	c.send(map[string]any{"type": "tts.speak", "text": "hi"})
	readTTS(t, c, 4800)
	c.expect("tts.speaking_start")
	if got := readTTS(t, c, 4800); got != 6000*2 {
		t.Errorf("second speech: %d bytes, want %d", got, 12000)
	}
}

func TestOpenVoiceRecoverable(t *testing.T) {
	s, c := dialOV(t, Options{})
	c.send(map[string]any{"type": "tts.speak", "text": "  "})
	m := c.expect("error")
	if m.M["recoverable"] != true || !strings.Contains(m.str("message"), "empty") {
		t.Errorf("error = %s", m.Raw)
	}
	c.send(map[string]any{"type": "tts.speak"})
	c.expect("error")
	c.send(map[string]any{"type": "tts.speak", "text": "still alive"})
	c.expect("tts.speaking_start")
	if r := s.Sessions()[0]; len(r.Rejections) != 2 || !r.EndedAt.IsZero() {
		t.Errorf("Rejections %q", r.Rejections)
	}
}

func TestOpenVoiceMutedDuringTTS(t *testing.T) {
	_, c := dialOV(t, Options{})
	c.send(map[string]any{"type": "tts.speak", "text": strings.Repeat("w ", 40)})
	c.expect("tts.speaking_start")
	sendPCM(c, append(tone(1, 0.3), silence(0.6)...), 16000)
	c.send(map[string]any{"type": "tts.cancel"})
	readTTS(t, c, 4800) // fails on any vad/transcript event
	// after TTS, STT hears again
	sendPCM(c, append(tone(0.5, 0.3), silence(0.5)...), 16000)
	c.expect("vad.speech_start")
}
