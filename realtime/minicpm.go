package realtime

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// newCodec makes the codec for cfg's dialect; reply audio is decoded into buffers from pool.
func newCodec(cfg Config, pool *samplePool) codec {
	switch cfg.Dialect {
	case DialectLegacy:
		return &miniCPM{legacy: true, mode: cfg.Mode, samples: pool}
	case DialectOpenVoice:
		return &openVoice{ttsRate: cfg.OpenVoiceTTSRate, frame: cfg.AudioFrameSamples(), samples: pool}
	default:
		return &miniCPM{mode: cfg.Mode, samples: pool}
	}
}

// miniCPM is the MiniCPM-o gateway protocol in both of its dialects. They share the queue, the
// close and the error events, and differ in init, input and output framing (see PROTOCOL-FACTS).
type miniCPM struct {
	legacy bool
	mode   Mode

	// The fast path's scratch (fastframe.go), reused from frame to frame: the frame and what
	// its pointers point at, the members seen, and the ids last seen.
	frame                                      miniFrame
	metrics                                    wireMetrics
	audio                                      decodedAudio
	text                                       string
	kvCache                                    float64
	seen                                       uint32
	lastSessionID, lastResponseID, lastBackend lastString
	// samples holds reply sample buffers the caller handed back (nil: each delta allocates).
	samples *samplePool
}

func (c *miniCPM) queued() bool { return true }

func (c *miniCPM) dialect() Dialect {
	if c.legacy {
		return DialectLegacy
	}
	return DialectCurrent
}

func (c *miniCPM) initMsgs(in Init) ([]outMsg, error) {
	if c.legacy {
		session := map[string]any{"instructions": in.Instructions}
		if in.MaxSliceNums > 0 {
			session["max_slice_nums"] = in.MaxSliceNums
		}
		if len(in.RefAudio) > 0 {
			session["ref_audio"] = string(appendFloat32Base64(nil, in.RefAudio))
		}
		if len(in.TTSRefAudio) > 0 {
			session["tts_ref_audio"] = string(appendFloat32Base64(nil, in.TTSRefAudio))
		}
		return jsonMsgs(map[string]any{"type": "session.update", "session": session})
	}
	payload := map[string]any{}
	if c.mode != ModeChat {
		if in.Instructions != "" {
			payload["system_prompt"] = in.Instructions
		}
		if len(in.Config) > 0 {
			payload["config"] = in.Config
		}
		// The C++ backend reads reference audio only from payload.voice.
		voice := map[string]any{}
		if len(in.RefAudio) > 0 {
			voice["ref_audio_base64"] = string(appendFloat32Base64(nil, in.RefAudio))
		}
		if len(in.TTSRefAudio) > 0 {
			voice["tts_ref_audio_base64"] = string(appendFloat32Base64(nil, in.TTSRefAudio))
		}
		if len(voice) > 0 {
			payload["voice"] = voice
		}
	}
	return jsonMsgs(map[string]any{"type": "session.init", "payload": payload})
}

func jsonMsgs(v any) ([]outMsg, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return []outMsg{{data: b}}, nil
}

// chunk builds input.append (current) or input_audio_buffer.append (legacy) by hand: the audio is
// base64-encoded straight into the frame, with no intermediate strings.
func (c *miniCPM) chunk(ch Chunk, in Init, buf []byte) (outMsg, error) {
	if len(ch.Audio) < MinChunkSamples {
		return outMsg{}, fmt.Errorf("send chunk: %d samples is under the server minimum of %d (250 ms at 16 kHz)", len(ch.Audio), MinChunkSamples)
	}
	if len(ch.Frames) > 0 && c.mode != ModeVideo {
		return outMsg{}, fmt.Errorf("send chunk: video frames in mode=%s; only mode=video takes them", c.mode)
	}
	slices := ch.MaxSliceNums
	if slices == 0 {
		slices = in.MaxSliceNums
	}
	if slices < 0 || slices > 9 {
		return outMsg{}, fmt.Errorf("send chunk: max_slice_nums %d is outside 1..9", slices)
	}
	size := 96 + (len(ch.Audio)*4+2)/3*4
	for _, f := range ch.Frames {
		size += 3 + (len(f)+2)/3*4
	}
	b := buf[:0]
	if cap(b) < size {
		// A quarter's headroom: the next chunk's JPEG is a little larger as often as not, and
		// it then fits in this buffer (handed back as a spare) instead of a new one.
		b = make([]byte, 0, size+size/4)
	}
	if c.legacy {
		b = append(b, `{"type":"input_audio_buffer.append","audio":"`...)
	} else {
		b = append(b, `{"type":"input.append","input":{"audio":"`...)
	}
	b = appendFloat32Base64(b, ch.Audio)
	b = append(b, '"')
	if len(ch.Frames) > 0 {
		b = append(b, `,"video_frames":[`...)
		for i, f := range ch.Frames {
			if len(f) == 0 {
				return outMsg{}, fmt.Errorf("send chunk: video frame %d is empty", i)
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = appendBase64(b, f)
			b = append(b, '"')
		}
		b = append(b, ']')
	}
	b = append(b, `,"force_listen":`...)
	b = strconv.AppendBool(b, ch.ForceListen)
	if slices > 0 {
		b = append(b, `,"max_slice_nums":`...)
		b = strconv.AppendInt(b, int64(slices), 10)
	}
	if !c.legacy {
		b = append(b, '}')
	}
	b = append(b, '}')
	return outMsg{data: b}, nil
}

func (c *miniCPM) chat(r ChatRequest) (outMsg, error) {
	b, err := encodeChatRequest(r)
	return outMsg{data: b}, err
}

func (c *miniCPM) speak(Speech) (outMsg, string, error) {
	return outMsg{}, "", fmt.Errorf("speak: the %s dialect has no text-to-speech request; use a chat turn with tts enabled", c.dialect())
}

func (c *miniCPM) commit() (outMsg, error) {
	return outMsg{}, fmt.Errorf("commit audio: the %s dialect has none; the model listens to every chunk", c.dialect())
}

func (c *miniCPM) cancelSpeech() (outMsg, error) {
	return outMsg{}, fmt.Errorf("cancel speech: the %s dialect has none; send a chunk with force_listen", c.dialect())
}

func (c *miniCPM) closeMsg(reason string) (outMsg, bool) {
	b, _ := json.Marshal(map[string]string{"type": "session.close", "reason": reason})
	return outMsg{data: b}, true
}

// miniFrame is the union of every server event of both dialects, decoded in one pass.
// Numbers are float64 so that servers writing 1024.0 or integer milliseconds still parse.
type miniFrame struct {
	Type string `json:"type"`

	// queue
	Position       float64 `json:"position"`
	EstimatedWaitS float64 `json:"estimated_wait_s"`
	TicketID       string  `json:"ticket_id"`
	QueueLength    float64 `json:"queue_length"`

	// session
	SessionID    string          `json:"session_id"`
	Mode         string          `json:"mode"`
	Metrics      *wireMetrics    `json:"metrics"`
	ServerSendTS float64         `json:"server_send_ts"`
	Reason       string          `json:"reason"`
	Diagnostic   json.RawMessage `json:"diagnostic"`

	// output
	Kind       string `json:"kind"`
	ResponseID string `json:"response_id"`
	// Text and Audio are nil when absent (or null): a text or audio delta without them is a
	// protocol error, not an empty delta.
	Text          *string  `json:"text"`
	Audio         *string  `json:"audio"`
	EndOfTurn     bool     `json:"end_of_turn"`
	KVCacheLength *float64 `json:"kv_cache_length"`

	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`

	// The fast path (fastframe.go) decodes the audio itself: fastAudio is set then, and Audio
	// is nil.
	fastAudio *decodedAudio
}

// decodedAudio is an audio member decoded outside encoding/json: its samples, or why they do not
// decode, and how long its base64 text was.
type decodedAudio struct {
	samples []float32
	err     error
	size    int
}

// hasAudio reports whether the frame has an audio member (a null one counts as absent).
func (f *miniFrame) hasAudio() bool { return f.fastAudio != nil || f.Audio != nil }

// audioSize is the length of the audio member's base64 text.
func (f *miniFrame) audioSize() int {
	if f.fastAudio != nil {
		return f.fastAudio.size
	}
	return len(str(f.Audio))
}

// samples decodes the audio member.
func (f *miniFrame) samples() ([]float32, error) {
	if f.fastAudio != nil {
		return f.fastAudio.samples, f.fastAudio.err
	}
	return decodeFloat32Base64(stringBytes(str(f.Audio)))
}

type wireMetrics struct {
	KVCacheLength float64 `json:"kv_cache_length"`
	Backend       string  `json:"backend"`
	PrefillMS     float64 `json:"prefill_ms"`
	GenerateMS    float64 `json:"generate_ms"`
	WallClockMS   float64 `json:"wall_clock_ms"`
	NTokens       float64 `json:"n_tokens"`
	NTTSTokens    float64 `json:"n_tts_tokens"`
	VisionSlices  float64 `json:"vision_slices"`
	VisionTokens  float64 `json:"vision_tokens"`
	ChunkIndex    float64 `json:"chunk_index"`
}

func (m *wireMetrics) metrics(sendTS float64) Metrics {
	out := Metrics{ServerSendTS: normaliseTS(sendTS)}
	if m == nil {
		return out
	}
	out.KVCacheLength = int(m.KVCacheLength)
	out.Backend = m.Backend
	out.PrefillMS, out.GenerateMS, out.WallClockMS = m.PrefillMS, m.GenerateMS, m.WallClockMS
	out.NTokens, out.NTTSTokens = int(m.NTokens), int(m.NTTSTokens)
	out.VisionSlices, out.VisionTokens = int(m.VisionSlices), int(m.VisionTokens)
	out.ChunkIndex = int(m.ChunkIndex)
	return out
}

// normaliseTS accepts float seconds or (one mock's) integer milliseconds.
func normaliseTS(ts float64) float64 {
	if ts > 1e11 {
		return ts / 1000
	}
	return ts
}

func protocolError(event, code, format string, args ...any) ErrorEvent {
	return ErrorEvent{Err: &Error{Class: ClassProtocol, Code: code, Event: event, Message: fmt.Sprintf(format, args...)}}
}

// decode takes the fast path for frames with audio (fastframe.go) and the general decoder for the
// rest; both give the same events.
func (c *miniCPM) decode(binary bool, data []byte, emit func(Event)) {
	if !binary {
		if f, ok := c.fastFrame(data); ok {
			c.emitFrame(f, emit)
			return
		}
	}
	c.decodeGeneral(binary, data, emit)
}

// decodeGeneral decodes a frame with encoding/json alone: the reference the fast path matches.
func (c *miniCPM) decodeGeneral(binary bool, data []byte, emit func(Event)) {
	if binary {
		emit(protocolError("binary", CodeBadField, "unexpected binary frame of %d bytes from a MiniCPM-o server", len(data)))
		return
	}
	var f miniFrame
	if err := json.Unmarshal(data, &f); err != nil {
		emit(protocolError(peekType(data), CodeInvalidJSON, "server frame is not valid JSON: %v", err))
		return
	}
	c.emitFrame(&f, emit)
}

// emitFrame turns one decoded frame into events.
func (c *miniCPM) emitFrame(f *miniFrame, emit func(Event)) {
	switch f.Type {
	case "session.queued", "session.queue_update":
		emit(queueSignal{QueueStatus{Position: int(f.Position), EstimatedWait: seconds(f.EstimatedWaitS),
			Length: int(f.QueueLength), Ticket: f.TicketID}})
	case "session.queue_done":
		emit(queueSignal{QueueStatus{Done: true}})
	case "session.created":
		emit(createdSignal{Info{ID: f.SessionID, ServerMode: f.Mode, Metrics: f.Metrics.metrics(f.ServerSendTS)}})
	case "session.closed":
		emit(closedSignal{reason: f.Reason, diagnostic: diagnosticText(f.Diagnostic)})
	case "error":
		emit(serverErrSignal{serverError(f)})
	case "response.output.delta", "response.done":
		if c.legacy {
			emit(fatalSignal{c.otherDialect(f.Type)})
			return
		}
		c.decodeCurrent(f, emit)
	case "response.output_audio.delta", "response.listen":
		if !c.legacy {
			emit(fatalSignal{c.otherDialect(f.Type)})
			return
		}
		c.decodeLegacy(f, emit)
	default:
		// Unknown events (response.step.done, ...) are ignored, never fatal.
	}
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func (c *miniCPM) decodeCurrent(f *miniFrame, emit func(Event)) {
	if f.Type == "response.done" {
		done := TurnDone{Text: str(f.Text), Reason: f.Reason}
		if f.audioSize() > 0 {
			samples, err := f.samples()
			if err != nil {
				emit(protocolError(f.Type, CodeBadField, "response.done audio dropped: %v", err))
			} else {
				done.Audio, done.SampleRate = samples, OutputSampleRate
			}
		}
		emit(done)
		if f.Metrics != nil {
			emit(MetricsUpdate{f.Metrics.metrics(f.ServerSendTS)})
		}
		return
	}
	switch f.Kind {
	case "listen":
		emit(Listen{})
	case "text":
		switch {
		case f.Text == nil:
			emit(protocolError(f.Type, CodeBadField, "a kind:\"text\" delta without text"))
		case *f.Text != "":
			emit(TextDelta{Text: *f.Text, ResponseID: f.ResponseID})
		}
	case "audio":
		if !f.hasAudio() {
			emit(protocolError(f.Type, CodeBadField, "a kind:\"audio\" delta without audio"))
			break
		}
		samples, err := f.samples()
		if err != nil {
			emit(protocolError(f.Type, CodeBadField, "audio delta dropped: %v", err))
		} else if len(samples) > 0 {
			emit(AudioDelta{Samples: samples, SampleRate: OutputSampleRate, ResponseID: f.ResponseID})
		}
	default:
		// Unknown kinds (audio_tokens, ...) carry nothing for us.
	}
	if f.Metrics != nil {
		emit(MetricsUpdate{f.Metrics.metrics(f.ServerSendTS)})
	}
}

func (c *miniCPM) decodeLegacy(f *miniFrame, emit func(Event)) {
	if f.Type == "response.listen" {
		emit(Listen{})
	} else {
		if t := str(f.Text); t != "" {
			emit(TextDelta{Text: t})
		}
		if f.audioSize() > 0 {
			samples, err := f.samples()
			if err != nil {
				emit(protocolError(f.Type, CodeBadField, "audio delta dropped: %v", err))
			} else if len(samples) > 0 {
				emit(AudioDelta{Samples: samples, SampleRate: OutputSampleRate})
			}
		}
		if f.EndOfTurn {
			emit(TurnDone{Reason: "end_of_turn"})
		}
	}
	if f.KVCacheLength != nil || f.Metrics != nil {
		m := f.Metrics.metrics(f.ServerSendTS)
		if f.KVCacheLength != nil {
			m.KVCacheLength = int(*f.KVCacheLength)
		}
		emit(MetricsUpdate{m})
	}
}

func (c *miniCPM) otherDialect(event string) *Error {
	other := DialectLegacy
	if c.legacy {
		other = DialectCurrent
	}
	return &Error{Class: ClassConfig, Code: CodeDialectMismatch, Event: event,
		Message: fmt.Sprintf("the server speaks the %s dialect (it sent %s), but dialect is set to %s; set server.dialect: %s",
			other, event, c.dialect(), other)}
}

func serverError(f *miniFrame) *Error {
	if f.Error == nil {
		return &Error{Class: ClassProtocol, Code: "unknown", Event: "error", Message: "server error without details"}
	}
	return &Error{Class: classifyServerCode(f.Error.Code), Code: f.Error.Code, Event: "error",
		Message: fmt.Sprintf("server error %s: %s", f.Error.Code, f.Error.Message)}
}

// diagnosticText reads session.closed's diagnostic, which is {message} or, on some servers, a string.
func diagnosticText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var d struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &d) == nil && d.Message != "" {
		return d.Message
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// peekType finds the event type of a frame that does not decode, for the error message.
func peekType(data []byte) string {
	var t struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &t) == nil && t.Type != "" {
		return t.Type
	}
	return "unparsable"
}

func seconds(s float64) time.Duration {
	if s <= 0 || s > 1e9 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}
