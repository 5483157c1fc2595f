package realtimetest

// Decoders of client input. They are independent of package realtime on purpose:
// a client bug must not be mirrored by shared code. Every error they return is a
// protocol violation, worded for the person reading a failing test.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Event names of both MiniCPM-o dialects and OpenVoice.
const (
	evSessionInit   = "session.init"
	evInputAppend   = "input.append"
	evSessionClose  = "session.close"
	evSessionUpdate = "session.update"
	evBufferAppend  = "input_audio_buffer.append"
	evConfigure     = "session.configure"
	evTTSSpeak      = "tts.speak"
	evTTSCancel     = "tts.cancel"
)

// obj is a decoded JSON object whose members are decoded on demand.
type obj map[string]json.RawMessage

var jsonNull = []byte("null")

func parseObject(data []byte, what string) (obj, error) {
	var o obj
	if err := json.Unmarshal(data, &o); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %v", what, err)
	}
	if o == nil {
		return nil, fmt.Errorf("%s is not a JSON object", what)
	}
	return o, nil
}

// present reports whether key is there and not null.
func (o obj) present(key string) bool {
	v, ok := o[key]
	return ok && !bytes.Equal(bytes.TrimSpace(v), jsonNull)
}

func (o obj) str(key, where string) (string, bool, error) {
	if !o.present(key) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(o[key], &s); err != nil {
		return "", true, fmt.Errorf("%s.%s must be a string", where, key)
	}
	return s, true, nil
}

func (o obj) boolean(key, where string) (bool, bool, error) {
	if !o.present(key) {
		return false, false, nil
	}
	var b bool
	if err := json.Unmarshal(o[key], &b); err != nil {
		return false, true, fmt.Errorf("%s.%s must be a boolean, got %s", where, key, clip(o[key]))
	}
	return b, true, nil
}

func (o obj) integer(key, where string) (int, bool, error) {
	if !o.present(key) {
		return 0, false, nil
	}
	var n json.Number
	if err := json.Unmarshal(o[key], &n); err != nil {
		return 0, true, fmt.Errorf("%s.%s must be an integer, got %s", where, key, clip(o[key]))
	}
	i, err := n.Int64()
	if err != nil || i < -1<<31 || i > 1<<31-1 {
		return 0, true, fmt.Errorf("%s.%s must be an integer, got %s", where, key, n)
	}
	return int(i), true, nil
}

func (o obj) object(key, where string) (obj, bool, error) {
	if !o.present(key) {
		return nil, false, nil
	}
	var m obj
	if err := json.Unmarshal(o[key], &m); err != nil || m == nil {
		return nil, true, fmt.Errorf("%s.%s must be a JSON object, got %s", where, key, clip(o[key]))
	}
	return m, true, nil
}

func (o obj) anyMap(key, where string) (map[string]any, error) {
	if !o.present(key) {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal(o[key], &m); err != nil || m == nil {
		return nil, fmt.Errorf("%s.%s must be a JSON object, got %s", where, key, clip(o[key]))
	}
	return m, nil
}

func (o obj) array(key, where string) ([]json.RawMessage, bool, error) {
	if !o.present(key) {
		return nil, false, nil
	}
	var a []json.RawMessage
	if err := json.Unmarshal(o[key], &a); err != nil {
		return nil, true, fmt.Errorf("%s.%s must be an array, got %s", where, key, clip(o[key]))
	}
	return a, true, nil
}

// clip shortens raw JSON for an error message.
func clip(b []byte) string {
	s := string(bytes.TrimSpace(b))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

// messageType decodes the envelope of a client text frame.
func messageType(data []byte) (obj, string, error) {
	o, err := parseObject(data, "message")
	if err != nil {
		return nil, "", err
	}
	t, ok, err := o.str("type", "message")
	if err != nil {
		return nil, "", &unknownEventError{err.Error()}
	}
	if !ok || t == "" {
		return nil, "", &unknownEventError{"message has no type"}
	}
	return o, t, nil
}

// unknownEventError is a message whose type the server does not know (or cannot read). The
// current gateway refuses it; the legacy gateway ignores it.
type unknownEventError struct{ msg string }

func (e *unknownEventError) Error() string { return e.msg }

// peekType returns the type of a client text frame for the record, never failing.
func peekType(data []byte) string {
	var v struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return "(invalid json)"
	}
	if s, ok := v.Type.(string); ok && s != "" {
		return s
	}
	return "(no type)"
}

// clientMsg is one decoded MiniCPM-o client message (either dialect).
type clientMsg struct {
	Type        string
	Init        *initMsg   // session.init / session.update
	Append      *appendMsg // full-duplex input
	Chat        *chatMsg   // chat-mode input.append
	CloseReason string     // session.close
}

type initMsg struct {
	Instructions       string
	RefAudioSamples    int
	TTSRefAudioSamples int
	MaxSliceNums       int
	Config             map[string]any
	ForceListenCount   int // -1 when the client did not set config.force_listen_count
}

type appendMsg struct {
	Audio        []float32
	Frames       []FrameInfo
	ForceListen  bool
	MaxSliceNums int
}

type chatMsg struct {
	Messages           []ChatMessage
	Streaming          bool
	TTS                bool
	TTSRefAudioSamples int
	Generation         map[string]any
	EnableThinking     bool
	OmniMode           bool
	UseTTSTemplate     bool
	MaxSliceNums       int
}

var legacyEvents = map[string]bool{evSessionUpdate: true, evBufferAppend: true}
var currentEvents = map[string]bool{evSessionInit: true, evInputAppend: true}

// decodeCurrent decodes a client text frame of the current dialect for a connection of
// public mode "video", "audio" or "chat".
func decodeCurrent(data []byte, mode string) (clientMsg, error) {
	o, typ, err := messageType(data)
	if err != nil {
		return clientMsg{}, err
	}
	m := clientMsg{Type: typ}
	switch typ {
	case evSessionInit:
		m.Init, err = decodeCurrentInit(o)
	case evInputAppend:
		in, ok, e := o.object("input", typ)
		switch {
		case e != nil:
			err = e
		case !ok:
			err = errors.New("input.append has no input object")
		case mode == "chat":
			m.Chat, err = decodeChat(in)
		default:
			m.Append, err = decodeDuplexInput(in, "input.append input", mode, true)
		}
	case evSessionClose:
		m.CloseReason, _, err = o.str("reason", typ)
	default:
		err = unknownEvent(typ, Current)
	}
	return m, err
}

// decodeLegacy decodes a client text frame of the legacy dialect (mode "video" or "audio").
func decodeLegacy(data []byte, mode string) (clientMsg, error) {
	o, typ, err := messageType(data)
	if err != nil {
		return clientMsg{}, err
	}
	m := clientMsg{Type: typ}
	switch typ {
	case evSessionUpdate:
		m.Init, err = decodeLegacyUpdate(o)
	case evBufferAppend:
		m.Append, err = decodeDuplexInput(o, typ, mode, false)
	case evSessionClose:
		m.CloseReason, _, err = o.str("reason", typ)
	default:
		err = unknownEvent(typ, Legacy)
	}
	return m, err
}

func unknownEvent(typ string, d Dialect) error {
	var msg string
	switch {
	case d == Current && legacyEvents[typ]:
		msg = fmt.Sprintf("unknown event type %q: that is a legacy-dialect event; this server speaks the current dialect (session.init, input.append, session.close)", typ)
	case d == Legacy && currentEvents[typ]:
		msg = fmt.Sprintf("unknown event type %q: that is a current-dialect event; this server speaks the legacy dialect (session.update, input_audio_buffer.append, session.close)", typ)
	case d == Current:
		msg = fmt.Sprintf("unknown event type %q (the current dialect accepts session.init, input.append, session.close)", typ)
	default:
		msg = fmt.Sprintf("unknown event type %q (the legacy dialect accepts session.update, input_audio_buffer.append, session.close)", typ)
	}
	return &unknownEventError{msg}
}

func decodeCurrentInit(o obj) (*initMsg, error) {
	p, ok, err := o.object("payload", evSessionInit)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("session.init has no payload object")
	}
	const where = "session.init payload"
	in := &initMsg{ForceListenCount: -1}
	sp, hasSP, err := p.str("system_prompt", where)
	if err != nil {
		return nil, err
	}
	ins, hasIns, err := p.str("instructions", where)
	if err != nil {
		return nil, err
	}
	switch {
	case hasSP:
		in.Instructions = sp
	case hasIns:
		in.Instructions = ins
	}
	for _, k := range []string{"ref_audio", "tts_ref_audio", "ref_audio_base64", "tts_ref_audio_base64"} {
		if p.present(k) {
			return nil, fmt.Errorf("%s.%s is ignored by real servers: reference audio goes in payload.voice.ref_audio_base64 / payload.voice.tts_ref_audio_base64", where, k)
		}
	}
	if in.Config, err = p.anyMap("config", where); err != nil {
		return nil, err
	}
	if cfg, _, _ := p.object("config", where); cfg != nil {
		n, ok, err := cfg.integer("force_listen_count", where+".config")
		if err != nil {
			return nil, err
		}
		if ok {
			if n < 0 {
				return nil, fmt.Errorf("%s.config.force_listen_count is %d: must not be negative", where, n)
			}
			in.ForceListenCount = n
		}
	}
	if in.MaxSliceNums, err = sliceNums(p, where); err != nil {
		return nil, err
	}
	voice, _, err := p.object("voice", where)
	if err != nil {
		return nil, err
	}
	if voice != nil {
		if in.RefAudioSamples, err = refAudio(voice, "ref_audio_base64", where+".voice"); err != nil {
			return nil, err
		}
		if in.TTSRefAudioSamples, err = refAudio(voice, "tts_ref_audio_base64", where+".voice"); err != nil {
			return nil, err
		}
	}
	return in, nil
}

func decodeLegacyUpdate(o obj) (*initMsg, error) {
	s, ok, err := o.object("session", evSessionUpdate)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("session.update has no session object")
	}
	const where = "session.update session"
	in := &initMsg{ForceListenCount: -1}
	ins, ok, err := s.str("instructions", where)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("session.update session.instructions is required")
	}
	in.Instructions = ins
	if in.MaxSliceNums, err = sliceNums(s, where); err != nil {
		return nil, err
	}
	if in.RefAudioSamples, err = refAudio(s, "ref_audio", where); err != nil {
		return nil, err
	}
	if in.TTSRefAudioSamples, err = refAudio(s, "tts_ref_audio", where); err != nil {
		return nil, err
	}
	return in, nil
}

// refAudio checks one reference-audio field: raw float32 LE PCM, no WAV header.
func refAudio(o obj, key, where string) (int, error) {
	s, ok, err := o.str(key, where)
	if err != nil || !ok {
		return 0, err
	}
	samples, err := decodeFloat32(where+"."+key, s, 0)
	if err != nil {
		return 0, err
	}
	return len(samples), nil
}

func sliceNums(o obj, where string) (int, error) {
	n, ok, err := o.integer("max_slice_nums", where)
	if err != nil || !ok {
		return 0, err
	}
	if n < 1 || n > 9 {
		return 0, fmt.Errorf("%s.max_slice_nums is %d: must be 1..9", where, n)
	}
	return n, nil
}

// decodeDuplexInput decodes full-duplex input: the current dialect's input object or the
// legacy flat append message.
func decodeDuplexInput(o obj, where, mode string, current bool) (*appendMsg, error) {
	a := &appendMsg{}
	audio, ok, err := o.str("audio", where)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s.audio is required", where)
	}
	if a.Audio, err = decodeFloat32(where+".audio", audio, minSamples); err != nil {
		return nil, err
	}
	frames, _, err := o.array("video_frames", where)
	if err != nil {
		return nil, err
	}
	if len(frames) > 0 && mode != "video" {
		return nil, fmt.Errorf("%s.video_frames sent in mode=%s: video frames are accepted only with mode=video", where, mode)
	}
	for i, raw := range frames {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("%s.video_frames[%d] must be a base64 string", where, i)
		}
		info, err := decodeImage(fmt.Sprintf("%s.video_frames[%d]", where, i), s, false)
		if err != nil {
			return nil, err
		}
		a.Frames = append(a.Frames, info)
	}
	if a.ForceListen, _, err = o.boolean("force_listen", where); err != nil {
		return nil, err
	}
	if current {
		hints, _, err := o.object("hints", where)
		if err != nil {
			return nil, err
		}
		if hints != nil {
			fl, _, err := hints.boolean("force_listen", where+".hints")
			if err != nil {
				return nil, err
			}
			a.ForceListen = a.ForceListen || fl
		}
	}
	if a.MaxSliceNums, err = sliceNums(o, where); err != nil {
		return nil, err
	}
	return a, nil
}

func decodeChat(in obj) (*chatMsg, error) {
	const where = "input.append input"
	c := &chatMsg{Streaming: true}
	msgs, ok, err := in.array("messages", where)
	if err != nil {
		return nil, err
	}
	if !ok || len(msgs) == 0 {
		return nil, fmt.Errorf("%s.messages is required and must be a non-empty array", where)
	}
	for i, raw := range msgs {
		m, err := decodeChatMessage(raw, fmt.Sprintf("%s.messages[%d]", where, i))
		if err != nil {
			return nil, err
		}
		c.Messages = append(c.Messages, m)
	}
	if v, ok, err := in.boolean("streaming", where); err != nil {
		return nil, err
	} else if ok {
		c.Streaming = v
	}
	if c.Generation, err = in.anyMap("generation", where); err != nil {
		return nil, err
	}
	if img, _, err := in.object("image", where); err != nil {
		return nil, err
	} else if img != nil {
		if c.MaxSliceNums, err = sliceNums(img, where+".image"); err != nil {
			return nil, err
		}
	}
	if tts, _, err := in.object("tts", where); err != nil {
		return nil, err
	} else if tts != nil {
		if c.TTS, _, err = tts.boolean("enabled", where+".tts"); err != nil {
			return nil, err
		}
		if c.TTSRefAudioSamples, err = refAudio(tts, "ref_audio_data", where+".tts"); err != nil {
			return nil, err
		}
	}
	if c.EnableThinking, _, err = in.boolean("enable_thinking", where); err != nil {
		return nil, err
	}
	if c.OmniMode, _, err = in.boolean("omni_mode", where); err != nil {
		return nil, err
	}
	if c.UseTTSTemplate, _, err = in.boolean("use_tts_template", where); err != nil {
		return nil, err
	}
	return c, nil
}

func decodeChatMessage(raw json.RawMessage, where string) (ChatMessage, error) {
	var m ChatMessage
	o, err := parseObject(raw, where)
	if err != nil {
		return m, err
	}
	role, _, err := o.str("role", where)
	if err != nil {
		return m, err
	}
	switch role {
	case "system", "user", "assistant":
		m.Role = role
	default:
		return m, fmt.Errorf("%s.role is %q: must be system, user or assistant", where, role)
	}
	if !o.present("content") {
		return m, fmt.Errorf("%s.content is required", where)
	}
	var text string
	if json.Unmarshal(o["content"], &text) == nil {
		m.Text = text
		return m, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(o["content"], &parts); err != nil {
		return m, fmt.Errorf("%s.content must be a string or a list of parts", where)
	}
	var texts []string
	for i, p := range parts {
		pw := fmt.Sprintf("%s.content[%d]", where, i)
		po, err := parseObject(p, pw)
		if err != nil {
			return m, err
		}
		typ, _, err := po.str("type", pw)
		if err != nil {
			return m, err
		}
		switch typ {
		case "text":
			t, ok, err := po.str("text", pw)
			if err != nil {
				return m, err
			}
			if !ok {
				return m, fmt.Errorf("%s.text is required for a text part", pw)
			}
			texts = append(texts, t)
		case "image":
			d, ok, err := po.str("data", pw)
			if err != nil {
				return m, err
			}
			if !ok {
				return m, fmt.Errorf("%s.data is required for an image part", pw)
			}
			info, err := decodeImage(pw+".data", d, true)
			if err != nil {
				return m, err
			}
			m.Images = append(m.Images, info)
		default:
			return m, fmt.Errorf("%s.type is %q: must be text or image", pw, typ)
		}
	}
	m.Text = strings.Join(texts, "\n")
	return m, nil
}
