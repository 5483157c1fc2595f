package realtime

import "time"

// Event is something the server said, already decoded. The concrete types below are the whole set.
type Event interface{ event() }

// Listen: the model is listening (legacy response.listen, current kind "listen"). A Listen that
// arrives while reply audio is still queued means the model stopped talking: flush playback.
type Listen struct{}

// TextDelta is a piece of the model's text. Text leads audio by a few hundred ms: drive captions and
// the "speaking" state from playback, not from this.
type TextDelta struct {
	Text       string
	ResponseID string // opaque; empty in the legacy dialect
}

// AudioDelta is a piece of the model's speech: mono samples at SampleRate (24 kHz for MiniCPM-o).
// Sizes vary; do not assume one second.
type AudioDelta struct {
	Samples    []float32
	SampleRate int
	ResponseID string
}

// TurnDone ends one spoken or chat turn: legacy end_of_turn, current response.done. In chat mode
// Text is the whole answer and, for a non-streaming request with TTS, Audio the whole speech.
type TurnDone struct {
	Text       string
	Reason     string
	Audio      []float32
	SampleRate int
}

// MetricsUpdate carries server metrics whenever a frame has them (both dialects), so the agent can
// watch kv_cache_length.
type MetricsUpdate struct{ Metrics Metrics }

// Transcript is the user's speech as text (OpenVoice transcript.partial/final).
type Transcript struct {
	Text     string
	Final    bool
	Language string
	Duration time.Duration
}

// VAD reports the server's voice activity detection (OpenVoice vad.speech_start/end).
type VAD struct{ Speaking bool }

// TTSState reports OpenVoice synthesis starting or ending (tts.speaking_start/end).
type TTSState struct{ Speaking bool }

// ErrorEvent reports a problem that did NOT end the session: a bad frame from the server, or a
// recoverable server error. The session goes on.
type ErrorEvent struct{ Err *Error }

// Closed is always the last event. Reason is the server's session.closed reason ("" when the link
// ended without one); Err is nil after a clean Close and otherwise classifies the end.
type Closed struct {
	Reason     string
	Diagnostic string
	Err        *Error
	// Undelivered lists, oldest first, the IDs of media chunks Send accepted that the peer's TCP
	// stack had not acknowledged when the session ended (still queued, being written, or written
	// but unacknowledged): the caller may send them again in its next session. Empty after a
	// clean Close. The connection is reset rather than closed when it holds such data, so none of
	// it arrives later.
	Undelivered []uint64
}

// Metrics are the server's counters; zero when absent. Unknown keys are ignored.
type Metrics struct {
	KVCacheLength int
	Backend       string
	PrefillMS     float64
	GenerateMS    float64
	WallClockMS   float64
	NTokens       int
	NTTSTokens    int
	VisionSlices  int
	VisionTokens  int
	ChunkIndex    int
	// ServerSendTS is when the server sent the frame, if it said (seconds since the epoch).
	ServerSendTS float64
}

func (Listen) event()        {}
func (TextDelta) event()     {}
func (AudioDelta) event()    {}
func (TurnDone) event()      {}
func (MetricsUpdate) event() {}
func (Transcript) event()    {}
func (VAD) event()           {}
func (TTSState) event()      {}
func (ErrorEvent) event()    {}
func (Closed) event()        {}
