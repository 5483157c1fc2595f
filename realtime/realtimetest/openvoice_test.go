package realtimetest

import (
	"regexp"
	"slices"
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
	if !regexp.MustCompile(`^sess_[0-9a-f]{12}$`).MatchString(m.str("session_id")) {
		t.Errorf("session_id %q", m.str("session_id"))
	}
	return s, c
}

// sendPCM sends audio as PCM16 frames of 40 ms at rate, as the server's own client does.
func sendPCM(c *client, s []float32, rate int) {
	frame := rate / 25
	for len(s) > 0 {
		k := min(frame, len(s))
		c.sendBinary(pcm16(s[:k]))
		s = s[k:]
	}
}

func TestOpenVoiceVAD(t *testing.T) {
	tests := []struct {
		name      string
		query     string
		configure map[string]any
		speech    []float32
		silence   float64
		want      []string // "type text" of the expected events, in order
	}{
		{"normal", "", nil, tone(1, 0.3), 0.6, []string{"vad.speech_start", "transcript.partial speech 0.5s",
			"transcript.partial speech 1.0s", "transcript.final heard 1.0 seconds of speech", "vad.speech_end"}},
		{"short utterance in German", "&language=de", nil, tone(0.3, 0.3), 0.5, []string{"vad.speech_start",
			"transcript.final heard 0.3 seconds of speech", "vad.speech_end"}},
		{"low sensitivity ignores quiet speech", "", map[string]any{"vad_sensitivity": "low"}, tone(1, 0.02), 0.6, nil},
		{"normal hears quiet speech", "", map[string]any{"vad_sensitivity": "normal"}, tone(0.6, 0.02), 0.6, []string{"vad.speech_start",
			"transcript.partial speech 0.5s", "transcript.final heard 0.6 seconds of speech", "vad.speech_end"}},
		{"high needs less silence", "", map[string]any{"vad_sensitivity": "high"}, tone(0.4, 0.3), 0.35, []string{"vad.speech_start",
			"transcript.final heard 0.4 seconds of speech", "vad.speech_end"}},
		{"normal needs 0.4 s of silence", "", nil, tone(0.4, 0.3), 0.35, []string{"vad.speech_start"}},
		// The configure language is only logged by the real server: transcripts stay in the
		// query's language (auto-detect: en here).
		{"configure language does not apply", "", map[string]any{"language": "fr"}, tone(0.3, 0.3), 0.5, []string{"vad.speech_start",
			"transcript.final heard 0.3 seconds of speech", "vad.speech_end"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSrv(t, Options{Dialect: OpenVoice})
			c := dial(t, s, "model=faster-whisper-large-v3"+tt.query)
			c.expect("session.created")
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
				case "transcript.partial":
					if m.M["segment_id"] != 0.0 || m.M["timestamp_ms"] == nil {
						t.Errorf("partial %s", m.Raw)
					}
				}
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("events:\n%q\nwant\n%q", got, tt.want)
			}
			if start.M != nil && start.M["timestamp_ms"] != 200.0 {
				t.Errorf("speech_start %s, want timestamp_ms 200", start.Raw)
			}
			if final.M != nil {
				lang := "en"
				if strings.Contains(tt.query, "language=") {
					lang = tt.query[strings.Index(tt.query, "=")+1:]
				}
				ms := float64(len(tt.speech)) / 16
				words, _ := final.M["words"].([]any)
				if final.str("language") != lang || final.M["start_ms"] != 0.0 || final.num("end_ms") != ms || final.M["segment_id"] != 0.0 ||
					final.M["confidence"] == nil || len(words) != 5 || final.M["duration"] != nil {
					t.Errorf("final = %s", final.Raw)
				}
				if end.num("timestamp_ms") != 200+ms || end.M["timestamp"] != nil {
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

func TestOpenVoiceSegments(t *testing.T) {
	s, c := dialOV(t, Options{})
	sendPCM(c, append(tone(0.5, 0.3), silence(0.5)...), 16000)
	sendPCM(c, tone(0.6, 0.3), 16000)
	c.send(map[string]any{"type": "input_audio_buffer.commit"}) // ends the segment before the silence does
	sendPCM(c, append(tone(0.3, 0.3), silence(0.5)...), 16000)
	var ids []float64
	for len(ids) < 3 {
		m := c.next()
		if m.typ() == "transcript.final" {
			ids = append(ids, m.num("segment_id"))
		}
	}
	if ids[0] != 0 || ids[1] != 1 || ids[2] != 2 {
		t.Errorf("segment ids %v, want 0 1 2", ids)
	}
	c.expect("vad.speech_end")
	if r := s.Sessions()[0]; r.Commits != 1 || len(r.Rejections) != 0 {
		t.Errorf("Commits %d Rejections %q", r.Commits, r.Rejections)
	}
}

func TestOpenVoiceConfigureAndRate(t *testing.T) {
	s := newSrv(t, Options{Dialect: OpenVoice, OpenVoiceInputRate: 48000})
	c := dial(t, s, "model=faster-whisper-large-v3&language=pt")
	if m := c.expect("session.created"); m.str("model") != "faster-whisper-large-v3" || m.M["config"].(map[string]any)["language"] != "pt" {
		t.Errorf("created %s", m.Raw)
	}
	c.send(map[string]any{"type": "session.configure", "vad_sensitivity": "high", "language": "pt",
		"hot_words": []string{"Macaw", "OpenVoice"}, "model_tts": "kokoro-v1", "silence_timeout_ms": 1500,
		"hold_timeout_ms": 600000, "enable_itn": false})
	c.sendBinary(pcm16(make([]float32, 4800)))
	c.sendBinary(pcm16(make([]float32, 43200)))
	c.send(map[string]any{"type": "tts.cancel"}) // nothing to cancel: ignored
	c.send(map[string]any{"type": "session.configure", "language": "es", "enable_itn": nil})
	c.send(map[string]any{"type": "tts.speak", "text": "x"})
	c.expect("tts.speaking_start")
	r := s.Sessions()[0]
	in := r.Init
	if in.Type != "session.configure" || in.Configures != 2 || in.VADSensitivity != "high" || in.Language != "es" ||
		strings.Join(in.HotWords, ",") != "Macaw,OpenVoice" || in.TTSModel != "kokoro-v1" || in.SilenceTimeoutMS != 1500 ||
		in.HoldTimeoutMS != 600000 || in.EnableITN == nil || *in.EnableITN {
		t.Errorf("Init = %+v", in)
	}
	if len(r.Appends) != 2 || r.Appends[0].Samples != 4800 || len(r.Audio) != 16000 {
		t.Errorf("Appends %+v, Audio %d (want 1 s at 16 kHz)", r.Appends, len(r.Audio))
	}
	if r.Model != "faster-whisper-large-v3" || r.Language != "pt" || r.Mode != "openvoice" || !r.AssignedAt.IsZero() || len(r.Rejections) != 0 {
		t.Errorf("Model %q Language %q Mode %q Rejections %q", r.Model, r.Language, r.Mode, r.Rejections)
	}
	if len(r.TTSRequests) != 1 || r.TTSRequests[0].Model != "kokoro-v1" || r.TTSRequests[0].Voice != "default" {
		t.Errorf("TTSRequests %+v", r.TTSRequests)
	}
}

// The real server is lenient: it answers what it cannot take with a recoverable error, and drops
// what it does not know without a word. The simulator does the same and records each as a
// violation, so a client whose setting silently does nothing is caught.
func TestOpenVoiceLenient(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		binary []byte
		code   string // the error the real server answers with; "" for none (ignored)
		want   string // in the recorded violation
	}{
		{"nested vad is ignored", `{"type":"session.configure","vad":{"sensitivity":"high"}}`, nil, "", `field "vad" is ignored by the real server`},
		{"tts_model is ignored", `{"type":"session.configure","tts_model":"kokoro"}`, nil, "", `field "tts_model" is ignored by the real server`},
		{"unknown cancel field is ignored", `{"type":"tts.cancel","all":true}`, nil, "", `tts.cancel field "all" is ignored`},
		{"bad sensitivity", `{"type":"session.configure","vad_sensitivity":"max"}`, nil, "validation_error", `vad_sensitivity`},
		{"hot words not strings", `{"type":"session.configure","hot_words":[1]}`, nil, "validation_error", "hot_words.0"},
		{"language not a string", `{"type":"session.configure","language":["en"]}`, nil, "validation_error", "language"},
		{"zero timeout", `{"type":"session.configure","silence_timeout_ms":0}`, nil, "validation_error", "greater than 0"},
		{"unknown type", `{"type":"input.append"}`, nil, "unknown_command", `Unknown command type: 'input.append'`},
		{"no type", `{"text":"hi"}`, nil, "unknown_command", "Missing required field: 'type'"},
		{"invalid json", `{"type":"tts.speak",`, nil, "malformed_json", "Invalid JSON"},
		{"not an object", `[1]`, nil, "malformed_json", "Expected JSON object"},
		{"empty speech", `{"type":"tts.speak","text":""}`, nil, "validation_error", "text"},
		{"voice not a string", `{"type":"tts.speak","text":"hi","voice":3}`, nil, "validation_error", "voice"},
		{"speed out of range", `{"type":"tts.speak","text":"hi","speed":9}`, nil, "validation_error", "speed"},
		{"frame over 1 MiB", "", make([]byte, 1<<20+2), "frame_too_large", "Frame too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := dialOV(t, Options{})
			c.sendTextOrBinary(tt.raw, tt.binary)
			if tt.code != "" {
				m := c.expect("error")
				if m.M["recoverable"] != true || m.str("code") != tt.code {
					t.Errorf("error = %s, want recoverable %s", m.Raw, tt.code)
				}
			}
			// The session goes on.
			sendPCM(c, append(tone(0.3, 0.3), silence(0.5)...), 16000)
			c.expect("vad.speech_start")
			r := s.Sessions()[0]
			if !hasRejection(r, tt.want) || !r.EndedAt.IsZero() {
				t.Errorf("Rejections %q EndReason %q, want a violation with %q and the session alive", r.Rejections, r.EndReason, tt.want)
			}
		})
	}
}

// Two inputs make the real server's handler raise: the session ends with an unrecoverable
// internal_error and session.closed{client_disconnect}, and the socket is left open.
func TestOpenVoiceFatal(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		binary []byte
		want   string
	}{
		{"odd pcm", "", []byte{1, 2, 3}, "binary frame of 3 bytes"},
		{"timeout under a second", `{"type":"session.configure","hold_timeout_ms":500}`, nil, "hold_timeout_ms 500 is under 1000"},
		{"type not hashable", `{"type":["tts.speak"]}`, nil, "type is an array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := dialOV(t, Options{})
			c.sendTextOrBinary(tt.raw, tt.binary)
			if m := c.expect("error"); m.M["recoverable"] != false || m.str("code") != "internal_error" {
				t.Errorf("error = %s", m.Raw)
			}
			if m := c.expect("session.closed"); m.str("reason") != "client_disconnect" {
				t.Errorf("closed = %s", m.Raw)
			}
			c.pingSilent()
			c.ws.Close()
			if r := waitEnded(t, s, 0); !hasRejection(r, tt.want) || !strings.HasPrefix(r.EndReason, "rejected: ") {
				t.Errorf("Rejections %q EndReason %q", r.Rejections, r.EndReason)
			}
		})
	}
}

// sendTextOrBinary sends binary when it is set, else raw as a text frame.
func (c *client) sendTextOrBinary(raw string, binary []byte) {
	c.t.Helper()
	if binary != nil {
		c.sendBinary(binary)
		return
	}
	c.sendText([]byte(raw))
}

// until reads until a message of type typ, skipping those of the types in skip.
func (c *client) until(typ string, skip ...string) msg {
	c.t.Helper()
	for {
		m := c.next()
		switch {
		case m.typ() == typ:
			return m
		case !slices.Contains(skip, m.typ()):
			c.t.Fatalf("got %s %.200s, want %s", m.typ(), m.Raw, typ)
		}
	}
}

// readTTS reads binary frames until tts.speaking_end and returns the PCM bytes and the end event.
func readTTS(t *testing.T, c *client) (int, msg) {
	t.Helper()
	total := 0
	for {
		m := c.next()
		switch {
		case m.Binary:
			if len(m.Raw) > ovTTSFrame || len(m.Raw)%2 != 0 {
				t.Errorf("TTS frame of %d bytes (max %d)", len(m.Raw), ovTTSFrame)
			}
			total += len(m.Raw)
		case m.typ() == "tts.speaking_end":
			return total, m
		default:
			t.Fatalf("unexpected %s during TTS", m.Raw)
		}
	}
}

func TestOpenVoiceTTS(t *testing.T) {
	for _, rate := range []int{24000, 16000} {
		s, c := dialOV(t, Options{OpenVoiceTTSRate: rate})
		c.send(map[string]any{"type": "tts.speak", "text": "one two three", "voice": "default", "request_id": "req_1"})
		start := c.expect("tts.speaking_start")
		if start.str("request_id") != "req_1" || start.M["timestamp_ms"] == nil {
			t.Errorf("start %s", start.Raw)
		}
		got, end := readTTS(t, c)
		if want := 3 * rate / 4 * 2; got != want {
			t.Errorf("rate %d: %d bytes of TTS, want %d", rate, got, want)
		}
		if end.str("request_id") != "req_1" || end.M["cancelled"] != false || end.M["duration_ms"] == nil || end.M["timestamp_ms"] == nil {
			t.Errorf("end %s", end.Raw)
		}
		r := s.Sessions()[0]
		if len(r.Rejections) != 0 || r.Sent[1] != "tts.speaking_start" || r.Sent[2] != "binary" ||
			len(r.TTSRequests) != 1 || r.TTSRequests[0].Outcome != "spoken" || r.TTSRequests[0].RequestID != "req_1" {
			t.Errorf("Rejections %q Sent %q TTS %+v", r.Rejections, r.Sent, r.TTSRequests)
		}
	}
}

func TestOpenVoiceTTSCancel(t *testing.T) {
	s, c := dialOV(t, Options{OpenVoiceSynthesisSpeed: 1})
	long := strings.Repeat("word ", 40) // 10 s
	c.send(map[string]any{"type": "tts.speak", "text": long})
	id := c.expect("tts.speaking_start").str("request_id")
	if !regexp.MustCompile(`^tts_[0-9a-f]{8}$`).MatchString(id) {
		t.Errorf("request_id %q: the server makes one up as tts_<8 hex>", id)
	}
	if m := c.next(); !m.Binary {
		t.Fatalf("got %s, want audio", m.Raw)
	}
	c.send(map[string]any{"type": "tts.cancel", "request_id": "someone-else"}) // the real server cancels whatever runs
	if got, end := readTTS(t, c); got > 24000*2*2 || end.M["cancelled"] != true || end.str("request_id") != id {
		t.Errorf("%d bytes after cancel, end %s", got, end.Raw)
	}
	// a new tts.speak cancels the current one
	c.send(map[string]any{"type": "tts.speak", "text": long, "request_id": "a"})
	c.expect("tts.speaking_start")
	c.next()
	c.send(map[string]any{"type": "tts.speak", "text": "hi", "request_id": "b"})
	if _, end := readTTS(t, c); end.str("request_id") != "a" || end.M["cancelled"] != true {
		t.Errorf("first speech ended with %s", end.Raw)
	}
	c.expect("tts.speaking_start")
	if got, end := readTTS(t, c); got != 6000*2 || end.str("request_id") != "b" || end.M["cancelled"] != false {
		t.Errorf("second speech: %d bytes (want %d), end %s", got, 12000, end.Raw)
	}
	r := s.Sessions()[0]
	var outcomes []string
	for _, q := range r.TTSRequests {
		outcomes = append(outcomes, q.Outcome)
	}
	if strings.Join(outcomes, ",") != "cancelled,cancelled,spoken" {
		t.Errorf("outcomes %q", outcomes)
	}
}

// A synthesis that fails sends only an error; one with nothing to say sends nothing at all.
func TestOpenVoiceTTSFailure(t *testing.T) {
	s, c := dialOV(t, Options{TTSModels: []string{"kokoro-v1"}})
	c.send(map[string]any{"type": "session.configure", "model_tts": "piper-x"})
	c.send(map[string]any{"type": "tts.speak", "text": "hello", "request_id": "r1"})
	if m := c.expect("error"); m.str("code") != "model_not_found" || m.M["recoverable"] != true {
		t.Errorf("error %s", m.Raw)
	}
	c.send(map[string]any{"type": "session.configure", "model_tts": "kokoro-v1"})
	c.send(map[string]any{"type": "tts.speak", "text": "  ", "request_id": "r2"})
	c.send(map[string]any{"type": "tts.speak", "text": "still alive", "request_id": "r3"})
	if m := c.expect("tts.speaking_start"); m.str("request_id") != "r3" {
		t.Errorf("start %s: nothing must come for r2", m.Raw)
	}
	r := s.Sessions()[0]
	if len(r.TTSRequests) != 3 || r.TTSRequests[0].Outcome != "error: model_not_found" || r.TTSRequests[1].Outcome != "silent" || len(r.Rejections) != 0 {
		t.Errorf("TTS %+v Rejections %q", r.TTSRequests, r.Rejections)
	}
}

func TestOpenVoiceMutedDuringTTS(t *testing.T) {
	_, c := dialOV(t, Options{OpenVoiceSynthesisSpeed: 1})
	c.send(map[string]any{"type": "tts.speak", "text": strings.Repeat("w ", 40)})
	c.expect("tts.speaking_start")
	sendPCM(c, append(tone(1, 0.3), silence(0.6)...), 16000)
	c.send(map[string]any{"type": "tts.cancel"})
	readTTS(t, c) // fails on any vad/transcript event
	// after TTS, STT hears again
	sendPCM(c, append(tone(0.5, 0.3), silence(0.5)...), 16000)
	c.expect("vad.speech_start")
}

// The server's flow control: audio faster than 1.2× real time gets session.rate_limit, a backlog
// of more than 10 s gets its frames dropped (and counted).
func TestOpenVoiceFlowControl(t *testing.T) {
	t.Run("rate limit", func(t *testing.T) {
		s, c := dialOV(t, Options{})
		sendPCM(c, silence(0.04), 16000)
		time.Sleep(600 * time.Millisecond) // past the server's first half second
		sendPCM(c, silence(5), 16000)      // 5 s at once: far above 1.2× real time
		m := c.expect("session.rate_limit")
		if m.num("delay_ms") < 1 || m.str("message") == "" {
			t.Errorf("rate_limit %s", m.Raw)
		}
		c.send(map[string]any{"type": "tts.speak", "text": "x"}) // answered once every frame before it is taken
		c.until("tts.speaking_start", "session.rate_limit")
		if r := s.Sessions()[0]; len(r.Audio) != 5*16000+640 || r.DroppedFrames != 0 {
			t.Errorf("Audio %d, DroppedFrames %d: a rate limit drops nothing", len(r.Audio), r.DroppedFrames)
		}
	})
	t.Run("frames dropped", func(t *testing.T) {
		s, c := dialOV(t, Options{})
		sendPCM(c, silence(20), 16000) // 20 s at once: 10 s of backlog are too much
		if m := c.until("session.frames_dropped", "session.rate_limit"); m.num("dropped_ms") != 40 {
			t.Errorf("frames_dropped %s", m.Raw)
		}
		c.send(map[string]any{"type": "tts.speak", "text": "x"})
		c.until("tts.speaking_start", "session.rate_limit", "session.frames_dropped")
		r := s.Sessions()[0]
		if r.DroppedFrames == 0 || len(r.Audio)+r.DroppedFrames*640 != 20*16000 {
			t.Errorf("Audio %d samples, DroppedFrames %d", len(r.Audio), r.DroppedFrames)
		}
	})
}

// A minute without binary audio ends the session (JSON does not count); this one closes the socket.
func TestOpenVoiceInactivity(t *testing.T) {
	s, c := dialOV(t, Options{OpenVoiceInactivity: 300 * time.Millisecond})
	c.send(map[string]any{"type": "session.configure", "language": "en"})
	msgs, code := c.readUntilClose()
	if len(msgs) != 1 || msgs[0].str("reason") != "inactivity_timeout" || msgs[0].M["total_duration_ms"] == nil || code != websocket.CloseNormalClosure {
		t.Errorf("%d msgs (%v), close %d", len(msgs), msgs, code)
	}
	if r := waitEnded(t, s, 0); r.EndReason != "inactivity_timeout" {
		t.Errorf("EndReason %q", r.EndReason)
	}
}

func TestOpenVoiceCancelSession(t *testing.T) {
	s, c := dialOV(t, Options{OpenVoiceSynthesisSpeed: 1})
	c.send(map[string]any{"type": "tts.speak", "text": strings.Repeat("w ", 40), "request_id": "r"})
	c.expect("tts.speaking_start")
	c.send(map[string]any{"type": "session.cancel"})
	for {
		m := c.next()
		if m.Binary {
			continue
		}
		if m.typ() != "session.closed" || m.str("reason") != "cancelled" {
			t.Fatalf("got %s, want session.closed{cancelled}", m.Raw)
		}
		break
	}
	// The synthesis is cancelled after session.closed, as the real server's clean-up does.
	if m := c.expect("tts.speaking_end"); m.M["cancelled"] != true {
		t.Errorf("end %s", m.Raw)
	}
	c.pingSilent()
	c.ws.Close()
	if r := waitEnded(t, s, 0); r.EndReason != "cancelled" || len(r.Rejections) != 0 {
		t.Errorf("EndReason %q Rejections %q", r.EndReason, r.Rejections)
	}
}

// TestOpenVoiceUnrecorded: an OpenVoice session on a server that keeps no growing records
// hears, speaks and ends a TTS request as always, and keeps neither its audio nor its requests.
func TestOpenVoiceUnrecorded(t *testing.T) {
	s, c := dialOV(t, Options{Unrecorded: true})
	c.sendBinary(pcm16(make([]float32, 4800)))
	c.send(map[string]any{"type": "tts.speak", "text": "one two"})
	c.expect("tts.speaking_start")
	for m := c.next(); m.typ() != "tts.speaking_end"; m = c.next() {
	}
	c.send(map[string]any{"type": "tts.speak", "text": "three"})
	c.expect("tts.speaking_start")
	c.send(map[string]any{"type": "tts.cancel"})
	for m := c.next(); m.typ() != "tts.speaking_end"; m = c.next() {
	}
	r := s.Sessions()[0]
	if len(r.Audio)+len(r.Appends)+len(r.TTSRequests)+len(r.Received)+len(r.Sent) != 0 || len(r.Rejections) != 0 {
		t.Errorf("kept %d samples, %d appends, %d TTS requests, %d and %d messages; rejections %v",
			len(r.Audio), len(r.Appends), len(r.TTSRequests), len(r.Received), len(r.Sent), r.Rejections)
	}
}
