package mqtt_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/mqtt"
)

// msg is one message a watcher received.
type msg struct {
	Topic    string
	Payload  string
	Retained bool
}

func (m msg) json(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(m.Payload), &v); err != nil {
		t.Fatalf("%s: payload %q is not a JSON object: %v", m.Topic, m.Payload, err)
	}
	return v
}

// watcher is a real paho subscriber on "#" that records everything it receives.
type watcher struct {
	t      testing.TB
	c      paho.Client
	mu     sync.Mutex
	msgs   []msg
	notify chan struct{}
}

type watchOpt func(*paho.ClientOptions)

// persistent makes the watcher keep its session (and QoS 1 messages queued for it) across
// disconnects, with a broker started WithPersistence.
func persistent(id string) watchOpt {
	return func(o *paho.ClientOptions) { o.SetClientID(id).SetCleanSession(false).SetResumeSubs(true) }
}

func watch(t testing.TB, broker string, opts ...watchOpt) *watcher {
	t.Helper()
	w := &watcher{t: t, notify: make(chan struct{}, 1)}
	o := paho.NewClientOptions().AddBroker(broker).SetClientID(fmt.Sprintf("watcher-%d", time.Now().UnixNano())).
		SetAutoReconnect(true).SetMaxReconnectInterval(500 * time.Millisecond).SetConnectRetry(true).
		SetConnectRetryInterval(200 * time.Millisecond).SetOrderMatters(true)
	for _, f := range opts {
		f(o)
	}
	o.SetOnConnectHandler(func(c paho.Client) {
		c.Subscribe("#", 1, nil)
	})
	o.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
		w.mu.Lock()
		w.msgs = append(w.msgs, msg{Topic: m.Topic(), Payload: string(m.Payload()), Retained: m.Retained()})
		w.mu.Unlock()
		select {
		case w.notify <- struct{}{}:
		default:
		}
	})
	w.c = paho.NewClient(o)
	tok := w.c.Connect()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("watcher: connect to %s: %v", broker, tok.Error())
	}
	// Wait until the subscription is in place: publish a probe and see it.
	probe := fmt.Sprintf("probe/%d", time.Now().UnixNano())
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		w.c.Publish(probe, 0, false, "x")
		if w.has(probe) {
			t.Cleanup(func() { w.c.Disconnect(100) })
			return w
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("watcher: subscription on %s not working", broker)
	return nil
}

func (w *watcher) has(topic string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.msgs {
		if m.Topic == topic {
			return true
		}
	}
	return false
}

// all returns the messages on topic so far.
func (w *watcher) all(topic string) []msg {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []msg
	for _, m := range w.msgs {
		if m.Topic == topic {
			out = append(out, m)
		}
	}
	return out
}

// waitFor returns the first message on topic (from the start) that matches.
func (w *watcher) waitFor(topic string, timeout time.Duration, match func(msg) bool) msg {
	w.t.Helper()
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		for _, m := range w.msgs {
			if m.Topic == topic && (match == nil || match(m)) {
				w.mu.Unlock()
				return m
			}
		}
		w.mu.Unlock()
		select {
		case <-w.notify:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			w.t.Fatalf("no matching message on %s within %v; got %v", topic, timeout, w.all(topic))
		}
	}
}

// waitCount waits until topic has at least n messages and returns them.
func (w *watcher) waitCount(topic string, n int, timeout time.Duration) []msg {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if got := w.all(topic); len(got) >= n {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := w.all(topic)
	w.t.Fatalf("%d messages on %s within %v, want %d: %v", len(got), topic, timeout, n, got)
	return nil
}

func payloadIs(s string) func(msg) bool { return func(m msg) bool { return m.Payload == s } }

func jsonField(t testing.TB, key string, want any) func(msg) bool {
	return func(m msg) bool {
		var v map[string]any
		if json.Unmarshal([]byte(m.Payload), &v) != nil {
			return false
		}
		return fmt.Sprint(v[key]) == fmt.Sprint(want)
	}
}

// retained reads the retained message of topic with a fresh subscription ("" if none).
func retained(t testing.TB, broker, topic string) (string, bool) {
	t.Helper()
	got := make(chan string, 1)
	o := paho.NewClientOptions().AddBroker(broker).SetClientID(fmt.Sprintf("ret-%d", time.Now().UnixNano()))
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(50)
	c.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) {
		if m.Retained() {
			select {
			case got <- string(m.Payload()):
			default:
			}
		}
	}).WaitTimeout(5 * time.Second)
	select {
	case p := <-got:
		return p, true
	case <-time.After(300 * time.Millisecond):
		return "", false
	}
}

// publish sends a command (or anything) from a separate client, QoS 1.
func publish(t testing.TB, broker, topic, payload string, retain bool) {
	t.Helper()
	o := paho.NewClientOptions().AddBroker(broker).SetClientID(fmt.Sprintf("pub-%d", time.Now().UnixNano()))
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(50)
	if tok := c.Publish(topic, 1, retain, payload); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publish %s: %v", topic, tok.Error())
	}
}

// fakeAgent records commands and lets the test emit events.
type fakeAgent struct {
	mu     sync.Mutex
	status agent.Status
	calls  []string
	subs   []chan agent.Event
	volErr error
}

func newFakeAgent() *fakeAgent {
	return &fakeAgent{status: agent.Status{State: agent.StateListening, Mode: "audio", Dialect: "current",
		SessionID: "sess-1", KVCacheLength: 100, Volume: 50, Policy: agent.PolicyAlways, Since: time.Unix(1700000000, 0)}}
}

func (f *fakeAgent) Subscribe(n int) (<-chan agent.Event, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan agent.Event, n)
	f.subs = append(f.subs, ch)
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			for i, c := range f.subs {
				if c == ch {
					f.subs = append(f.subs[:i], f.subs[i+1:]...)
					close(ch)
					return
				}
			}
		})
	}
}

func (f *fakeAgent) emit(ev agent.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.subs {
		c <- ev
	}
}

func (f *fakeAgent) Status() agent.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status
}

func (f *fakeAgent) record(s string, change func(*agent.Status)) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	if change != nil {
		change(&f.status)
	}
	st := f.status
	f.mu.Unlock()
	if change != nil {
		f.emit(agent.StateChanged{Status: st})
	}
}

func (f *fakeAgent) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeAgent) Start()     { f.record("start", nil) }
func (f *fakeAgent) Stop()      { f.record("stop", nil) }
func (f *fakeAgent) Restart()   { f.record("restart", nil) }
func (f *fakeAgent) Interrupt() { f.record("interrupt", nil) }
func (f *fakeAgent) Mute(on bool) {
	f.record(fmt.Sprintf("mute %v", on), func(s *agent.Status) { s.Muted = on })
}
func (f *fakeAgent) Camera(on bool) {
	f.record(fmt.Sprintf("camera %v", on), func(s *agent.Status) { s.CameraOn = on })
}
func (f *fakeAgent) SetVolume(v int) error {
	if f.volErr != nil {
		return f.volErr
	}
	f.record(fmt.Sprintf("volume %d", v), func(s *agent.Status) { s.Volume = v })
	return nil
}
func (f *fakeAgent) SetInstructions(text string, restart bool) {
	f.record(fmt.Sprintf("instructions %q %v", text, restart), nil)
}
func (f *fakeAgent) Ask(id, q string, o agent.TurnOptions) {
	f.record(fmt.Sprintf("ask %s %q %v", id, q, o.Snapshot)+turnSuffix(o), nil)
}
func (f *fakeAgent) Say(id, text string, o agent.TurnOptions) {
	f.record(fmt.Sprintf("say %s %q", id, text)+turnSuffix(o), nil)
}
func (f *fakeAgent) ResetSettings() { f.record("settings reset", nil) }

// turnSuffix shows the chat options of a call when any is set.
func turnSuffix(o agent.TurnOptions) string {
	if o.MaxNewTokens == 0 && !o.Thinking && o.Voice == "" {
		return ""
	}
	return fmt.Sprintf(" max_new_tokens=%d thinking=%v voice=%q", o.MaxNewTokens, o.Thinking, o.Voice)
}

// running is a bridge running in the background.
type running struct {
	b      *mqtt.Bridge
	cancel context.CancelFunc
	done   chan error
}

func (r *running) stop(t testing.TB) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Run did not return within 10 s of cancel")
	}
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("MQTT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func testConfig(t testing.TB, broker string) mqtt.Config {
	return mqtt.Config{Broker: broker, StatsInterval: -1, MaxReconnectInterval: time.Second,
		Outbox: mqtt.OutboxConfig{Path: t.TempDir()}}
}

func startBridge(t testing.TB, cfg mqtt.Config, deviceID string, a mqtt.Agent) *running {
	t.Helper()
	b, err := mqtt.New(cfg, deviceID, "1.2.3", a, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{b: b, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- b.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}
