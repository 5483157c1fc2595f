// Package mqtt connects the agent to a home-automation hub over MQTT: state, transcripts, events
// and statistics out; commands in; Home Assistant device discovery; and an on-disk outbox so
// that no transcript, answer or event is lost while the broker is away. See README.md.
//
// It knows the agent's public API and paho; nothing of devices or the model server's protocol.
package mqtt

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/omnisat/omnisat/agent"
)

// Agent is the part of *agent.Supervisor the bridge drives.
type Agent interface {
	Subscribe(buffer int) (<-chan agent.Event, func())
	Status() agent.Status
	Start()
	Stop()
	Restart()
	Interrupt()
	Mute(on bool)
	Camera(on bool)
	SetVolume(v int) error
	SetInstructions(text string, restart bool)
	ResetSettings()
	Ask(id, question string, o agent.TurnOptions)
	Say(id, text string, o agent.TurnOptions)
}

// ErrDisabled is returned by New when no broker is configured.
var ErrDisabled = errors.New("mqtt: no broker configured (mqtt.broker is empty): MQTT is disabled")

const (
	eventBuffer      = 4096
	shutdownGrace    = 300 * time.Millisecond
	offlineTimeout   = 2 * time.Second
	subscribeTimeout = 10 * time.Second
	maxPartialBytes  = 8 << 10
	// flushTimeout bounds how long a clean stop waits for the broker to acknowledge what is
	// still in the outbox (the agent's last events): past it they go out at the next start.
	flushTimeout = 3 * time.Second
)

// Bridge is one connection to the broker on behalf of one agent.
type Bridge struct {
	cfg      Config
	deviceID string
	objectID string // deviceID restricted to [a-zA-Z0-9_-]
	version  string
	agent    Agent
	log      *slog.Logger
	password string
	tls      *tls.Config
	started  time.Time

	events    <-chan agent.Event
	cancelSub func()

	connCh chan struct{} // OnConnect → run loop: announce
	linkUp chan struct{} // OnConnect → send loop: the outbox can go out again
	haCh   chan struct{} // Home Assistant said online → run loop: discovery + state
	cmdCh  chan inbound  // command messages → run loop
	// statsCh carries a new statistics interval to the run loop (configuration reload).
	statsCh chan time.Duration
	seq     atomic.Uint64 // ids for ask/say without one
	runs    atomic.Bool
	// bootID and msgSeq make each outbox message's msg_id: unique per device across restarts,
	// assigned when the message is made and kept through the outbox, so a consumer can drop
	// the duplicates a crash may cause.
	bootID       string
	msgSeq       atomic.Uint64
	outboxFailed atomic.Uint64 // messages the outbox could not write (disk full, I/O error)

	mu          sync.Mutex
	lastConnErr error
	connects    int

	// run-loop state (only the Run goroutine touches these)
	lastStateKey    string
	lastPublicState string
	stateSince      time.Time
	activity        activityPayload
	activitySent    bool
	lastUtter       []byte
	partial         map[string]string // session id → assistant text so far
	answers         map[string]string // ask id → answer text so far
	lastImageAt     time.Time
}

type inbound struct {
	topic    string
	payload  []byte
	retained bool
}

// New checks the configuration, reads the password file and TLS files, and subscribes to the
// agent's events (so nothing is missed between New and Run). cfg should have been passed through
// Resolve(deviceID, stateDir); New resolves what is still missing from deviceID. a may be nil for
// a bridge that only runs RemoveDiscovery.
func New(cfg Config, deviceID, version string, a Agent, log *slog.Logger) (*Bridge, error) {
	if !cfg.Enabled() {
		return nil, ErrDisabled
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.Resolve(deviceID, "")
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if version == "" {
		version = "dev"
	}
	b := &Bridge{
		cfg: cfg, deviceID: deviceID, objectID: topicSafeID(deviceID), version: version, agent: a,
		log: log.With("component", "mqtt"), password: cfg.Password, started: time.Now(),
		connCh: make(chan struct{}, 1), linkUp: make(chan struct{}, 1), haCh: make(chan struct{}, 1), cmdCh: make(chan inbound, 64),
		statsCh: make(chan time.Duration, 1),
		partial: map[string]string{}, answers: map[string]string{},
		bootID: randomID(),
	}
	if cfg.PasswordFile != "" {
		pw, err := os.ReadFile(cfg.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("mqtt.password_file: read %q: %w", cfg.PasswordFile, err)
		}
		b.password = strings.TrimRight(string(pw), "\r\n")
	}
	u, _ := url.Parse(cfg.Broker) // checked by Validate
	switch u.Scheme {
	case "ssl", "tls", "mqtts", "wss":
		t, err := buildTLS(cfg.TLS, u.Hostname())
		if err != nil {
			return nil, err
		}
		b.tls = t
	}
	if a != nil {
		b.events, b.cancelSub = a.Subscribe(eventBuffer)
	}
	return b, nil
}

func buildTLS(c TLSConfig, host string) (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host, InsecureSkipVerify: c.Insecure} //nolint:gosec // opt-in, documented
	if c.ServerName != "" {
		t.ServerName = c.ServerName
	}
	if c.CAFile != "" {
		pemData, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("mqtt.tls.ca_file: read %q: %w", c.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemData) {
			return nil, fmt.Errorf("mqtt.tls.ca_file: %q holds no PEM certificate", c.CAFile)
		}
		t.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("mqtt.tls.cert_file: load %q with key %q: %w", c.CertFile, c.KeyFile, err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

// Topic returns the full topic of a name under the prefix ("state" → "omnisat/kiosk1/state").
func (b *Bridge) Topic(name string) string { return b.cfg.Prefix + "/" + name }

// Config is the resolved configuration in use.
func (b *Bridge) Config() Config { return b.cfg }

// LastConnectError is the error of the latest failed connection attempt (nil once connected).
func (b *Bridge) LastConnectError() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastConnErr
}

func (b *Bridge) clientOptions(clientID string, will bool) *paho.ClientOptions {
	o := paho.NewClientOptions().
		AddBroker(b.cfg.Broker).
		SetClientID(clientID).
		SetUsername(b.cfg.Username).
		SetPassword(b.password).
		SetKeepAlive(b.cfg.Keepalive).
		SetConnectTimeout(b.cfg.ConnectTimeout).
		SetCleanSession(true).
		SetOrderMatters(false).
		SetAutoReconnect(true).
		SetMaxReconnectInterval(b.cfg.MaxReconnectInterval).
		SetConnectRetry(true).
		SetConnectRetryInterval(time.Second).
		SetWriteTimeout(10 * time.Second).
		SetStore(newCopyingStore())
	if b.tls != nil {
		o.SetTLSConfig(b.tls)
	}
	if will {
		o.SetBinaryWill(b.Topic("availability"), []byte("offline"), 1, true)
	}
	o.SetConnectionNotificationHandler(func(_ paho.Client, n paho.ConnectionNotification) {
		switch n := n.(type) {
		case paho.ConnectionNotificationBrokerFailed:
			b.setConnErr(fmt.Errorf("connect to %s: %w", b.cfg.Broker, n.Reason))
		case paho.ConnectionNotificationFailed:
			b.setConnErr(fmt.Errorf("connect to %s: %w", b.cfg.Broker, n.Reason))
		case paho.ConnectionNotificationLost:
			b.log.Warn("mqtt: connection lost; reconnecting", "broker", b.cfg.Broker, "err", n.Reason)
		case paho.ConnectionNotificationConnected:
			b.mu.Lock()
			b.lastConnErr = nil
			b.connects++
			b.mu.Unlock()
			b.log.Info("mqtt: connected", "broker", b.cfg.Broker, "client_id", clientID)
		}
	})
	return o
}

func (b *Bridge) setConnErr(err error) {
	b.mu.Lock()
	repeated := b.lastConnErr != nil && b.lastConnErr.Error() == err.Error()
	b.lastConnErr = err
	b.mu.Unlock()
	if !repeated {
		b.log.Error("mqtt: cannot connect; retrying with backoff", "err", err)
	}
}

// SetStatsInterval changes how often statistics are published (≤ 0 stops them), from the next
// tick on. It is safe to call from any goroutine while Run runs.
func (b *Bridge) SetStatsInterval(d time.Duration) {
	for {
		select {
		case b.statsCh <- d:
			return
		default:
			select {
			case <-b.statsCh: // an older change not yet applied is replaced
			default:
			}
		}
	}
}

// Run connects (retrying in the background while the broker is unreachable), publishes until ctx
// is done, then publishes a retained "offline" and disconnects cleanly. Messages still in the
// outbox stay on disk for the next run.
func (b *Bridge) Run(ctx context.Context) error {
	if b.agent == nil {
		return errors.New("mqtt: Run needs an agent")
	}
	if !b.runs.CompareAndSwap(false, true) {
		return errors.New("mqtt: Run was already called on this bridge")
	}
	defer b.cancelSub()
	ob, err := openOutbox(b.cfg.Outbox.Path, int64(b.cfg.Outbox.MaxBytes))
	if err != nil {
		return fmt.Errorf("mqtt.outbox.path: %w", err)
	}
	defer ob.Close()
	if n, bytes, _ := ob.Stats(); n > 0 {
		b.log.Info("mqtt: outbox holds messages from before; they go out first", "messages", n, "bytes", bytes)
	}

	opts := b.clientOptions(b.cfg.ClientID, true)
	opts.SetOnConnectHandler(b.onConnect)
	client := paho.NewClient(opts)
	b.log.Info("mqtt: starting", "config", b.cfg)
	client.Connect() // with ConnectRetry this keeps trying in the background

	sendCtx, stopSend := context.WithCancel(context.Background())
	sendDone := make(chan struct{})
	go b.sendLoop(sendCtx, client, ob, sendDone)

	var statsC <-chan time.Time
	var statsTicker *time.Ticker
	setStats := func(d time.Duration) {
		if statsTicker != nil {
			statsTicker.Stop()
			statsTicker, statsC = nil, nil
		}
		if d > 0 {
			statsTicker = time.NewTicker(d)
			statsC = statsTicker.C
		}
	}
	setStats(b.cfg.StatsInterval)
	defer func() { setStats(0) }()
	events := b.events
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			b.handleEvent(client, ob, ev)
		case <-b.connCh:
			b.announce(client, ob)
		case <-b.haCh:
			b.log.Info("mqtt: Home Assistant is online; publishing discovery and state")
			b.publishDiscovery(client)
			b.publishState(client, b.agent.Status(), true)
		case m := <-b.cmdCh:
			b.handleCommand(client, m)
		case <-statsC:
			b.publishStats(client, ob)
		case d := <-b.statsCh:
			b.log.Info("mqtt: statistics interval changed", "stats_interval", d)
			setStats(d)
		}
	}

	// The agent usually stops with the same context: keep what it still says (session_ended...).
	if events != nil {
		grace := time.NewTimer(shutdownGrace)
	drain:
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					break drain
				}
				b.handleEvent(client, ob, ev)
			case <-grace.C:
				break drain
			}
		}
		grace.Stop()
	}
	b.flush(client, ob)
	stopSend()
	<-sendDone
	if err := ob.Close(); err != nil {
		b.log.Warn("mqtt: outbox not closed cleanly", "err", err)
	}
	if client.IsConnectionOpen() {
		t := client.Publish(b.Topic("availability"), 1, true, "offline")
		if !t.WaitTimeout(offlineTimeout) || t.Error() != nil {
			b.log.Warn("mqtt: could not publish offline before disconnecting (the will covers it)", "err", t.Error())
		}
	}
	client.Disconnect(250)
	if n, _, _ := ob.Stats(); n > 0 {
		b.log.Info("mqtt: stopped; messages kept in the outbox for the next start", "messages", n)
	} else {
		b.log.Info("mqtt: stopped")
	}
	return nil
}

// onConnect runs on paho's goroutine after every (re)connection: subscribe, then let the run loop
// announce availability, discovery and state.
func (b *Bridge) onConnect(c paho.Client) {
	select {
	case b.linkUp <- struct{}{}:
	default: // a signal is already waiting
	}
	subs := map[string]byte{b.Topic("cmd/+"): 1}
	if b.cfg.DiscoveryEnabled() {
		subs[b.cfg.DiscoveryPrefix+"/status"] = 1
	}
	t := c.SubscribeMultiple(subs, b.onMessage)
	if !t.WaitTimeout(subscribeTimeout) || t.Error() != nil {
		b.log.Error("mqtt: subscribe to commands failed", "topics", subs, "err", t.Error())
	}
	select {
	case b.connCh <- struct{}{}:
	default:
	}
}

func (b *Bridge) onMessage(_ paho.Client, m paho.Message) {
	if m.Topic() == b.cfg.DiscoveryPrefix+"/status" {
		if strings.TrimSpace(string(m.Payload())) == "online" {
			select {
			case b.haCh <- struct{}{}:
			default:
			}
		}
		return
	}
	select {
	case b.cmdCh <- inbound{topic: m.Topic(), payload: append([]byte(nil), m.Payload()...), retained: m.Retained()}:
	default:
		b.log.Warn("mqtt: command dropped: more than 64 commands waiting", "topic", m.Topic())
	}
}

// publish sends a message if the connection is open (state, stats and the like are republished
// on every connect, so skipping them while away loses nothing). It does not wait for the broker.
func (b *Bridge) publish(c paho.Client, topic string, qos byte, retained bool, payload []byte) bool {
	if !c.IsConnectionOpen() {
		return false
	}
	t := c.Publish(topic, qos, retained, payload)
	go func() {
		if t.WaitTimeout(30*time.Second) && t.Error() != nil {
			b.log.Warn("mqtt: publish failed", "topic", topic, "err", t.Error())
		}
	}()
	return true
}

func (b *Bridge) announce(c paho.Client, ob *outbox) {
	b.publish(c, b.Topic("availability"), 1, true, []byte("online"))
	if b.cfg.DiscoveryEnabled() {
		b.publishDiscovery(c)
	}
	b.publishState(c, b.agent.Status(), true)
	b.publishActivity(c, true)
	if b.lastUtter != nil {
		b.publish(c, b.Topic("last_utterance"), 1, true, b.lastUtter)
	}
	if b.cfg.StatsInterval > 0 {
		b.publishStats(c, ob)
	}
}

func (b *Bridge) publishDiscovery(c paho.Client) {
	b.publish(c, b.discoveryTopic(), 1, true, marshal(b.discoveryPayload()))
}

// publishState publishes the state when a field that matters changed (or force: on connect).
func (b *Bridge) publishState(c paho.Client, st agent.Status, force bool) {
	if ps := publicState(st.State); ps != b.lastPublicState || b.stateSince.IsZero() {
		b.lastPublicState, b.stateSince = ps, st.Since
	}
	b.setActivity(c, func(a *activityPayload) {
		a.AssistantSpeaking = st.State == agent.StateSpeaking
		a.VoiceLocal = st.Speech
	})
	p := buildState(st, b.stateSince)
	key := p.key()
	if !force && key == b.lastStateKey {
		return
	}
	if b.publish(c, b.Topic("state"), 1, true, marshal(p)) {
		b.lastStateKey = key
	}
}

// setActivity edits the activity and publishes it when it changed.
func (b *Bridge) setActivity(c paho.Client, f func(*activityPayload)) {
	before := b.activity
	f(&b.activity)
	b.activity.Voice = b.activity.VoiceLocal || b.activity.VoiceServer
	if b.activity != before || !b.activitySent {
		b.publishActivity(c, false)
	}
}

func (b *Bridge) publishActivity(c paho.Client, force bool) {
	if b.publish(c, b.Topic("activity"), 1, true, marshal(b.activity)) || force {
		b.activitySent = true
	}
}

// msgID is a new id for an outbox message.
func (b *Bridge) msgID() string { return fmt.Sprintf("%s-%d", b.bootID, b.msgSeq.Add(1)) }

// randomID is 8 random hex digits: this run's part of message ids.
func randomID() string {
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return fmt.Sprintf("%08x", uint32(time.Now().UnixNano()))
	}
	return hex.EncodeToString(r[:])
}

func (b *Bridge) handleEvent(c paho.Client, ob *outbox, ev agent.Event) {
	switch ev := ev.(type) {
	case agent.StateChanged:
		b.publishState(c, ev.Status, false)
	case agent.TextDelta:
		if !b.cfg.PartialTranscripts {
			return
		}
		text := b.partial[ev.SessionID] + ev.Text
		if len(text) > maxPartialBytes {
			text = text[len(text)-maxPartialBytes:]
		}
		clear(b.partial) // only the live session's reply is kept
		b.partial[ev.SessionID] = text
		b.publish(c, b.Topic("transcript/partial"), 0, false,
			marshal(transcriptPayload{Role: "assistant", Text: text, SessionID: ev.SessionID}))
	case agent.Utterance:
		if ev.Partial {
			if b.cfg.PartialTranscripts {
				b.publish(c, b.Topic("transcript/partial"), 0, false, marshal(buildTranscript(ev)))
			}
			return
		}
		tp := buildTranscript(ev)
		tp.MsgID, tp.EventType = b.msgID(), ev.Role
		payload := marshal(tp)
		b.enqueue(c, ob, "transcript", payload)
		if ev.Role == "assistant" {
			delete(b.partial, ev.SessionID)
			b.lastUtter = payload
			b.publish(c, b.Topic("last_utterance"), 1, true, payload)
		}
	case agent.Lifecycle:
		b.enqueue(c, ob, "event", marshal(eventPayload{MsgID: b.msgID(), Kind: ev.Kind, SessionID: ev.SessionID, Reason: ev.Reason, At: rfc3339(ev.At)}))
	case agent.Answer:
		delete(b.answers, ev.ID)
		b.enqueue(c, ob, "answer", marshal(answerPayload{MsgID: b.msgID(), ID: ev.ID, Text: ev.Text, Error: ev.Error}))
	case agent.AnswerDelta:
		text := b.answers[ev.ID] + ev.Text
		if len(text) > maxPartialBytes {
			text = text[len(text)-maxPartialBytes:]
		}
		b.answers[ev.ID] = text
		b.publish(c, b.Topic("answer/stream"), 1, false, marshal(answerStreamPayload{ID: ev.ID, Delta: ev.Text, Text: text}))
	case agent.VoiceActivity:
		b.setActivity(c, func(a *activityPayload) {
			if ev.Source == "server" {
				a.VoiceServer = ev.Speaking
			} else {
				a.VoiceLocal = ev.Speaking
			}
		})
	case agent.FrameSent:
		// At most one picture per image_interval; the next frame after it goes out.
		if b.cfg.Image && len(ev.JPEG) > 0 && time.Since(b.lastImageAt) >= b.cfg.ImageInterval {
			if b.publish(c, b.Topic("image"), 0, false, ev.JPEG) {
				b.lastImageAt = time.Now()
			}
		}
	}
}

// enqueue puts a message in the outbox; a drop by the bound is reported on event (itself queued).
// A message the outbox cannot write (disk full, I/O error) is counted, announced on event, and
// published directly while the broker is connected, so it is lost only if the broker is away too.
func (b *Bridge) enqueue(c paho.Client, ob *outbox, name string, payload []byte) {
	dropped, err := ob.Enqueue(b.Topic(name), payload)
	if err != nil {
		n := b.outboxFailed.Add(1)
		direct := b.publish(c, b.Topic(name), 1, false, payload)
		reason := fmt.Sprintf("outbox write failed (%v): a %s message was not kept on disk; %s; %d since start",
			err, name, map[bool]string{true: "sent directly", false: "lost: the broker is away too"}[direct], n)
		b.log.Error("mqtt: "+reason, "path", b.cfg.Outbox.Path)
		// Not through the outbox, which just failed.
		b.publish(c, b.Topic("event"), 1, false, marshal(eventPayload{MsgID: b.msgID(), Kind: "outbox_write_failed", Reason: reason, At: rfc3339(time.Now())}))
	}
	if dropped > 0 {
		_, _, total := ob.Stats()
		reason := fmt.Sprintf("outbox full (%v): dropped the %d oldest message(s), %d since start", b.cfg.Outbox.MaxBytes, dropped, total)
		b.log.Warn("mqtt: "+reason, "path", b.cfg.Outbox.Path)
		if _, err := ob.Enqueue(b.Topic("event"), marshal(eventPayload{MsgID: b.msgID(), Kind: "outbox_dropped", Reason: reason, At: rfc3339(time.Now())})); err != nil {
			b.log.Error("mqtt: drop report not queued", "err", err)
		}
	}
}

// flush waits (at most flushTimeout) until the broker has acknowledged everything in the outbox,
// so that a clean stop does not send the same messages again at the next start.
func (b *Bridge) flush(c paho.Client, ob *outbox) {
	if !c.IsConnectionOpen() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if !ob.waitEmpty(ctx) {
		n, _, _ := ob.Stats()
		b.log.Warn("mqtt: the broker did not acknowledge every message before the stop; they go out at the next start", "messages", n)
	}
}

func (b *Bridge) handleCommand(c paho.Client, m inbound) {
	name := strings.TrimPrefix(m.topic, b.Topic("cmd/"))
	if m.retained {
		// A retained command would be applied again on every reconnect.
		b.reject(c, m, name, errors.New("retained commands are ignored: publish without the retain flag"))
		return
	}
	cmd, err := parseCommand(name, m.payload)
	if err != nil {
		b.reject(c, m, name, err)
		return
	}
	if (name == "ask" || name == "say") && cmd.id == "" {
		cmd.id = fmt.Sprintf("%s-%d", name, b.seq.Add(1))
	}
	if err := cmd.apply(b.agent); err != nil {
		b.reject(c, m, name, err)
		return
	}
	b.log.Info("mqtt: command", "name", name, "id", cmd.id)
}

func (b *Bridge) reject(c paho.Client, m inbound, name string, err error) {
	msg := errorMessage{Topic: m.topic, Payload: string(m.payload), Error: "cmd/" + name + ": " + err.Error(), At: rfc3339(time.Now())}
	if len(msg.Payload) > 200 {
		msg.Payload = quote(msg.Payload)
	}
	b.log.Warn("mqtt: bad command", "topic", m.topic, "err", err)
	b.publish(c, b.Topic("error"), 1, false, marshal(msg))
}

func (b *Bridge) publishStats(c paho.Client, ob *outbox) {
	st := b.agent.Status()
	n, bytes, dropped := ob.Stats()
	b.mu.Lock()
	reconnects := max(b.connects-1, 0)
	b.mu.Unlock()
	p := statsPayload{
		UptimeS: time.Since(b.started).Round(time.Second).Seconds(), ChunksSent: st.ChunksSent,
		SessionAgeS: math.Round(st.SessionAge*10) / 10, KVCacheLength: st.KVCacheLength,
		Reconnects: st.Reconnects, Rollovers: st.Rollovers,
		ChunksDropped: st.ChunksDropped, AudioDroppedS: st.SecondsDropped,
		ServerDroppedS: math.Round(st.ServerDroppedS*1000) / 1000, RateLimits: st.RateLimits,
		OutboxPending: n, OutboxBytes: bytes, OutboxDropped: dropped, OutboxFailed: b.outboxFailed.Load(),
		MQTTReconnects: reconnects, BytesUp: st.BytesUp, BytesDown: st.BytesDown,
		PlaybackUnderruns: st.PlaybackUnderruns, LastStep: st.LastStep,
	}
	if d, ok := b.agent.(interface{ Dropped() uint64 }); ok {
		v := d.Dropped()
		p.EventsDropped = &v
	}
	if cpu, rss, ok := procStats(); ok {
		p.CPUSeconds, p.RSSBytes = &cpu, rss
	}
	b.publish(c, b.Topic("stats"), 0, false, marshal(p))
}

// sendLoop delivers the outbox, oldest first, one message at a time: a message leaves the outbox
// only after the broker's PUBACK. While disconnected it waits; paho re-sends a message that was in
// flight when the link dropped, and its token completes then.
func (b *Bridge) sendLoop(ctx context.Context, c paho.Client, ob *outbox, done chan<- struct{}) {
	defer close(done)
	for {
		rec, ok := ob.Peek()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-ob.ready:
			}
			continue
		}
		if !c.IsConnectionOpen() {
			select { // a signal left from an earlier connect only makes the loop look again
			case <-ctx.Done():
				return
			case <-b.linkUp:
			}
			continue
		}
		t := c.Publish(rec.topic, 1, false, rec.payload)
		waited := 0
	wait:
		for {
			select {
			case <-ctx.Done():
				return // not acknowledged: it stays in the outbox
			case <-t.Done():
				break wait
			case <-time.After(30 * time.Second):
				waited += 30
				b.log.Warn("mqtt: still waiting for the broker to acknowledge", "topic", rec.topic, "seconds", waited)
			}
		}
		if err := t.Error(); err != nil {
			b.log.Warn("mqtt: publish from outbox failed; retrying", "topic", rec.topic, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		if err := ob.Ack(rec.end); err != nil {
			b.log.Error("mqtt: outbox acknowledgement not recorded (the message may be sent again after a restart)", "err", err)
		}
	}
}

// RemoveDiscovery publishes an empty retained message on the discovery topic, which makes Home
// Assistant remove the device and its entities (for `omnisat mqtt remove-discovery`). It uses its
// own short connection, without will or availability.
func (b *Bridge) RemoveDiscovery(ctx context.Context) error {
	opts := b.clientOptions(b.cfg.ClientID+"-rm", false).SetConnectRetry(false).SetAutoReconnect(false)
	c := paho.NewClient(opts)
	if err := wait(ctx, c.Connect()); err != nil {
		return fmt.Errorf("mqtt: remove discovery: connect to %s: %w", b.cfg.Broker, err)
	}
	defer c.Disconnect(250)
	topic := b.discoveryTopic()
	if err := wait(ctx, c.Publish(topic, 1, true, []byte{})); err != nil {
		return fmt.Errorf("mqtt: remove discovery: publish empty config on %s: %w", topic, err)
	}
	b.log.Info("mqtt: Home Assistant discovery removed", "topic", topic)
	return nil
}

func wait(ctx context.Context, t paho.Token) error {
	select {
	case <-t.Done():
		return t.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}
