package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/omnisat/omnisat/internal/testbroker"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// omnisat run with an mqtt: section: availability online and a state while it runs, offline
// after a clean stop, and remove-discovery clears the Home Assistant config.
func TestRunPublishesMQTT(t *testing.T) {
	broker := testbroker.Start(t)
	sim := realtimetest.NewServer(realtimetest.Options{})
	defer sim.Close()
	dir := t.TempDir()
	wavPath, _ := filepath.Abs("../../configs/demo/hello.wav")
	cfg := filepath.Join(dir, "omnisat.yaml")
	os.WriteFile(cfg, []byte(`
device_id: kiosk1
server:
  url: `+sim.URL()+`
  mode: audio
audio:
  input: file:`+wavPath+`
  loop: true
  output: none
mqtt:
  broker: `+broker.URL()+`
`), 0o600)

	got := watchBroker(t, broker.URL())

	var out, errb syncBuffer
	env := &cliEnv{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"run", "-c", cfg, "--state-dir", dir}, env) }()

	waitFor := func(topic, contains string) {
		t.Helper()
		deadline := time.After(15 * time.Second)
		for {
			select {
			case m := <-got:
				// An empty want means an empty payload (a removed retained message).
				if m[0] == topic && (contains == "" && m[1] == "" || contains != "" && strings.Contains(m[1], contains)) {
					return
				}
			case <-deadline:
				t.Fatalf("no %s containing %q; output %s %s", topic, contains, out.String(), errb.String())
			}
		}
	}
	waitFor("omnisat/kiosk1/availability", "online")
	waitFor("homeassistant/device/kiosk1/config", `"cmps"`)
	waitFor("omnisat/kiosk1/state", `"state":"listening"`)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d: %s", code, errb.String())
	}
	waitFor("omnisat/kiosk1/availability", "offline")

	code, stdout, stderr := runCLI(t, "mqtt", "-c", cfg, "remove-discovery")
	if code != 0 || !strings.Contains(stdout, "kiosk1") {
		t.Fatalf("remove-discovery: %d %q %q", code, stdout, stderr)
	}
	waitFor("homeassistant/device/kiosk1/config", "")
}

// watchBroker subscribes to every topic of the broker for the rest of the test and hands out
// each message as {topic, payload}.
func watchBroker(t *testing.T, url string) <-chan [2]string {
	t.Helper()
	got := make(chan [2]string, 1000)
	sub := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID("watcher"))
	if tok := sub.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("watcher: %v", tok.Error())
	}
	t.Cleanup(func() { sub.Disconnect(100) })
	sub.Subscribe("#", 1, func(_ paho.Client, m paho.Message) { got <- [2]string{m.Topic(), string(m.Payload())} }).Wait()
	return got
}
