package realtime

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// ChatRequest is one turn of mode=chat (seed 001).
type ChatRequest struct {
	Messages []ChatMessage
	// Stream asks for text/audio deltas before response.done (the server's default is true).
	Stream bool
	// MaxNewTokens and LengthPenalty are generation options; zero leaves the server default.
	MaxNewTokens  int
	LengthPenalty float64
	// ImageMaxSliceNums sets image slicing; zero leaves the server default.
	ImageMaxSliceNums int
	OmniMode          bool
	// TTS asks for speech (24 kHz) besides the text; TTSRefAudio is a 16 kHz reference voice.
	TTS            bool
	TTSRefAudio    []float32
	UseTTSTemplate bool
	EnableThinking bool
}

// ChatMessage is one message; Images are encoded image files (JPEG or PNG).
type ChatMessage struct {
	Role   string // system, user or assistant
	Text   string
	Images [][]byte
}

func encodeChatRequest(r ChatRequest) ([]byte, error) {
	if len(r.Messages) == 0 {
		return nil, fmt.Errorf("chat request: no messages")
	}
	type part struct {
		Type string `json:"type"`
		Text string `json:"text,omitempty"`
		Data string `json:"data,omitempty"`
	}
	msgs := make([]map[string]any, 0, len(r.Messages))
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return nil, fmt.Errorf("chat request: message %d: role %q is not system, user or assistant", i, m.Role)
		}
		if len(m.Images) == 0 {
			msgs = append(msgs, map[string]any{"role": m.Role, "content": m.Text})
			continue
		}
		var parts []part
		if m.Text != "" {
			parts = append(parts, part{Type: "text", Text: m.Text})
		}
		for _, img := range m.Images {
			parts = append(parts, part{Type: "image", Data: base64.StdEncoding.EncodeToString(img)})
		}
		msgs = append(msgs, map[string]any{"role": m.Role, "content": parts})
	}
	input := map[string]any{
		"messages":         msgs,
		"streaming":        r.Stream,
		"omni_mode":        r.OmniMode,
		"use_tts_template": r.UseTTSTemplate,
		"enable_thinking":  r.EnableThinking,
	}
	gen := map[string]any{}
	if r.MaxNewTokens > 0 {
		gen["max_new_tokens"] = r.MaxNewTokens
	}
	if r.LengthPenalty > 0 {
		gen["length_penalty"] = r.LengthPenalty
	}
	if len(gen) > 0 {
		input["generation"] = gen
	}
	if r.ImageMaxSliceNums > 0 {
		input["image"] = map[string]any{"max_slice_nums": r.ImageMaxSliceNums}
	}
	tts := map[string]any{"enabled": r.TTS}
	if len(r.TTSRefAudio) > 0 {
		tts["ref_audio_data"] = string(appendFloat32Base64(nil, r.TTSRefAudio))
	}
	input["tts"] = tts
	return json.Marshal(map[string]any{"type": "input.append", "input": input})
}

// Reply is the outcome of one turn-based request.
type Reply struct {
	Text       string
	Audio      []float32 // speech, if any, at SampleRate
	SampleRate int
	SessionID  string
}

// Chat runs one chat-mode turn on its own connection: dial (mode=chat), ask, collect the reply,
// close with "turn_done". onEvent, if set, sees every event as it arrives (for streaming output).
func Chat(ctx context.Context, cfg Config, r ChatRequest, onEvent func(Event)) (*Reply, error) {
	cfg.Mode = ModeChat
	if cfg.Dialect == DialectOpenVoice || cfg.Dialect == DialectLegacy {
		return nil, &Error{Class: ClassConfig, Code: CodeConfig,
			Message: fmt.Sprintf("chat: the %s dialect has no chat mode; chat needs the current dialect", cfg.Dialect)}
	}
	s, err := Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer s.Close(context.Background(), "turn_done")
	if err := s.Ask(ctx, r); err != nil {
		return nil, asError(err, "send chat request")
	}
	reply := &Reply{SessionID: s.Info().ID, SampleRate: OutputSampleRate}
	var text strings.Builder
	err = collectReply(ctx, s, "chat", onEvent, func(ev Event) (bool, error) {
		switch ev := ev.(type) {
		case TextDelta:
			text.WriteString(ev.Text)
		case AudioDelta:
			reply.Audio = append(reply.Audio, ev.Samples...)
		case TurnDone:
			reply.Text = ev.Text
			if reply.Text == "" {
				reply.Text = text.String()
			}
			reply.Audio = append(reply.Audio, ev.Audio...)
			if reply.Text == "" && len(reply.Audio) == 0 {
				return true, &Error{Class: ClassRetryable, Code: CodeEmptyReply, Event: "response.done",
					Message: "chat: the turn ended with neither text nor audio"}
			}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return reply, nil
}

// collectReply feeds a one-shot request's events to onEvent and handle until handle says the reply
// is complete (or fails), the session ends, or ctx is done.
func collectReply(ctx context.Context, s Session, what string, onEvent func(Event), handle func(Event) (bool, error)) error {
	for {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				return endedEarly(s, what)
			}
			if onEvent != nil {
				onEvent(ev)
			}
			if _, closed := ev.(Closed); closed {
				return endedEarly(s, what)
			}
			if e, ok := ev.(ErrorEvent); ok && e.Err.Event == "error" {
				// The server's own error ends the request at once (a bad frame does not).
				return e.Err
			}
			if done, err := handle(ev); done || err != nil {
				return err
			}
		case <-ctx.Done():
			return &Error{Class: ClassRetryable, Code: CodeClosed, Err: ctx.Err(), Message: what + ": gave up waiting for the reply"}
		}
	}
}

// Synthesize speaks on an OpenVoice server (tts.speak) and returns the audio, at the server's
// TTS rate (Config.OpenVoiceTTSRate). It ends at the request's tts.speaking_end; a server error
// ends it at once (a failed synthesis sends nothing else), and a cancelled synthesis is an error.
func Synthesize(ctx context.Context, cfg Config, r Speech, onEvent func(Event)) (*Reply, error) {
	if cfg.Dialect != DialectOpenVoice {
		return nil, &Error{Class: ClassConfig, Code: CodeConfig, Message: "synthesize: needs the openvoice dialect"}
	}
	s, err := Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer s.Close(context.Background(), "done")
	id, err := s.Speak(ctx, r)
	if err != nil {
		return nil, asError(err, "send tts.speak")
	}
	reply := &Reply{SessionID: s.Info().ID, SampleRate: cfg.withDefaults().OpenVoiceTTSRate}
	err = collectReply(ctx, s, "synthesize", onEvent, func(ev Event) (bool, error) {
		switch ev := ev.(type) {
		case AudioDelta:
			reply.Audio = append(reply.Audio, ev.Samples...)
		case TTSState:
			switch {
			case ev.Speaking || ev.RequestID != id:
			case ev.Cancelled:
				return true, &Error{Class: ClassRetryable, Code: CodeSpeechCancelled, Event: "tts.speaking_end",
					Message: "synthesize: the server cancelled the speech before it was complete"}
			default:
				reply.Text = r.Text
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return reply, nil
}

func endedEarly(s Session, what string) error {
	<-s.Done()
	if err := s.Err(); err != nil {
		return fmt.Errorf("%s: session ended before the reply was complete: %w", what, err)
	}
	return &Error{Class: ClassRetryable, Code: CodeSessionClosed, Message: what + ": session ended before the reply was complete"}
}
