package realtime

import (
	"encoding/json"
	"fmt"
)

// openVoice is the Macaw OpenVoice protocol (seed 004): binary PCM16 frames up, JSON control,
// transcripts, and binary PCM16 TTS audio down. There is no queue and no session.close.
type openVoice struct {
	ttsRate int
}

func (o *openVoice) queued() bool { return false }

func (o *openVoice) initMsgs(in Init) ([]outMsg, error) {
	if in.VADSensitivity == "" && in.Language == "" && len(in.HotWords) == 0 && in.TTSModel == "" {
		return nil, nil // the server's defaults
	}
	msg := map[string]any{"type": "session.configure"}
	if in.VADSensitivity != "" {
		msg["vad"] = map[string]string{"sensitivity": in.VADSensitivity}
	}
	if in.Language != "" {
		msg["language"] = in.Language
	}
	if len(in.HotWords) > 0 {
		msg["hot_words"] = in.HotWords
	}
	if in.TTSModel != "" {
		msg["tts_model"] = in.TTSModel
	}
	return jsonMsgs(msg)
}

// chunk sends the audio as one PCM16 binary frame; frames and force_listen have no equivalent.
func (o *openVoice) chunk(ch Chunk, _ Init) (outMsg, error) {
	if len(ch.Audio) == 0 {
		return outMsg{}, fmt.Errorf("send chunk: no audio")
	}
	return outMsg{binary: true, data: appendPCM16(make([]byte, 0, 2*len(ch.Audio)), ch.Audio)}, nil
}

func (o *openVoice) chat(ChatRequest) (outMsg, error) {
	return outMsg{}, fmt.Errorf("ask: an OpenVoice server has no chat mode")
}

func (o *openVoice) speak(text, voice string) (outMsg, error) {
	if text == "" {
		return outMsg{}, fmt.Errorf("speak: empty text")
	}
	msg := map[string]string{"type": "tts.speak", "text": text}
	if voice != "" {
		msg["voice"] = voice
	}
	b, err := json.Marshal(msg)
	return outMsg{data: b}, err
}

func (o *openVoice) cancelSpeech() (outMsg, error) {
	return outMsg{data: []byte(`{"type":"tts.cancel"}`)}, nil
}

// closeMsg: the real server answers session.close with session.closed{reason:"client_request"}
// (and leaves the socket to us). It takes no reason.
func (o *openVoice) closeMsg(string) (outMsg, bool) {
	return outMsg{data: []byte(`{"type":"session.close"}`)}, true
}

type ovFrame struct {
	Type        string  `json:"type"`
	SessionID   string  `json:"session_id"`
	Text        string  `json:"text"`
	Language    string  `json:"language"`
	Duration    float64 `json:"duration"`
	Message     string  `json:"message"`
	Code        string  `json:"code"`
	Recoverable *bool   `json:"recoverable"`
	Reason      string  `json:"reason"`
}

// ovConfigCodes are the unrecoverable error codes that mean the session's settings are wrong
// (the real server sends them at connect, then closes with 1008).
var ovConfigCodes = map[string]bool{"model_not_found": true, "invalid_request": true}

func (o *openVoice) decode(binary bool, data []byte, emit func(Event)) {
	if binary {
		samples, err := decodePCM16(data)
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
	case "vad.speech_start":
		emit(VAD{Speaking: true})
	case "vad.speech_end":
		emit(VAD{Speaking: false})
	case "transcript.partial":
		emit(Transcript{Text: f.Text})
	case "transcript.final":
		emit(Transcript{Text: f.Text, Final: true, Language: f.Language, Duration: seconds(f.Duration)})
	case "tts.speaking_start":
		emit(TTSState{Speaking: true})
	case "tts.speaking_end":
		emit(TTSState{Speaking: false})
	case "session.closed":
		emit(closedSignal{reason: f.Reason})
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
		// Unknown events are ignored.
	}
}
