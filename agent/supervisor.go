package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/omnisat/omnisat/realtime"
)

const (
	inputRate  = realtime.InputSampleRate
	outputRate = realtime.OutputSampleRate
	// captureStep is the grain of voice detection, interrupts and frame sampling.
	captureStep = inputRate / 50 // 20 ms
	// readBlock is the most audio one Read asks for: a device delivers what it has (one period,
	// one wake-up), and a source that waits for the whole buffer is not waited on for longer
	// than this (interrupts and barge-in are cut at step grain either way).
	readBlock = inputRate / 10 // 100 ms
	// patientBlock is the most a patient read asks for (PatientSource): what a microphone
	// gathers at once (a second: one block to a 1 s chunk, one wake-up of the process and one
	// of the echo canceller for each), and a chunk's end cuts it shorter.
	patientBlock = inputRate
	// sendTimeout bounds one Send while the sender holds sendMu.
	sendTimeout = time.Second
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
	// AudioHold is the most audio the source may hold captured and not yet returned by Read
	// (the device's input buffer: audio.input_latency). Mute and stop are judged by when a
	// sample may have been captured, not by when it was read; 0 means 100 ms.
	AudioHold time.Duration
	Frames    FrameSource // nil: no camera
	Speaker   Speaker
	Dial      DialFunc // default realtime.Dial
	Chat      ChatFunc // default realtime.Chat
	Logger    *slog.Logger
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
	// chunkBufs carries the audio buffers of chunks that are done with back to capture.
	chunkBufs *chunkBuffers
	active    atomic.Pointer[live] // the session the sender feeds
	// sendMu is held by the sender from reading active to the end of Send, so switching sessions
	// never races a chunk: every chunk goes to exactly one session, before that session's close.
	sendMu sync.Mutex
	cmds   chan func(*loop)
	bus    *bus

	// activeCh wakes the sender when a session becomes active.
	activeCh chan struct{}
	pacer    *pacer // used by the sender only
	lag      lagLimit
	captured atomic.Int64 // samples read from the source
	// timerWakes counts the state loop's timer firing (a deadline came): with nothing due, none.
	timerWakes atomic.Uint64
	// hurryRead cuts the patient read in flight short (nil: none is): the speaker has something
	// to play, and barge-in looks at every buffer from then on (see hurryCapture).
	hurryRead atomic.Pointer[context.CancelFunc]

	muted     atomic.Bool
	cameraOn  atomic.Bool
	interrupt atomic.Bool  // capture cuts the current chunk short and marks it force_listen
	speech    atomic.Bool  // local voice activity right now
	volume    atomic.Int32 // the volume last set, whatever the sink
	held      atomic.Bool  // a stop command holds the session off (policy always)
	settings  *settingsStore
	defaults  Defaults
	lastFrame atomic.Pointer[FrameSent] // the newest frame a chunk carried to the server
	// epoch counts stops: audio captured before a stop is never sent (privacy). muteEpoch counts
	// mutes: audio not yet sent when the microphone is muted goes out as silence.
	epoch, muteEpoch atomic.Uint64
	// epochAt and unmutedAt are when the epoch last changed and the microphone was last unmuted
	// (since born): a block read after either may hold samples captured before it, up to
	// audioHold and the block's own length.
	born               time.Time
	audioHold          time.Duration
	epochAt, unmutedAt atomic.Int64
	// dropping is set while audio is being dropped: the first drop of an episode is announced,
	// the rest only counted.
	dropping atomic.Bool
	// The server's flow control (OpenVoice): audio it dropped (nanoseconds of audio) and the
	// times it asked us to slow down. Counted, and said once per episode (see serverFlow).
	serverDropped, rateLimits atomic.Int64
	// delivered counts the chunks of sessions already left behind that reached the server.
	delivered atomic.Uint64
	// Traffic of sessions already left behind; the active one's is added in Status.
	bytesUp, bytesDown atomic.Uint64
	speechCh           chan bool     // capture → loop: speech started/stopped
	playCh             chan struct{} // playback changed outside the loop (say): re-check the state

	statusMu sync.Mutex
	status   Status

	instrMu      sync.Mutex
	instructions string // base system prompt; changeable live

	running atomic.Bool
}

// New checks the options and builds a supervisor; nothing runs until Run.
func New(o Options) (*Supervisor, error) {
	o.Config = o.Config.WithDefaults()
	if err := errors.Join(o.Config.check(), o.Config.CheckContext(o.Server.Init.Instructions)); err != nil {
		return nil, err
	}
	return newSupervisor(o)
}

// newSupervisor builds a supervisor from checked options (tests may skip the checks).
func newSupervisor(o Options) (*Supervisor, error) {
	o.Config = o.Config.WithDefaults()
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
	if o.Server.Buffers == nil {
		o.Server.Buffers = realtime.NewBuffers() // one set of message buffers for this agent's sessions
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
		activeCh:     make(chan struct{}, 1),
		pacer:        &pacer{rate: o.Config.CatchUpRate},
		lag:          lagLimit{maxLag: o.Config.MaxLag, gain: o.Config.CatchUpRate - 1},
		speechCh:     make(chan bool, 4),
		playCh:       make(chan struct{}, 1),
		instructions: o.Server.Init.Instructions,
		born:         time.Now(),
		audioHold:    o.AudioHold,
	}
	if s.audioHold <= 0 {
		s.audioHold = samplesToDuration(readBlock)
	}
	s.backlog = newBacklog(durationToSamples(s.idleBuffer(false)))
	s.chunkBufs = newChunkBuffers(chunkBufferSize(s.chunkSamples(), *s.cfg.BargeIn.Enabled, s.cfg.BargeIn.MinSpeech))
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
	s.setMuted(muted)
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
	st.ChunksSent = s.delivered.Load()
	_, dc, ds := s.backlog.stats()
	st.ChunksDropped = dc
	st.SecondsDropped = float64(ds) / inputRate
	st.ServerDroppedS = time.Duration(s.serverDropped.Load()).Seconds()
	st.RateLimits = s.rateLimits.Load()
	st.BytesUp, st.BytesDown = s.bytesUp.Load(), s.bytesDown.Load()
	if l := s.active.Load(); l != nil {
		st.SessionAge = s.now().Sub(l.started).Seconds()
		t := l.sess.Stats()
		st.BytesUp += t.BytesSent
		st.BytesDown += t.BytesReceived
		st.ChunksSent += t.ChunksDelivered
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

	l := newLoop(s, ctx)
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
	s.setMuted(on)
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

// queueReply hands reply audio to the speaker and ends a patient read in flight: every way reply
// audio is queued goes through here.
func (s *Supervisor) queueReply(samples []float32) {
	s.speaker.Play(samples)
	s.hurryCapture()
}

// hurryCapture ends a patient read in flight (see captureLoop): reply audio was queued, and from
// now on barge-in looks at every device buffer. Without it the read would still wait for the
// rest of its block, up to a second into the reply before the user could talk over it.
func (s *Supervisor) hurryCapture() {
	if h := s.hurryRead.Load(); h != nil {
		(*h)()
	}
}

// newEpoch marks a stop or a start: nothing captured before it is sent.
func (s *Supervisor) newEpoch() {
	s.epochAt.Store(int64(time.Since(s.born)) + 1) // never 0, which means never
	s.epoch.Add(1)
}

// setMuted switches the microphone off or on. Audio captured before a mute and not yet handed
// to the connection goes out as silence too: pressing mute means the last words were not for
// the server either.
func (s *Supervisor) setMuted(on bool) {
	if on && !s.muted.Load() {
		s.muteEpoch.Add(1)
	}
	if !on && s.muted.Load() {
		s.unmutedAt.Store(int64(time.Since(s.born)) + 1)
	}
	s.muted.Store(on)
}

// idleBuffer is the audio kept while no session is wanted: only policy voice's pre-roll, and
// nothing after an explicit stop (what is heard while switched off never leaves the device).
func (s *Supervisor) idleBuffer(stopped bool) time.Duration {
	if s.cfg.Policy == PolicyVoice && !stopped {
		return s.cfg.PreRoll
	}
	return 0
}

// closeBudget bounds the polite goodbye to a session, and each wait before it.
func (s *Supervisor) closeBudget() time.Duration {
	if s.server.CloseTimeout > 0 {
		return s.server.CloseTimeout + time.Second
	}
	return 3 * time.Second
}

// gapBuffer is the audio kept while a wanted session is not there (connecting, queued,
// reconnecting): it is sent first when one is.
func (s *Supervisor) gapBuffer() time.Duration { return s.cfg.ReconnectBuffer }

// liveBuffer bounds the queue while a session is live: what a gap left to catch up, or what a
// link that fell behind may still send (max_lag), plus the chunk being handed over. Audio is
// dropped by age when it is sent; this only bounds memory.
func (s *Supervisor) liveBuffer() time.Duration {
	return max(s.cfg.MaxLag, s.cfg.ReconnectBuffer) + s.cfg.Chunk
}

// play queues reply audio from outside the loop and has the loop follow the playback state.
func (s *Supervisor) play(samples []float32) {
	s.queueReply(samples)
	select {
	case s.playCh <- struct{}{}:
	default:
	}
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

// state is the current state, without building a whole Status.
func (s *Supervisor) state() State {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	return s.status.State
}

// editStatus edits status fields other than the state without publishing: the next status
// read or published carries them.
func (s *Supervisor) editStatus(f func(*Status)) {
	s.statusMu.Lock()
	f(&s.status)
	s.statusMu.Unlock()
}

// updateStatus edits status fields other than the state and publishes the result.
func (s *Supervisor) updateStatus(f func(*Status)) {
	s.statusMu.Lock()
	f(&s.status)
	s.statusMu.Unlock()
	s.bus.publish(StateChanged{Status: s.Status()})
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
