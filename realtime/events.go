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
	Text  string
	Final bool
	// SegmentID numbers the speech segments of a session (0, 1, ...); a final and the partials
	// before it share one.
	SegmentID int
	Language  string // finals only; "" when the server did not say
	// Duration is how long the segment's speech lasted (finals): the server's end_ms − start_ms,
	// else the span of its words; 0 when it says neither.
	Duration time.Duration
	// Start and End are the speech's bounds within the segment as the server reports them
	// (finals), Timestamp the partial's stream time.
	Start, End, Timestamp time.Duration
	// Confidence is the server's 0..1 confidence in a final, 0 when it did not say.
	Confidence float64
	Words      []Word // finals, when the engine gives word times
}

// Word is one transcribed word with its time within the segment.
type Word struct {
	Text       string
	Start, End time.Duration
}

// VAD reports the server's voice activity detection (OpenVoice vad.speech_start/end). Timestamp
// is the server's stream time of the event (audio received since the session started).
type VAD struct {
	Speaking  bool
	Timestamp time.Duration
}

// TTSState reports an OpenVoice synthesis starting (tts.speaking_start, which comes with its
// first audio) or ending (tts.speaking_end). A synthesis that fails yields only an ErrorEvent, and
// one with nothing to say may yield nothing at all: wait with a deadline.
type TTSState struct {
	Speaking  bool
	RequestID string // the id Speak returned
	// Cancelled: the end came from tts.cancel, a newer Speak, or the session's end, not from
	// the speech being complete.
	Cancelled bool
	// Duration is the server's duration_ms at the end: how long it took to synthesise (wall
	// time), not the length of the audio.
	Duration time.Duration
}

// RateLimit is the OpenVoice server's flow control: audio arrives faster than it takes (about
// 1.2× real time). The session already holds its next audio back by Delay; the caller should
// send no faster than real time.
type RateLimit struct {
	Delay   time.Duration
	Message string
}

// FramesDropped: the OpenVoice server dropped audio because its backlog was over ~10 s. That
// audio is lost (it was never transcribed): count it.
type FramesDropped struct {
	Dropped time.Duration
	Message string
}

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
	// OpenVoice's totals from its session.closed: the session's length and the segments it
	// transcribed (zero from other servers).
	ServerDuration time.Duration
	Segments       int
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
func (RateLimit) event()     {}
func (FramesDropped) event() {}
func (ErrorEvent) event()    {}
func (Closed) event()        {}
