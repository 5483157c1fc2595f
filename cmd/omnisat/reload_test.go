package main

import (
	"encoding/json"
	"net"
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
// statistics interval, the instructions and the log format change without new devices; an MQTT
// change rebuilds only the MQTT connection; a session setting restarts the agent.
func TestReloadOnSIGHUP(t *testing.T) {
	sim, broker, bin, dir, msgs := reloadSetup(t)
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
		return "device_id: kiosk\nmqtt:\n  broker: " + broker + "\n  prefix: " + prefix + "\n  stats_interval: " + stats + "\n  discovery: false\n"
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
	waitUntil(t, "\"reload refused\" in the log", 5*time.Second, func() bool { return strings.Contains(logs.String(), "reload refused") })
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
	waitUntil(t, "volume 40 in the status", 5*time.Second, func() bool { return status(t, sock).Volume == 40 })
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
	waitUntil(t, "a session with the second prompt", 15*time.Second, func() bool {
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
	waitUntil(t, "a new session with 8000-sample chunks", 20*time.Second, func() bool {
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

	// 5. log.format changes at once, for every part's lines; the session goes on.
	third := status(t, sock)
	write("Second prompt.", "40", "500ms", mqttPart("kiosk/b", "1s")+"log:\n  format: json\n")
	hup()
	waitUntil(t, "\"config: reloaded\" in the log", 20*time.Second, func() bool { return strings.Contains(logs.String(), `"msg":"config: reloaded"`) })
	waitState(t, sock, agent.StateListening, 10*time.Second)
	if st := status(t, sock); st.SessionID != third.SessionID {
		t.Errorf("a log.format change restarted the session: %s → %s", third.SessionID, st.SessionID)
	}
	t.Logf("reloads: refused, live (volume/stats/instructions), MQTT only, full restart; %d sessions in all", len(sim.Sessions()))
}

// reloadSetup starts what a reload test runs against: the virtual sound card, a broker whose
// every message comes out of msgs, a two-worker simulator and the binary.
func reloadSetup(t *testing.T) (sim *realtimetest.Server, broker, bin, dir string, msgs <-chan [2]string) {
	t.Helper()
	testaudio.Start(t)
	b := testbroker.Start(t)
	sim = realtimetest.NewServer(realtimetest.Options{Workers: 2})
	t.Cleanup(sim.Close)
	return sim, b.URL(), buildOmnisat(t), t.TempDir(), watchBroker(t, b.URL())
}

// A reload is a transaction (the real binary, a real SIGHUP, the virtual sound card, a real
// broker): a valid file whose microphone does not exist, whose camera cannot be opened, whose
// MQTT certificate is missing, whose MQTT outbox cannot be made or whose control socket another
// program holds is refused — the
// running session goes on (same session id, no new session on the server) and the refusal is
// published as config_rejected — and a good reload after them still works.
func TestReloadIsATransaction(t *testing.T) {
	sim, broker, bin, dir, msgs := reloadSetup(t)
	frames, err := filepath.Abs("../../configs/demo/frames")
	if err != nil {
		t.Fatal(err)
	}
	busy := filepath.Join(dir, "busy.sock")
	other, err := net.Listen("unix", busy) // another program serves this socket
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go func() {
		for c, err := other.Accept(); err == nil; c, err = other.Accept() {
			c.Close()
		}
	}()

	cfgPath, sock := filepath.Join(dir, "omnisat.yaml"), filepath.Join(dir, "control.sock")
	write := func(input, camera, mqttExtra, socket, chunk string) {
		t.Helper()
		text := "device_id: kiosk\nstate_dir: " + dir + "\nserver:\n  url: " + sim.URL() + "\n  mode: video\nsession:\n  chunk: " + chunk + "\n" +
			"audio:\n  input: " + input + "\n  output: default\ncamera:\n  source: " + camera + "\n" +
			"control:\n  socket: " + socket + "\nmqtt:\n  broker: " + broker + "\n  prefix: kiosk\n  discovery: false\n" + mqttExtra
		if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("default", "dir:"+frames, "", sock, "1s")
	cmd, logs, stop := startOmnisatArgs(t, bin, "run", "-c", cfgPath) // no --state-dir: it would override control.socket
	defer stop()
	waitState(t, sock, agent.StateListening, 20*time.Second)
	first := status(t, sock)
	sessions := len(sim.Sessions())

	for _, tt := range []struct {
		name                                  string
		input, camera, mqttExtra, socket, why string
	}{
		{"a microphone that does not exist", "no such microphone", "dir:" + frames, "", sock, `audio.input: find input device \"no such microphone\"`},
		{"a camera that cannot be opened", "default", "file:" + filepath.Join(dir, "missing.mp4"), "", sock, "camera.source: open " + filepath.Join(dir, "missing.mp4")},
		{"an MQTT certificate that is not there", "default", "dir:" + frames, "  tls:\n    ca_file: " + filepath.Join(dir, "missing-ca.pem") + "\n", sock, "mqtt.tls.ca_file"},
		{"a control socket another program holds", "default", "dir:" + frames, "", busy, "another omnisat is already listening there"},
		{"an MQTT outbox that cannot be made", "default", "dir:" + frames, "  outbox:\n    path: " + cfgPath + "/outbox\n", sock, "mqtt.outbox.path: " + cfgPath + "/outbox cannot be made"},
	} {
		write(tt.input, tt.camera, tt.mqttExtra, tt.socket, "500ms") // with a session change: nothing may stop first
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitBroker(t, msgs, "kiosk/event", `"config_rejected"`, tt.why)
		if st := status(t, sock); st.SessionID != first.SessionID || st.State != agent.StateListening {
			t.Fatalf("%s: after the refused reload: %+v (was session %s)", tt.name, st, first.SessionID)
		}
		if n := len(sim.Sessions()); n != sessions {
			t.Fatalf("%s: %d sessions on the server, was %d", tt.name, n, sessions)
		}
		if cmd.ProcessState != nil {
			t.Fatalf("%s: omnisat exited: %v", tt.name, cmd.ProcessState)
		}
	}
	if !strings.Contains(logs.String(), "reload refused; the running configuration stays") {
		t.Error("the log does not say the reload was refused")
	}

	// A good reload still works: a new session with the new chunk size.
	write("default", "dir:"+frames, "", sock, "500ms")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitBroker(t, msgs, "kiosk/event", `"config_reloaded"`, "session")
	waitUntil(t, "a new session with 8000-sample chunks", 20*time.Second, func() bool {
		recs := sim.Sessions()
		last := recs[len(recs)-1]
		return len(recs) > sessions && len(last.Appends) > 0 && last.Appends[0].Samples == 8000
	})
	waitState(t, sock, agent.StateListening, 10*time.Second)
}

// waitBroker waits for a message on topic that contains every one of want.
func waitBroker(t *testing.T, msgs <-chan [2]string, topic string, want ...string) {
	t.Helper()
	deadline := time.After(20 * time.Second) // generous: the machine may be busy
	for {
		select {
		case m := <-msgs:
			if m[0] != topic {
				continue
			}
			all := true
			for _, w := range want {
				all = all && strings.Contains(m[1], w)
			}
			if all {
				return
			}
		case <-deadline:
			t.Fatalf("no message on %s containing %q", topic, want)
		}
	}
}
