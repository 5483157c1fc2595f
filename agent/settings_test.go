package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// newIdle builds an on_demand agent (it dials nothing) with a settings file and a volume.
func newIdle(t *testing.T, file string, volume int, instructions string) *agent.Supervisor {
	t.Helper()
	spk := devices.NewFileSpeaker("", 24000)
	t.Cleanup(func() { spk.Close() })
	sup, err := agent.New(agent.Options{
		Config: agent.Config{Policy: agent.PolicyOnDemand},
		Server: realtime.Config{URL: "ws://127.0.0.1:1/v1/realtime", Mode: realtime.ModeAudio, Init: realtime.Init{Instructions: instructions}},
		Audio:  devices.NewPacedSource(make([]float32, 16000), 16000, true, 1), Speaker: spk,
		Volume: &volume, SettingsFile: file,
	})
	if err != nil {
		t.Fatal(err)
	}
	return sup
}

// Settings changed by commands are kept in the file and restored by the next agent; a change of
// the configuration's value since wins over the stored one; a corrupt file falls back to the
// configuration; clearing them writes a file without overrides.
func TestSettingsSurviveRestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state", "settings.json")
	a := newIdle(t, file, 80, "Be kind.")
	if st := a.Status(); st.Muted || st.Volume != 80 || len(st.Overrides) != 0 {
		t.Fatalf("fresh agent %+v", st)
	}
	a.Mute(true)
	if err := a.SetVolume(37); err != nil { // a file speaker has no volume control: the value is kept
		t.Fatal(err)
	}
	a.SetInstructions("Be brief.", false)

	b := newIdle(t, file, 80, "Be kind.")
	if st := b.Status(); !st.Muted || st.Volume != 37 || !slices.Equal(st.Overrides, []string{"mute", "volume", "instructions"}) {
		t.Fatalf("restored %+v", st)
	}
	// The owner edits the file: volume 60 is newer than the command's 37; mute stays.
	c := newIdle(t, file, 60, "Be kind.")
	if st := c.Status(); !st.Muted || st.Volume != 60 {
		t.Fatalf("after the configuration changed: %+v", st)
	}
	c.ResetSettings()
	if st := newIdle(t, file, 60, "Be kind.").Status(); st.Muted || st.Volume != 60 || len(st.Overrides) != 0 {
		t.Fatalf("after a reset: %+v", st)
	}

	// A corrupt or unreadable file: the configuration applies, and a new command rewrites it.
	for _, bad := range []string{"{not json", `{"volume":{"value":900,"default":80}}`, strings.Repeat("x", 2<<20)} {
		os.WriteFile(file, []byte(bad), 0o600)
		d := newIdle(t, file, 80, "Be kind.")
		if st := d.Status(); st.Muted || st.Volume != 80 {
			t.Fatalf("%.20q: %+v", bad, st)
		}
	}
	newIdle(t, file, 80, "Be kind.").Mute(true)
	if !newIdle(t, file, 80, "Be kind.").Status().Muted {
		t.Fatal("a command after a corrupt file was not kept")
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(file), ".settings.json.*")); len(leftovers) > 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
}

// A stop command with policy always holds the session off across a restart: the restarted
// agent opens none until start.
func TestStopHeldAcrossRestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "settings.json")
	sim := realtimetest.NewServer(realtimetest.Options{})
	t.Cleanup(sim.Close)
	build := func() *agent.Supervisor {
		spk := devices.NewFileSpeaker("", 24000)
		t.Cleanup(func() { spk.Close() })
		sup, err := agent.New(agent.Options{Config: agent.Config{Chunk: 250 * time.Millisecond},
			Server:       realtime.Config{URL: sim.URL(), Mode: realtime.ModeAudio},
			Audio:        devices.NewPacedSource(make([]float32, 16000), 16000, true, 1),
			Speaker:      spk,
			SettingsFile: file})
		if err != nil {
			t.Fatal(err)
		}
		return sup
	}
	a := build()
	a.Stop()
	if st := a.Status(); !st.Held {
		t.Fatalf("stop with policy always: %+v", st)
	}
	b := build()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.Run(ctx); close(done) }()
	time.Sleep(time.Second)
	if n := len(sim.Sessions()); n != 0 || !b.Status().Held {
		t.Fatalf("a held agent opened %d sessions after the restart", n)
	}
	b.Start()
	deadline := time.Now().Add(10 * time.Second)
	for b.Status().State != agent.StateListening {
		if time.Now().After(deadline) {
			t.Fatalf("start after a held stop: %+v", b.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
}

// Say on OpenVoice answers when the server says the speech is done (tts.speaking_end), not
// when tts.speak was sent.
func TestOpenVoiceSayAnswersAtSpeakingEnd(t *testing.T) {
	audio := slices.Concat(make([]float32, 16000*20))
	h := newHarness(t, setup{audio: audio, speed: 1, sim: realtimetest.Options{Dialect: realtimetest.OpenVoice}})
	h.waitFor("listening", 10*time.Second, isState(agent.StateListening))
	h.sup.Say("s1", "hello there, this is a longer sentence to speak", agent.TurnOptions{})
	ev := h.waitFor("answer", 10*time.Second, func(ev agent.Event) bool { _, ok := ev.(agent.Answer); return ok })
	if a := ev.(agent.Answer); a.ID != "s1" || a.Error != "" {
		t.Fatalf("say %+v", a)
	}
	recs := h.sim.Sessions()
	sent := recs[len(recs)-1].Sent
	if !slices.Contains(sent, "tts.speaking_end") {
		t.Fatalf("answered before the server ended the speech; server sent %v", sent)
	}
	h.noRejections()
}

// Ask streams its text as AnswerDelta events, passes max_new_tokens and thinking, slices a
// snapshot as server.max_slice_nums says; say speaks with the configured voice; a server error
// ends the turn at once with the server's message.
func TestTurnOptions(t *testing.T) {
	var mu sync.Mutex
	var reqs []realtime.ChatRequest
	fail := false
	h := newHarness(t, setup{sim: realtimetest.Options{Workers: 2}, frames: staticFrames{},
		server: func(c *realtime.Config) {
			c.Init.MaxSliceNums = 2
			c.Init.TTSRefAudio = make([]float32, 16000)
			c.Init.TTSRefAudio[0] = 0.5
		},
		chatWrap: func(chat agent.ChatFunc) agent.ChatFunc {
			return func(ctx context.Context, cfg realtime.Config, r realtime.ChatRequest, on func(realtime.Event)) (*realtime.Reply, error) {
				mu.Lock()
				reqs = append(reqs, r)
				failing := fail
				mu.Unlock()
				if failing {
					// As the gateway does: an error event, and no end of the turn.
					on(realtime.ErrorEvent{Err: &realtime.Error{Code: "inference_failed", Message: "model crashed"}})
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return chat(ctx, cfg, r, on)
			}
		}})
	h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
	h.sup.Ask("q1", "Reply with exactly: one two three", agent.TurnOptions{MaxNewTokens: 64, Thinking: true, Snapshot: true})
	var deltas []string
	ev := h.waitFor("answer", 10*time.Second, func(ev agent.Event) bool {
		if d, ok := ev.(agent.AnswerDelta); ok && d.ID == "q1" {
			deltas = append(deltas, d.Text)
		}
		_, ok := ev.(agent.Answer)
		return ok
	})
	if a := ev.(agent.Answer); a.ID != "q1" || a.Error != "" || strings.Join(deltas, "") != a.Text || len(deltas) < 2 {
		t.Fatalf("answer %+v after deltas %q", a, deltas)
	}
	h.sup.Say("s1", "good evening", agent.TurnOptions{})
	h.waitFor("said", 10*time.Second, func(ev agent.Event) bool { a, ok := ev.(agent.Answer); return ok && a.ID == "s1" })
	mu.Lock()
	ask, say := reqs[0], reqs[1]
	fail = true
	mu.Unlock()
	if ask.MaxNewTokens != 64 || !ask.EnableThinking || ask.ImageMaxSliceNums != 2 || len(ask.Messages[len(ask.Messages)-1].Images) != 1 {
		t.Errorf("ask request %+v", ask)
	}
	if len(say.TTSRefAudio) != 16000 || say.TTSRefAudio[0] != 0.5 {
		t.Errorf("say did not use the configured voice (%d samples)", len(say.TTSRefAudio))
	}
	start := time.Now()
	h.sup.Ask("q2", "anything", agent.TurnOptions{})
	ev = h.waitFor("failed answer", 10*time.Second, func(ev agent.Event) bool { a, ok := ev.(agent.Answer); return ok && a.ID == "q2" })
	if a := ev.(agent.Answer); !strings.Contains(a.Error, "model crashed") {
		t.Fatalf("answer %+v: want the server's message", a)
	}
	t.Logf("server error answered after %v", time.Since(start))
}
