package mqtt_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/internal/testbroker"
	"github.com/omnisat/omnisat/mqtt"
)

const wait = 10 * time.Second

// Every topic's payload as documented in README.md, with a fake agent.
func TestTopicsAndPayloads(t *testing.T) {
	br := testbroker.Start(t)
	w := watch(t, br.URL())
	fa := newFakeAgent()
	cfg := testConfig(t, br.URL())
	cfg.StatsInterval = time.Second
	cfg.PartialTranscripts = true
	r := startBridge(t, cfg, "kiosk 1", fa)
	p := "omnisat/kiosk_1/"

	w.waitFor(p+"availability", wait, payloadIs("online"))
	st := w.waitFor(p+"state", wait, nil).json(t)
	for k, want := range map[string]any{"state": "listening", "connected": true, "mode": "audio", "dialect": "current",
		"session_id": "sess-1", "queue_position": 0.0, "mic_muted": false,
		"camera_on": false, "volume": 50.0, "last_error": "", "policy": "always"} {
		if st[k] != want {
			t.Errorf("state[%q] = %#v, want %#v (state %v)", k, st[k], want, st)
		}
	}
	// Counters, ages and voice activity are not in the state: they would rewrite it constantly.
	for _, k := range []string{"kv_cache_length", "session_age_s", "reconnects", "rollovers", "speech", "chunks_sent"} {
		if _, ok := st[k]; ok {
			t.Errorf("state carries %q: %v", k, st)
		}
	}
	if got, ok := retained(t, br.URL(), p+"availability"); !ok || got != "online" {
		t.Errorf("retained availability %q %v", got, ok)
	}
	if _, ok := retained(t, br.URL(), p+"state"); !ok {
		t.Error("state is not retained")
	}

	// State: on change only. Age, kv cache, speech and listening↔speaking are not changes of
	// the state; they show on stats and activity.
	s := fa.Status()
	s.SessionAge = 3
	fa.emit(agent.StateChanged{Status: s})
	s.State, s.KVCacheLength, s.Speech = agent.StateSpeaking, 180, true
	fa.emit(agent.StateChanged{Status: s})
	w.waitFor(p+"activity", wait, jsonField(t, "assistant_speaking", true))
	w.waitFor(p+"activity", wait, jsonField(t, "voice_local", true))
	s.State, s.Speech = agent.StateListening, false
	fa.emit(agent.StateChanged{Status: s})
	w.waitFor(p+"activity", wait, jsonField(t, "assistant_speaking", false))
	fa.emit(agent.VoiceActivity{Source: "server", Speaking: true})
	act := w.waitFor(p+"activity", wait, jsonField(t, "voice_server", true)).json(t)
	if act["voice"] != true || act["voice_local"] != false {
		t.Errorf("activity %v", act)
	}
	s.Muted = true
	fa.emit(agent.StateChanged{Status: s})
	w.waitFor(p+"state", wait, jsonField(t, "mic_muted", true))
	if n := len(w.all(p + "state")); n != 2 {
		t.Errorf("%d state messages, want 2 (the first and the mute): %v", n, w.all(p+"state"))
	}
	if _, ok := retained(t, br.URL(), p+"activity"); !ok {
		t.Error("activity is not retained")
	}

	// Transcript, last utterance, partials.
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	fa.emit(agent.TextDelta{SessionID: "sess-1", Text: "Hello"})
	fa.emit(agent.TextDelta{SessionID: "sess-1", Text: " there"})
	fa.emit(agent.Utterance{Role: "user", Text: "speech 0.5s", SessionID: "sess-1", Partial: true})
	fa.emit(agent.Utterance{Role: "assistant", Text: "Hello there", SessionID: "sess-1", Start: start, End: start.Add(2 * time.Second)})
	fa.emit(agent.Utterance{Role: "user", Text: "Hola", SessionID: "sess-1", Start: start, End: start.Add(1500 * time.Millisecond),
		Language: "es", Duration: 1500 * time.Millisecond, Confidence: 0.87, Segment: 2})
	trs := w.waitCount(p+"transcript", 2, wait)
	tr, user := trs[0].json(t), trs[1].json(t)
	ids := map[any]bool{}
	for _, m := range []map[string]any{tr, user} {
		id, _ := m["msg_id"].(string)
		if id == "" || ids[id] {
			t.Errorf("transcript msg_id missing or repeated: %v", m)
		}
		ids[id] = true
		delete(m, "msg_id")
	}
	want := map[string]any{"event_type": "assistant", "role": "assistant", "text": "Hello there", "session_id": "sess-1",
		"start": "2025-01-02T03:04:05Z", "end": "2025-01-02T03:04:07Z"}
	if fmt.Sprint(tr) != fmt.Sprint(want) {
		t.Errorf("transcript %v, want %v", tr, want)
	}
	if user["event_type"] != "user" || user["language"] != "es" || user["duration_s"] != 1.5 || user["confidence"] != 0.87 || user["segment_id"] != float64(2) {
		t.Errorf("user transcript %v: want its language, duration, confidence and segment", user)
	}
	parts := w.waitCount(p+"transcript/partial", 3, wait)
	if parts[1].json(t)["text"] != "Hello there" || parts[2].json(t)["role"] != "user" {
		t.Errorf("partials %v", parts)
	}
	lu := w.waitFor(p+"last_utterance", wait, nil).json(t)
	if lu["text"] != "Hello there" {
		t.Errorf("last_utterance %v", lu)
	}

	// Event and answer.
	fa.emit(agent.Lifecycle{Kind: "session_ended", SessionID: "sess-1", Reason: "timeout", At: start})
	ev := w.waitFor(p+"event", wait, nil).json(t)
	if id, _ := ev["msg_id"].(string); id == "" || ids[id] {
		t.Errorf("event msg_id missing or repeated: %v", ev)
	}
	delete(ev, "msg_id")
	if fmt.Sprint(ev) != fmt.Sprint(map[string]any{"kind": "session_ended", "session_id": "sess-1", "reason": "timeout", "at": "2025-01-02T03:04:05Z"}) {
		t.Errorf("event %v", ev)
	}
	// An ask answer streams on answer/stream before the answer.
	fa.emit(agent.AnswerDelta{ID: "q1", Text: "a "})
	fa.emit(agent.AnswerDelta{ID: "q1", Text: "cat"})
	fa.emit(agent.Answer{ID: "q1", Text: "a cat"})
	fa.emit(agent.Answer{ID: "q2", Error: "no camera frame"})
	stream := w.waitCount(p+"answer/stream", 2, wait)
	if stream[0].Payload != `{"id":"q1","delta":"a ","text":"a "}` || stream[1].Payload != `{"id":"q1","delta":"cat","text":"a cat"}` {
		t.Errorf("answer stream %v", stream)
	}
	ans := w.waitCount(p+"answer", 2, wait)
	a0, a1 := ans[0].json(t), ans[1].json(t)
	if a0["id"] != "q1" || a0["text"] != "a cat" || a1["id"] != "q2" || a1["error"] != "no camera frame" || a0["msg_id"] == a1["msg_id"] || a0["msg_id"] == nil {
		t.Errorf("answers %v", ans)
	}

	// Stats, with the server's flow control counted.
	fa.mu.Lock()
	fa.status.ServerDroppedS, fa.status.RateLimits = 1.25, 3
	fa.mu.Unlock()
	stats := w.waitFor(p+"stats", wait, jsonField(t, "server_rate_limits", float64(3))).json(t)
	for _, k := range []string{"uptime_s", "session_age_s", "kv_cache_length", "reconnects", "rollovers", "chunks_sent", "chunks_dropped",
		"outbox_pending", "outbox_dropped", "outbox_write_errors", "cpu_s", "rss_bytes", "bytes_up", "bytes_down"} {
		if _, ok := stats[k]; !ok {
			t.Errorf("stats has no %q: %v", k, stats)
		}
	}
	if stats["server_audio_dropped_s"] != 1.25 {
		t.Errorf("stats server_audio_dropped_s %v, want the agent's 1.25", stats["server_audio_dropped_s"])
	}

	// Clean shutdown: offline, retained.
	r.stop(t)
	w.waitFor(p+"availability", wait, payloadIs("offline"))
	if got, _ := retained(t, br.URL(), p+"availability"); got != "offline" {
		t.Errorf("retained availability after shutdown %q", got)
	}
}

func TestDiscovery(t *testing.T) {
	br := testbroker.Start(t)
	w := watch(t, br.URL())
	fa := newFakeAgent()
	cfg := testConfig(t, br.URL())
	r := startBridge(t, cfg, "kiosk1", fa)
	topic := "homeassistant/device/kiosk1/config"
	m := w.waitFor(topic, wait, nil)
	var d struct {
		Dev  map[string]any            `json:"dev"`
		O    map[string]any            `json:"o"`
		Cmps map[string]map[string]any `json:"cmps"`
	}
	if err := json.Unmarshal([]byte(m.Payload), &d); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(d.Dev["ids"]) != "[omnisat_kiosk1]" || d.Dev["sw"] != "1.2.3" || d.Dev["name"] == nil || d.Dev["mf"] == nil || d.Dev["mdl"] == nil {
		t.Errorf("dev %v", d.Dev)
	}
	if d.O["name"] != "omnisat" || d.O["sw"] != "1.2.3" || d.O["url"] == nil {
		t.Errorf("origin %v", d.O)
	}
	wantPlatforms := map[string]string{"state": "sensor", "connected": "binary_sensor", "last_utterance": "sensor",
		"kv_cache": "sensor", "queue_position": "sensor", "reconnects": "sensor", "session": "switch", "mic_mute": "switch",
		"camera": "switch", "interrupt": "button", "volume": "number", "instructions": "text", "say": "text",
		"announce": "notify", "transcript": "event", "voice": "binary_sensor", "assistant_speaking": "binary_sensor",
		"session_age": "sensor", "model_step": "sensor"}
	if len(d.Cmps) != len(wantPlatforms) {
		t.Errorf("%d components, want %d", len(d.Cmps), len(wantPlatforms))
	}
	ids := map[string]bool{}
	for name, plat := range wantPlatforms {
		c := d.Cmps[name]
		if c == nil {
			t.Errorf("no component %q", name)
			continue
		}
		if c["p"] != plat {
			t.Errorf("%s: p = %v, want %s", name, c["p"], plat)
		}
		uid, _ := c["unique_id"].(string)
		if uid == "" || ids[uid] {
			t.Errorf("%s: unique_id %q missing or repeated", name, uid)
		}
		ids[uid] = true
		if c["availability_topic"] != "omnisat/kiosk1/availability" || c["payload_available"] != "online" || c["payload_not_available"] != "offline" {
			t.Errorf("%s: availability %v", name, c)
		}
		if icon, _ := c["icon"].(string); !strings.HasPrefix(icon, "mdi:") {
			t.Errorf("%s: icon %q", name, icon)
		}
		for _, k := range []string{"state_topic", "command_topic", "json_attributes_topic"} {
			if v, ok := c[k].(string); ok && !strings.HasPrefix(v, "omnisat/kiosk1/") {
				t.Errorf("%s: %s = %q", name, k, v)
			}
		}
	}
	if d.Cmps["state"]["device_class"] != "enum" || len(d.Cmps["state"]["options"].([]any)) != 8 {
		t.Errorf("state sensor %v", d.Cmps["state"])
	}
	if d.Cmps["connected"]["device_class"] != "connectivity" {
		t.Errorf("connected %v", d.Cmps["connected"])
	}
	if !strings.Contains(d.Cmps["last_utterance"]["value_template"].(string), "[:255]") {
		t.Errorf("last utterance not truncated: %v", d.Cmps["last_utterance"])
	}
	if got, ok := retained(t, br.URL(), topic); !ok || got != m.Payload {
		t.Error("discovery is not retained")
	}

	// Home Assistant restarts: discovery and state again.
	nDisc, nState := len(w.all(topic)), len(w.all("omnisat/kiosk1/state"))
	publish(t, br.URL(), "homeassistant/status", "online", false)
	w.waitCount(topic, nDisc+1, wait)
	w.waitCount("omnisat/kiosk1/state", nState+1, wait)

	// Remove on request: empty retained config.
	r.stop(t)
	b, err := mqtt.New(cfg, "kiosk1", "1.2.3", nil, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := b.RemoveDiscovery(ctx); err != nil {
		t.Fatal(err)
	}
	w.waitFor(topic, wait, payloadIs(""))
	if _, ok := retained(t, br.URL(), topic); ok {
		t.Error("discovery still retained after RemoveDiscovery")
	}
}

// Discovery off publishes none and removes nothing.
func TestDiscoveryOff(t *testing.T) {
	br := testbroker.Start(t)
	publish(t, br.URL(), "homeassistant/device/kiosk1/config", `{"old":true}`, true)
	w := watch(t, br.URL())
	off := false
	cfg := testConfig(t, br.URL())
	cfg.Discovery = &off
	startBridge(t, cfg, "kiosk1", newFakeAgent())
	w.waitFor("omnisat/kiosk1/state", wait, nil)
	publish(t, br.URL(), "homeassistant/status", "online", false)
	time.Sleep(300 * time.Millisecond)
	if got := w.all("homeassistant/device/kiosk1/config"); len(got) != 1 || got[0].Payload != `{"old":true}` {
		t.Errorf("discovery topic %v", got)
	}
}

// Each command has its effect; bad payloads do not, and are answered on error.
func TestCommands(t *testing.T) {
	br := testbroker.Start(t)
	w := watch(t, br.URL())
	fa := newFakeAgent()
	cfg := testConfig(t, br.URL())
	startBridge(t, cfg, "k", fa)
	p := "omnisat/k/"
	w.waitFor(p+"availability", wait, payloadIs("online"))

	good := []struct{ cmd, payload, call string }{
		{"session", "start", "start"},
		{"session", "STOP", "stop"},
		{"session", " restart\n", "restart"},
		{"interrupt", "PRESS", "interrupt"},
		{"mute", "ON", "mute true"},
		{"mute", "off", "mute false"},
		{"camera", "ON", "camera true"},
		{"volume", "40", "volume 40"},
		{"volume", "55.0", "volume 55"},
		{"instructions", "Be brief.", `instructions "Be brief." false`},
		{"instructions", `{"text":"Be kind.","restart":true}`, `instructions "Be kind." true`},
		{"say", "Hello", `say say-1 "Hello"`},
		{"ask", `{"id":"q7","question":"What do you see?","snapshot":true}`, `ask q7 "What do you see?" true`},
		{"ask", "How late is it?", `ask ask-2 "How late is it?" false`},
		{"ask", `{"question":"Why?","max_new_tokens":64,"thinking":true}`, `ask ask-3 "Why?" false max_new_tokens=64 thinking=true voice=""`},
		{"say", `{"id":"s9","text":"Dinner is ready","voice":"anna"}`, `say s9 "Dinner is ready" max_new_tokens=0 thinking=false voice="anna"`},
		{"settings", "RESET", "settings reset"},
	}
	for _, g := range good {
		publish(t, br.URL(), p+"cmd/"+g.cmd, g.payload, false)
		deadline := time.Now().Add(wait)
		for !contains(fa.Calls(), g.call) {
			if time.Now().After(deadline) {
				t.Fatalf("cmd/%s %q: no call %q; calls %v", g.cmd, g.payload, g.call, fa.Calls())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Effects show in state.
	w.waitFor(p+"state", wait, func(m msg) bool {
		v := m.json(t)
		return v["mic_muted"] == false && v["camera_on"] == true && v["volume"] == 55.0
	})

	calls := len(fa.Calls())
	bad := []struct{ cmd, payload, says string }{
		{"session", "begin", `"begin" is not one of start, stop, restart`},
		{"mute", "maybe", `"maybe" is not ON or OFF`},
		{"camera", "", `"" is not ON or OFF`},
		{"volume", "loud", `"loud" is not a number 0..100`},
		{"volume", "101", `"101" is outside 0..100`},
		{"instructions", "  ", "empty instructions"},
		{"instructions", `{"txt":"x"}`, `unknown field "txt"`},
		{"say", "", "empty text"},
		{"ask", `{"id":"q","question":""}`, `no "question"`},
		{"ask", `{"id":"q","question":"x",`, "not valid JSON"},
		{"reboot", "now", `unknown command "reboot"`},
	}
	for i, b := range bad {
		publish(t, br.URL(), p+"cmd/"+b.cmd, b.payload, false)
		errs := w.waitCount(p+"error", i+1, wait)
		e := errs[i].json(t)
		if e["topic"] != p+"cmd/"+b.cmd || !strings.Contains(e["error"].(string), b.says) || !strings.HasPrefix(e["error"].(string), "cmd/"+b.cmd+": ") {
			t.Errorf("cmd/%s %q: error %v, want it to say %q", b.cmd, b.payload, e, b.says)
		}
	}
	// The agent refuses: no volume control.
	fa.mu.Lock()
	fa.volErr = errors.New("volume: this speaker has no volume control")
	fa.mu.Unlock()
	publish(t, br.URL(), p+"cmd/volume", "20", false)
	e := w.waitCount(p+"error", len(bad)+1, wait)[len(bad)].json(t)
	if !strings.Contains(e["error"].(string), "no volume control") {
		t.Errorf("volume refused: %v", e)
	}
	if got := fa.Calls(); len(got) != calls {
		t.Errorf("bad payloads changed something: %v", got[calls:])
	}
}

// A retained command (delivered again on every subscription) is refused with an error.
func TestRetainedCommandRefused(t *testing.T) {
	br := testbroker.Start(t)
	publish(t, br.URL(), "omnisat/k/cmd/mute", "ON", true)
	w := watch(t, br.URL())
	fa := newFakeAgent()
	startBridge(t, testConfig(t, br.URL()), "k", fa)
	e := w.waitFor("omnisat/k/error", wait, nil).json(t)
	if !strings.Contains(e["error"].(string), "retained commands are ignored") {
		t.Errorf("error %v", e)
	}
	if calls := fa.Calls(); len(calls) != 0 {
		t.Errorf("retained command applied: %v", calls)
	}
}

func TestTLS(t *testing.T) {
	br := testbroker.Start(t, testbroker.WithTLS())
	w := watch(t, br.URL())
	cfg := testConfig(t, br.TLSURL())
	cfg.TLS.CAFile = br.CAFile()
	startBridge(t, cfg, "secure", newFakeAgent())
	w.waitFor("omnisat/secure/availability", wait, payloadIs("online"))

	wrong, err := testbroker.WriteCAFile(t.TempDir(), "wrong CA")
	if err != nil {
		t.Fatal(err)
	}
	cfg = testConfig(t, br.TLSURL())
	cfg.TLS.CAFile = wrong
	r := startBridge(t, cfg, "wrongca", newFakeAgent())
	deadline := time.Now().Add(wait)
	for r.b.LastConnectError() == nil {
		if time.Now().After(deadline) {
			t.Fatal("no connection error with a wrong CA")
		}
		time.Sleep(20 * time.Millisecond)
	}
	msg := r.b.LastConnectError().Error()
	t.Logf("wrong CA: %s", msg)
	if !strings.Contains(msg, "certificate signed by unknown authority") || !strings.Contains(msg, br.TLSURL()) {
		t.Errorf("error %q does not say what failed", msg)
	}
	if w.has("omnisat/wrongca/availability") {
		t.Error("bridge with a wrong CA got connected")
	}
}

func TestConfig(t *testing.T) {
	c := mqtt.Config{Broker: "tcp://h:1883"}.Resolve("dev/1", "/var/lib/omnisat")
	if c.ClientID != "omnisat-dev_1" || c.Prefix != "omnisat/dev_1" || c.Outbox.Path != "/var/lib/omnisat/outbox" ||
		c.Keepalive != 30*time.Second || !c.DiscoveryEnabled() || c.DiscoveryPrefix != "homeassistant" ||
		c.StatsInterval != time.Minute || c.Outbox.MaxBytes != 4<<20 {
		t.Errorf("defaults %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (mqtt.Config{}).Validate(); err != nil {
		t.Errorf("disabled config: %v", err)
	}
	if _, err := mqtt.New(mqtt.Config{}, "x", "v", nil, nil); !errors.Is(err, mqtt.ErrDisabled) {
		t.Errorf("New without broker: %v", err)
	}
	for _, tc := range []struct {
		edit func(*mqtt.Config)
		want string
	}{
		{func(c *mqtt.Config) { c.Broker = "http://h" }, "mqtt.broker"},
		{func(c *mqtt.Config) { c.Broker = "tcp://" }, "mqtt.broker"},
		{func(c *mqtt.Config) { c.Prefix = "a/#" }, "mqtt.prefix"},
		{func(c *mqtt.Config) { c.Keepalive = time.Millisecond }, "mqtt.keepalive"},
		{func(c *mqtt.Config) { c.TLS.CertFile = "x" }, "mqtt.tls.key_file"},
		{func(c *mqtt.Config) { c.Outbox.MaxBytes = 10 }, "mqtt.outbox.max_bytes"},
		{func(c *mqtt.Config) { c.Outbox.Path = "" }, "mqtt.outbox.path"},
		{func(c *mqtt.Config) { c.Password, c.PasswordFile = "a", "b" }, "mqtt.password_file"},
	} {
		cc := c
		tc.edit(&cc)
		if err := cc.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("want error on %s, got %v", tc.want, err)
		}
	}
	c.Password = "s3cret"
	var sb strings.Builder
	fmt.Fprintf(&sb, "%v", c.LogValue())
	if strings.Contains(sb.String(), "s3cret") {
		t.Errorf("password in log value: %s", sb.String())
	}
	// Missing files are named.
	cfg := mqtt.Config{Broker: "ssl://h:8883", PasswordFile: "/nonexistent/pw", Outbox: mqtt.OutboxConfig{Path: t.TempDir()}}
	if _, err := mqtt.New(cfg, "x", "v", nil, nil); err == nil || !strings.Contains(err.Error(), "mqtt.password_file") {
		t.Errorf("missing password file: %v", err)
	}
	cfg.PasswordFile, cfg.TLS.CAFile = "", "/nonexistent/ca.pem"
	if _, err := mqtt.New(cfg, "x", "v", nil, nil); err == nil || !strings.Contains(err.Error(), "mqtt.tls.ca_file") {
		t.Errorf("missing CA: %v", err)
	}
}

// The image entity is opt-in: without mqtt.image no picture leaves the device; with it, the
// frames the agent sent to the model go out, at most one per image_interval.
func TestImageOptIn(t *testing.T) {
	br := testbroker.Start(t)
	w := watch(t, br.URL())
	fa := newFakeAgent()
	cfg := testConfig(t, br.URL())
	off := startBridge(t, cfg, "cam", fa)
	p := "omnisat/cam/"
	w.waitFor(p+"availability", wait, payloadIs("online"))
	fa.emit(agent.FrameSent{JPEG: []byte("\xff\xd8frame0"), At: time.Now()})
	w.waitFor("homeassistant/device/cam/config", wait, nil)
	off.stop(t)
	if got := w.all(p + "image"); len(got) != 0 {
		t.Fatalf("a picture left the device without mqtt.image: %v", got)
	}
	if strings.Contains(w.all("homeassistant/device/cam/config")[0].Payload, `"image"`) {
		t.Fatal("an image entity without mqtt.image")
	}

	cfg.Image, cfg.ImageInterval = true, time.Hour
	startBridge(t, cfg, "cam", fa)
	disc := w.waitCount("homeassistant/device/cam/config", 2, wait)[1]
	if !strings.Contains(disc.Payload, `"image_topic":"omnisat/cam/image"`) || !strings.Contains(disc.Payload, `value_json.camera_on`) {
		t.Fatalf("discovery lacks the image entity and its camera availability: %s", disc.Payload)
	}
	fa.emit(agent.FrameSent{JPEG: []byte("\xff\xd8frame1"), At: time.Now()})
	fa.emit(agent.FrameSent{JPEG: []byte("\xff\xd8frame2"), At: time.Now()})
	img := w.waitFor(p+"image", wait, nil)
	time.Sleep(300 * time.Millisecond)
	if got := w.all(p + "image"); img.Payload != "\xff\xd8frame1" || len(got) != 1 || img.Retained {
		t.Fatalf("images %v: want the first frame only (interval 1h), not retained", got)
	}
}
