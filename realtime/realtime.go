// Package realtime speaks the wire protocols of the model servers omnisat talks to: the MiniCPM-o
// realtime gateway in its current and legacy dialects, and the Macaw OpenVoice STT/TTS server. All of
// them sit behind one interface, Session, so the agent never sees JSON or WebSocket frames.
//
// The package knows nothing of devices, MQTT or the agent. See README.md in this folder for the
// behaviour it implements where real servers differ from their documents.
package realtime

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Dialect names the wire protocol a server speaks. Which one a server speaks is a deployment fact,
// so it is a setting, never guessed.
type Dialect string

const (
	// DialectCurrent is the MiniCPM-o protocol of the overview document: session.init, input.append,
	// response.output.delta with a kind, response.done.
	DialectCurrent Dialect = "current"
	// DialectLegacy is the older MiniCPM-o gateway: session.update, input_audio_buffer.append,
	// response.output_audio.delta, response.listen.
	DialectLegacy Dialect = "legacy"
	// DialectOpenVoice is the Macaw OpenVoice STT/TTS server: binary PCM16 up, transcripts and TTS down.
	DialectOpenVoice Dialect = "openvoice"
)

// Mode is the public API mode in the URL (?mode=...).
type Mode string

const (
	ModeVideo Mode = "video" // full duplex, audio plus camera frames; 300 s server limit
	ModeAudio Mode = "audio" // full duplex, audio only; 600 s server limit
	ModeChat  Mode = "chat"  // turn based (current dialect only)
)

// The range of Config.OpenVoiceFrame: the server's own client sends 40 ms; under 20 ms the
// frames cost more than they say, over 100 ms its VAD merges phrases and ends speech late. And
// the ranges of the OpenVoice state timeouts (its defaults: 30 s of silence, 5 min on hold).
const (
	minOpenVoiceFrame, maxOpenVoiceFrame = 20 * time.Millisecond, 100 * time.Millisecond
	maxSilenceTimeout                    = 10 * time.Minute
	maxHoldTimeout                       = time.Hour
)

// Sample rates fixed by the MiniCPM-o protocol.
const (
	InputSampleRate  = 16000 // what the server expects from the microphone
	OutputSampleRate = 24000 // what the server's TTS produces
	// MinChunkSamples is the smallest audio chunk servers accept (250 ms at 16 kHz).
	MinChunkSamples = 4000
)

// Config says where to connect and how. Zero values take the defaults noted on each field.
type Config struct {
	// URL of the realtime endpoint, e.g. "wss://host/v1/realtime". A URL without a path gets
	// "/v1/realtime". Query parameters already present are kept; mode (and model) are set from below.
	URL     string
	Dialect Dialect // default DialectCurrent
	Mode    Mode    // default ModeVideo; ignored by OpenVoice
	// Model is the OpenVoice STT model id (the required `model` query parameter).
	Model string
	// Token, when set, is sent as "Authorization: Bearer <token>". It is never logged.
	Token string
	// Header adds HTTP headers to the WebSocket handshake.
	Header http.Header
	// TLS configures wss:// connections; nil uses the system roots.
	TLS *tls.Config

	// Init is what the session is started with (instructions, voices, OpenVoice settings).
	Init Init

	// OnQueue, when set, is called from Dial's goroutine with every queue position report.
	OnQueue func(QueueStatus)
	// QueueLeaveWait, when set, is asked when the dial is given up (ctx ends) while a MiniCPM-o
	// gateway may hold it in its queue: how long to stay there for the worker, to hand it
	// straight back with session.close, before leaving anyway. The real gateway does not read
	// from queued clients; it notices one that left only when it next writes to it (a queue
	// update, about every 3 s), and a worker that frees before then goes to the client that left
	// and is lost until the gateway restarts; the worker about to free is often the caller's own
	// (a session it closes as it gives the dial up). Nil or ≤ 0 leaves at once.
	QueueLeaveWait func() time.Duration

	// OpenVoiceTTSRate is the sample rate of OpenVoice's binary TTS audio (its document does not
	// state it; the real server sends 24000). AudioDelta carries it. Default 24000.
	OpenVoiceTTSRate int
	// OpenVoiceFrame is the most audio one OpenVoice binary frame carries: the server's VAD judges
	// each frame as a whole (its own client sends 40 ms), so a chunk goes out as frames of this
	// length. Default 40 ms; 20..100 ms.
	OpenVoiceFrame time.Duration

	DialTimeout time.Duration // TCP + TLS + WebSocket handshake; default 10 s
	// InitTimeout bounds the wait for session.created: after session.init (MiniCPM-o; time in the
	// server's queue before it does not count: that wait is unlimited and reported to OnQueue),
	// or after connecting (OpenVoice, which greets unasked). Default 20 s.
	InitTimeout time.Duration
	// CloseTimeout bounds Close's wait for session.closed before it drops the link. Default 2 s.
	CloseTimeout time.Duration
	PingInterval time.Duration // client pings when the server has been silent this long; default 5 s
	// DeadLinkTimeout is how long the link may stay completely silent (no frame, no pong) before the
	// session is declared dead. Default 15 s. Must be longer than PingInterval.
	DeadLinkTimeout time.Duration
	WriteTimeout    time.Duration // one frame's write; default 10 s
	// MaxFrameBytes bounds one incoming frame; a larger frame ends the session. Default 16 MiB.
	MaxFrameBytes int64
	// SendQueue is how many outgoing messages may wait for the writer. Default 8. Beyond it, the
	// socket's send buffer is kept to about two media chunks, so that little can sit between Send
	// and the peer (see Closed.Undelivered).
	SendQueue int
	// EventBuffer is the capacity of the Events channel. Default 256. The consumer must keep reading:
	// a full channel stalls the read loop.
	EventBuffer int

	Logger *slog.Logger // nil discards

	// Buffers, when set, is shared by the sessions dialled with it (NewBuffers): they take
	// turns with one set of message buffers (the WebSocket write buffer, the read buffer, the
	// media messages' and the reply samples'), each held only while a message is read, built
	// or written, so two sessions that overlap (a rollover, a reconnect) do not keep a set each.
	// Nil: each session keeps its own.
	Buffers *Buffers

	// netDial replaces the TCP dialer (tests of the session over an in-memory pipe).
	netDial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Init is the session set-up sent once after the queue.
type Init struct {
	// Instructions is the system prompt (legacy session.instructions, current payload.system_prompt).
	Instructions string
	// RefAudio and TTSRefAudio are reference voices: 16 kHz mono samples. They go on the wire as raw
	// float32 little-endian PCM in base64, never as WAV (servers decode the bytes as samples).
	RefAudio    []float32
	TTSRefAudio []float32
	// MaxSliceNums is the video slicing (1 fast, 4 detailed); 0 leaves the server default.
	MaxSliceNums int
	// Config holds extra duplex inference settings (current dialect payload.config), e.g.
	// {"length_penalty": 1.1}. Nil sends none.
	Config map[string]any

	// OpenVoice session.configure fields (sent flat, under the names the server reads); all
	// empty sends no session.configure. Language also goes in the URL's language query
	// parameter, the only place today's server takes it from.
	VADSensitivity string // high, normal or low
	Language       string // ISO 639-1
	HotWords       []string
	TTSModel       string // model_tts
	// SilenceTimeout and HoldTimeout are the server's state timeouts (silence_timeout_ms,
	// hold_timeout_ms); 0 leaves its defaults. The server ends the session on a value under 1 s.
	SilenceTimeout, HoldTimeout time.Duration
	// EnableITN turns the server's inverse text normalisation on or off; nil leaves its default.
	EnableITN *bool
}

// Speech is one OpenVoice text-to-speech request (tts.speak).
type Speech struct {
	Text  string
	Voice string // the server's voice id; "" for its default
	// RequestID names the request in its TTSState events; "" makes one up (Speak returns it).
	RequestID string
	Speed     float64 // 0.25..4; 0 for the server's 1.0
}

// ReasonCancel, as Close's reason, cancels an OpenVoice session (session.cancel, answered with
// session.closed{reason:"cancelled"}) rather than closing it; MiniCPM-o servers see it as the reason.
const ReasonCancel = "cancelled"

// QueueStatus is one report from the server's queue.
type QueueStatus struct {
	Position      int           // 1-based; 0 when Done
	EstimatedWait time.Duration // the server's estimate
	Length        int           // clients waiting
	Ticket        string        // opaque; only the first report carries it
	Done          bool          // a worker has been assigned
}

// Chunk is one piece of full-duplex input.
type Chunk struct {
	// ID is the caller's id for this chunk, echoed in Closed.Undelivered; 0 = untracked.
	ID uint64
	// Audio is 16 kHz mono; at least MinChunkSamples for MiniCPM-o servers.
	Audio []float32
	// Frames are JPEG images (mode=video only).
	Frames [][]byte
	// ForceListen asks the model to stop talking and listen (barge-in).
	ForceListen bool
	// MaxSliceNums overrides the video slicing for this chunk (1..9); 0 omits it.
	MaxSliceNums int
}

// Info describes a started session.
type Info struct {
	ID         string  // opaque server id
	Dialect    Dialect // as configured
	Mode       Mode    // as requested in the URL
	ServerMode string  // the backend's runtime mode (current: full_duplex / turn_based), if said
	Metrics    Metrics // from session.created, if any
}

// Session is one live conversation with a server. All methods are safe for concurrent use.
type Session interface {
	Info() Info
	// Send queues one chunk of media. It blocks while the send queue is full, until ctx is done or
	// the session ends; it never blocks forever. It keeps neither c.Audio nor c.Frames after it
	// returns (the message is built during the call): the caller may reuse their buffers.
	Send(ctx context.Context, c Chunk) error
	// Ask sends one chat-mode turn (mode=chat). Replies arrive as events ending with TurnDone.
	Ask(ctx context.Context, r ChatRequest) error
	// Speak asks an OpenVoice server to synthesise text (tts.speak) and returns the request's id:
	// TTSState events carry it, and the audio arrives as AudioDelta between them.
	Speak(ctx context.Context, r Speech) (requestID string, err error)
	// CancelSpeech stops OpenVoice synthesis (tts.cancel): whatever runs ends with
	// TTSState{Cancelled: true}.
	CancelSpeech(ctx context.Context) error
	// CommitAudio ends OpenVoice's current speech segment now (input_audio_buffer.commit): its
	// transcript.final comes without waiting for the silence.
	CommitAudio(ctx context.Context) error
	// Events delivers what the server says, in order. The last event is always Closed, after which
	// the channel is closed.
	Events() <-chan Event
	// Close ends the session politely: session.close with reason (ReasonCancel: OpenVoice's
	// session.cancel), a bounded wait for session.closed, then the socket. It returns when the
	// session is over; calling it again is harmless.
	Close(ctx context.Context, reason string) error
	// Done is closed when the session has ended; Err then says why (nil after a clean Close).
	Done() <-chan struct{}
	Err() error
	// Stats counts the session's traffic so far.
	Stats() Stats
}

// AudioRecycler is implemented by sessions that can reuse the sample buffers of the AudioDelta
// events they deliver. A caller done with a delta's samples (a speaker that has copied them)
// hands them back, and a later delta is decoded into them instead of into new memory: a second
// of reply audio a second otherwise costs a fresh 96 KB buffer, its page faults and garbage.
// Nothing may use the samples after RecycleAudio; a caller that keeps them simply does not
// call it.
type AudioRecycler interface {
	RecycleAudio(samples []float32)
}

// Stats is a session's traffic: WebSocket message payload bytes each way, and the media chunks
// the peer has received.
type Stats struct {
	BytesSent, BytesReceived uint64
	// ChunksDelivered counts media chunks every byte of which the peer has acknowledged.
	ChunksDelivered uint64
}

// Dial connects, waits through the server's queue (reporting to cfg.OnQueue), initialises the
// session and returns it ready for input. ctx bounds only this set-up, not the session's life.
func Dial(ctx context.Context, cfg Config) (Session, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, &Error{Class: ClassConfig, Code: CodeConfig, Message: err.Error()}
	}
	return dial(ctx, cfg)
}

func (c Config) withDefaults() Config {
	if c.Dialect == "" {
		c.Dialect = DialectCurrent
	}
	if c.Mode == "" {
		c.Mode = ModeVideo
	}
	if c.OpenVoiceTTSRate == 0 {
		c.OpenVoiceTTSRate = 24000
	}
	if c.OpenVoiceFrame == 0 {
		c.OpenVoiceFrame = 40 * time.Millisecond
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.InitTimeout == 0 {
		c.InitTimeout = 20 * time.Second
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = 2 * time.Second
	}
	if c.PingInterval == 0 {
		c.PingInterval = 5 * time.Second
	}
	if c.DeadLinkTimeout == 0 {
		c.DeadLinkTimeout = 15 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.MaxFrameBytes == 0 {
		c.MaxFrameBytes = 16 << 20
	}
	if c.SendQueue == 0 {
		c.SendQueue = 8
	}
	if c.EventBuffer == 0 {
		c.EventBuffer = 256
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every setting that cannot work (joined errors), each naming its field.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		bad("url: empty; want ws://host:port/v1/realtime or wss://...")
	case err != nil:
		bad("url: %q: %v", c.URL, err)
	case u.Scheme != "ws" && u.Scheme != "wss":
		bad("url: %q: scheme %q is not ws or wss", c.URL, u.Scheme)
	case u.Host == "":
		bad("url: %q: no host", c.URL)
	}
	switch c.Dialect {
	case DialectCurrent, DialectLegacy, DialectOpenVoice:
	default:
		bad("dialect: %q is not one of current, legacy, openvoice", c.Dialect)
	}
	switch c.Mode {
	case ModeVideo, ModeAudio:
	case ModeChat:
		if c.Dialect == DialectLegacy {
			bad("mode: chat needs the current dialect (a legacy gateway treats it as audio)")
		}
	default:
		bad("mode: %q is not one of video, audio, chat", c.Mode)
	}
	if c.Dialect == DialectOpenVoice && c.Model == "" {
		bad("model: empty; an OpenVoice server requires its STT model id")
	}
	if c.Init.MaxSliceNums < 0 || c.Init.MaxSliceNums > 9 {
		bad("init.max_slice_nums: %d is outside 1..9", c.Init.MaxSliceNums)
	}
	switch c.Init.VADSensitivity {
	case "", "high", "normal", "low":
	default:
		bad("init.vad_sensitivity: %q is not one of high, normal, low", c.Init.VADSensitivity)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"dial_timeout", c.DialTimeout}, {"init_timeout", c.InitTimeout}, {"close_timeout", c.CloseTimeout}} {
		if d.v < 0 {
			bad("%s: %v is negative", d.key, d.v)
		}
	}
	if c.DeadLinkTimeout <= c.PingInterval {
		bad("dead_link_timeout: %v must be longer than ping_interval %v", c.DeadLinkTimeout, c.PingInterval)
	}
	if c.OpenVoiceTTSRate < 8000 || c.OpenVoiceTTSRate > 192000 {
		bad("openvoice_tts_rate: %d Hz is outside 8000..192000", c.OpenVoiceTTSRate)
	}
	if c.OpenVoiceFrame < minOpenVoiceFrame || c.OpenVoiceFrame > maxOpenVoiceFrame {
		bad("openvoice_frame: %v is outside %v..%v", c.OpenVoiceFrame, minOpenVoiceFrame, maxOpenVoiceFrame)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
		max time.Duration
	}{{"init.silence_timeout", c.Init.SilenceTimeout, maxSilenceTimeout}, {"init.hold_timeout", c.Init.HoldTimeout, maxHoldTimeout}} {
		if d.v != 0 && (d.v < time.Second || d.v > d.max || d.v%time.Millisecond != 0) {
			bad("%s: %v is outside 1s..%v (whole milliseconds); the server ends a session given less than a second", d.key, d.v, d.max)
		}
	}
	if c.MaxFrameBytes < 4096 {
		bad("max_frame_bytes: %d is below 4096", c.MaxFrameBytes)
	}
	return errors.Join(errs...)
}

// AudioFrameSamples is how many 16 kHz samples one binary audio frame carries for an OpenVoice
// server (whose VAD judges each frame whole), 0 for MiniCPM-o servers, which take chunks of any
// length. A caller that cuts its audio into chunks of this length sends the server small frames
// paced at real time.
func (c Config) AudioFrameSamples() int {
	if c.Dialect != DialectOpenVoice {
		return 0
	}
	return max(1, int(c.withDefaults().OpenVoiceFrame*InputSampleRate/time.Second))
}

// endpoint builds the WebSocket URL with the mode (and model) query parameters.
func (c Config) endpoint() string {
	u, _ := url.Parse(c.URL) // validated
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/realtime"
	}
	q := u.Query()
	if c.Dialect == DialectOpenVoice {
		q.Set("model", c.Model)
		if c.Init.Language != "" {
			q.Set("language", c.Init.Language)
		}
	} else {
		q.Set("mode", string(c.Mode))
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// redactedEndpoint is the endpoint safe for logs and errors (no user info).
func (c Config) redactedEndpoint() string {
	u, err := url.Parse(c.endpoint())
	if err != nil {
		return "<bad url>"
	}
	u.User = nil
	return strings.TrimSpace(u.String())
}
