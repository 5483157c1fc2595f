package agent_test

import (
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
	loud := 0
	for _, v := range h.speaker.Recording() {
		if math.Abs(float64(v)) > 0.05 {
			loud++
		}
	}
	// A 0.3-amplitude sine is above 0.05 for 89% of its samples: ~10700 of 12000 at 24 kHz
	// (7100 if the 16 kHz audio were played as 24 kHz).
	if loud < 9500 || loud > 12500 {
		t.Errorf("%d loud samples on the 24 kHz speaker, want about 10700 (0.5 s of speech)", loud)
	}
	recs := h.sim.Sessions()
	rec := recs[len(recs)-1]
	if len(rec.Appends) < 10 {
		t.Fatalf("%d frames", len(rec.Appends))
	}
	for _, a := range rec.Appends[:len(rec.Appends)-1] {
		if a.Samples != 640 {
			t.Fatalf("a frame of %d samples: the server's VAD wants 40 ms frames", a.Samples)
		}
	}
	h.noRejections()
}

// A link that sends faster than real time (here the microphone itself runs at 8×) meets the
// server's flow control: the audio it drops is reported as lost.
func TestOpenVoiceServerDropsAudio(t *testing.T) {
	h := newHarness(t, setup{speed: 8, sim: realtimetest.Options{Dialect: realtimetest.OpenVoice}})
	ev := h.waitFor("audio_dropped", 20*time.Second, func(ev agent.Event) bool {
		lc, ok := ev.(agent.Lifecycle)
		return ok && lc.Kind == "audio_dropped" && strings.Contains(lc.Reason, "server")
	})
	t.Log(ev.(agent.Lifecycle).Reason)
	recs := h.sim.Sessions()
	if recs[len(recs)-1].DroppedFrames == 0 || !slices.Contains(recs[len(recs)-1].Sent, "session.frames_dropped") {
		t.Fatal("the server dropped nothing")
	}
}
