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

func (o *openVoice) closeMsg(string) (outMsg, bool) { return outMsg{}, false }

type ovFrame struct {
	Type        string  `json:"type"`
	SessionID   string  `json:"session_id"`
	Text        string  `json:"text"`
	Language    string  `json:"language"`
	Duration    float64 `json:"duration"`
	Message     string  `json:"message"`
	Recoverable *bool   `json:"recoverable"`
}

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
	case "error":
		e := &Error{Class: ClassProtocol, Code: "openvoice_error", Event: "error",
			Message: fmt.Sprintf("server error: %s", f.Message)}
		if f.Recoverable != nil && !*f.Recoverable {
			e.Class = ClassRetryable
			e.Message = fmt.Sprintf("server error (not recoverable): %s", f.Message)
			emit(fatalSignal{e})
			return
		}
		emit(serverErrSignal{e})
	default:
		// Unknown events are ignored.
	}
}
