package realtimetest

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// The OpenVoice client commands as the real server (usemacaw/macaw-openvoice) reads them: each
// type is validated against its model, unknown keys are silently ignored, and every problem is
// answered with a recoverable error. Only two inputs make its handler raise, which ends the
// session with error{internal_error, recoverable:false}.

const (
	evSessionCancel = "session.cancel"
	evCommit        = "input_audio_buffer.commit"

	// ovMaxText is the server's tts.speak text limit (TTS_MAX_TEXT_LENGTH).
	ovMaxText = 4096
	// ovMinTimeoutMS: the server accepts any positive silence/hold timeout, then its state machine
	// refuses one under a second by raising, which ends the session.
	ovMinTimeoutMS = 1000
)

// ovMsg is one decoded OpenVoice client text frame.
type ovMsg struct {
	Type      string
	Configure *ovConfigure
	Speak     *ovSpeak
	// Ignored lists the keys the real server drops without a word (unknown to its model).
	Ignored []string
}

type ovConfigure struct {
	Sensitivity                     string
	Language                        *string
	HotWords                        []string
	HotWordsSet                     bool
	TTSModel                        *string
	SilenceTimeoutMS, HoldTimeoutMS int // 0: not given
	MaxSegmentMS, InputSampleRate   int
	EnableITN, PartialTranscripts   *bool
	HotWordBoost                    *float64
	Denoise                         *bool
	DenoiseEngine                   *string
}

type ovSpeak struct {
	Text, Voice, RequestID string
	Speed                  float64
}

// ovError is how the real server answers a command it cannot take. code and msg are what it
// sends; fatal errors make its handler raise: error{internal_error, recoverable:false}, and the
// session is over.
type ovError struct {
	code, msg string
	fatal     bool
}

func (e *ovError) Error() string { return e.msg }

// The server's models (server/models/events.py): field name → kind.
var ovFields = map[string]map[string]string{
	evConfigure: {"vad_sensitivity": "sensitivity", "silence_timeout_ms": "posint", "hold_timeout_ms": "posint",
		"max_segment_duration_ms": "posint", "language": "string", "hot_words": "strings", "hot_word_boost": "number",
		"enable_partial_transcripts": "bool", "enable_itn": "bool", "preprocessing": "preprocessing",
		"input_sample_rate": "posint", "model_tts": "string"},
	evTTSSpeak: {"text": "text", "voice": "string", "speed": "speed", "request_id": "string", "language": "string",
		"ref_audio": "string", "ref_text": "string", "instruction": "string", "codec": "codec"},
	evTTSCancel:     {"request_id": "string"},
	evSessionCancel: {},
	evSessionClose:  {},
	evCommit:        {},
}

func ovCommandList() string {
	names := make([]string, 0, len(ovFields))
	for k := range ovFields {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// decodeOpenVoice decodes an OpenVoice client text frame as the real server does. Errors are
// *ovError.
func decodeOpenVoice(data []byte) (ovMsg, error) {
	var raw any
	if err := json.Unmarshal(data, &raw); err != nil {
		return ovMsg{}, &ovError{code: "malformed_json", msg: fmt.Sprintf("Invalid JSON: %v", err)}
	}
	o, ok := raw.(map[string]any)
	if !ok {
		return ovMsg{}, &ovError{code: "malformed_json", msg: "Expected JSON object, got " + jsonKind(raw)}
	}
	t, present := o["type"]
	switch t := t.(type) {
	case nil:
		if !present || t == nil {
			return ovMsg{}, &ovError{code: "unknown_command", msg: "Missing required field: 'type'"}
		}
	case []any, map[string]any:
		// An unhashable type makes the server's dispatch table lookup raise.
		return ovMsg{}, &ovError{code: "internal_error", msg: fmt.Sprintf("type is %s: the real server's handler raises (Internal server error)", jsonKind(t)), fatal: true}
	}
	typ, _ := t.(string)
	fields, known := ovFields[typ]
	if !known {
		return ovMsg{}, &ovError{code: "unknown_command", msg: fmt.Sprintf("Unknown command type: '%v' (the server knows %s)", t, ovCommandList())}
	}
	m := ovMsg{Type: typ}
	var problems []string
	for _, k := range sortedKeys(o) {
		if k == "type" {
			continue
		}
		kind, ok := fields[k]
		if !ok {
			m.Ignored = append(m.Ignored, k)
			continue
		}
		if p := checkField(k, kind, o[k]); p != "" {
			problems = append(problems, p)
		}
	}
	if typ == evTTSSpeak {
		if _, ok := o["text"]; !ok {
			problems = append(problems, "text: field required")
		}
	}
	if len(problems) > 0 {
		return m, &ovError{code: "validation_error", msg: fmt.Sprintf("Validation error for '%s': %s", typ, strings.Join(problems, "; "))}
	}
	switch typ {
	case evConfigure:
		m.Configure = configureFrom(o)
		for _, k := range []string{"silence_timeout_ms", "hold_timeout_ms"} {
			if v := intField(o, k); v > 0 && v < ovMinTimeoutMS {
				return m, &ovError{code: "internal_error", fatal: true,
					msg: fmt.Sprintf("%s %d is under 1000: the real server's state machine raises (Internal server error) and the session ends", k, v)}
			}
		}
		if p, ok := o["preprocessing"].(map[string]any); ok {
			for _, k := range sortedKeys(p) {
				if k != "denoise" && k != "denoise_engine" {
					m.Ignored = append(m.Ignored, "preprocessing."+k)
				}
			}
		}
	case evTTSSpeak:
		s := &ovSpeak{Text: o["text"].(string), Voice: "default", Speed: 1}
		if v, ok := o["voice"].(string); ok {
			s.Voice = v
		}
		if v, ok := o["request_id"].(string); ok {
			s.RequestID = v
		}
		if v, ok := o["speed"].(float64); ok {
			s.Speed = v
		}
		m.Speak = s
	}
	return m, nil
}

// checkField validates one known field against its kind; "" when it is acceptable. null is
// always acceptable (every optional field of the server's models takes None), except text.
func checkField(key, kind string, v any) string {
	if v == nil {
		if kind == "text" {
			return "text: input should be a valid string"
		}
		return ""
	}
	bad := func(want string) string { return fmt.Sprintf("%s: input should be %s, got %s", key, want, jsonKind(v)) }
	switch kind {
	case "string", "text":
		s, ok := v.(string)
		switch {
		case !ok:
			return bad("a valid string")
		case kind == "text" && (len(s) < 1 || len([]rune(s)) > ovMaxText):
			return fmt.Sprintf("text: length %d is outside 1..%d", len([]rune(s)), ovMaxText)
		}
	case "sensitivity":
		if s, ok := v.(string); !ok || (s != "high" && s != "normal" && s != "low") {
			return fmt.Sprintf("%s: input should be 'high', 'normal' or 'low', got %s", key, clipJSON(v))
		}
	case "posint":
		f, ok := v.(float64)
		switch {
		case !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53:
			return bad("a valid integer")
		case f <= 0:
			return fmt.Sprintf("%s: input should be greater than 0, got %v", key, f)
		}
	case "number":
		if _, ok := v.(float64); !ok {
			return bad("a valid number")
		}
	case "speed":
		f, ok := v.(float64)
		if !ok || f < 0.25 || f > 4 {
			return fmt.Sprintf("%s: input should be a number in 0.25..4.0, got %s", key, clipJSON(v))
		}
	case "bool":
		if _, ok := v.(bool); !ok {
			return bad("a valid boolean")
		}
	case "strings":
		a, ok := v.([]any)
		if !ok {
			return bad("a valid list")
		}
		for i, e := range a {
			if _, ok := e.(string); !ok {
				return fmt.Sprintf("%s.%d: input should be a valid string, got %s", key, i, jsonKind(e))
			}
		}
	case "codec":
		if v != "opus" {
			return fmt.Sprintf("%s: input should be 'opus', got %s", key, clipJSON(v))
		}
	case "preprocessing":
		p, ok := v.(map[string]any)
		if !ok {
			return bad("a valid dictionary")
		}
		if d, ok := p["denoise"]; ok {
			if _, ok := d.(bool); !ok {
				return "preprocessing.denoise: input should be a valid boolean"
			}
		}
		if e, ok := p["denoise_engine"]; ok {
			if _, ok := e.(string); !ok {
				return "preprocessing.denoise_engine: input should be a valid string"
			}
		}
	}
	return ""
}

func configureFrom(o map[string]any) *ovConfigure {
	c := &ovConfigure{}
	str := func(k string) *string {
		if s, ok := o[k].(string); ok {
			return &s
		}
		return nil
	}
	boolean := func(k string) *bool {
		if b, ok := o[k].(bool); ok {
			return &b
		}
		return nil
	}
	if s := str("vad_sensitivity"); s != nil {
		c.Sensitivity = *s
	}
	c.Language, c.TTSModel = str("language"), str("model_tts")
	if a, ok := o["hot_words"].([]any); ok {
		c.HotWordsSet = true
		c.HotWords = []string{}
		for _, w := range a {
			c.HotWords = append(c.HotWords, w.(string))
		}
	}
	c.SilenceTimeoutMS, c.HoldTimeoutMS = intField(o, "silence_timeout_ms"), intField(o, "hold_timeout_ms")
	c.MaxSegmentMS, c.InputSampleRate = intField(o, "max_segment_duration_ms"), intField(o, "input_sample_rate")
	c.EnableITN, c.PartialTranscripts = boolean("enable_itn"), boolean("enable_partial_transcripts")
	if f, ok := o["hot_word_boost"].(float64); ok {
		c.HotWordBoost = &f
	}
	if p, ok := o["preprocessing"].(map[string]any); ok {
		if b, ok := p["denoise"].(bool); ok {
			c.Denoise = &b
		}
		if s, ok := p["denoise_engine"].(string); ok {
			c.DenoiseEngine = &s
		}
	}
	return c
}

func intField(o map[string]any, k string) int {
	f, _ := o[k].(float64)
	return int(f)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func clipJSON(v any) string {
	b, _ := json.Marshal(v)
	return clip(b)
}
