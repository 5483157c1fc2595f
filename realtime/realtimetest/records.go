package realtimetest

import (
	"maps"
	"slices"
	"time"
)

// SessionRecord is what the simulator saw and did on one WebSocket connection.
// Server.Sessions returns deep copies, so a test may keep and change them freely.
type SessionRecord struct {
	Index      int     // position in Server.Sessions (0-based, connection order)
	ID         string  // session id sent in session.created ("" if never reached)
	Mode       string  // public mode: "video", "audio", "chat" (MiniCPM dialects) or "openvoice"
	Dialect    Dialect // dialect the server spoke on this connection
	Model      string  // OpenVoice: the model query parameter
	Language   string  // OpenVoice: the language query parameter (what the real server transcribes in)
	RemoteAddr string

	ConnectedAt time.Time // WebSocket upgrade accepted
	AssignedAt  time.Time // worker assigned (session.queue_done sent); zero if never
	CreatedAt   time.Time // session.created sent; zero if never
	EndedAt     time.Time // connection torn down; zero while the session runs
	// LeftAt is when the server saw the client's socket end (close frame or EOF) while the
	// session ran or waited; zero if the server ended it first. With Options.LateQueueLeave a
	// queued client's EndedAt comes later, when the gateway notices.
	LeftAt time.Time

	QueuedPositions []int // positions announced: session.queued and every session.queue_update

	Init       InitRecord     // what the client configured the session with
	Appends    []AppendRecord // every accepted full-duplex input chunk (OpenVoice: every binary frame)
	Audio      []float32      // every accepted input sample concatenated, 16 kHz mono
	ReplyAudio []float32      // every full-duplex reply sample sent, concatenated, 24 kHz mono
	// Interrupts holds, for every force_listen that interrupted a reply, how much of ReplyAudio
	// had been sent before it: what follows belongs to the interrupted reply (Options.InterruptLag)
	// until the next reply.
	Interrupts   []int
	ChatRequests []ChatRecord // every accepted chat-mode input.append
	TTSRequests  []TTSRecord  // OpenVoice: every accepted tts.speak, in order
	// Commits counts OpenVoice input_audio_buffer.commit commands.
	Commits int
	// DroppedFrames counts OpenVoice binary frames the server's flow control dropped (its
	// backlog was over 10 s: session.frames_dropped); they are not in Appends or Audio.
	DroppedFrames int

	Received    []string // type of every client message in order ("binary" for binary frames)
	Sent        []string // type of every server message in order ("binary" for binary frames)
	Rejections  []string // every protocol violation found, human-readable
	ClientPings int      // WebSocket pings the client sent

	CloseReason   string // reason the client gave in session.close, if any
	EndReason     string // why the session ended (see README.md for the list)
	KVCacheLength int    // simulated kv cache length at the end (or now)
	// IgnoredAfterClose counts input that arrived within the in-flight grace after a
	// session.closed that left the socket open (legacy context_full, OpenVoice, a keep-open close
	// fault): sent before the client could know, so ignored, not rejected.
	IgnoredAfterClose int
}

// QueueWait is how long the session waited in the queue for a worker: from connect to
// session.queue_done, or, if it never got a worker, to its end (or until now while it waits).
// Zero for OpenVoice, which has no queue.
func (r SessionRecord) QueueWait() time.Duration {
	switch {
	case r.Dialect == OpenVoice:
		return 0
	case !r.AssignedAt.IsZero():
		return r.AssignedAt.Sub(r.ConnectedAt)
	case !r.EndedAt.IsZero():
		return r.EndedAt.Sub(r.ConnectedAt)
	}
	return time.Since(r.ConnectedAt)
}

// InitRecord holds the session configuration the client sent: session.init (current),
// session.update (legacy) or session.configure (OpenVoice).
type InitRecord struct {
	At   time.Time // zero if the client never initialised the session
	Type string    // "session.init", "session.update" or "session.configure"

	Instructions       string         // system_prompt / instructions
	RefAudioSamples    int            // LLM reference audio samples (float32, 16 kHz)
	TTSRefAudioSamples int            // TTS reference audio samples (float32, 16 kHz)
	MaxSliceNums       int            // 0 if not given
	Config             map[string]any // current dialect payload.config as decoded JSON
	ForceListenCount   int            // effective number of forced listen chunks for this session

	// OpenVoice session.configure (for each field the last value given wins; Configures counts
	// the commands).
	Configures     int
	VADSensitivity string
	// Language is the configure field, which the real server only logs: the language query
	// parameter (SessionRecord.Language) is what applies.
	Language         string
	HotWords         []string
	TTSModel         string // model_tts
	SilenceTimeoutMS int
	HoldTimeoutMS    int
	EnableITN        *bool
}

// TTSRecord is one OpenVoice tts.speak the server accepted.
type TTSRecord struct {
	At        time.Time
	RequestID string // the client's, or the one the server made up (tts_<8 hex>)
	Text      string
	Voice     string
	Model     string // the model_tts in force, "" for the server's default
	// Outcome: "spoken" (tts.speaking_end{cancelled:false}), "cancelled" (by tts.cancel, a new
	// tts.speak or the end of the session), "error: <code>" (only an error was sent), "silent"
	// (nothing to say: the real server then sends no event at all), "" while it runs.
	Outcome string
}

// AppendRecord describes one accepted input chunk.
type AppendRecord struct {
	At           time.Time
	Samples      int  // audio samples in the chunk
	ForceListen  bool // the client asked for listen on this chunk
	MaxSliceNums int  // per-chunk max_slice_nums, 0 if not given
	Frames       []FrameInfo
}

// FrameInfo describes one decoded image.
type FrameInfo struct {
	Width, Height int
	Bytes         int // size of the encoded image
	Quality       int // JPEG quality estimated from the quantisation tables; 0 if unknown or not JPEG
	Format        string
}

// ChatRecord describes one accepted chat-mode input.append.
type ChatRecord struct {
	At                 time.Time
	Messages           []ChatMessage
	Streaming          bool
	TTS                bool
	TTSRefAudioSamples int // input.tts.ref_audio_data samples (float32, 16 kHz), 0 if none
	Generation         map[string]any
	EnableThinking     bool
	OmniMode           bool
	UseTTSTemplate     bool
	MaxSliceNums       int    // input.image.max_slice_nums, 0 if not given
	Reply              string // the text the simulator answered
}

// ChatMessage is one message of a chat request.
type ChatMessage struct {
	Role   string
	Text   string      // text content; text parts joined with "\n"
	Images []FrameInfo // decoded image parts
}

func (r *SessionRecord) clone() SessionRecord {
	c := *r
	c.QueuedPositions = slices.Clone(r.QueuedPositions)
	c.Init = r.Init.clone()
	if r.Appends != nil {
		c.Appends = make([]AppendRecord, len(r.Appends))
		for i, a := range r.Appends {
			a.Frames = slices.Clone(a.Frames)
			c.Appends[i] = a
		}
	}
	c.Audio = slices.Clone(r.Audio)
	c.ReplyAudio = slices.Clone(r.ReplyAudio)
	c.Interrupts = slices.Clone(r.Interrupts)
	if r.ChatRequests != nil {
		c.ChatRequests = make([]ChatRecord, len(r.ChatRequests))
		for i, q := range r.ChatRequests {
			c.ChatRequests[i] = q.clone()
		}
	}
	c.TTSRequests = slices.Clone(r.TTSRequests)
	c.Received = slices.Clone(r.Received)
	c.Sent = slices.Clone(r.Sent)
	c.Rejections = slices.Clone(r.Rejections)
	return c
}

func (r InitRecord) clone() InitRecord {
	r.Config = cloneJSONMap(r.Config)
	r.HotWords = slices.Clone(r.HotWords)
	if r.EnableITN != nil {
		v := *r.EnableITN
		r.EnableITN = &v
	}
	return r
}

func (q ChatRecord) clone() ChatRecord {
	if q.Messages != nil {
		msgs := make([]ChatMessage, len(q.Messages))
		for i, m := range q.Messages {
			m.Images = slices.Clone(m.Images)
			msgs[i] = m
		}
		q.Messages = msgs
	}
	q.Generation = cloneJSONMap(q.Generation)
	return q
}

// cloneJSONMap deep-copies a value tree produced by encoding/json.
func cloneJSONMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	c := maps.Clone(m)
	for k, v := range c {
		c[k] = cloneJSON(v)
	}
	return c
}

func cloneJSON(v any) any {
	switch t := v.(type) {
	case map[string]any:
		return cloneJSONMap(t)
	case []any:
		s := make([]any, len(t))
		for i, e := range t {
			s[i] = cloneJSON(e)
		}
		return s
	default:
		return v
	}
}
