package agent_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// OpenVoice end to end: the server's VAD sees small frames paced at real time, its TTS audio plays
// at its own rate, and its flow control is not ignored.

func TestOpenVoiceSmallFramesAndTTSRate(t *testing.T) {
	audio := make([]float32, 16000*20)
	h := newHarness(t, setup{audio: audio, speed: 1,
		sim:    realtimetest.Options{Dialect: realtimetest.OpenVoice, OpenVoiceTTSRate: 16000},
		server: func(c *realtime.Config) { c.OpenVoiceTTSRate = 16000 }})
	h.waitFor("listening", 10*time.Second, isState(agent.StateListening))
	h.sup.Say("s1", "hello there", agent.TurnOptions{})
	ev := h.waitFor("answer", 10*time.Second, func(ev agent.Event) bool { _, ok := ev.(agent.Answer); return ok })
	if a := ev.(agent.Answer); a.Error != "" {
		t.Fatalf("say %+v", a)
	}
	// Two words of the simulator's voice: 0.5 s, sent as 16 kHz PCM16, played at 24 kHz.
	deadline := time.Now().Add(10 * time.Second)
	for h.speaker.Pending() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	played, err := h.speaker.Recording()
	if err != nil {
		t.Fatal(err)
	}
	loud := 0
	for _, v := range played {
		if math.Abs(float64(v)) > 0.05 {
			loud++
		}
	}
	// A 0.3-amplitude sine is above 0.05 for 89% of its samples: ~10700 of 12000 at 24 kHz
	// (7100 if the 16 kHz audio were played as 24 kHz).
	if loud < 9500 || loud > 12500 {
		t.Errorf("%d loud samples on the 24 kHz speaker, want about 10700 (0.5 s of speech)", loud)
	}
	// Ten frames or more to judge: they come at real time, 40 ms each, and the steps above may
	// take less than the 400 ms ten of them need (9 had come in a CI run).
	sent := func() (n int) {
		for _, rec := range h.sim.Sessions() {
			n += len(rec.Appends)
		}
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); sent() < 10 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	// Every session's frames (a loaded machine may lose a session on the way), but the last of
	// each, which a close may cut short.
	frames := 0
	for _, rec := range h.sim.Sessions() {
		for i, a := range rec.Appends {
			if a.Samples != 640 && i < len(rec.Appends)-1 {
				t.Fatalf("a frame of %d samples: the server's VAD wants 40 ms frames", a.Samples)
			}
			frames++
		}
	}
	if frames < 10 {
		t.Fatalf("%d frames", frames)
	}
	h.noRejections()
}

// A link that sends faster than real time (here the microphone itself runs at 8×) meets the
// server's flow control: the audio it drops and its requests to slow down are counted in the
// status; the drops are said once (one audio_dropped event), not once per dropped frame.
func TestOpenVoiceServerDropsAudio(t *testing.T) {
	h := newHarness(t, setup{speed: 8, sim: realtimetest.Options{Dialect: realtimetest.OpenVoice}})
	ev := h.waitFor("audio_dropped", 20*time.Second, func(ev agent.Event) bool {
		lc, ok := ev.(agent.Lifecycle)
		return ok && lc.Kind == "audio_dropped" && strings.Contains(lc.Reason, "server")
	})
	t.Log(ev.(agent.Lifecycle).Reason)
	// Until the server has dropped a good many frames and the agent has counted them.
	const many = 20
	for deadline := time.Now().Add(60 * time.Second); h.sup.Status().ServerDroppedS < many*0.04 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	st := h.sup.Status()
	h.stop()
	// Over every session: a loaded machine may lose one on the way.
	recs := h.sim.Sessions()
	limits, dropped, dropping := 0, 0, 0
	for _, rec := range recs {
		for _, typ := range rec.Sent {
			if typ == "session.rate_limit" {
				limits++
			}
		}
		dropped += rec.DroppedFrames
		if rec.DroppedFrames > 0 {
			dropping++
		}
	}
	t.Logf("server: %d frames dropped in %d of %d sessions, %d rate limits; status: %.2f s dropped, %d rate limits",
		dropped, dropping, len(recs), limits, st.ServerDroppedS, st.RateLimits)
	if st.ServerDroppedS < many*0.04 || st.ServerDroppedS > float64(dropped)*0.04+1e-9 {
		t.Errorf("status counts %.2f s dropped by the server; it dropped %d frames of 40 ms", st.ServerDroppedS, dropped)
	}
	if st.RateLimits < 1 || st.RateLimits > int64(limits) {
		t.Errorf("status counts %d rate limits; the server sent %d", st.RateLimits, limits)
	}
	announced := 0
	h.mu.Lock()
	for _, ev := range h.log {
		if lc, ok := ev.(agent.Lifecycle); ok && lc.Kind == "audio_dropped" && strings.Contains(lc.Reason, "server") {
			announced++
		}
	}
	h.mu.Unlock()
	for drained := false; !drained; {
		select {
		case ev, open := <-h.events:
			drained = !open
			if lc, ok := ev.(agent.Lifecycle); ok && lc.Kind == "audio_dropped" && strings.Contains(lc.Reason, "server") {
				announced++
			}
		default:
			drained = true
		}
	}
	if announced < 1 || announced > dropping {
		t.Errorf("%d audio_dropped events from the server's drops in %d sessions with drops, want one a session: said once, then counted", announced, dropping)
	}
}

func isAnswer(id string) func(agent.Event) bool {
	return func(ev agent.Event) bool { a, ok := ev.(agent.Answer); return ok && a.ID == id }
}

// A say follows its own request: a newer say cancels the running synthesis on the server (its
// tts.speaking_end says cancelled), which fails the older say rather than reporting it spoken;
// the newer one succeeds by its own request's end. An interrupt's tts.cancel fails the say too.
func TestOpenVoiceSayFollowsItsRequest(t *testing.T) {
	long := strings.Repeat("word ", 40) // 10 s of the simulator's voice, synthesised in 20 s
	h := newHarness(t, setup{audio: make([]float32, 16000*120), speed: 1,
		sim: realtimetest.Options{Dialect: realtimetest.OpenVoice, OpenVoiceSynthesisSpeed: 0.5}})
	h.waitFor("listening", 10*time.Second, isState(agent.StateListening))
	h.sup.Say("s1", long, agent.TurnOptions{})
	h.waitFor("speaking", 10*time.Second, isState(agent.StateSpeaking))
	h.sup.Say("s2", "hello there", agent.TurnOptions{})
	a1 := h.waitFor("answer s1", 10*time.Second, isAnswer("s1")).(agent.Answer)
	if a1.Error == "" || !strings.Contains(a1.Error, "cancel") {
		t.Errorf("s1, cancelled by s2 on the server, was answered %+v: want a failure that says it was cancelled", a1)
	}
	a2 := h.waitFor("answer s2", 20*time.Second, isAnswer("s2")).(agent.Answer)
	if a2.Error != "" || a2.Text != "hello there" {
		t.Errorf("s2 %+v: want spoken", a2)
	}

	h.sup.Say("s3", long, agent.TurnOptions{})
	h.waitFor("speaking", 10*time.Second, isState(agent.StateSpeaking))
	h.sup.Interrupt()
	a3 := h.waitFor("answer s3", 10*time.Second, isAnswer("s3")).(agent.Answer)
	if a3.Error == "" {
		t.Errorf("s3, interrupted, was answered %+v: want a failure", a3)
	}
	recs := h.sim.Sessions()
	var outcomes []string
	for _, r := range recs[len(recs)-1].TTSRequests {
		outcomes = append(outcomes, r.Outcome)
	}
	if !slices.Equal(outcomes, []string{"cancelled", "spoken", "cancelled"}) {
		t.Errorf("the server's record of the requests: %v, want cancelled, spoken, cancelled", outcomes)
	}
	h.noRejections()
}

// The user's words as the server transcribed them: the final's language, the speech's length
// (end_ms − start_ms: the server sends no duration), its confidence and its segment reach the
// Utterance; the partials before it carry the same segment.
func TestOpenVoiceTranscriptFields(t *testing.T) {
	audio := slices.Concat(make([]float32, 8000), tone(16000, 0.3), make([]float32, 16000*5), tone(24000, 0.3), make([]float32, 16000*20))
	h := newHarness(t, setup{audio: audio, speed: 1, sim: realtimetest.Options{Dialect: realtimetest.OpenVoice},
		server: func(c *realtime.Config) { c.Init.Language = "de" }})
	var finals, partials []agent.Utterance
	for len(finals) < 2 {
		u := h.waitFor("user transcript", 20*time.Second, func(ev agent.Event) bool {
			u, ok := ev.(agent.Utterance)
			return ok && u.Role == "user"
		}).(agent.Utterance)
		if u.Partial {
			partials = append(partials, u)
		} else {
			finals = append(finals, u)
		}
	}
	for i, u := range finals {
		var heard float64
		if _, err := fmt.Sscanf(u.Text, "heard %g seconds", &heard); err != nil {
			t.Fatalf("final %q: %v", u.Text, err)
		}
		want := time.Duration(heard * float64(time.Second))
		if u.Language != "de" || u.Duration != want || u.Confidence != 0.93 || u.Segment != i || u.End.Sub(u.Start) != want {
			t.Errorf("final %d %+v: want language de, duration %v (= end − start), confidence 0.93, segment %d", i, u, want, i)
		}
	}
	if len(partials) == 0 {
		t.Fatal("no partial transcripts")
	}
	for _, u := range partials {
		if u.Segment > 1 || u.Language != "" || u.Duration != 0 {
			t.Errorf("partial %+v: want segment 0 or 1, no language or duration", u)
		}
	}
	h.noRejections()
}
