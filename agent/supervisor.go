package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/omnisat/omnisat/realtime"
)

const (
	inputRate  = realtime.InputSampleRate
	outputRate = realtime.OutputSampleRate
	// captureBlock is how much audio capture reads at a time: the grain of voice detection,
	// interrupts and frame sampling.
	captureBlock = inputRate / 50 // 20 ms
	// closeTimeout bounds the polite goodbye to a session.
	closeTimeout = 2 * time.Second
	// sendTimeout bounds one Send while the sender holds sendMu.
	sendTimeout = time.Second
	// stateTick is how often playback is checked for the speaking/listening state.
	stateTick = 50 * time.Millisecond
)

// DialFunc opens a session; realtime.Dial in production.
type DialFunc func(ctx context.Context, cfg realtime.Config) (realtime.Session, error)

// ChatFunc runs one turn-based request; realtime.Chat in production.
type ChatFunc func(ctx context.Context, cfg realtime.Config, r realtime.ChatRequest, onEvent func(realtime.Event)) (*realtime.Reply, error)

// Options are the agent's parts. Server, Audio and Speaker are required.
type Options struct {
	Config Config
	// Server is the session configuration; Init.Instructions is the base system prompt.
	Server realtime.Config
	// ChatServer is used for Ask and Say (mode=chat); zero means Server's URL in chat mode.
	ChatServer *realtime.Config
	Audio      AudioSource
	Frames     FrameSource // nil: no camera
	Speaker    Speaker
	Dial       DialFunc // default realtime.Dial
	Chat       ChatFunc // default realtime.Chat
	Logger     *slog.Logger
	// Rand makes backoff jitter reproducible in tests; nil uses a random source.
	Rand *rand.Rand
	// Now is the clock; nil uses time.Now.
	Now func() time.Time
	// Volume is the configured speaker volume (0..100), shown while no command has set another;
	// nil takes the speaker's own, or 100 for a speaker without a volume control.
	Volume *int
	// SettingsFile keeps the settings commands change (mute, camera, volume, instructions, a
	// held stop) across restarts; empty keeps them in memory only.
	SettingsFile string
	// Voices resolves a voice name of a turn-based request to a reference voice (16 kHz mono)
	// for MiniCPM-o; nil refuses named voices there.
	Voices func(name string) ([]float32, error)
}

// Supervisor owns the conversation. Create it with New, run it with Run, drive it with its methods
// from any goroutine.
type Supervisor struct {
	cfg     Config
	server  realtime.Config
	chatCfg realtime.Config
	audio   AudioSource
	frames  FrameSource
	speaker Speaker
	dial    DialFunc
	chat    ChatFunc
	voices  func(string) ([]float32, error)
	log     *slog.Logger
	rng     *rand.Rand
	now     func() time.Time

	backlog *backlog
	active  atomic.Pointer[live] // the session the sender feeds
	// sendMu is held by the sender from reading active to the end of Send, so switching sessions
	// never races a chunk: every chunk goes to exactly one session, before that session's close.
	sendMu sync.Mutex
	cmds   chan func(*loop)
	bus    *bus

	muted     atomic.Bool
	cameraOn  atomic.Bool
	volume    atomic.Int32 // the volume last set, whatever the sink
	held      atomic.Bool  // a stop command holds the session off (policy always)
	settings  *settingsStore
	defaults  Defaults
	lastFrame atomic.Pointer[FrameSent] // the newest frame a chunk carried to the server
	interrupt atomic.Bool               // capture cuts the current chunk short and marks it force_listen
	speech    atomic.Bool               // local voice activity right now
	sent      atomic.Uint64
	// Traffic of sessions already left behind; the active one's is added in Status.
	bytesUp, bytesDown atomic.Uint64
	speechCh           chan bool // capture → loop: speech started/stopped

	statusMu sync.Mutex
	status   Status

	instrMu      sync.Mutex
	instructions string // base system prompt; changeable live

	running atomic.Bool
}

// New checks the options and builds a supervisor; nothing runs until Run.
func New(o Options) (*Supervisor, error) {
	o.Config = o.Config.WithDefaults()
	if err := o.Config.check(); err != nil {
		return nil, err
	}
	if o.Audio == nil || o.Speaker == nil {
		return nil, errors.New("agent: an audio source and a speaker are required")
	}
	if o.Dial == nil {
		o.Dial = realtime.Dial
	}
	if o.Chat == nil {
		o.Chat = realtime.Chat
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Rand == nil {
		o.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Server.Mode == "" {
		o.Server.Mode = realtime.ModeVideo
	}
	if o.Server.Dialect == "" {
		o.Server.Dialect = realtime.DialectCurrent
	}
	if o.Server.Mode == realtime.ModeChat {
		return nil, errors.New("server.mode: the agent runs a duplex session (video or audio); chat is used for ask/say")
	}
	chatCfg := o.Server
	if o.ChatServer != nil {
		chatCfg = *o.ChatServer
	}
	chatCfg.Mode = realtime.ModeChat
	chatCfg.Init = realtime.Init{}
	chatCfg.OnQueue = nil
	s := &Supervisor{
		cfg: o.Config, server: o.Server, chatCfg: chatCfg,
		audio: o.Audio, frames: o.Frames, speaker: o.Speaker, dial: o.Dial, chat: o.Chat, voices: o.Voices,
		log: o.Logger, rng: o.Rand, now: o.Now,
		cmds:         make(chan func(*loop), 16),
		bus:          newBus(),
		speechCh:     make(chan bool, 4),
		instructions: o.Server.Init.Instructions,
	}
	s.backlog = newBacklog(durationToSamples(s.idleBuffer()))
	s.defaults = Defaults{CameraOn: true, Volume: 100, Instructions: o.Server.Init.Instructions}
	if vc, ok := o.Speaker.(VolumeControl); ok {
		s.defaults.Volume = vc.Volume()
	}
	if o.Volume != nil {
		if *o.Volume < 0 || *o.Volume > 100 {
			return nil, fmt.Errorf("agent: volume %d is outside 0..100", *o.Volume)
		}
		s.defaults.Volume = *o.Volume
	}
	// Settings changed by commands before a restart apply from the first sample on: a muted
	// satellite stays muted.
	s.settings = openSettings(o.SettingsFile, s.defaults, s.log)
	s.applySettings()
	s.status = Status{State: StateIdle, Since: s.now(), Policy: s.cfg.Policy, Mode: string(o.Server.Mode),
		Dialect: string(o.Server.Dialect), CameraOn: o.Frames != nil}
	return s, nil
}

// applySettings makes the defaults and the stored overrides the live values.
func (s *Supervisor) applySettings() {
	stored := s.settings.snapshot()
	d := s.Defaults()
	muted, camera, volume, instructions := d.Muted, d.CameraOn, d.Volume, d.Instructions
	if o := stored.Muted; o != nil {
		muted = o.Value
	}
	if o := stored.CameraOn; o != nil {
		camera = o.Value
	}
	if o := stored.Volume; o != nil {
		volume = o.Value
	}
	if o := stored.Instructions; o != nil {
		instructions = o.Value
	}
	s.muted.Store(muted)
	s.cameraOn.Store(camera)
	s.setVolume(volume)
	s.instrMu.Lock()
	s.instructions = instructions
	s.instrMu.Unlock()
	s.held.Store(stored.Held && s.cfg.Policy == PolicyAlways)
}

func (s *Supervisor) setVolume(v int) {
	s.volume.Store(int32(v))
	if vc, ok := s.speaker.(VolumeControl); ok {
		vc.SetVolume(v)
	}
}

// Subscribe returns a channel of every event from now on. A subscriber that falls more than
// buffer events behind loses the oldest (counted in Dropped). cancel ends the subscription.
func (s *Supervisor) Subscribe(buffer int) (events <-chan Event, cancel func()) {
	return s.bus.subscribe(buffer)
}

// Status returns the current snapshot.
func (s *Supervisor) Status() Status {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	st := s.status
	if s.status.Devices != nil {
		st.Devices = make(map[string]string, len(s.status.Devices))
		for k, v := range s.status.Devices {
			st.Devices[k] = v
		}
	}
	st.Muted = s.muted.Load()
	st.Volume = int(s.volume.Load())
	st.Held = s.held.Load()
	st.Overrides = s.settings.names()
	st.CameraOn = s.cameraOn.Load() && s.frames != nil
	if d, known := st.Devices["camera"]; known && d != "ok" {
		st.CameraOn = false // video chunks carry no frames until it is back
	}
	st.Speech = s.speech.Load()
	st.ChunksSent = s.sent.Load()
	_, dc, ds := s.backlog.stats()
	st.ChunksDropped = dc
	st.SecondsDropped = float64(ds) / inputRate
	st.BytesUp, st.BytesDown = s.bytesUp.Load(), s.bytesDown.Load()
	if l := s.active.Load(); l != nil {
		st.SessionAge = s.now().Sub(l.started).Seconds()
		t := l.sess.Stats()
		st.BytesUp += t.BytesSent
		st.BytesDown += t.BytesReceived
	}
	if u, ok := s.speaker.(UnderrunCounter); ok {
		n := u.Underruns()
		st.PlaybackUnderruns = &n
	}
	if st.LastStep != nil {
		m := *st.LastStep
		st.LastStep = &m
	}
	return st
}

// Run runs the agent until ctx is cancelled; then it closes the session politely and returns.
func (s *Supervisor) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("agent: already running")
	}
	defer s.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	captureErr := make(chan error, 1)
	wg.Add(2)
	go func() { defer wg.Done(); captureErr <- s.captureLoop(ctx) }()
	go func() { defer wg.Done(); s.sendLoop(ctx) }()

	l := &loop{s: s, ctx: ctx, sessEvents: make(chan sessEvent, 64), dialDone: make(chan dialResult, 2)}
	err := l.run(captureErr)
	cancel()
	wg.Wait()
	l.wg.Wait()
	s.setState(StateStopped, "", nil)
	s.bus.close()
	return err
}

// Commands. Each is safe from any goroutine and returns at once; effects show in Status and events.

// Start asks for a session (policies on_demand and voice; for always it ends a held stop).
func (s *Supervisor) Start() { s.hold(false); s.do(func(l *loop) { l.start("start command") }) }

// Stop ends the session and holds none until Start; with policy always the stop is kept across
// restarts (a person stopped it), with the others the next voice or start opens one anyway.
func (s *Supervisor) Stop() { s.hold(true); s.do(func(l *loop) { l.stop("stop command") }) }

// Restart ends the session and opens a new one (also clears an error state and a held stop).
func (s *Supervisor) Restart() { s.hold(false); s.do(func(l *loop) { l.restart("restart command") }) }

func (s *Supervisor) hold(on bool) {
	if s.cfg.Policy != PolicyAlways {
		return
	}
	s.held.Store(on)
	s.settings.update(func(st *storedSettings) { st.Held = on })
}

// Interrupt stops the model talking: playback is flushed now and the next chunk (cut short)
// carries force_listen.
func (s *Supervisor) Interrupt() {
	s.speaker.FlushAfter(0)
	s.interrupt.Store(true)
	s.do(func(l *loop) { l.interrupted() })
}

// Mute sends silence instead of the microphone while on (the session and its pacing go on).
// It is kept across restarts.
func (s *Supervisor) Mute(on bool) {
	s.muted.Store(on)
	s.settings.update(func(st *storedSettings) { setOverride(&st.Muted, on, s.defaults.Muted) })
	s.do(func(l *loop) { l.publish() })
}

// SetVolume sets the volume (0..100): the speaker's now, if it has a volume control, and the
// status's whatever the sink. It is kept across restarts.
func (s *Supervisor) SetVolume(v int) error {
	if v < 0 || v > 100 {
		return fmt.Errorf("volume: %d is outside 0..100", v)
	}
	s.setVolume(v)
	s.settings.update(func(st *storedSettings) { setOverride(&st.Volume, v, s.defaults.Volume) })
	s.do(func(l *loop) { l.publish() })
	return nil
}

// Camera turns the frames on or off (mode=video sends audio only while off). It is kept across
// restarts.
func (s *Supervisor) Camera(on bool) {
	s.cameraOn.Store(on)
	s.settings.update(func(st *storedSettings) { setOverride(&st.CameraOn, on, s.defaults.CameraOn) })
	s.do(func(l *loop) { l.publish() })
}

// SetInstructions changes the system prompt from the next session on; restart applies it now.
// It is kept across restarts.
func (s *Supervisor) SetInstructions(text string, restart bool) {
	s.instrMu.Lock()
	s.instructions = text
	s.instrMu.Unlock()
	s.settings.update(func(st *storedSettings) { setOverride(&st.Instructions, text, s.defaults.Instructions) })
	if restart {
		s.Restart()
	} else {
		s.do(func(l *loop) { l.publish() })
	}
}

// ResetSettings drops every setting a command changed (mute, camera, volume, instructions, a
// held stop): the configuration's values apply again, now and after restarts. A changed prompt
// takes effect with the next session.
func (s *Supervisor) ResetSettings() {
	s.settings.update(func(st *storedSettings) { *st = storedSettings{} })
	s.applySettings()
	s.do(func(l *loop) {
		if s.cfg.Policy == PolicyAlways {
			l.start("settings reset")
		}
		l.publish()
	})
}

// SetDefaults takes new configuration values (a reload): each applies now, and replaces the
// override a command had set for it, since the configuration is the newer decision.
func (s *Supervisor) SetDefaults(d Defaults) {
	s.settings.update(func(st *storedSettings) {
		s.defaults = d
		st.dropStale(d)
	})
	s.applySettings()
	s.do(func(l *loop) { l.publish() })
}

// Defaults returns the configuration's values of the settings commands change.
func (s *Supervisor) Defaults() Defaults {
	s.settings.mu.Lock()
	defer s.settings.mu.Unlock()
	return s.defaults
}

// frameSent records the frame a chunk carried to the server and announces it.
func (s *Supervisor) frameSent(jpeg []byte) {
	f := FrameSent{JPEG: jpeg, At: s.now()}
	s.lastFrame.Store(&f)
	s.bus.publish(f)
}

// LastFrameSent returns the newest camera frame a chunk carried to the server.
func (s *Supervisor) LastFrameSent() (FrameSent, bool) {
	f := s.lastFrame.Load()
	if f == nil {
		return FrameSent{}, false
	}
	return *f, true
}

// Announce publishes a lifecycle event from outside the agent (configuration reloaded or
// refused, ...), so that every subscriber (console, MQTT) hears of it.
func (s *Supervisor) Announce(kind, reason string) {
	s.bus.publish(Lifecycle{Kind: kind, Reason: reason, At: s.now()})
}

// DeviceState records a device's health: the device layer calls it when a microphone, speaker
// or camera is lost or comes back. The agent keeps running either way (a lost camera means no
// frames; a lost microphone means silence) and says so in its status and events.
func (s *Supervisor) DeviceState(device string, ok bool, err error) {
	detail := "ok"
	if !ok {
		detail = "lost"
		if err != nil {
			detail = err.Error()
		}
	}
	s.statusMu.Lock()
	if s.status.Devices == nil {
		s.status.Devices = map[string]string{}
	}
	prev, known := s.status.Devices[device]
	s.status.Devices[device] = detail
	if !ok {
		s.status.LastError = device + ": " + detail
	}
	s.statusMu.Unlock()
	if known && prev == detail {
		return
	}
	kind := "device_back"
	if !ok {
		kind = "device_lost"
		s.log.Warn("agent: device lost", "device", device, "err", err)
	} else if !known {
		kind = "" // first report of a healthy device: no event
	}
	if kind != "" {
		s.bus.publish(Lifecycle{Kind: kind, Reason: device + ": " + detail, At: s.now()})
	}
	s.bus.publish(StateChanged{Status: s.Status()})
}

// Ask answers a question with a turn-based request (optionally with the newest camera frame):
// the text streams as AnswerDelta events and the result arrives as an Answer with the given id.
func (s *Supervisor) Ask(id, question string, o TurnOptions) {
	s.do(func(l *loop) { l.ask(id, question, o) })
}

// Say speaks text on the speaker; completion or failure arrives as an Answer event with the id.
func (s *Supervisor) Say(id, text string, o TurnOptions) { s.do(func(l *loop) { l.say(id, text, o) }) }

func (s *Supervisor) do(f func(*loop)) {
	select {
	case s.cmds <- f:
	default:
		// A full command queue means commands come faster than the loop runs them; run this one
		// as soon as there is room rather than dropping it.
		go func() { s.cmds <- f }()
	}
}

func (s *Supervisor) idleBuffer() time.Duration {
	if s.cfg.Policy == PolicyVoice {
		return s.cfg.PreRoll
	}
	return s.cfg.ReconnectBuffer
}

func (s *Supervisor) currentInstructions() string {
	s.instrMu.Lock()
	defer s.instrMu.Unlock()
	return s.instructions
}

// setState updates the status and publishes it. f, if set, edits other fields under the lock.
func (s *Supervisor) setState(st State, detail string, f func(*Status)) {
	s.statusMu.Lock()
	changed := s.status.State != st || s.status.Detail != detail
	if changed {
		s.status.Since = s.now()
	}
	s.status.State, s.status.Detail = st, detail
	if f != nil {
		f(&s.status)
		changed = true
	}
	s.statusMu.Unlock()
	if changed {
		s.bus.publish(StateChanged{Status: s.Status()})
	}
}

// updateStatus edits status fields other than the state and publishes the result.
func (s *Supervisor) updateStatus(f func(*Status)) {
	s.statusMu.Lock()
	f(&s.status)
	s.statusMu.Unlock()
	s.bus.publish(StateChanged{Status: s.Status()})
}

// captureLoop reads the microphone, cuts chunks and queues them. It runs whether or not a session
// is live, so audio captured while connecting can be kept.
func (s *Supervisor) captureLoop(ctx context.Context) error {
	chunkSamples := durationToSamples(s.cfg.Chunk)
	if n := s.server.AudioFrameSamples(); n > 0 {
		// OpenVoice's VAD judges each frame whole: send it small frames as they are captured.
		chunkSamples = n
	}
	framesEvery := 0
	if s.server.Mode == realtime.ModeVideo && s.cfg.FramesPerChunk > 0 {
		framesEvery = chunkSamples / s.cfg.FramesPerChunk
	}
	vad := newEnergyVAD(s.cfg.VADThreshold)
	var barge *energyVAD
	wasRising, holdOpen := false, false
	preRoll := max(0, realtime.MinChunkSamples-durationToSamples(s.cfg.BargeIn.MinSpeech))
	if *s.cfg.BargeIn.Enabled {
		barge = newBargeInVAD(s.cfg.BargeIn)
	}
	block := make([]float32, captureBlock)
	var seq uint64
	cur := make([]float32, 0, chunkSamples)
	var frames [][]byte
	nextFrameAt := framesEvery
	for {
		// Never read past the chunk boundary: every chunk holds exactly chunkSamples, except
		// one held open while speech may be starting (below).
		want := chunkSamples - len(cur)
		if want <= 0 {
			want = captureBlock
		}
		n, err := s.audio.Read(ctx, block[:min(captureBlock, want)])
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return io.EOF
			}
			return fmt.Errorf("read audio: %w", err)
		}
		got := block[:n]
		if s.muted.Load() {
			clear(got)
		}
		if speaking, changed := vad.process(got); changed {
			s.speech.Store(speaking)
			select {
			case s.speechCh <- speaking:
			default:
			}
		}
		if barge != nil {
			// The user talks over the model's speech: stop it (the signal is echo-cancelled
			// upstream, so the model's own voice does not count).
			playing := s.active.Load() != nil && s.speaker.Pending() > 0
			speaking, changed := barge.process(got)
			rising := barge.v.Rising()
			// Speech may be starting: end the chunk just before it (keeping preRoll of the
			// audio before the onset for the next chunk), so that when the minimum speech
			// confirms it the chunk holding the onset is about as long as a server accepts and
			// carries force_listen at once, instead of after whatever the chunk held before.
			if rising && !wasRising && playing && len(cur) >= realtime.MinChunkSamples {
				at := max(realtime.MinChunkSamples, len(cur)-preRoll)
				seq = s.queueChunk(seq, slices.Clip(cur[:at]), frames, false, framesEvery)
				cur, frames, nextFrameAt = append(make([]float32, 0, chunkSamples), cur[at:]...), nil, framesEvery
			}
			wasRising = rising
			holdOpen = rising && playing
			if changed && speaking && playing {
				s.log.Info("agent: barge-in: the user speaks over the reply")
				s.bus.publish(Lifecycle{Kind: "barge_in", At: s.now()})
				s.Interrupt()
			}
		}
		cur = append(cur, got...)
		if framesEvery > 0 && len(cur) >= nextFrameAt {
			if s.cameraOn.Load() {
				if f, ok := s.frames.Latest(); ok {
					frames = append(frames, f)
				}
			}
			nextFrameAt += framesEvery
		}
		// While speech may be starting over the model's speech, the chunk holding its onset
		// stays open (for at most the minimum speech) so that it, not a chunk begun after the
		// onset, carries the force_listen.
		cut := len(cur) >= chunkSamples && !holdOpen
		force := false
		if s.interrupt.Load() && len(cur) >= realtime.MinChunkSamples {
			cut, force = true, true
			s.interrupt.Store(false)
		}
		if !cut {
			continue
		}
		seq = s.queueChunk(seq, cur, frames, force, framesEvery)
		cur = make([]float32, 0, chunkSamples)
		frames = nil
		nextFrameAt = framesEvery
	}
}

// queueChunk puts the captured audio (and frames) on the backlog as chunk seq+1 and returns
// the new sequence number.
func (s *Supervisor) queueChunk(seq uint64, cur []float32, frames [][]byte, force bool, framesEvery int) uint64 {
	seq++
	c := chunk{seq: seq, audio: cur, frames: frames, forceListen: force, captured: s.now()}
	if len(c.frames) == 0 && framesEvery > 0 && s.cameraOn.Load() {
		if f, ok := s.frames.Latest(); ok { // interrupt cut before the first frame point
			c.frames = [][]byte{f}
		}
	}
	if dropped := s.backlog.push(c); dropped > 0 {
		s.bus.publish(Lifecycle{Kind: "audio_dropped", At: s.now(),
			Reason: fmt.Sprintf("link behind: dropped %d oldest chunk(s)", dropped)})
	}
	return seq
}

// sendLoop feeds the active session with queued chunks, oldest first, at the pace they are
// captured. A chunk that cannot be sent goes back to the front of the queue.
func (s *Supervisor) sendLoop(ctx context.Context) {
	for {
		c, ok := s.backlog.pop(ctx)
		if !ok {
			return
		}
		s.sendMu.Lock()
		l := s.active.Load()
		if l == nil {
			s.sendMu.Unlock()
			s.backlog.pushFront(c)
			if !s.waitActive(ctx) {
				return
			}
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, sendTimeout)
		err := l.sess.Send(sctx, realtime.Chunk{Audio: c.audio, Frames: c.frames, ForceListen: c.forceListen})
		cancel()
		s.sendMu.Unlock()
		switch {
		case err == nil:
			s.sent.Add(1)
			if n := len(c.frames); n > 0 {
				s.frameSent(c.frames[n-1])
			}
		case ctx.Err() != nil:
			return
		case errors.Is(err, realtime.ErrClosed):
			// The session ended under us: keep the chunk for the next one.
			s.active.CompareAndSwap(l, nil)
			s.backlog.pushFront(c)
		case errors.Is(err, context.DeadlineExceeded):
			// The link is behind: keep the chunk; the backlog bound drops the oldest if need be.
			s.backlog.pushFront(c)
		default:
			s.log.Warn("agent: chunk not sent", "err", err)
		}
	}
}

// waitActive waits until a session is active (polling is fine: it only runs while disconnected).
func (s *Supervisor) waitActive(ctx context.Context) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.active.Load() == nil {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// backoff returns the wait before attempt n (1-based): full jitter on an exponential ceiling.
func (s *Supervisor) backoff(n int) time.Duration {
	ceil := float64(s.cfg.BackoffMin) * math.Pow(2, float64(n-1))
	if ceil > float64(s.cfg.BackoffMax) {
		ceil = float64(s.cfg.BackoffMax)
	}
	return time.Duration(s.rng.Float64() * ceil)
}

// carryOver builds the next session's instructions: the base prompt plus a bounded summary of the
// conversation so far.
func carryOver(base string, history []Utterance, maxChars int) string {
	if len(history) == 0 || maxChars <= 0 {
		return base
	}
	var lines []string
	total := 0
	for i := len(history) - 1; i >= 0; i-- {
		u := history[i]
		if u.Partial || strings.TrimSpace(u.Text) == "" {
			continue
		}
		who := "Assistant"
		if u.Role == "user" {
			who = "User"
		}
		line := who + ": " + strings.TrimSpace(u.Text)
		if total+len(line) > maxChars {
			if total == 0 {
				line = line[:maxChars]
				lines = append(lines, line)
			}
			break
		}
		lines = append(lines, line)
		total += len(line) + 1
	}
	for i, j := 0, len(lines)-1; i < j; i, j = i+1, j-1 {
		lines[i], lines[j] = lines[j], lines[i]
	}
	return strings.TrimSpace(base + "\n\nThe conversation so far (continue it; do not greet again):\n" + strings.Join(lines, "\n"))
}
