// Package agent is omnisat's heart: the supervisor that owns one conversation with the model server
// for as long as the service runs, whatever the server and the network do. It consumes audio and
// frame sources, drives a realtime.Session, feeds a speaker, and publishes what happens as events.
//
// It knows nothing of PortAudio, OpenCV, MQTT or JSON: devices and the hub plug in through the
// small interfaces below. See README.md in this folder for the states, policies and rules.
package agent

import (
	"context"
	"time"
)

// AudioSource is the microphone after the pipeline: 16 kHz mono float32, paced by capture.
type AudioSource interface {
	// Read fills p with the next captured samples, blocking until at least one is available.
	// It returns io.EOF when the source has ended for good.
	Read(ctx context.Context, p []float32) (int, error)
}

// PatientSource is an AudioSource that can hold its capture back until a block of several
// device buffers has come (audio.Microphone): ReadPatiently returns once p is full or the
// source has gathered as much as it hands over at once, so that the device's buffers wake the
// reader once per block instead of once each. The agent reads patiently only while nothing
// needs the microphone sooner (see captureLoop).
type PatientSource interface {
	AudioSource
	ReadPatiently(ctx context.Context, p []float32) (int, error)
}

// FrameSource is the camera after the pipeline: the newest encoded JPEG frame.
type FrameSource interface {
	// Latest returns the newest frame, or ok=false when there is none (no camera, or it is lost).
	Latest() (jpeg []byte, ok bool)
}

// Speaker plays the model's speech: 24 kHz mono float32 in, whatever the device needs out.
type Speaker interface {
	// Play queues samples; it must not block for long, and must not keep samples after it
	// returns (the agent hands their buffer back to the session for the next reply audio).
	Play(samples []float32)
	// FlushAfter drops queued audio beyond keep from now (0: silence at once).
	FlushAfter(keep time.Duration)
	// Pending is how much queued audio has not been heard yet.
	Pending() time.Duration
}

// VolumeControl is a Speaker whose volume can change live (0..100). Optional.
type VolumeControl interface {
	SetVolume(v int)
	Volume() int
}

// State is where the agent is in its life.
type State string

const (
	StateIdle         State = "idle"         // no session wanted (on_demand / voice waiting)
	StateConnecting   State = "connecting"   // dialling the server
	StateQueued       State = "queued"       // waiting in the server's queue
	StateStarting     State = "starting"     // worker assigned, session being initialised
	StateListening    State = "listening"    // session live, the model listens
	StateSpeaking     State = "speaking"     // session live, reply audio is being played
	StateReconnecting State = "reconnecting" // waiting before the next attempt
	StateStopped      State = "stopped"      // Run has returned
	StateError        State = "error"        // a configuration problem; tried again slowly (next_attempt)
)

// Status is a snapshot of the agent, as published on every state change and by `ctl status`.
type Status struct {
	State      State     `json:"state"`
	Detail     string    `json:"detail,omitempty"`
	Since      time.Time `json:"since"`
	Policy     Policy    `json:"policy"`
	Mode       string    `json:"mode"`
	Dialect    string    `json:"dialect"`
	SessionID  string    `json:"session_id,omitempty"`
	SessionAge float64   `json:"session_age_s"`

	QueuePosition int     `json:"queue_position,omitempty"`
	QueueWaitS    float64 `json:"queue_wait_s,omitempty"`
	KVCacheLength int     `json:"kv_cache_length"`

	// Reconnects counts attempts to get a session back (not the first of a start, not
	// rollovers); SessionsLost counts sessions that ended without being asked to.
	Reconnects   int       `json:"reconnects"`
	Rollovers    int       `json:"rollovers"`
	SessionsLost int       `json:"sessions_lost"`
	NextAttempt  time.Time `json:"next_attempt,omitzero"`
	LastError    string    `json:"last_error,omitempty"`

	Muted    bool `json:"mic_muted"`
	CameraOn bool `json:"camera_on"`
	// Volume is the volume last set (0..100), whatever the sink: a speaker without a volume
	// control (none, a file) keeps it for when one comes.
	Volume int  `json:"volume"`
	Speech bool `json:"speech"`
	// Held is true when a stop command holds the session off across restarts (policy always).
	Held bool `json:"held,omitempty"`
	// Overrides names the settings that come from commands rather than the configuration
	// (mute, camera, volume, instructions, session), kept across restarts.
	Overrides []string `json:"overrides,omitempty"`
	// Devices maps each device (microphone, speaker, camera) to "ok" or what is wrong with it.
	Devices map[string]string `json:"devices,omitempty"`

	ChunksSent     uint64  `json:"chunks_sent"`
	ChunksDropped  uint64  `json:"chunks_dropped"`
	SecondsDropped float64 `json:"audio_dropped_s"`
	// ServerDroppedS is audio the server's flow control dropped after it arrived (OpenVoice
	// session.frames_dropped); RateLimits counts its requests to slow down (session.rate_limit).
	ServerDroppedS float64 `json:"server_audio_dropped_s"`
	RateLimits     int64   `json:"server_rate_limits"`
	// BytesUp and BytesDown count the WebSocket traffic of every session so far.
	BytesUp   uint64 `json:"bytes_up"`
	BytesDown uint64 `json:"bytes_down"`
	// PlaybackUnderruns counts times the speaker ran dry mid-reply; nil when the speaker does
	// not count them (file stand-ins, none).
	PlaybackUnderruns *int64 `json:"playback_underruns,omitempty"`
	// LastStep is the model's newest per-step metrics, where the server sends them.
	LastStep *StepMetrics `json:"last_step,omitempty"`
}

// StepMetrics are the timings the model server reports for one step (MiniCPM-o metrics);
// zero fields were not sent.
type StepMetrics struct {
	PrefillMS   float64   `json:"prefill_ms,omitempty"`
	GenerateMS  float64   `json:"generate_ms,omitempty"`
	WallClockMS float64   `json:"wall_clock_ms,omitempty"`
	Tokens      int       `json:"n_tokens,omitempty"`
	TTSTokens   int       `json:"n_tts_tokens,omitempty"`
	At          time.Time `json:"at"`
}

// UnderrunCounter is a Speaker that counts its underruns. Optional.
type UnderrunCounter interface{ Underruns() int64 }

// Event is something the agent publishes. The concrete types below are the whole set.
type Event interface{ agentEvent() }

// StateChanged carries the new status.
type StateChanged struct{ Status Status }

// TextDelta is assistant text as it streams (it leads the audio).
type TextDelta struct {
	SessionID string
	Text      string
}

// Utterance is one finished piece of speech: the assistant's reply, or the user's words where the
// server transcribes them (OpenVoice).
type Utterance struct {
	Role      string // "assistant" or "user"
	Text      string
	SessionID string
	Start     time.Time
	End       time.Time
	Partial   bool // an unstable hypothesis (user transcript.partial)
	// Language and Duration of the user's speech, where the server reports them (OpenVoice).
	Language string
	Duration time.Duration
	// Confidence is the server's 0..1 confidence in the user's final transcript (0: not said).
	Confidence float64
	// Segment numbers the user's speech segments within the session (OpenVoice segment_id): the
	// partials of a phrase and its final share one.
	Segment int
}

// VoiceActivity is someone starting or stopping to speak, as heard by the local detector
// (Source "local", on the echo-cancelled microphone) or by the server's VAD ("server").
type VoiceActivity struct {
	Source   string
	Speaking bool
	At       time.Time
}

// AnswerDelta is the text of an Ask answer as it streams; the Answer with the same ID ends it.
type AnswerDelta struct {
	ID   string
	Text string
}

// FrameSent is the camera frame the newest chunk carried to the server (a JPEG).
type FrameSent struct {
	JPEG []byte
	At   time.Time
}

// TurnOptions are a turn-based request's options (Ask and Say). Zero values leave the
// server's defaults.
type TurnOptions struct {
	// Snapshot attaches the newest camera frame (Ask).
	Snapshot bool
	// MaxNewTokens bounds the reply's length.
	MaxNewTokens int
	// Thinking lets the model think before it answers (MiniCPM-o enable_thinking).
	Thinking bool
	// Voice names the voice to speak with: an OpenVoice voice id, or for MiniCPM-o a reference
	// voice the Voices option resolves; empty uses the configured voice (server.tts_ref_audio).
	Voice string
}

// Lifecycle is a session or device event: started, ended (with reason), rollover, reconnect,
// dropped audio, a device lost or back.
type Lifecycle struct {
	Kind      string // session_started, session_ended, rollover, reconnect, audio_dropped, device_lost, device_back, barge_in, error
	SessionID string
	Reason    string
	At        time.Time
}

// Answer is the result of an Ask or Say request.
type Answer struct {
	ID    string
	Text  string
	Error string
}

func (StateChanged) agentEvent()  {}
func (TextDelta) agentEvent()     {}
func (Utterance) agentEvent()     {}
func (Lifecycle) agentEvent()     {}
func (Answer) agentEvent()        {}
func (VoiceActivity) agentEvent() {}
func (AnswerDelta) agentEvent()   {}
func (FrameSent) agentEvent()     {}
