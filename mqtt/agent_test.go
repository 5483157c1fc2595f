package mqtt_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/internal/testbroker"
	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// volSpeaker gives the file speaker a volume control, as the PortAudio speaker has.
type volSpeaker struct {
	*devices.FileSpeaker
	v atomic.Int32
}

func (s *volSpeaker) SetVolume(v int) { s.v.Store(int32(v)) }
func (s *volSpeaker) Volume() int     { return int(s.v.Load()) }

type noFrames struct{}

func (noFrames) Latest() ([]byte, bool) { return nil, false }

// speechLoop is 1 s of silence, 1 s of a tone, 1 s of silence: the simulator's parrot answers
// each tone with "I heard 1.0 seconds of speech".
func speechLoop() []float32 {
	s := make([]float32, 3*16000)
	for i := 16000; i < 32000; i++ {
		s[i] = float32(0.3 * math.Sin(2*math.Pi*440*float64(i)/16000))
	}
	return s
}

// The real agent against the protocol simulator, watched and driven over a real broker.
func TestWithRealAgent(t *testing.T) {
	br := testbroker.Start(t)
	w := watch(t, br.URL())
	sim := realtimetest.NewServer(realtimetest.Options{Workers: 2, ForceListenCount: -1})
	t.Cleanup(sim.Close)
	spk := &volSpeaker{FileSpeaker: devices.NewFileSpeaker("", 24000)}
	spk.v.Store(80)
	t.Cleanup(func() { spk.Close() })
	sup, err := agent.New(agent.Options{
		Config: agent.Config{Chunk: 250 * time.Millisecond, BackoffMin: 50 * time.Millisecond, BackoffMax: 400 * time.Millisecond},
		Server: realtime.Config{URL: sim.URL(), Dialect: realtime.DialectCurrent, Mode: realtime.ModeAudio, Model: "test-model",
			PingInterval: 200 * time.Millisecond, DeadLinkTimeout: time.Second, DialTimeout: 2 * time.Second,
			Init: realtime.Init{Instructions: "You are a test."}},
		Audio: devices.NewPacedSource(speechLoop(), 16000, true, 2), Speaker: spk, Frames: noFrames{},
		Rand: rand.New(rand.NewPCG(1, 2)),
	})
	if err != nil {
		t.Fatal(err)
	}
	// What the agent says, to compare with what the broker carries.
	events, _ := sup.Subscribe(100000)
	var mu sync.Mutex
	var agentStates []string
	var agentUtter []string
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for ev := range events {
			mu.Lock()
			switch ev := ev.(type) {
			case agent.StateChanged:
				agentStates = append(agentStates, string(ev.Status.State))
			case agent.Utterance:
				if !ev.Partial {
					agentUtter = append(agentUtter, ev.SessionID+"|"+ev.Text)
				}
			}
			mu.Unlock()
		}
	}()

	cfg := testConfig(t, br.URL())
	startBridge(t, cfg, "real", sup)
	p := "omnisat/real/"
	w.waitFor(p+"availability", wait, payloadIs("online"))
	w.waitFor(p+"state", wait, jsonField(t, "state", "idle"))

	ctx, cancel := context.WithCancel(context.Background())
	supDone := make(chan error, 1)
	go func() { supDone <- sup.Run(ctx) }()
	stopSup := func() {
		if cancel == nil {
			return
		}
		cancel()
		cancel = nil
		select {
		case <-supDone:
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop")
		}
	}
	t.Cleanup(stopSup)

	// Transcripts: the simulator's replies, in order.
	trs := w.waitCount(p+"transcript", 3, 20*time.Second)
	for _, m := range trs {
		v := m.json(t)
		if v["role"] != "assistant" || !strings.HasPrefix(v["text"].(string), "I heard") || v["session_id"] == "" {
			t.Errorf("transcript %v", v)
		}
	}
	w.waitFor(p+"last_utterance", wait, func(m msg) bool { return strings.HasPrefix(m.json(t)["text"].(string), "I heard") })
	w.waitFor(p+"state", wait, jsonField(t, "connected", true))

	// Commands, each checked through the agent and the simulator.
	cmd := func(name, payload string) { publish(t, br.URL(), p+"cmd/"+name, payload, false) }
	eventually := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(wait)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v; status %+v", what, wait, sup.Status())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// ask and say answer on answer.
	cmd("ask", `{"id":"q1","question":"Reply with exactly: blue sky","snapshot":false}`)
	a := w.waitFor(p+"answer", 20*time.Second, jsonField(t, "id", "q1")).json(t)
	if a["text"] != "blue sky" {
		t.Errorf("answer %v", a)
	}
	cmd("say", "Good morning")
	a = w.waitFor(p+"answer", 20*time.Second, jsonField(t, "id", "say-1")).json(t)
	if a["error"] != nil {
		t.Errorf("say answer %v", a)
	}
	cmd("interrupt", "PRESS")
	eventually("force_listen chunk after interrupt", func() bool {
		for _, s := range sim.Sessions() {
			for _, ap := range s.Appends {
				if ap.ForceListen {
					return true
				}
			}
		}
		return false
	})
	cmd("volume", "30")
	eventually("volume 30", func() bool { return sup.Status().Volume == 30 })
	w.waitFor(p+"state", wait, jsonField(t, "volume", 30))
	cmd("camera", "OFF")
	eventually("camera off", func() bool { return !sup.Status().CameraOn })
	w.waitFor(p+"state", wait, jsonField(t, "camera_on", false))
	cmd("mute", "ON")
	eventually("muted", func() bool { return sup.Status().Muted })
	w.waitFor(p+"state", wait, jsonField(t, "mic_muted", true))
	cmd("mute", "perhaps")
	w.waitFor(p+"error", wait, nil)
	if !sup.Status().Muted {
		t.Error("a bad mute payload changed the mute")
	}
	sessions := len(sim.Sessions())
	cmd("instructions", `{"text":"New prompt.","restart":true}`)
	eventually("a new session with the new instructions", func() bool {
		recs := sim.Sessions()
		return len(recs) > sessions && strings.HasPrefix(recs[len(recs)-1].Init.Instructions, "New prompt.")
	})
	cmd("session", "stop")
	eventually("idle after stop", func() bool { return sup.Status().State == agent.StateIdle })
	w.waitFor(p+"state", wait, jsonField(t, "state", "idle"))
	cmd("session", "start")
	w.waitFor(p+"event", wait, jsonField(t, "kind", "session_started"))
	eventually("live after start", func() bool { return sup.Status().State == agent.StateListening })

	// Everything the agent said went out, in the same order.
	stopSup()
	<-collected
	w.waitFor(p+"state", wait, jsonField(t, "state", "stopped"))
	mu.Lock()
	defer mu.Unlock()
	var got []string
	deadline := time.Now().Add(wait)
	for {
		got = nil
		for _, m := range w.all(p + "transcript") {
			v := m.json(t)
			got = append(got, v["session_id"].(string)+"|"+v["text"].(string))
		}
		if len(got) >= len(agentUtter) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !slices.Equal(got, agentUtter) {
		t.Errorf("transcripts on the broker\n%v\nagent said\n%v", got, agentUtter)
	}
	var mqttStates []string
	for _, m := range w.all(p + "state") {
		mqttStates = append(mqttStates, m.json(t)["state"].(string))
	}
	// MQTT shows speaking as listening (the assistant's speech is on activity).
	for i, s := range agentStates {
		if s == string(agent.StateSpeaking) {
			agentStates[i] = string(agent.StateListening)
		}
	}
	want := slices.Compact(append([]string{"idle"}, agentStates...))
	if gotS := slices.Compact(mqttStates); !slices.Equal(gotS, want) {
		t.Errorf("states on the broker\n%v\nagent went through\n%v", gotS, want)
	}
	t.Logf("%d transcripts, %d state messages, %d sessions", len(got), len(mqttStates), len(sim.Sessions()))
}

// A lively 30 s conversation with the real agent on the simulator: the retained state stays
// quiet. Replies every 3 s flip listening↔speaking and the local voice flag; neither is a change
// of the state (they are on activity), nor are the kv cache and the session's age (on stats).
// Bound: state messages ≤ the real changes of what the state holds, and ≤ 1 per 3 s.
func TestQuietStateOverAConversation(t *testing.T) {
	t.Parallel()
	const conversation = 30 * time.Second
	br := testbroker.Start(t)
	w := watch(t, br.URL())
	sim := realtimetest.NewServer(realtimetest.Options{Workers: 2})
	t.Cleanup(sim.Close)
	spk := &volSpeaker{FileSpeaker: devices.NewFileSpeaker("", 24000)}
	spk.v.Store(80)
	t.Cleanup(func() { spk.Close() })
	sup, err := agent.New(agent.Options{
		Config: agent.Config{Chunk: 500 * time.Millisecond},
		Server: realtime.Config{URL: sim.URL(), Dialect: realtime.DialectCurrent, Mode: realtime.ModeAudio},
		Audio:  devices.NewPacedSource(speechLoop(), 16000, true, 1), Speaker: spk,
	})
	if err != nil {
		t.Fatal(err)
	}
	events, _ := sup.Subscribe(100000)
	var mu sync.Mutex
	var realChanges, flips, voice int
	lastKey, lastState := "", ""
	go func() {
		for ev := range events {
			mu.Lock()
			switch ev := ev.(type) {
			case agent.StateChanged:
				st := ev.Status
				state := st.State
				if state == agent.StateSpeaking {
					state = agent.StateListening
				}
				// What a person or an automation acts on.
				key := fmt.Sprint(state, st.Detail, st.SessionID, st.QueuePosition, st.Muted, st.CameraOn, st.Volume, st.LastError, st.Devices)
				if key != lastKey {
					realChanges++
					lastKey = key
				}
				if s := string(ev.Status.State); s != lastState && (s == "speaking" || lastState == "speaking") {
					flips++
				}
				lastState = string(ev.Status.State)
			case agent.VoiceActivity:
				voice++
			}
			mu.Unlock()
		}
	}()
	cfg := testConfig(t, br.URL())
	startBridge(t, cfg, "quiet", sup)
	p := "omnisat/quiet/"
	w.waitFor(p+"state", wait, jsonField(t, "state", "idle"))
	ctx, cancel := context.WithCancel(context.Background())
	supDone := make(chan error, 1)
	go func() { supDone <- sup.Run(ctx) }()
	w.waitFor(p+"state", wait, jsonField(t, "state", "listening"))
	t.Cleanup(func() { cancel(); <-supDone })

	mu.Lock()
	startChanges, startFlips, startVoice := realChanges, flips, voice
	mu.Unlock()
	before := len(w.all(p + "state"))
	beforeActivity := len(w.all(p + "activity"))
	time.Sleep(conversation)
	states := w.all(p + "state")[before:]
	mu.Lock()
	changes, talk, heard := realChanges-startChanges, flips-startFlips, voice-startVoice
	mu.Unlock()
	transcripts := len(w.all(p + "transcript"))
	t.Logf("%v of conversation: %d state messages, %d real state changes, %d listening↔speaking flips, %d voice events, %d activity messages, %d transcripts",
		conversation, len(states), changes, talk, heard, len(w.all(p+"activity"))-beforeActivity, transcripts)
	if talk < 10 || transcripts < 5 {
		t.Fatalf("not a lively conversation: %d flips, %d transcripts", talk, transcripts)
	}
	if len(states) > changes {
		t.Errorf("%d state messages for %d real changes: %v", len(states), changes, states)
	}
	if max := int(conversation / (3 * time.Second)); len(states) > max {
		t.Errorf("%d state messages in %v: more than one per 3 s", len(states), conversation)
	}
	if len(w.all(p+"activity"))-beforeActivity < talk {
		t.Errorf("the assistant's speech did not show on activity")
	}
}
