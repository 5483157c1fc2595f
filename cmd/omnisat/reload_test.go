package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/internal/testaudio"
	"github.com/omnisat/omnisat/internal/testbroker"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// SIGHUP re-reads the file in the real binary, on the virtual sound card and a real broker: an
// invalid file is refused (logged and published) while the agent carries on; the volume, the
// statistics interval and the instructions change without new devices; an MQTT change rebuilds
// only the MQTT connection; a session setting restarts the agent.
func TestReloadOnSIGHUP(t *testing.T) {
	testaudio.Start(t)
	broker := testbroker.Start(t)
	sim := realtimetest.NewServer(realtimetest.Options{Workers: 2})
	defer sim.Close()
	bin := buildOmnisat(t)
	dir := t.TempDir()

	msgs := watchBroker(t, broker.URL())
	waitMsg := func(topic, contains string, within time.Duration) time.Time {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case m := <-msgs:
				if m[0] == topic && strings.Contains(m[1], contains) {
					return time.Now()
				}
			case <-deadline:
				t.Fatalf("no message on %s containing %q within %v", topic, contains, within)
			}
		}
	}

	mqttPart := func(prefix, stats string) string {
		return "device_id: kiosk\nmqtt:\n  broker: " + broker.URL() + "\n  prefix: " + prefix + "\n  stats_interval: " + stats + "\n  discovery: false\n"
	}
	cfgPath, sock := filepath.Join(dir, "omnisat.yaml"), filepath.Join(dir, "control.sock")
	write := func(instructions, volume, chunk, mqtt string) {
		t.Helper()
		text := "server:\n  url: " + sim.URL() + "\n  mode: audio\n  instructions: " + instructions + "\n" +
			"session:\n  chunk: " + chunk + "\naudio:\n  input: default\n  output: default\n  volume: " + volume + "\n" +
			"camera:\n  source: none\ncontrol:\n  socket: " + sock + "\n" + mqtt
		if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("First prompt.", "80", "1s", mqttPart("kiosk/a", "60s"))
	cmd, logs, stop := startOmnisat(t, bin, cfgPath, dir)
	defer stop()
	hup := func() {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	waitState(t, sock, agent.StateListening, 20*time.Second)
	waitMsg("kiosk/a/availability", "online", 10*time.Second)
	first := status(t, sock)
	if first.Volume != 80 {
		t.Fatalf("volume %d at start", first.Volume)
	}

	// 1. An invalid file: refused with its reason, in the log and on MQTT; nothing restarts.
	os.WriteFile(cfgPath, []byte("server:\n  url: "+sim.URL()+"\n  mode: vidoe\naudio:\n  volume: 500\n"), 0o600)
	hup()
	waitMsg("kiosk/a/event", `"config_rejected"`, 10*time.Second)
	waitFor(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), "reload refused") })
	for _, want := range []string{`server.mode: \"vidoe\" is not one of video, audio, chat`, `audio.volume: 500 is outside 0..100`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	if st := status(t, sock); st.SessionID != first.SessionID || st.Volume != 80 || st.State != agent.StateListening {
		t.Fatalf("after a refused reload: %+v (was session %s)", st, first.SessionID)
	}

	// 2. Live changes: volume and statistics interval at once, instructions with a new session.
	write("Second prompt.", "40", "1s", mqttPart("kiosk/a", "1s"))
	hup()
	waitMsg("kiosk/a/event", `"config_reloaded"`, 10*time.Second)
	waitFor(t, 5*time.Second, func() bool { return status(t, sock).Volume == 40 })
	// Two statistics in a row tell the new interval by their own uptimes (the old one was 60 s),
	// whatever delays a busy machine adds to their delivery.
	uptime := func() float64 {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case m := <-msgs:
				var st struct {
					UptimeS *float64 `json:"uptime_s"`
				}
				if m[0] == "kiosk/a/stats" && json.Unmarshal([]byte(m[1]), &st) == nil && st.UptimeS != nil {
					return *st.UptimeS
				}
			case <-deadline:
				t.Fatal("no statistics on kiosk/a/stats within 30 s after stats_interval: 1s")
			}
		}
	}
	if u1, u2 := uptime(), uptime(); u2-u1 > 10 {
		t.Errorf("statistics %.1f s apart after stats_interval: 1s", u2-u1)
	}
	waitFor(t, 15*time.Second, func() bool {
		recs := sim.Sessions()
		return len(recs) >= 2 && recs[len(recs)-1].Init.Instructions != "" && strings.HasPrefix(recs[len(recs)-1].Init.Instructions, "Second prompt.")
	})
	second := status(t, sock)

	// 3. An MQTT change rebuilds only MQTT: the session goes on.
	write("Second prompt.", "40", "1s", mqttPart("kiosk/b", "1s"))
	hup()
	waitMsg("kiosk/b/availability", "online", 10*time.Second)
	waitState(t, sock, agent.StateListening, 10*time.Second)
	if st := status(t, sock); st.SessionID != second.SessionID {
		t.Errorf("an MQTT change restarted the session: %s → %s", second.SessionID, st.SessionID)
	}

	// 4. A session setting restarts the agent: a new session with the new chunk size.
	sessions := len(sim.Sessions())
	write("Second prompt.", "40", "500ms", mqttPart("kiosk/b", "1s"))
	hup()
	waitFor(t, 20*time.Second, func() bool {
		recs := sim.Sessions()
		if len(recs) <= sessions {
			return false
		}
		last := recs[len(recs)-1]
		return len(last.Appends) > 0 && last.Appends[0].Samples == 8000
	})
	waitState(t, sock, agent.StateListening, 10*time.Second)
	if st := status(t, sock); st.Volume != 40 {
		t.Errorf("volume after the restart: %d", st.Volume)
	}

	// 5. log.format restarts the agent with the new format.
	write("Second prompt.", "40", "500ms", mqttPart("kiosk/b", "1s")+"log:\n  format: json\n")
	hup()
	waitFor(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), `"msg":"`) })
	waitState(t, sock, agent.StateListening, 10*time.Second)
	t.Logf("reloads: refused, live (volume/stats/instructions), MQTT only, full restart; %d sessions in all", len(sim.Sessions()))
}

func waitFor(t *testing.T, within time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
