package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/agent/control"
	"github.com/omnisat/omnisat/internal/testbroker"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// The real binary, restarted between commands: mute, camera, volume and instructions set over
// MQTT survive a restart and show in the first state message and in ctl status; the restarted,
// muted satellite sends the server nothing but silence and no frame; a clean stop sends nothing
// twice (every transcript and event has its own msg_id, the shutdown's session_ended arrives
// once); `ctl settings reset` brings back the configuration.
func TestRunSettingsSurviveRestart(t *testing.T) {
	broker := testbroker.Start(t)
	sim := realtimetest.NewServer(realtimetest.Options{Workers: 2})
	defer sim.Close()
	bin := buildOmnisat(t)
	dir := t.TempDir()
	wavPath, _ := filepath.Abs("../../configs/demo/hello.wav")
	framesDir, _ := filepath.Abs("../../configs/demo/frames")
	cfgPath, sock := filepath.Join(dir, "omnisat.yaml"), filepath.Join(dir, "control.sock")
	os.WriteFile(cfgPath, []byte(`
device_id: kiosk
server:
  url: `+sim.URL()+`
  mode: video
  instructions: Configured prompt.
audio:
  input: file:`+wavPath+`
  loop: true
  output: none
  volume: 80
camera:
  source: dir:`+framesDir+`
control:
  socket: `+sock+`
mqtt:
  broker: `+broker.URL()+`
  prefix: sat
  discovery: false
  stats_interval: -1s
`), 0o600)
	msgs := watchBroker(t, broker.URL())
	var seen [][2]string
	next := func(topic string, ok func(map[string]any) bool, within time.Duration) map[string]any {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case m := <-msgs:
				seen = append(seen, m)
				if m[0] != topic {
					continue
				}
				var v map[string]any
				if json.Unmarshal([]byte(m[1]), &v) == nil && (ok == nil || ok(v)) {
					return v
				}
			case <-deadline:
				t.Fatalf("no matching message on %s within %v", topic, within)
			}
		}
	}
	publish := func(cmd, payload string) {
		t.Helper()
		c := brokerClient(t, broker.URL())
		if tok := c.Publish("sat/cmd/"+cmd, 1, false, payload); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", cmd, tok.Error())
		}
		c.Disconnect(50)
	}

	// First run: the configuration's values, then commands change them.
	_, _, stop := startOmnisat(t, bin, cfgPath, dir)
	next("sat/state", func(v map[string]any) bool { return v["state"] == "listening" }, 30*time.Second)
	publish("mute", "ON")
	publish("camera", "OFF")
	publish("volume", "37")
	publish("instructions", "Changed prompt.")
	next("sat/state", func(v map[string]any) bool {
		return v["mic_muted"] == true && v["camera_on"] == false && v["volume"] == 37.0
	}, 15*time.Second)
	waitUntil(t, "four overrides in the status", 10*time.Second, func() bool { return len(status(t, sock).Overrides) == 4 })
	firstRun := len(sim.Sessions())
	stop()
	shutdownEnd := next("sat/event", func(v map[string]any) bool { return v["kind"] == "session_ended" && v["reason"] == "shutdown" }, 10*time.Second)

	// Second run: the first state already holds the settings. The first run's last state
	// ("stopped", after its session_ended) may still be on its way: it is not the new run's.
	_, _, stop = startOmnisat(t, bin, cfgPath, dir)
	defer stop()
	first := next("sat/state", func(v map[string]any) bool {
		if v["state"] == "stopped" {
			t.Log("skipped the first run's last state")
		}
		return v["state"] != "stopped"
	}, 30*time.Second)
	if first["mic_muted"] != true || first["camera_on"] != false || first["volume"] != 37.0 {
		t.Fatalf("first state after the restart: %v", first)
	}
	// The control socket may come up a moment after the broker connection: wait for its first
	// answer, which must already hold the restored settings.
	var st agent.Status
	waitUntil(t, "an answer from the control socket", 30*time.Second, func() bool { st = status(t, sock); return st.State != "" })
	if !st.Muted || st.CameraOn || st.Volume != 37 {
		t.Fatalf("ctl status after the restart: %+v", st)
	}
	// Privacy: the new session hears only silence, sees no frame, and carries the new prompt.
	var rec realtimetest.SessionRecord
	waitUntil(t, "three chunks in the session after the restart", 30*time.Second, func() bool {
		recs := sim.Sessions()
		if len(recs) <= firstRun {
			return false
		}
		rec = recs[len(recs)-1]
		return len(rec.Appends) >= 3
	})
	if !strings.HasPrefix(rec.Init.Instructions, "Changed prompt.") {
		t.Errorf("instructions after the restart %q", rec.Init.Instructions)
	}
	for i, v := range rec.Audio {
		if v != 0 {
			t.Fatalf("sample %d of the muted session is %v: the microphone reached the server", i, v)
		}
	}
	for i, a := range rec.Appends {
		if len(a.Frames) > 0 {
			t.Fatalf("chunk %d of the session carried %d frame(s) with the camera off", i, len(a.Frames))
		}
	}

	// Nothing delivered twice across the clean restart.
	time.Sleep(2 * time.Second) // time for an outbox replay to show, if there were one
	for len(msgs) > 0 {
		seen = append(seen, <-msgs)
	}
	ids := map[string]string{}
	ends := 0
	for _, m := range seen {
		if m[0] != "sat/event" && m[0] != "sat/transcript" {
			continue
		}
		var v map[string]any
		json.Unmarshal([]byte(m[1]), &v)
		id, _ := v["msg_id"].(string)
		if id == "" {
			t.Errorf("%s without msg_id: %s", m[0], m[1])
		}
		if prev, dup := ids[id]; dup {
			t.Errorf("delivered twice: %s and %s", prev, m[1])
		}
		ids[id] = m[1]
		if v["kind"] == "session_ended" && v["session_id"] == shutdownEnd["session_id"] {
			ends++
		}
	}
	if ends != 1 {
		t.Errorf("the shutdown's session_ended arrived %d times", ends)
	}

	// ctl settings reset: the configuration's values again, now and after restarts.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := control.Call(ctx, sock, control.Request{Cmd: "settings", Arg: "reset"})
	if err != nil || !resp.OK || resp.Status.Muted || !resp.Status.CameraOn || resp.Status.Volume != 80 || len(resp.Status.Overrides) != 0 {
		t.Fatalf("settings reset: %v %+v", err, resp)
	}
	if b, err := os.ReadFile(filepath.Join(dir, settingsFile)); err != nil || strings.Contains(string(b), "value") {
		t.Errorf("settings file after reset: %q %v", b, err)
	}
}

// brokerClient is a connected paho client for the test to publish with.
func brokerClient(t *testing.T, url string) paho.Client {
	t.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID("pub-" + time.Now().Format("150405.000000000")))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	return c
}
