package realtimetest

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
)

// stepWant describes the expected answer to one chunk.
type stepWant struct {
	text   string // text delta ("" none)
	audio  int    // samples of the audio delta (0 none)
	listen bool   // a listen (current: after the audio, if any)
	eot    bool   // legacy end_of_turn
}

func checkStep(t *testing.T, d Dialect, n int, got []msg, w stepWant) {
	t.Helper()
	desc := func() string {
		var s []string
		for _, m := range got {
			s = append(s, fmt.Sprintf("%s/%s", m.typ(), m.str("kind")))
		}
		return strings.Join(s, " ")
	}
	if d == Legacy {
		m := got[0]
		switch {
		case w.audio == 0:
			if m.typ() != "response.listen" {
				t.Fatalf("step %d: got %.120s, want response.listen", n, m.Raw)
			}
		default:
			if m.typ() != "response.output_audio.delta" || m.str("text") != w.text || m.M["end_of_turn"] != w.eot {
				t.Fatalf("step %d: got %.160s, want delta text %q end_of_turn %v", n, m.Raw, w.text, w.eot)
			}
			if k := len(decodeAudio(t, m.str("audio"))); k != w.audio {
				t.Fatalf("step %d: %d samples, want %d", n, k, w.audio)
			}
		}
		if _, ok := m.M["kv_cache_length"].(float64); !ok {
			t.Errorf("step %d: no kv_cache_length: %.100s", n, m.Raw)
		}
		return
	}
	i := 0
	take := func(kind string) msg {
		t.Helper()
		if i >= len(got) || got[i].str("kind") != kind {
			t.Fatalf("step %d: got [%s], want a %s delta at %d", n, desc(), kind, i)
		}
		i++
		return got[i-1]
	}
	if w.text != "" {
		if m := take("text"); m.str("text") != w.text {
			t.Fatalf("step %d: text %q, want %q", n, m.str("text"), w.text)
		}
	}
	if w.audio > 0 {
		if k := len(decodeAudio(t, take("audio").str("audio"))); k != w.audio {
			t.Fatalf("step %d: %d samples, want %d", n, k, w.audio)
		}
	}
	if w.listen {
		take("listen")
	}
	if i != len(got) {
		t.Fatalf("step %d: got [%s], want %d deltas", n, desc(), i)
	}
	for _, m := range got {
		if _, ok := m.M["metrics"].(map[string]any)["kv_cache_length"]; !ok || m.str("session_id") == "" || m.M["server_send_ts"] == nil {
			t.Errorf("step %d: delta lacks session_id/metrics.kv_cache_length/server_send_ts: %.150s", n, m.Raw)
		}
	}
}

func TestParrot(t *testing.T) {
	const heard2 = "I heard 2.0 seconds of speech"
	sil, speech := silence(1), tone(1, 0.3)
	tests := []struct {
		name   string
		d      Dialect
		mode   string
		chunks [][]float32
		want   []stepWant
	}{
		{
			name:   "current video",
			d:      Current,
			mode:   "video",
			chunks: [][]float32{sil, sil, sil, speech, speech, sil, sil, sil},
			want: []stepWant{{listen: true}, {listen: true}, {listen: true}, {listen: true}, {listen: true},
				{text: heard2 + " and saw a 640x480 frame", audio: 24000},
				{audio: 24000, listen: true},
				{listen: true}},
		},
		{
			name:   "legacy video",
			d:      Legacy,
			mode:   "video",
			chunks: [][]float32{sil, sil, sil, speech, speech, sil, sil, sil},
			want: []stepWant{{}, {}, {}, {}, {},
				{text: heard2 + " and saw a 640x480 frame", audio: 24000},
				{text: "", audio: 24000, eot: true},
				{}},
		},
		{
			name:   "current audio, 1.5 s",
			d:      Current,
			mode:   "audio",
			chunks: [][]float32{sil, sil, sil, speech, tone(0.5, 0.3), sil, sil},
			want: []stepWant{{listen: true}, {listen: true}, {listen: true}, {listen: true}, {listen: true},
				{text: "I heard 1.5 seconds of speech", audio: 24000},
				{audio: 12000, listen: true}},
		},
		{
			name:   "legacy audio, short reply",
			d:      Legacy,
			mode:   "audio",
			chunks: [][]float32{sil, sil, sil, tone(0.5, 0.3), sil, sil},
			want:   []stepWant{{}, {}, {}, {}, {text: "I heard 0.5 seconds of speech", audio: 12000, eot: true}, {}},
		},
		{
			name: "speech during the forced listen chunks answers after them",
			d:    Current, mode: "audio",
			chunks: [][]float32{speech, sil, sil, sil, sil},
			want: []stepWant{{listen: true}, {listen: true}, {listen: true},
				{text: "I heard 1.0 seconds of speech", audio: 24000, listen: true}, {listen: true}},
		},
		{
			name: "quiet noise is not speech",
			d:    Legacy, mode: "audio",
			chunks: [][]float32{sil, sil, sil, tone(1, 0.005), sil},
			want:   []stepWant{{}, {}, {}, {}, {}},
		},
	}
	frame := jpegB64(t, 640, 480, 70)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSrv(t, Options{Dialect: tt.d})
			c := dial(t, s, "mode="+tt.mode)
			created := c.handshake(tt.d, tt.mode)
			sid := created.str("session_id")
			var replyIDs []string
			for i, chunk := range tt.chunks {
				var frames []string
				if tt.mode == "video" {
					frames = []string{frame}
				}
				c.send(appendFor(tt.d, chunk, frames, nil))
				got := c.stepMsgs(tt.d)
				checkStep(t, tt.d, i+1, got, tt.want[i])
				if tt.d == Current && tt.want[i].audio > 0 {
					for _, m := range got {
						replyIDs = append(replyIDs, m.str("response_id"))
					}
				}
			}
			for _, id := range replyIDs {
				if id != replyIDs[0] || !regexp.MustCompile("^"+sid+`_resp_\d+$`).MatchString(id) {
					t.Errorf("reply response ids %q (session %s)", replyIDs, sid)
					break
				}
			}
			r := s.Sessions()[0]
			if len(r.Appends) != len(tt.chunks) || len(r.Rejections) != 0 {
				t.Errorf("Appends %d Rejections %q", len(r.Appends), r.Rejections)
			}
		})
	}
}

// The reply audio is the heard speech resampled to 24 kHz.
func TestParrotAudioContent(t *testing.T) {
	s := newSrv(t, Options{Dialect: Legacy, ForceListenCount: -1})
	c := dial(t, s, "mode=audio")
	c.handshake(Legacy, "audio")
	in := tone(1, 0.5)
	c.send(appendFor(Legacy, in, nil, nil))
	c.expect("response.listen")
	c.send(appendFor(Legacy, silence(1), nil, nil))
	out := decodeAudio(t, c.expect("response.output_audio.delta").str("audio"))
	if len(out) != 24000 {
		t.Fatalf("%d samples", len(out))
	}
	// sample i at 24 kHz is the input at i*2/3 (exact on every third sample)
	for i := 0; i < len(out); i += 3 {
		if math.Abs(float64(out[i]-in[i*2/3])) > 1e-6 {
			t.Fatalf("sample %d = %v, want %v", i, out[i], in[i*2/3])
		}
	}
	if r := rms(out); math.Abs(r-0.5/math.Sqrt2) > 0.01 {
		t.Errorf("rms %v", r)
	}
}

// TestUnrecorded: a server that keeps no growing records (the simulator program, which serves
// for days) still answers as always, and its record holds the session but none of what grows
// with its length: the same exchange recorded keeps every sample and message.
func TestUnrecorded(t *testing.T) {
	for _, unrecorded := range []bool{false, true} {
		s := newSrv(t, Options{Dialect: Current, ForceListenCount: -1, Unrecorded: unrecorded})
		c := dial(t, s, "mode=audio")
		c.handshake(Current, "audio")
		for range 2 {
			c.send(appendFor(Current, tone(1, 0.5), nil, nil))
			c.stepMsgs(Current)
		}
		c.send(appendFor(Current, silence(1), nil, nil)) // the first of two seconds of reply
		if got := c.stepMsgs(Current); len(got) == 0 || got[0].str("kind") == "" {
			t.Fatalf("unrecorded %v: no reply to the tone: %v", unrecorded, got)
		}
		c.send(appendFor(Current, silence(1), nil, map[string]any{"force_listen": true})) // interrupts it
		c.stepMsgs(Current)
		c.ws.Close()
		r := waitEnded(t, s, 0)
		grown := len(r.Audio) + len(r.ReplyAudio) + len(r.Appends) + len(r.Interrupts) + len(r.Received) + len(r.Sent)
		t.Logf("unrecorded %v: %d samples heard, %d played, %d appends, %d interrupts, %d and %d messages",
			unrecorded, len(r.Audio), len(r.ReplyAudio), len(r.Appends), len(r.Interrupts), len(r.Received), len(r.Sent))
		if r.ID == "" || r.Init.Type != "session.init" || r.EndReason == "" {
			t.Errorf("unrecorded %v: the session itself is not in its record: %+v", unrecorded, r)
		}
		switch {
		case unrecorded && grown != 0:
			t.Errorf("an unrecorded server kept %d growing entries", grown)
		case !unrecorded && (len(r.Audio) != 4*inputRate || len(r.ReplyAudio) == 0 || len(r.Appends) != 4 ||
			len(r.Interrupts) != 1 || len(r.Received) == 0 || len(r.Sent) == 0):
			t.Errorf("a recording server lost part of the exchange")
		}
	}
}

func TestForceListenInterrupts(t *testing.T) {
	tests := []struct {
		d     Dialect
		force map[string]any
	}{
		{Current, map[string]any{"force_listen": true}},
		{Current, map[string]any{"hints": map[string]any{"force_listen": true}}},
		{Legacy, map[string]any{"force_listen": true}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %v", tt.d, tt.force), func(t *testing.T) {
			s := newSrv(t, Options{Dialect: tt.d, ForceListenCount: -1})
			c := dial(t, s, "mode=audio")
			c.handshake(tt.d, "audio")
			for range 3 {
				c.send(appendFor(tt.d, tone(1, 0.3), nil, nil))
				c.stepMsgs(tt.d)
			}
			c.send(appendFor(tt.d, silence(1), nil, nil))
			checkStep(t, tt.d, 4, c.stepMsgs(tt.d), stepWant{text: "I heard 3.0 seconds of speech", audio: 24000})
			c.send(appendFor(tt.d, silence(1), nil, tt.force))
			checkStep(t, tt.d, 5, c.stepMsgs(tt.d), stepWant{listen: true})
			c.send(appendFor(tt.d, silence(1), nil, nil)) // the rest of the reply is gone
			checkStep(t, tt.d, 6, c.stepMsgs(tt.d), stepWant{listen: true})
			if r := s.Sessions()[0]; !r.Appends[4].ForceListen || r.Appends[3].ForceListen {
				t.Errorf("ForceListen not recorded: %+v", r.Appends)
			}
		})
	}
}

// force_listen on a listening chunk keeps the model listening even after speech.
func TestForceListenWhileListening(t *testing.T) {
	s := newSrv(t, Options{Dialect: Legacy, ForceListenCount: -1})
	c := dial(t, s, "mode=audio")
	c.handshake(Legacy, "audio")
	c.send(appendFor(Legacy, tone(1, 0.3), nil, nil))
	c.expect("response.listen")
	c.send(appendFor(Legacy, silence(1), nil, map[string]any{"force_listen": true}))
	c.expect("response.listen")
	c.send(appendFor(Legacy, silence(1), nil, nil))
	if m := c.expect("response.output_audio.delta"); m.str("text") != "I heard 1.0 seconds of speech" {
		t.Errorf("text %q", m.str("text"))
	}
}

func TestExtraEvents(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoExtraEvents=%v", off), func(t *testing.T) {
			s := newSrv(t, Options{NoExtraEvents: off})
			c := dial(t, s, "mode=audio")
			c.handshake(Current, "audio")
			for range 3 {
				c.send(appendFor(Current, silence(0.5), nil, nil))
			}
			c.send(map[string]any{"type": "session.close", "reason": "user_stop"})
			msgs, _ := c.readUntilClose()
			var stepDone, tokens int
			for _, m := range msgs {
				if m.typ() == "response.step.done" {
					stepDone++
				}
				if m.str("kind") == "audio_tokens" {
					tokens++
				}
			}
			if off && stepDone+tokens != 0 || !off && (stepDone != 3 || tokens != 1) {
				t.Errorf("step.done %d audio_tokens %d", stepDone, tokens)
			}
		})
	}
}

// Chunks are answered strictly in order, one step each, however fast they come.
func TestBacklogInOrder(t *testing.T) {
	s := newSrv(t, Options{Dialect: Legacy, ForceListenCount: -1, TokensPerAudioSecond: 10})
	c := dial(t, s, "mode=audio")
	c.handshake(Legacy, "audio")
	for range 20 {
		c.send(appendFor(Legacy, silence(1), nil, nil))
	}
	for i := range 20 {
		m := c.expect("response.listen")
		if m.kv() != 3+10*(i+1) {
			t.Fatalf("answer %d: kv %d, want %d (out of order?)", i, m.kv(), 3+10*(i+1))
		}
	}
}

func TestStepDelay(t *testing.T) {
	const delay = 30 * time.Millisecond
	s := newSrv(t, Options{Dialect: Legacy, StepDelay: delay})
	c := dial(t, s, "mode=audio")
	c.handshake(Legacy, "audio")
	start := time.Now()
	for range 3 {
		c.send(appendFor(Legacy, silence(1), nil, nil))
	}
	for range 3 {
		c.expect("response.listen")
	}
	if d := time.Since(start); d < 3*delay {
		t.Errorf("3 steps took %v, want at least %v", d, 3*delay)
	}
}
