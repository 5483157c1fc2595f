package realtime

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// openVoice is the Macaw OpenVoice protocol as its server (usemacaw/macaw-openvoice) speaks it:
// binary PCM16 frames up, flat JSON commands, transcripts and binary PCM16 TTS audio down. There
// is no queue; the server greets at once.
type openVoice struct {
	ttsRate int
	// frame is the most samples one binary frame carries: the server's VAD judges each frame as
	// a whole, so audio goes out in small frames whatever the chunk size.
	frame int
	// samples holds TTS sample buffers the caller handed back (nil: each frame allocates).
	samples *samplePool
}

func (o *openVoice) queued() bool { return false }

// initMsgs sends session.configure with the names the server reads (it drops unknown keys
// without a word), only when something is set.
func (o *openVoice) initMsgs(in Init) ([]outMsg, error) {
	msg := map[string]any{}
	if in.VADSensitivity != "" {
		msg["vad_sensitivity"] = in.VADSensitivity
	}
	if in.Language != "" {
		msg["language"] = in.Language // the server only logs it; the query parameter applies
	}
	if len(in.HotWords) > 0 {
		msg["hot_words"] = in.HotWords
	}
	if in.TTSModel != "" {
		msg["model_tts"] = in.TTSModel
	}
	if in.SilenceTimeout > 0 {
		msg["silence_timeout_ms"] = in.SilenceTimeout.Milliseconds()
	}
	if in.HoldTimeout > 0 {
		msg["hold_timeout_ms"] = in.HoldTimeout.Milliseconds()
	}
	if in.EnableITN != nil {
		msg["enable_itn"] = *in.EnableITN
	}
	if len(msg) == 0 {
		return nil, nil // the server's defaults
	}
	msg["type"] = "session.configure"
	return jsonMsgs(msg)
}

// chunk sends the audio as PCM16 in binary frames of at most o.frame samples; video frames and
// force_listen have no equivalent.
func (o *openVoice) chunk(ch Chunk, _ Init, buf []byte) (outMsg, error) {
	if len(ch.Audio) == 0 {
		return outMsg{}, fmt.Errorf("send chunk: no audio")
	}
	m := outMsg{binary: true, data: appendPCM16(buf[:0], ch.Audio)}
	if n := (len(ch.Audio) - 1) / o.frame; n > 0 {
		m.splits = make([]int, n)
		for i := range m.splits {
			m.splits[i] = 2 * (i + 1) * o.frame
		}
	}
	return m, nil
}

func (o *openVoice) chat(ChatRequest) (outMsg, error) {
	return outMsg{}, fmt.Errorf("ask: an OpenVoice server has no chat mode")
}

func (o *openVoice) speak(r Speech) (outMsg, string, error) {
	if r.Text == "" {
		return outMsg{}, "", fmt.Errorf("speak: empty text")
	}
	if r.Speed != 0 && (r.Speed < 0.25 || r.Speed > 4) {
		return outMsg{}, "", fmt.Errorf("speak: speed %v is outside 0.25..4", r.Speed)
	}
	id := r.RequestID
	if id == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		id = "omnisat_" + hex.EncodeToString(b[:])
	}
	msg := map[string]any{"type": "tts.speak", "text": r.Text, "request_id": id}
	if r.Voice != "" {
		msg["voice"] = r.Voice
	}
	if r.Speed != 0 {
		msg["speed"] = r.Speed
	}
	b, err := json.Marshal(msg)
	return outMsg{data: b}, id, err
}

func (o *openVoice) cancelSpeech() (outMsg, error) {
	return outMsg{data: []byte(`{"type":"tts.cancel"}`)}, nil
}

func (o *openVoice) commit() (outMsg, error) {
	return outMsg{data: []byte(`{"type":"input_audio_buffer.commit"}`)}, nil
}

// closeMsg: session.close, answered with session.closed{reason:"client_request"}; for the reason
// ReasonCancel, session.cancel (answered with reason "cancelled"). Either way the server leaves
// the socket to us.
func (o *openVoice) closeMsg(reason string) (outMsg, bool) {
	if reason == ReasonCancel {
		return outMsg{data: []byte(`{"type":"session.cancel"}`)}, true
	}
	return outMsg{data: []byte(`{"type":"session.close"}`)}, true
}

type ovFrame struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Text      string `json:"text"`
	Language  string `json:"language"`
	// Numbers are float64 so that 12.0 or a float where the server means an int still reads.
	SegmentID   float64  `json:"segment_id"`
	StartMS     float64  `json:"start_ms"`
	EndMS       float64  `json:"end_ms"`
	TimestampMS *float64 `json:"timestamp_ms"`
	Timestamp   float64  `json:"timestamp"` // seed document: seconds
	Confidence  float64  `json:"confidence"`
	Words       []ovWord `json:"words"`
	RequestID   string   `json:"request_id"`
	DurationMS  float64  `json:"duration_ms"`
	Cancelled   bool     `json:"cancelled"`
	DelayMS     float64  `json:"delay_ms"`
	DroppedMS   float64  `json:"dropped_ms"`
	TotalMS     float64  `json:"total_duration_ms"`
	Segments    float64  `json:"segments_transcribed"`
	Message     string   `json:"message"`
	Code        string   `json:"code"`
	Recoverable *bool    `json:"recoverable"`
	Reason      string   `json:"reason"`
	Duration    float64  `json:"duration"` // seed document: seconds
}

type ovWord struct {
	Word  string  `json:"word"`
	Start float64 `json:"start"` // seconds
	End   float64 `json:"end"`
}

// ovConfigCodes are the unrecoverable error codes that mean the session's settings are wrong
// (the real server sends them at connect, then closes with 1008).
var ovConfigCodes = map[string]bool{"model_not_found": true, "invalid_request": true}

func millis(ms float64) time.Duration {
	if ms <= 0 || ms > 1e12 {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// stamp is an event's stream time: timestamp_ms, or the seed document's timestamp in seconds.
func (f *ovFrame) stamp() time.Duration {
	if f.TimestampMS != nil {
		return millis(*f.TimestampMS)
	}
	return seconds(f.Timestamp)
}

func (f *ovFrame) transcript(final bool) Transcript {
	t := Transcript{Text: f.Text, Final: final, SegmentID: int(f.SegmentID)}
	if !final {
		t.Timestamp = f.stamp()
		return t
	}
	t.Language, t.Confidence = f.Language, f.Confidence
	t.Start, t.End = millis(f.StartMS), millis(f.EndMS)
	for _, w := range f.Words {
		t.Words = append(t.Words, Word{Text: w.Word, Start: seconds(w.Start), End: seconds(w.End)})
	}
	// The server sends no duration: the speech's span is its end minus its start, else the span
	// of its words (the seed document's duration, in seconds, where a server sends it).
	switch n := len(t.Words); {
	case t.End > t.Start:
		t.Duration = t.End - t.Start
	case n > 0 && t.Words[n-1].End > t.Words[0].Start:
		t.Duration = t.Words[n-1].End - t.Words[0].Start
	default:
		t.Duration = seconds(f.Duration)
	}
	return t
}

func (o *openVoice) decode(binary bool, data []byte, emit func(Event)) {
	if binary {
		samples, err := decodePCM16Into(o.samples, data)
		if err != nil {
			emit(protocolError("binary", CodeBadField, "TTS audio dropped: %v", err))
			return
		}
		if len(samples) > 0 {
			emit(AudioDelta{Samples: samples, SampleRate: o.ttsRate})
		}
		return
	}
	var f ovFrame
	if err := json.Unmarshal(data, &f); err != nil {
		emit(protocolError(peekType(data), CodeInvalidJSON, "server frame is not valid JSON: %v", err))
		return
	}
	switch f.Type {
	case "session.created":
		emit(createdSignal{Info{ID: f.SessionID}})
	case "vad.speech_start", "vad.speech_end":
		emit(VAD{Speaking: f.Type == "vad.speech_start", Timestamp: f.stamp()})
	case "transcript.partial", "transcript.final":
		emit(f.transcript(f.Type == "transcript.final"))
	case "tts.speaking_start":
		emit(TTSState{Speaking: true, RequestID: f.RequestID})
	case "tts.speaking_end":
		emit(TTSState{RequestID: f.RequestID, Cancelled: f.Cancelled, Duration: millis(f.DurationMS)})
	case "session.rate_limit":
		emit(rateLimitSignal{RateLimit{Delay: millis(f.DelayMS), Message: f.Message}})
	case "session.frames_dropped":
		emit(FramesDropped{Dropped: millis(f.DroppedMS), Message: f.Message})
	case "session.closed":
		emit(closedSignal{reason: f.Reason, duration: millis(f.TotalMS), segments: int(f.Segments)})
	case "error":
		code := f.Code
		if code == "" {
			code = "openvoice_error"
		}
		e := &Error{Class: ClassProtocol, Code: code, Event: "error",
			Message: fmt.Sprintf("server error %s: %s", code, f.Message)}
		switch {
		case f.Recoverable == nil || *f.Recoverable:
			emit(serverErrSignal{e}) // the session goes on
		case ovConfigCodes[code]:
			e.Class = ClassConfig
			e.Message = fmt.Sprintf("the server refused the session: %s: %s; check server.model", code, f.Message)
			emit(fatalSignal{e})
		default:
			e.Class = ClassRetryable
			e.Message = fmt.Sprintf("server error %s (not recoverable): %s", code, f.Message)
			emit(fatalSignal{e})
		}
	default:
		// Unknown events (session.hold, ...) are ignored.
	}
}
