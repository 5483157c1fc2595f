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

// statePayload is <prefix>/state (retained).
type statePayload struct {
	State         string            `json:"state"`
	Detail        string            `json:"detail,omitempty"`
	Since         string            `json:"since,omitempty"`
	Connected     bool              `json:"connected"`
	Policy        string            `json:"policy,omitempty"`
	Mode          string            `json:"mode"`
	Dialect       string            `json:"dialect"`
	SessionID     string            `json:"session_id"`
	SessionAge    float64           `json:"session_age_s"`
	QueuePosition int               `json:"queue_position"`
	KVCacheLength int               `json:"kv_cache_length"`
	Reconnects    int               `json:"reconnects"`
	Rollovers     int               `json:"rollovers"`
	MicMuted      bool              `json:"mic_muted"`
	CameraOn      bool              `json:"camera_on"`
	Volume        int               `json:"volume"`
	Speech        bool              `json:"speech"`
	LastError     string            `json:"last_error"`
	Devices       map[string]string `json:"devices,omitempty"`
}

// connectedStates are the states in which a session with the model server is live.
func isConnected(s agent.State) bool {
	return s == agent.StateListening || s == agent.StateSpeaking
}

func buildState(st agent.Status) statePayload {
	p := statePayload{
		State: string(st.State), Detail: st.Detail, Connected: isConnected(st.State),
		Policy: string(st.Policy), Mode: st.Mode, Dialect: st.Dialect, SessionID: st.SessionID,
		SessionAge: math.Round(st.SessionAge*10) / 10, QueuePosition: st.QueuePosition,
		KVCacheLength: st.KVCacheLength, Reconnects: st.Reconnects, Rollovers: st.Rollovers,
		MicMuted: st.Muted, CameraOn: st.CameraOn, Volume: st.Volume, Speech: st.Speech, LastError: st.LastError,
		Devices: st.Devices,
	}
	if !st.Since.IsZero() {
		p.Since = st.Since.UTC().Format(time.RFC3339)
	}
	return p
}

// stateKey is what decides whether a state is new: everything but the session's age, which
// changes on every snapshot.
func (p statePayload) key() string {
	p.SessionAge = 0
	b, _ := json.Marshal(p)
	return string(b)
}

// transcriptPayload is <prefix>/transcript and <prefix>/transcript/partial.
type transcriptPayload struct {
	Role      string `json:"role"`
	Text      string `json:"text"`
	SessionID string `json:"session_id,omitempty"`
	Start     string `json:"start,omitempty"`
	End       string `json:"end,omitempty"`
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func buildTranscript(u agent.Utterance) transcriptPayload {
	return transcriptPayload{Role: u.Role, Text: u.Text, SessionID: u.SessionID, Start: rfc3339(u.Start), End: rfc3339(u.End)}
}

// eventPayload is <prefix>/event.
type eventPayload struct {
	Kind      string `json:"kind"`
	SessionID string `json:"session_id,omitempty"`
	Reason    string `json:"reason,omitempty"`
	At        string `json:"at"`
}

// answerPayload is <prefix>/answer.
type answerPayload struct {
	ID    string `json:"id"`
	Text  string `json:"text,omitempty"`
	Error string `json:"error,omitempty"`
}

// statsPayload is <prefix>/stats.
type statsPayload struct {
	UptimeS        float64 `json:"uptime_s"`
	ChunksSent     uint64  `json:"chunks_sent"`
	ChunksDropped  uint64  `json:"chunks_dropped"`
	AudioDroppedS  float64 `json:"audio_dropped_s"`
	EventsDropped  *uint64 `json:"events_dropped,omitempty"`
	OutboxPending  int     `json:"outbox_pending"`
	OutboxBytes    int64   `json:"outbox_bytes"`
	OutboxDropped  uint64  `json:"outbox_dropped"`
	CPUSeconds     float64 `json:"cpu_s,omitempty"`
	RSSBytes       int64   `json:"rss_bytes,omitempty"`
	MQTTReconnects int     `json:"mqtt_reconnects"`
	BytesUp        uint64  `json:"bytes_up"`
	BytesDown      uint64  `json:"bytes_down"`
	// PlaybackUnderruns is omitted when the speaker does not count them.
	PlaybackUnderruns *int64 `json:"playback_underruns,omitempty"`
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
