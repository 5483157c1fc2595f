package realtime

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/omnisat/omnisat/pipeline"
)

func f32b64(samples ...float32) string {
	return string(appendFloat32Base64(nil, samples))
}

func collect(c codec, binary bool, frame string) []Event {
	var out []Event
	c.decode(binary, []byte(frame), func(ev Event) { out = append(out, ev) })
	return out
}

// Every server event of the seeds and of PROTOCOL-FACTS, decoded.
func TestDecodeCurrent(t *testing.T) {
	c := &miniCPM{mode: ModeVideo}
	tests := []struct {
		name  string
		frame string
		want  []Event
	}{
		{"queued", `{"type":"session.queued","position":2,"estimated_wait_s":20,"ticket_id":"q_0123456789ab","queue_length":3}`,
			[]Event{queueSignal{QueueStatus{Position: 2, EstimatedWait: 20 * time.Second, Length: 3, Ticket: "q_0123456789ab"}}}},
		{"queue update", `{"type":"session.queue_update","position":1,"estimated_wait_s":4.5,"queue_length":1}`,
			[]Event{queueSignal{QueueStatus{Position: 1, EstimatedWait: 4500 * time.Millisecond, Length: 1}}}},
		{"queue done", `{"type":"session.queue_done"}`, []Event{queueSignal{QueueStatus{Done: true}}}},
		{"created", `{"type":"session.created","session_id":"sess_abc","mode":"full_duplex","metrics":{"backend":"cpp"},"server_send_ts":1714200000.5,"new_field":[1]}`,
			[]Event{createdSignal{Info{ID: "sess_abc", ServerMode: "full_duplex", Metrics: Metrics{Backend: "cpp", ServerSendTS: 1714200000.5}}}}},
		{"created ms timestamp", `{"type":"session.created","session_id":"x","server_send_ts":1714200000500}`,
			[]Event{createdSignal{Info{ID: "x", Metrics: Metrics{ServerSendTS: 1714200000.5}}}}},
		{"listen with metrics", `{"type":"response.output.delta","kind":"listen","metrics":{"kv_cache_length":1024,"prefill_ms":12.5,"usage":{"a":1}}}`,
			[]Event{Listen{}, MetricsUpdate{Metrics{KVCacheLength: 1024, PrefillMS: 12.5}}}},
		{"text", `{"type":"response.output.delta","kind":"text","session_id":"s","response_id":"s_resp_1","input_id":"i","text":"Hello","metrics":{}}`,
			[]Event{TextDelta{Text: "Hello", ResponseID: "s_resp_1"}, MetricsUpdate{}}},
		{"audio", `{"type":"response.output.delta","kind":"audio","response_id":"r","audio":"` + f32b64(0.5, -0.25) + `"}`,
			[]Event{AudioDelta{Samples: []float32{0.5, -0.25}, SampleRate: 24000, ResponseID: "r"}}},
		{"unknown kind ignored", `{"type":"response.output.delta","kind":"audio_tokens","tokens":[1,2]}`, nil},
		{"unknown event ignored", `{"type":"response.step.done"}`, nil},
		{"done", `{"type":"response.done","session_id":"s","response_id":"r","text":"test","reason":"turn_end","metrics":{"n_tokens":3}}`,
			[]Event{TurnDone{Text: "test", Reason: "turn_end"}, MetricsUpdate{Metrics{NTokens: 3}}}},
		{"done with audio", `{"type":"response.done","text":"t","audio":"` + f32b64(0.125) + `"}`,
			[]Event{TurnDone{Text: "t", Audio: []float32{0.125}, SampleRate: 24000}}},
		{"closed", `{"type":"session.closed","session_id":"s","reason":"user_stop"}`, []Event{closedSignal{reason: "user_stop"}}},
		{"closed with diagnostic", `{"type":"session.closed","reason":"backend_error","diagnostic":{"message":"bad frame"}}`,
			[]Event{closedSignal{reason: "backend_error", diagnostic: "bad frame"}}},
		{"closed with string diagnostic", `{"type":"session.closed","reason":"backend_error","diagnostic":"oops"}`,
			[]Event{closedSignal{reason: "backend_error", diagnostic: "oops"}}},
		{"error queue_full", `{"type":"error","error":{"code":"queue_full","message":"Queue full","type":"server_error"}}`,
			[]Event{serverErrSignal{&Error{Class: ClassRetryable, Code: "queue_full", Event: "error", Message: "server error queue_full: Queue full"}}}},
		{"error inference_failed", `{"type":"error","error":{"code":"inference_failed","message":"x"}}`,
			[]Event{serverErrSignal{&Error{Class: ClassProtocol, Code: "inference_failed", Event: "error", Message: "server error inference_failed: x"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := collect(c, false, tt.frame)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("decode %s\n got  %#v\n want %#v", tt.frame, got, tt.want)
			}
		})
	}
}

func TestDecodeLegacy(t *testing.T) {
	c := &miniCPM{legacy: true, mode: ModeVideo}
	tests := []struct {
		name  string
		frame string
		want  []Event
	}{
		{"created", `{"type":"session.created","session_id":"rt_1714200000000","prompt_length":256}`,
			[]Event{createdSignal{Info{ID: "rt_1714200000000"}}}},
		{"delta", `{"type":"response.output_audio.delta","text":"The weather","audio":"` + f32b64(0.5) + `","end_of_turn":false,"kv_cache_length":1024}`,
			[]Event{TextDelta{Text: "The weather"}, AudioDelta{Samples: []float32{0.5}, SampleRate: 24000}, MetricsUpdate{Metrics{KVCacheLength: 1024}}}},
		{"last delta", `{"type":"response.output_audio.delta","text":"","audio":"` + f32b64(0.5) + `","end_of_turn":true,"kv_cache_length":1100}`,
			[]Event{AudioDelta{Samples: []float32{0.5}, SampleRate: 24000}, TurnDone{Reason: "end_of_turn"}, MetricsUpdate{Metrics{KVCacheLength: 1100}}}},
		{"listen", `{"type":"response.listen","kv_cache_length":1024}`, []Event{Listen{}, MetricsUpdate{Metrics{KVCacheLength: 1024}}}},
		{"context full", `{"type":"session.closed","reason":"context_full"}`, []Event{closedSignal{reason: "context_full"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := collect(c, false, tt.frame)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("decode %s\n got  %#v\n want %#v", tt.frame, got, tt.want)
			}
		})
	}
}

func TestDecodeOpenVoice(t *testing.T) {
	c := &openVoice{ttsRate: 22050}
	pcm := []byte{0x00, 0x40, 0x00, 0xc0} // 0.5, -0.5
	tests := []struct {
		name   string
		binary bool
		frame  string
		want   []Event
	}{
		{"created", false, `{"type":"session.created","session_id":"sess_0123456789ab","model":"fw","config":{"vad_sensitivity":"normal"}}`,
			[]Event{createdSignal{Info{ID: "sess_0123456789ab"}}}},
		{"speech start", false, `{"type":"vad.speech_start","timestamp_ms":1200}`, []Event{VAD{Speaking: true, Timestamp: 1200 * time.Millisecond}}},
		{"speech start, seed document", false, `{"type":"vad.speech_start","timestamp":1.5}`, []Event{VAD{Speaking: true, Timestamp: 1500 * time.Millisecond}}},
		{"partial", false, `{"type":"transcript.partial","text":"Hello how can","segment_id":3,"timestamp_ms":500}`,
			[]Event{Transcript{Text: "Hello how can", SegmentID: 3, Timestamp: 500 * time.Millisecond}}},
		{"final", false, `{"type":"transcript.final","text":"Hello there.","segment_id":3,"start_ms":120,"end_ms":1620,"language":"en","confidence":0.91,` +
			`"words":[{"word":"Hello","start":0.12,"end":0.6},{"word":"there.","start":0.7,"end":1.62}]}`,
			[]Event{Transcript{Text: "Hello there.", Final: true, SegmentID: 3, Language: "en", Duration: 1500 * time.Millisecond,
				Start: 120 * time.Millisecond, End: 1620 * time.Millisecond, Confidence: 0.91,
				Words: []Word{{"Hello", 120 * time.Millisecond, 600 * time.Millisecond}, {"there.", 700 * time.Millisecond, 1620 * time.Millisecond}}}}},
		{"final without times: the words' span", false, `{"type":"transcript.final","text":"Hi","segment_id":0,"start_ms":0,"end_ms":0,"language":null,` +
			`"confidence":null,"words":[{"word":"Hi","start":0.25,"end":0.5}]}`,
			[]Event{Transcript{Text: "Hi", Final: true, Duration: 250 * time.Millisecond, Words: []Word{{"Hi", 250 * time.Millisecond, 500 * time.Millisecond}}}}},
		{"final, seed document", false, `{"type":"transcript.final","text":"Hello.","language":"en","duration":3.42}`,
			[]Event{Transcript{Text: "Hello.", Final: true, Language: "en", Duration: 3420 * time.Millisecond}}},
		{"speech end", false, `{"type":"vad.speech_end","timestamp_ms":1620}`, []Event{VAD{Speaking: false, Timestamp: 1620 * time.Millisecond}}},
		{"tts start", false, `{"type":"tts.speaking_start","request_id":"r1","timestamp_ms":180}`, []Event{TTSState{Speaking: true, RequestID: "r1"}}},
		{"tts end", false, `{"type":"tts.speaking_end","request_id":"r1","timestamp_ms":900,"duration_ms":900,"cancelled":false}`,
			[]Event{TTSState{RequestID: "r1", Duration: 900 * time.Millisecond}}},
		{"tts cancelled", false, `{"type":"tts.speaking_end","request_id":"r1","timestamp_ms":90,"duration_ms":90,"cancelled":true}`,
			[]Event{TTSState{RequestID: "r1", Duration: 90 * time.Millisecond, Cancelled: true}}},
		{"rate limit", false, `{"type":"session.rate_limit","delay_ms":40,"message":"Client sending faster than real-time, please throttle"}`,
			[]Event{rateLimitSignal{RateLimit{Delay: 40 * time.Millisecond, Message: "Client sending faster than real-time, please throttle"}}}},
		{"frames dropped", false, `{"type":"session.frames_dropped","dropped_ms":40,"message":"Backlog exceeded, 40ms of audio dropped"}`,
			[]Event{FramesDropped{Dropped: 40 * time.Millisecond, Message: "Backlog exceeded, 40ms of audio dropped"}}},
		{"hold ignored", false, `{"type":"session.hold","timestamp_ms":30000,"hold_timeout_ms":300000}`, nil},
		{"tts audio", true, string(pcm), []Event{AudioDelta{Samples: []float32{0.5, -0.5}, SampleRate: 22050}}},
		{"recoverable error", false, `{"type":"error","message":"Worker connection lost","recoverable":true}`,
			[]Event{serverErrSignal{&Error{Class: ClassProtocol, Code: "openvoice_error", Event: "error", Message: "server error openvoice_error: Worker connection lost"}}}},
		{"recoverable with code", false, `{"type":"error","code":"frame_too_large","message":"Frame exceeds 1MB","recoverable":true}`,
			[]Event{serverErrSignal{&Error{Class: ClassProtocol, Code: "frame_too_large", Event: "error", Message: "server error frame_too_large: Frame exceeds 1MB"}}}},
		{"fatal error", false, `{"type":"error","message":"gone","recoverable":false}`,
			[]Event{fatalSignal{&Error{Class: ClassRetryable, Code: "openvoice_error", Event: "error", Message: "server error openvoice_error (not recoverable): gone"}}}},
		{"unknown model", false, `{"type":"error","code":"model_not_found","message":"Model 'x' not found in registry","recoverable":false}`,
			[]Event{fatalSignal{&Error{Class: ClassConfig, Code: "model_not_found", Event: "error",
				Message: "the server refused the session: model_not_found: Model 'x' not found in registry; check server.model"}}}},
		{"missing model", false, `{"type":"error","code":"invalid_request","message":"Query parameter 'model' is required","recoverable":false}`,
			[]Event{fatalSignal{&Error{Class: ClassConfig, Code: "invalid_request", Event: "error",
				Message: "the server refused the session: invalid_request: Query parameter 'model' is required; check server.model"}}}},
		{"closed", false, `{"type":"session.closed","reason":"inactivity_timeout","total_duration_ms":61000,"segments_transcribed":2}`,
			[]Event{closedSignal{reason: "inactivity_timeout", duration: 61 * time.Second, segments: 2}}},
		{"unknown ignored", false, `{"type":"something.new"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := collect(c, tt.binary, tt.frame)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("decode %q\n got  %#v\n want %#v", tt.frame, got, tt.want)
			}
		})
	}
}

// Bad frames become protocol errors naming the event; they never end the session by themselves.
func TestDecodeBadInput(t *testing.T) {
	tests := []struct {
		name   string
		c      codec
		binary bool
		frame  string
		code   string
		event  string
	}{
		{"invalid json", &miniCPM{}, false, `{not json`, CodeInvalidJSON, "unparsable"},
		{"wrong field type", &miniCPM{}, false, `{"type":"response.output.delta","kind":"text","text":5}`, CodeInvalidJSON, "response.output.delta"},
		{"garbage base64", &miniCPM{}, false, `{"type":"response.output.delta","kind":"audio","audio":"!!!!"}`, CodeBadField, "response.output.delta"},
		{"partial sample", &miniCPM{}, false, `{"type":"response.output.delta","kind":"audio","audio":"AAAAAAA="}`, CodeBadField, "response.output.delta"},
		{"nan sample", &miniCPM{}, false, `{"type":"response.output.delta","kind":"audio","audio":"` + f32b64(float32(math.NaN())) + `"}`, CodeBadField, "response.output.delta"},
		{"text delta without text", &miniCPM{}, false, `{"type":"response.output.delta","kind":"text","response_id":"r"}`, CodeBadField, "response.output.delta"},
		{"text delta with null text", &miniCPM{}, false, `{"type":"response.output.delta","kind":"text","text":null}`, CodeBadField, "response.output.delta"},
		{"audio delta without audio", &miniCPM{}, false, `{"type":"response.output.delta","kind":"audio","response_id":"r"}`, CodeBadField, "response.output.delta"},
		{"legacy garbage", &miniCPM{legacy: true}, false, `{"type":"response.output_audio.delta","audio":"%%%","end_of_turn":false}`, CodeBadField, "response.output_audio.delta"},
		{"binary to minicpm", &miniCPM{}, true, "\x00\x01", CodeBadField, "binary"},
		{"odd pcm", &openVoice{ttsRate: 24000}, true, "\x00\x01\x02", CodeBadField, "binary"},
		{"openvoice json", &openVoice{ttsRate: 24000}, false, `[`, CodeInvalidJSON, "unparsable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := collect(tt.c, tt.binary, tt.frame)
			if len(got) != 1 {
				t.Fatalf("want one error event, got %#v", got)
			}
			ev, ok := got[0].(ErrorEvent)
			if !ok || ev.Err.Class != ClassProtocol || ev.Err.Code != tt.code || ev.Err.Event != tt.event {
				t.Fatalf("got %#v (%v), want protocol error %s on %s", got[0], got[0], tt.code, tt.event)
			}
		})
	}
}

func TestDecodeOtherDialect(t *testing.T) {
	for _, tt := range []struct {
		c     *miniCPM
		frame string
	}{
		{&miniCPM{}, `{"type":"response.listen","kv_cache_length":3}`},
		{&miniCPM{legacy: true}, `{"type":"response.output.delta","kind":"listen"}`},
	} {
		got := collect(tt.c, false, tt.frame)
		if len(got) != 1 {
			t.Fatalf("%s: %#v", tt.frame, got)
		}
		f, ok := got[0].(fatalSignal)
		if !ok || f.err.Class != ClassConfig || f.err.Code != CodeDialectMismatch || !strings.Contains(f.err.Message, "set server.dialect") {
			t.Fatalf("%s: got %#v", tt.frame, got[0])
		}
	}
}

func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("client frame is not JSON: %v\n%s", err, b)
	}
	return m
}

// Every client event, encoded as the documents (and the facts page) say.
func TestEncodeInit(t *testing.T) {
	mustMsgs := func(msgs []outMsg, err error) []outMsg {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	in := Init{Instructions: "be brief", RefAudio: []float32{0.5}, TTSRefAudio: []float32{-0.5}, MaxSliceNums: 4,
		Config: map[string]any{"length_penalty": 1.1}}
	cur := mustMsgs((&miniCPM{mode: ModeAudio}).initMsgs(in))
	got := decodeJSON(t, cur[0].data)
	want := map[string]any{"type": "session.init", "payload": map[string]any{
		"system_prompt": "be brief", "config": map[string]any{"length_penalty": 1.1},
		"voice": map[string]any{"ref_audio_base64": f32b64(0.5), "tts_ref_audio_base64": f32b64(-0.5)}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("current init\n got  %v\n want %v", got, want)
	}

	chat := mustMsgs((&miniCPM{mode: ModeChat}).initMsgs(in))
	if got := string(chat[0].data); got != `{"payload":{},"type":"session.init"}` {
		t.Fatalf("chat init %s", got)
	}

	leg := mustMsgs((&miniCPM{legacy: true, mode: ModeVideo}).initMsgs(in))
	got = decodeJSON(t, leg[0].data)
	want = map[string]any{"type": "session.update", "session": map[string]any{
		"instructions": "be brief", "max_slice_nums": 4.0, "ref_audio": f32b64(0.5), "tts_ref_audio": f32b64(-0.5)}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("legacy init\n got  %v\n want %v", got, want)
	}

	// Reference audio is raw float32 PCM, never a WAV: the bytes decode straight back to samples.
	raw, _ := base64.StdEncoding.DecodeString(f32b64(0.5))
	if math.Float32frombits(binary.LittleEndian.Uint32(raw)) != 0.5 || string(raw[:min(4, len(raw))]) == "RIFF" {
		t.Fatal("reference audio is not raw float32")
	}

	itn := false
	ov := mustMsgs((&openVoice{}).initMsgs(Init{VADSensitivity: "high", Language: "en", HotWords: []string{"Macaw"}, TTSModel: "kokoro-v1",
		SilenceTimeout: 1500 * time.Millisecond, HoldTimeout: 10 * time.Minute, EnableITN: &itn}))
	got = decodeJSON(t, ov[0].data)
	// Flat, under the names the server reads (it drops vad.sensitivity and tts_model unread).
	want = map[string]any{"type": "session.configure", "vad_sensitivity": "high", "language": "en",
		"hot_words": []any{"Macaw"}, "model_tts": "kokoro-v1", "silence_timeout_ms": 1500.0, "hold_timeout_ms": 600000.0, "enable_itn": false}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("openvoice configure\n got  %v\n want %v", got, want)
	}
	if none := mustMsgs((&openVoice{}).initMsgs(Init{Instructions: "ignored"})); len(none) != 0 {
		t.Fatalf("openvoice without settings sent %v", none)
	}
}

func TestEncodeChunk(t *testing.T) {
	audio := make([]float32, 4000)
	for i := range audio {
		audio[i] = float32(math.Sin(float64(i) / 10))
	}
	jpeg := []byte{0xff, 0xd8, 0xff, 0xd9}

	m, err := (&miniCPM{mode: ModeVideo}).chunk(Chunk{Audio: audio, Frames: [][]byte{jpeg}, ForceListen: true}, Init{MaxSliceNums: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := decodeJSON(t, m.data)
	want := map[string]any{"type": "input.append", "input": map[string]any{
		"audio": f32b64(audio...), "video_frames": []any{base64.StdEncoding.EncodeToString(jpeg)},
		"force_listen": true, "max_slice_nums": 1.0}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("current append mismatch")
	}
	if samples, err := decodeFloat32Base64([]byte(got["input"].(map[string]any)["audio"].(string))); err != nil || !reflect.DeepEqual(samples, audio) {
		t.Fatalf("audio does not round-trip: %v", err)
	}

	m, err = (&miniCPM{legacy: true, mode: ModeAudio}).chunk(Chunk{Audio: audio}, Init{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got = decodeJSON(t, m.data)
	want = map[string]any{"type": "input_audio_buffer.append", "audio": f32b64(audio...), "force_listen": false}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("legacy append\n got %v", got)
	}

	for _, bad := range []struct {
		c  *miniCPM
		ch Chunk
	}{
		{&miniCPM{mode: ModeVideo}, Chunk{Audio: audio[:3999]}},
		{&miniCPM{mode: ModeAudio}, Chunk{Audio: audio, Frames: [][]byte{jpeg}}},
		{&miniCPM{mode: ModeVideo}, Chunk{Audio: audio, Frames: [][]byte{{}}}},
		{&miniCPM{mode: ModeVideo}, Chunk{Audio: audio, MaxSliceNums: 10}},
	} {
		if _, err := bad.c.chunk(bad.ch, Init{}, nil); err == nil {
			t.Errorf("chunk %d samples, %d frames, slices %d in %s: no error", len(bad.ch.Audio), len(bad.ch.Frames), bad.ch.MaxSliceNums, bad.c.mode)
		}
	}

	m, err = (&openVoice{frame: 640}).chunk(Chunk{Audio: []float32{0.5, -1, 2}}, Init{}, nil)
	if err != nil || !m.binary || string(m.data) != "\xff\x3f\x01\x80\xff\x7f" || len(m.splits) != 0 {
		t.Fatalf("openvoice pcm16 % x %v, %v", m.data, m.splits, err)
	}
	// A chunk longer than a frame goes out as frames of at most 40 ms.
	m, _ = (&openVoice{frame: 640}).chunk(Chunk{Audio: make([]float32, 16000)}, Init{}, nil)
	if len(m.splits) != 24 || m.splits[0] != 1280 || m.splits[23] != 24*1280 || len(m.data) != 32000 {
		t.Fatalf("1 s chunk split at %v", m.splits)
	}
}

func TestEncodeControl(t *testing.T) {
	m, _ := (&miniCPM{}).closeMsg("user_stop")
	if got := decodeJSON(t, m.data); !reflect.DeepEqual(got, map[string]any{"type": "session.close", "reason": "user_stop"}) {
		t.Fatalf("close %v", got)
	}
	ov := &openVoice{}
	m, id, err := ov.speak(Speech{Text: "Hello", Voice: "default", RequestID: "r1", Speed: 1.25})
	if err != nil || id != "r1" || !reflect.DeepEqual(decodeJSON(t, m.data),
		map[string]any{"type": "tts.speak", "text": "Hello", "voice": "default", "request_id": "r1", "speed": 1.25}) {
		t.Fatalf("speak %s %v", m.data, err)
	}
	if m, id, _ := ov.speak(Speech{Text: "Hi"}); !strings.HasPrefix(id, "omnisat_") || decodeJSON(t, m.data)["request_id"] != id {
		t.Fatalf("speak without id: %s, id %q", m.data, id)
	}
	for _, bad := range []Speech{{}, {Text: "x", Speed: 5}} {
		if _, _, err := ov.speak(bad); err == nil {
			t.Fatalf("speak %+v accepted", bad)
		}
	}
	if m, _ := ov.commit(); string(m.data) != `{"type":"input_audio_buffer.commit"}` {
		t.Fatalf("commit %s", m.data)
	}
	if m, ok := ov.closeMsg(ReasonCancel); !ok || string(m.data) != `{"type":"session.cancel"}` {
		t.Fatalf("openvoice cancel %s", m.data)
	}
	m, _ = ov.cancelSpeech()
	if string(m.data) != `{"type":"tts.cancel"}` {
		t.Fatalf("cancel %s", m.data)
	}
	if m, ok := ov.closeMsg("x"); !ok || string(m.data) != `{"type":"session.close"}` {
		t.Fatalf("openvoice close %s", m.data)
	}
	if _, _, err := (&miniCPM{}).speak(Speech{Text: "x"}); err == nil {
		t.Fatal("minicpm speak accepted")
	}
	if _, err := (&miniCPM{}).commit(); err == nil {
		t.Fatal("minicpm commit accepted")
	}
}

func TestEncodeChat(t *testing.T) {
	b, err := encodeChatRequest(ChatRequest{
		Messages: []ChatMessage{{Role: "system", Text: "sys"}, {Role: "user", Text: "Describe this image", Images: [][]byte{{1, 2, 3}}}},
		Stream:   true, MaxNewTokens: 64, LengthPenalty: 1.1, ImageMaxSliceNums: 1, TTS: true, EnableThinking: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := decodeJSON(t, b)
	want := map[string]any{"type": "input.append", "input": map[string]any{
		"messages": []any{
			map[string]any{"role": "system", "content": "sys"},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": "Describe this image"},
				map[string]any{"type": "image", "data": "AQID"}}},
		},
		"streaming": true, "generation": map[string]any{"max_new_tokens": 64.0, "length_penalty": 1.1},
		"image": map[string]any{"max_slice_nums": 1.0}, "omni_mode": false, "tts": map[string]any{"enabled": true},
		"use_tts_template": false, "enable_thinking": true}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("chat\n got  %v\n want %v", got, want)
	}
	if _, err := encodeChatRequest(ChatRequest{}); err == nil {
		t.Fatal("empty chat accepted")
	}
	if _, err := encodeChatRequest(ChatRequest{Messages: []ChatMessage{{Role: "robot"}}}); err == nil {
		t.Fatal("bad role accepted")
	}
}

// pipeline.AllFinite, which the decoder checks with, agrees with a sample-by-sample check
// wherever an Inf or a NaN sits, and a decoded delta names the first such sample.
func TestAllFinite(t *testing.T) {
	bad := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.Float32frombits(0xffc00001)}
	for n := range 40 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(i)/7 - 2 // finite, with large and small exponents nearby
		}
		s = append(s, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32)
		for from := range min(n, 3) { // any start within a word
			if !pipeline.AllFinite(s[from:]) {
				t.Fatalf("n=%d from=%d: finite samples reported otherwise", n, from)
			}
		}
		for i := range s {
			for _, b := range bad {
				keep := s[i]
				s[i] = b
				if pipeline.AllFinite(s) || i >= 1 && pipeline.AllFinite(s[1:]) {
					t.Fatalf("n=%d: %v at %d not found", n, b, i)
				}
				if _, err := decodeFloat32Base64(appendFloat32Base64(nil, s)); err == nil || !strings.Contains(err.Error(), "sample "+strconv.Itoa(i)+" ") {
					t.Fatalf("n=%d: %v at %d: %v", n, b, i, err)
				}
				s[i] = keep
			}
		}
	}
}

func TestFloat32Base64RoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 4, 191, 192, 193, 16000} {
		in := make([]float32, n)
		for i := range in {
			in[i] = float32(i%200)/100 - 1
		}
		enc := appendFloat32Base64(nil, in)
		if want := base64.StdEncoding.EncodedLen(4 * n); len(enc) != want {
			t.Fatalf("n=%d: %d base64 bytes, want %d", n, len(enc), want)
		}
		out, err := decodeFloat32Base64(enc)
		if err != nil || len(out) != n || (n > 0 && !reflect.DeepEqual(out, in)) {
			t.Fatalf("n=%d: round trip failed: %v", n, err)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		got, want Class
	}{
		{classifyCloseCode(1013), ClassRetryable},
		{classifyCloseCode(1008), ClassConfig},
		{classifyCloseCode(1009), ClassRetryable},
		{classifyCloseReason("timeout"), ClassEnded},
		{classifyCloseReason("context_full"), ClassEnded},
		{classifyCloseReason("backend_error"), ClassRetryable},
		{classifyServerCode("worker_busy"), ClassRetryable},
		{classifyServerCode("queue_full"), ClassRetryable},
		{classifyServerCode("inference_failed"), ClassProtocol},
		{ClassOf(&Error{Class: ClassConfig}), ClassConfig},
		{ClassOf(ErrClosed), ClassRetryable},
	} {
		if tt.got != tt.want {
			t.Errorf("got %v want %v", tt.got, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{URL: "ws://127.0.0.1:1/v1/realtime"}.withDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.URL = "" }, "url: empty"},
		{func(c *Config) { c.URL = "http://x" }, `scheme "http"`},
		{func(c *Config) { c.URL = "ws://" }, "no host"},
		{func(c *Config) { c.Dialect = "new" }, `dialect: "new"`},
		{func(c *Config) { c.Mode = "vidoe" }, `mode: "vidoe" is not one of video, audio, chat`},
		{func(c *Config) { c.Dialect, c.Mode = DialectLegacy, ModeChat }, "chat needs the current dialect"},
		{func(c *Config) { c.Dialect = DialectOpenVoice }, "model: empty"},
		{func(c *Config) { c.Init.MaxSliceNums = 12 }, "max_slice_nums"},
		{func(c *Config) { c.DeadLinkTimeout = time.Second }, "dead_link_timeout"},
		{func(c *Config) { c.OpenVoiceFrame = 250 * time.Millisecond }, "openvoice_frame: 250ms is outside 20ms..100ms"},
		{func(c *Config) { c.Init.SilenceTimeout = 500 * time.Millisecond }, "init.silence_timeout: 500ms is outside 1s..10m0s"},
		{func(c *Config) { c.Init.HoldTimeout = 2 * time.Hour }, "init.hold_timeout"},
	} {
		c := ok
		tt.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("want error containing %q, got %v", tt.want, err)
		}
	}
	if got := (Config{URL: "wss://h:1", Mode: ModeAudio}).endpoint(); got != "wss://h:1/v1/realtime?mode=audio" {
		t.Fatalf("endpoint %s", got)
	}
	if got := (Config{URL: "ws://h/x?token=1", Dialect: DialectOpenVoice, Model: "fw", Init: Init{Language: "pt"}}).endpoint(); got != "ws://h/x?language=pt&model=fw&token=1" {
		t.Fatalf("endpoint %s", got)
	}
}

// The fast path takes the frames real servers send, and leaves anything unusual to the general
// decoder (FuzzFastFrame checks that the events agree).
func TestFastFrameTakesTheHotFrames(t *testing.T) {
	a := f32b64(0.5, -0.25)
	for _, tt := range []struct {
		frame string
		fast  bool
	}{
		{`{"type":"response.output.delta","kind":"audio","session_id":"s","response_id":"s_resp_1","input_id":"i","audio":"` + a + `","metrics":{"kv_cache_length":3},"server_send_ts":1.5}`, true},
		{`{"type": "response.output_audio.delta", "text": "\u4f60\u597d", "audio": "` + a + `", "end_of_turn": false, "kv_cache_length": 9}`, true},
		{`{"type":"response.done","text":"t","audio":"` + a + `"}`, true},
		{`{"type":"response.output.delta","kind":"text","text":"no audio here"}`, true},
		{`{"type":"response.output.delta","kind":"listen","session_id":"s","response_id":"r","input_id":"i","metrics":{"kv_cache_length":12,"backend":"cpp","prefill_ms":1.25e1,"n_tokens":-0},"server_send_ts":1764000000.125}`, true},
		{`{"type":"response.step.done","session_id":"s","response_id":"r"}`, true},
		{`{"type":"response.output.delta","kind":"audio_tokens","tokens":[101,202,303],"x":{"y":[true,false,null,"\"]"]}}`, true},
		{`{"type":"session.queued","position":2,"estimated_wait_s":3.5,"ticket_id":"t","queue_length":4}`, true},
		{`{"type":"response.output.delta","kind":"audio","audio":null}`, true},
		{`{"type":"response.listen","kv_cache_length":null,"text":"\ud83d\ude00 \ud83d x\u00e9\/\n"}`, true},
		{"{\"type\":\"response.output.delta\",\"kind\":\"text\",\"text\":\"caf\xe9\"}", true},
		{`{"type":"response.output.delta","kind":"text","text":"caf\xe9"}`, false},
		{`{"type":"response.output.delta","kind":"audio","audio":"` + a + `","AUDIO":"` + a + `"}`, false},
		{`{"type":"response.output.delta","kind":"audio","audio":"` + a + `","audio":"` + a + `"}`, false},
		{`{"type":"response.output.delta","kind":"audio","audio":"AAAA\/AAA"}`, false},
		{`{"type":"response.output.delta","kind":"audio","audio":"` + a + `"}]`, false},
		{`{"type":"response.output.delta","kind":5,"audio":"` + a + `"}`, false},
		{`{"type":"response.output.delta","kind":"audio","audio":"!!!!"}`, false},
		{`{"ty\u0070e":"response.output.delta"}`, false},
		{`{"type":"response.output.delta","metrics":{"kv_cache_length":1e999}}`, false},
		{`{"type":"session.closed","reason":"timeout","diagnostic":{"message":"m"}}`, false},
		{`{"type":"error","error":{"code":"c","message":"m"}}`, false},
		{`{"type":"x","y":01}`, false},
		{`{"type":"x",}`, false},
		{`null`, false},
	} {
		c := &miniCPM{mode: ModeAudio, legacy: strings.Contains(tt.frame, "output_audio")}
		if _, ok := c.fastFrame([]byte(tt.frame)); ok != tt.fast {
			t.Errorf("fast path %v for %s, want %v", ok, tt.frame, tt.fast)
		}
		if !reflect.DeepEqual(collect(c, false, tt.frame), func() (out []Event) {
			c.decodeGeneral(false, []byte(tt.frame), func(ev Event) { out = append(out, ev) })
			return out
		}()) {
			t.Errorf("fast and general decoders disagree on %s", tt.frame)
		}
	}
}

// Reply deltas vary in length: a buffer handed back must serve the next delta of a similar
// length, not only one of exactly its size, and the pool keeps only a few, none too long.
func TestSamplePoolServesNearSizes(t *testing.T) {
	p := &samplePool{}
	b := p.get(OutputSampleRate * 7 / 10)
	p.put(b)
	if allocs := testing.AllocsPerRun(50, func() {
		c := p.get(OutputSampleRate*7/10 + 500)
		p.put(c)
	}); allocs != 0 {
		t.Errorf("a slightly longer delta after a recycled one: %.1f allocations, want 0", allocs)
	}
	for range 2 * maxPooledBuffers {
		p.put(make([]float32, 10))
	}
	p.put(make([]float32, maxPooledSamples+1))
	if len(p.free) != maxPooledBuffers {
		t.Errorf("the pool keeps %d buffers, want at most %d", len(p.free), maxPooledBuffers)
	}
	for _, f := range p.free {
		if cap(f) > maxPooledSamples {
			t.Errorf("the pool kept a buffer of %d samples", cap(f))
		}
	}
}

// TestChunkBufferAbsorbsFrameSizes: a video chunk's JPEG changes size with every frame; the
// buffer a chunk was built in (handed back as a spare) takes the next one even when its frame
// is a little larger, so a stream of frames does not need a new buffer each time one is the
// largest yet.
func TestChunkBufferAbsorbsFrameSizes(t *testing.T) {
	c := &miniCPM{mode: ModeVideo}
	audio := make([]float32, InputSampleRate)
	first, err := c.chunk(Chunk{Audio: audio, Frames: [][]byte{make([]byte, 30_000)}}, Init{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	next, err := c.chunk(Chunk{Audio: audio, Frames: [][]byte{make([]byte, 36_000)}}, Init{}, first.data)
	if err != nil {
		t.Fatal(err)
	}
	if &next.data[:1][0] != &first.data[:1][0] {
		t.Errorf("a chunk 8 KB larger than the last needed a new buffer (capacity %d for %d bytes)", cap(first.data), len(next.data))
	}
}
