package mqtt

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/omnisat/omnisat/agent"
)

// statePayload is <prefix>/state (retained). It holds only what a person or an automation acts
// on, so that it changes rarely: counters and ages are in stats, voice activity and the
// assistant's speech in activity.
type statePayload struct {
	State         string            `json:"state"`
	Detail        string            `json:"detail,omitempty"`
	Since         string            `json:"since,omitempty"`
	Connected     bool              `json:"connected"`
	Policy        string            `json:"policy,omitempty"`
	Mode          string            `json:"mode"`
	Dialect       string            `json:"dialect"`
	SessionID     string            `json:"session_id"`
	QueuePosition int               `json:"queue_position"`
	MicMuted      bool              `json:"mic_muted"`
	CameraOn      bool              `json:"camera_on"`
	Volume        int               `json:"volume"`
	Held          bool              `json:"held,omitempty"`
	Overrides     []string          `json:"overrides,omitempty"`
	LastError     string            `json:"last_error"`
	Devices       map[string]string `json:"devices,omitempty"`
}

// isConnected: the states in which a session with the model server is live.
func isConnected(s agent.State) bool {
	return s == agent.StateListening || s == agent.StateSpeaking
}

// publicState is the state as MQTT shows it: a live session is "listening" whether or not a
// reply plays (that flips every few seconds in a conversation; it is on activity).
func publicState(s agent.State) string {
	if s == agent.StateSpeaking {
		return string(agent.StateListening)
	}
	return string(s)
}

// buildState makes the state payload; since is when the public state began (the bridge keeps it,
// as the agent's own changes with every listening/speaking flip).
func buildState(st agent.Status, since time.Time) statePayload {
	p := statePayload{
		State: publicState(st.State), Detail: st.Detail, Connected: isConnected(st.State),
		Policy: string(st.Policy), Mode: st.Mode, Dialect: st.Dialect, SessionID: st.SessionID,
		QueuePosition: st.QueuePosition, MicMuted: st.Muted, CameraOn: st.CameraOn, Volume: st.Volume,
		Held: st.Held, Overrides: st.Overrides, LastError: st.LastError, Devices: st.Devices,
	}
	if !since.IsZero() {
		p.Since = since.UTC().Format(time.RFC3339)
	}
	return p
}

// key is what decides whether a state is new: everything but since (which follows the state).
func (p statePayload) key() string {
	p.Since = ""
	b, _ := json.Marshal(p)
	return string(b)
}

// activityPayload is <prefix>/activity (retained): who is speaking now.
type activityPayload struct {
	// Voice is true while someone speaks to the satellite, by the local detector or the server's.
	Voice       bool `json:"voice"`
	VoiceLocal  bool `json:"voice_local"`
	VoiceServer bool `json:"voice_server"`
	// AssistantSpeaking is true while a reply plays on the speaker.
	AssistantSpeaking bool `json:"assistant_speaking"`
}

// transcriptPayload is <prefix>/transcript and <prefix>/transcript/partial.
type transcriptPayload struct {
	MsgID string `json:"msg_id,omitempty"`
	// EventType is the role again, for Home Assistant's event entity.
	EventType string  `json:"event_type,omitempty"`
	Role      string  `json:"role"`
	Text      string  `json:"text"`
	SessionID string  `json:"session_id,omitempty"`
	Start     string  `json:"start,omitempty"`
	End       string  `json:"end,omitempty"`
	Language  string  `json:"language,omitempty"`
	DurationS float64 `json:"duration_s,omitempty"`
	// Confidence (0..1) and SegmentID are the server's, for the user's words (OpenVoice): a
	// phrase's partials and its final share a segment.
	Confidence float64 `json:"confidence,omitempty"`
	SegmentID  *int    `json:"segment_id,omitempty"`
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func buildTranscript(u agent.Utterance) transcriptPayload {
	p := transcriptPayload{Role: u.Role, Text: u.Text, SessionID: u.SessionID, Start: rfc3339(u.Start), End: rfc3339(u.End),
		Language: u.Language, DurationS: math.Round(u.Duration.Seconds()*1000) / 1000,
		Confidence: math.Round(u.Confidence*1000) / 1000}
	if u.Role == "user" {
		seg := u.Segment
		p.SegmentID = &seg
	}
	return p
}

// eventPayload is <prefix>/event.
type eventPayload struct {
	MsgID     string `json:"msg_id,omitempty"`
	Kind      string `json:"kind"`
	SessionID string `json:"session_id,omitempty"`
	Reason    string `json:"reason,omitempty"`
	At        string `json:"at"`
}

// answerPayload is <prefix>/answer.
type answerPayload struct {
	MsgID string `json:"msg_id,omitempty"`
	ID    string `json:"id"`
	Text  string `json:"text,omitempty"`
	Error string `json:"error,omitempty"`
}

// answerStreamPayload is <prefix>/answer/stream: an ask answer as it streams.
type answerStreamPayload struct {
	ID    string `json:"id"`
	Delta string `json:"delta"`
	Text  string `json:"text"` // the answer so far (the last 8 KiB)
}

// statsPayload is <prefix>/stats.
type statsPayload struct {
	UptimeS       float64 `json:"uptime_s"`
	SessionAgeS   float64 `json:"session_age_s"`
	KVCacheLength int     `json:"kv_cache_length"`
	Reconnects    int     `json:"reconnects"`
	Rollovers     int     `json:"rollovers"`
	ChunksSent    uint64  `json:"chunks_sent"`
	ChunksDropped uint64  `json:"chunks_dropped"`
	AudioDroppedS float64 `json:"audio_dropped_s"`
	// The server's flow control (OpenVoice): audio it dropped, and its requests to slow down.
	ServerDroppedS float64  `json:"server_audio_dropped_s"`
	RateLimits     int64    `json:"server_rate_limits"`
	EventsDropped  *uint64  `json:"events_dropped,omitempty"`
	OutboxPending  int      `json:"outbox_pending"`
	OutboxBytes    int64    `json:"outbox_bytes"`
	OutboxDropped  uint64   `json:"outbox_dropped"`
	OutboxFailed   uint64   `json:"outbox_write_errors"`
	CPUSeconds     *float64 `json:"cpu_s,omitempty"` // nil where /proc is missing
	RSSBytes       int64    `json:"rss_bytes,omitempty"`
	MQTTReconnects int      `json:"mqtt_reconnects"`
	BytesUp        uint64   `json:"bytes_up"`
	BytesDown      uint64   `json:"bytes_down"`
	// PlaybackUnderruns is omitted when the speaker does not count them.
	PlaybackUnderruns *int64 `json:"playback_underruns,omitempty"`
	// LastStep is the model's newest per-step timing, where the server sends it.
	LastStep *agent.StepMetrics `json:"last_step,omitempty"`
}

// clockTicks is USER_HZ, 100 on every Linux the project runs on (x86-64, arm64).
const clockTicks = 100

// procStats reads the process's CPU time (user+system) and resident set from /proc/self.
// ok is false where /proc is missing (not Linux).
func procStats() (cpuSeconds float64, rssBytes int64, ok bool) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, 0, false
	}
	// Fields after the command name (which may contain spaces) start after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, 0, false
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	stt, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	cpuSeconds = float64(ut+stt) / clockTicks
	if st, err := os.Open("/proc/self/status"); err == nil {
		sc := bufio.NewScanner(st)
		for sc.Scan() {
			line := sc.Text()
			if rest, found := strings.CutPrefix(line, "VmRSS:"); found {
				fs := strings.Fields(rest)
				if len(fs) >= 1 {
					if kb, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
						rssBytes = kb * 1024
					}
				}
				break
			}
		}
		st.Close()
	}
	return cpuSeconds, rssBytes, true
}

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain structs of strings and numbers are marshalled here; this cannot happen.
		return []byte(`{"error":"marshal failed"}`)
	}
	return b
}
