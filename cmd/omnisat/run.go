package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/agent/control"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/devices/audio"
	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/mqtt"
	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

func runRun(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet("run", env, "")
	path := fs.String("c", defaultConfigPath, "configuration file")
	simulator := fs.Bool("simulator", false, "start the built-in simulator and talk to it instead of server.url")
	stateDir := fs.String("state-dir", "", "override state_dir (control socket, outbox)")
	logFormat := fs.String("log-format", "", "text or json (overrides log.format)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "omnisat run: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *logFormat != "" && *logFormat != "text" && *logFormat != "json" {
		fmt.Fprintf(env.stderr, "omnisat run: --log-format: %q is not one of text, json\n", *logFormat)
		return exitUsage
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(env.stderr, "omnisat run: "+format+"\n", a...)
		return code
	}
	load := func() (*fileConfig, error) {
		cfg, err := loadConfig(*path, loadOptions{simulator: *simulator, stateDir: *stateDir, getenv: env.getenv})
		if err == nil && *logFormat != "" {
			cfg.Log.Format = *logFormat
		}
		return cfg, err
	}
	cfg, err := load()
	if err != nil {
		return fail(exitConfig, "%v", err)
	}
	level := new(slog.LevelVar)
	log := newLogger(env.stderr, cfg.Log, level, env.journal)
	for _, w := range cfg.warnings {
		log.Warn("config: " + w)
	}

	var sim *realtimetest.Server
	if *simulator {
		sim, err = realtimetest.Listen("127.0.0.1:0", realtimetest.Options{Dialect: realtimetest.Dialect(cfg.Server.Dialect), Workers: 2,
			Logger: log.With("component", "simulator")})
		if err != nil {
			return fail(exitFailure, "%v", err)
		}
		defer sim.Close()
		useSimulator(cfg, sim)
		fmt.Fprintf(env.stdout, "built-in simulator (%s dialect) at %s\n", cfg.Server.Dialect, sim.URL())
	}

	hangup := env.hangup
	if hangup == nil {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGHUP)
		defer signal.Stop(c)
		hangup = c
	}

	inst, code, err := startInstance(ctx, cfg, env, log)
	if err != nil {
		return fail(code, "%v", err)
	}
	for {
		select {
		case <-ctx.Done():
			inst.stop()
			return exitOK
		case <-inst.done:
			inst.stop()
			switch err := inst.runErr; {
			case errors.Is(err, io.EOF):
				fmt.Fprintln(env.stdout, "audio input ended; stopped")
			case err != nil:
				return fail(exitFailure, "%v", err)
			}
			return exitOK
		case <-hangup:
			next, err := load()
			if err != nil {
				log.Error("config: reload refused; the running configuration stays", "file", *path, "err", err)
				inst.sup.Announce("config_rejected", err.Error())
				continue
			}
			if sim != nil {
				useSimulator(next, sim)
			}
			for _, w := range next.warnings {
				log.Warn("config: " + w)
			}
			plan := planReload(inst.cfg, next)
			if plan.empty() {
				log.Info("config: reloaded; nothing changed", "file", *path)
				continue
			}
			log.Info("config: reloaded", "file", *path, "live", plan.live, "restart", plan.restart)
			if plan.restartAll {
				inst.sup.Announce("config_reloaded", "restarting for "+strings.Join(plan.restart, ", "))
				inst.stop()
				log = newLogger(env.stderr, next.Log, level, env.journal) // log.format may have changed
				if inst, code, err = startInstance(ctx, next, env, log); err != nil {
					return fail(code, "after reload: %v", err)
				}
				continue
			}
			inst.apply(ctx, plan, next, level)
			inst.sup.Announce("config_reloaded", plan.String())
		}
	}
}

// useSimulator points the server settings at the built-in simulator.
func useSimulator(cfg *fileConfig, sim *realtimetest.Server) {
	cfg.Server.URL = sim.URL()
	if cfg.Server.ChatURL != "" {
		cfg.Server.ChatURL = sim.URL()
	}
}

// instance is one running agent with its devices, control socket, MQTT bridge and console
// printer, built from one configuration. A reload that needs new devices or a new agent stops
// it and starts another.
type instance struct {
	cfg    *fileConfig
	log    *slog.Logger
	parts  *parts
	sup    *agent.Supervisor
	cancel context.CancelFunc
	done   chan struct{} // closed when the agent's Run returns, with runErr set
	runErr error
	runs   sync.WaitGroup
	bridge *bridgeRun
	unsub  func()
}

// bridgeRun is a running MQTT bridge that can be replaced on its own.
type bridgeRun struct {
	b      *mqtt.Bridge
	cancel context.CancelFunc
	done   chan struct{}
}

func startInstance(parent context.Context, cfg *fileConfig, env *cliEnv, log *slog.Logger) (*instance, int, error) {
	ctx, cancel := context.WithCancel(parent)
	in := &instance{cfg: cfg, log: log, cancel: cancel, done: make(chan struct{})}
	report := &deviceReporter{}
	parts, err := buildParts(ctx, cfg, report, log)
	if err != nil {
		cancel()
		return nil, exitConfig, err
	}
	in.parts = parts
	sup, err := agent.New(agent.Options{Config: cfg.Session, Server: parts.server, ChatServer: parts.chat,
		Audio: parts.audio, Frames: parts.frames, Speaker: parts.speaker, Logger: log.With("component", "agent"),
		Volume: cfg.Audio.Volume, SettingsFile: filepath.Join(cfg.StateDir, settingsFile),
		Voices: voicesIn(filepath.Join(cfg.StateDir, voicesDir))})
	if err != nil {
		cancel()
		parts.close()
		return nil, exitConfig, err
	}
	in.sup = sup
	report.attach(sup)

	// The MQTT bridge subscribes to the agent's events when built: before the agent runs.
	if cfg.MQTT.Enabled() {
		if in.bridge, err = in.startBridge(ctx, cfg); err != nil {
			cancel()
			parts.close()
			return nil, exitConfig, err
		}
	}
	ctl, err := control.Listen(cfg.socketPath(), sup, log.With("component", "control"))
	if err != nil {
		in.stopBridge()
		cancel()
		parts.close()
		return nil, exitFailure, err
	}
	in.runs.Add(1)
	go func() { defer in.runs.Done(); ctl.Serve(ctx) }()

	events, unsubscribe := sup.Subscribe(4096)
	in.unsub = unsubscribe
	in.runs.Add(1)
	go func() { defer in.runs.Done(); printEvents(env.stdout, events, !env.journal) }()

	fmt.Fprintf(env.stdout, "omnisat %s: %s, %s/%s at %s; control socket %s\n", version, parts.describe,
		cfg.Server.Dialect, cfg.Server.Mode, cfg.Server.URL, cfg.socketPath())
	go func() { in.runErr = sup.Run(ctx); close(in.done) }()
	return in, exitOK, nil
}

func (in *instance) startBridge(parent context.Context, cfg *fileConfig) (*bridgeRun, error) {
	b, err := mqtt.New(cfg.MQTT, cfg.DeviceID, version, in.sup, in.log.With("component", "mqtt"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(parent)
	br := &bridgeRun{b: b, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(br.done)
		if err := b.Run(ctx); err != nil && ctx.Err() == nil {
			in.log.Error("mqtt bridge stopped", "err", err)
		}
	}()
	return br, nil
}

func (in *instance) stopBridge() {
	if in.bridge != nil {
		in.bridge.cancel()
		<-in.bridge.done
		in.bridge = nil
	}
}

// stop ends the agent (it says goodbye to the server), then the bridge (which still publishes
// what the agent said last), the control socket and the devices.
func (in *instance) stop() {
	in.cancel()
	select {
	case <-in.done:
	case <-time.After(10 * time.Second):
		in.log.Warn("agent did not stop within 10s")
	}
	in.stopBridge()
	in.unsub()
	in.runs.Wait()
	in.parts.close()
}

// apply makes the changes that need no new agent: live values, and a new MQTT bridge.
func (in *instance) apply(ctx context.Context, p reloadPlan, next *fileConfig, level *slog.LevelVar) {
	old := in.cfg
	in.cfg = next
	level.Set(logLevel(next.Log.Level))
	if *next.Audio.Volume != *old.Audio.Volume || next.Server.Instructions != old.Server.Instructions {
		// The file's new values apply, and replace what a command had set for them.
		d := in.sup.Defaults()
		d.Volume, d.Instructions = *next.Audio.Volume, next.Server.Instructions
		in.sup.SetDefaults(d)
		if next.Server.Instructions != old.Server.Instructions && !in.sup.Status().Held {
			// The prompt is part of a session's set-up: a new session carries it.
			in.sup.Restart()
		}
	}
	if p.restartMQTT {
		in.stopBridge()
		if next.MQTT.Enabled() {
			br, err := in.startBridge(ctx, next)
			if err != nil {
				in.log.Error("config: MQTT not restarted", "err", err)
				return
			}
			in.bridge = br
		}
		return
	}
	if in.bridge != nil && next.MQTT.StatsInterval != old.MQTT.StatsInterval {
		in.bridge.b.SetStatsInterval(next.MQTT.StatsInterval)
	}
}

// parts are the pieces the agent is built from, chosen by the configuration.
type parts struct {
	server   realtime.Config
	chat     *realtime.Config
	audio    agent.AudioSource
	frames   agent.FrameSource
	speaker  agent.Speaker
	closers  []func() error
	describe string
}

func (p *parts) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

func buildParts(ctx context.Context, cfg *fileConfig, report *deviceReporter, log *slog.Logger) (*parts, error) {
	p := &parts{server: cfg.Server.Config()}
	p.server.Logger = log.With("component", "realtime")
	token, err := readSecret(cfg.Server.Token, cfg.Server.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("server.token_file: %w", err)
	}
	p.server.Token = token
	for _, ref := range []struct {
		path string
		dst  *[]float32
	}{{cfg.Server.RefAudio, &p.server.Init.RefAudio}, {cfg.Server.TTSRefAudio, &p.server.Init.TTSRefAudio}} {
		if ref.path == "" {
			continue
		}
		samples, err := readVoice(ref.path)
		if err != nil {
			return nil, err
		}
		*ref.dst = samples
	}
	if cfg.Server.ChatURL != "" {
		c := p.server
		c.URL = cfg.Server.ChatURL
		c.Dialect = realtime.DialectCurrent
		p.chat = &c
	}

	var desc []string
	// What the speaker plays reaches the microphone's echo canceller through echo.
	echo := audio.NewEchoReference()
	mic, micDesc, closeMic, err := openMicrophone(ctx, cfg.Audio, echo, report, log)
	if err != nil {
		return nil, err
	}
	p.audio = mic
	if closeMic != nil {
		p.closers = append(p.closers, closeMic)
	}
	spk, spkDesc, closeSpk, err := openSpeaker(ctx, cfg.Audio, echo, report, log)
	if err != nil {
		p.close()
		return nil, err
	}
	p.speaker = spk
	p.closers = append(p.closers, closeSpk)
	desc = append(desc, micDesc, spkDesc)
	frames, camDesc, closeCam, err := openCamera(ctx, cfg.Camera, report, log)
	if err != nil {
		p.close()
		return nil, err
	}
	if frames != nil {
		p.frames = frames
	}
	if closeCam != nil {
		p.closers = append(p.closers, closeCam)
	}
	desc = append(desc, camDesc)
	p.describe = strings.Join(desc, ", ")
	return p, nil
}

// settingsFile (in the state directory) keeps the settings commands change across restarts.
const settingsFile = "settings.json"

// voicesDir (in the state directory) holds the named reference voices of say --voice NAME
// (MiniCPM-o): NAME.wav.
const voicesDir = "voices"

// voicesIn resolves a voice name to <dir>/<name>.wav, read as 16 kHz mono. Names are plain
// ([A-Za-z0-9_-]), so a command can read nothing outside dir.
func voicesIn(dir string) func(string) ([]float32, error) {
	return func(name string) ([]float32, error) {
		if !validVoiceName(name) {
			return nil, fmt.Errorf("%q is not a voice name (letters, digits, _ and -, at most 64)", name)
		}
		return readVoice(filepath.Join(dir, name+".wav"))
	}
}

func validVoiceName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// readVoice reads a reference voice WAV as 16 kHz mono.
func readVoice(path string) ([]float32, error) {
	a, err := wav.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reference voice: %w", err)
	}
	samples, err := devices.Resample(a.Mono(), a.Rate, realtime.InputSampleRate)
	if err != nil {
		return nil, fmt.Errorf("reference voice %s: %w", path, err)
	}
	return samples, nil
}

// readSecret returns value, or the trimmed content of file when value is empty.
func readSecret(value, file string) (string, error) {
	if value != "" || file == "" {
		return value, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// newLogger writes c.Format lines to w at a level a reload can change. In the journal (journal
// true) each line starts with its syslog priority (<3> for errors ...), so journalctl can filter
// and colour by level, and text lines carry no time of their own: the journal stamps each.
func newLogger(w io.Writer, c logConfig, level *slog.LevelVar, journal bool) *slog.Logger {
	level.Set(logLevel(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	var out *journalOut
	if journal {
		out = &journalOut{w: w}
		w = out
		if c.Format != "json" {
			opts.ReplaceAttr = dropTime
		}
	}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	if out != nil {
		h = &journalHandler{inner: h, out: out}
	}
	return slog.New(h)
}

func logLevel(name string) slog.Level {
	var level slog.Level
	_ = level.UnmarshalText([]byte(name)) // validated: debug, info, warn, error
	return level
}

// printEvents writes the agent's events as readable lines: state changes, the assistant's text
// as it streams, transcripts, lifecycle events and answers. Lines start with the time when
// stamp is set (not in the journal, which stamps them itself).
func printEvents(w io.Writer, events <-chan agent.Event, stamp bool) {
	streaming := false
	now := func() string {
		if stamp {
			return time.Now().Format("15:04:05") + " "
		}
		return ""
	}
	line := func(format string, a ...any) {
		if streaming {
			fmt.Fprintln(w)
			streaming = false
		}
		fmt.Fprintf(w, now()+format+"\n", a...)
	}
	last := agent.State("")
	for ev := range events {
		switch ev := ev.(type) {
		case agent.StateChanged:
			st := ev.Status
			if st.State == last && st.State != agent.StateQueued {
				continue
			}
			last = st.State
			detail := st.Detail
			if st.State == agent.StateListening && st.SessionID != "" {
				detail = "session " + st.SessionID
			}
			if st.State == agent.StateReconnecting && !st.NextAttempt.IsZero() {
				detail += fmt.Sprintf(" (next attempt in %v)", time.Until(st.NextAttempt).Round(time.Millisecond))
			}
			line("state %s %s", st.State, detail)
		case agent.TextDelta:
			if !streaming {
				fmt.Fprint(w, now()+"assistant: ")
				streaming = true
			}
			fmt.Fprint(w, ev.Text)
		case agent.Utterance:
			if ev.Role == "assistant" {
				if streaming {
					fmt.Fprintln(w)
					streaming = false
				}
				continue
			}
			if !ev.Partial {
				line("user: %s", ev.Text)
			}
		case agent.Lifecycle:
			line("%s %s %s", strings.ReplaceAll(ev.Kind, "_", " "), ev.SessionID, ev.Reason)
		case agent.Answer:
			if ev.Error != "" {
				line("answer %s failed: %s", ev.ID, ev.Error)
			} else {
				line("answer %s: %s", ev.ID, ev.Text)
			}
		}
	}
	if streaming {
		fmt.Fprintln(w)
	}
}
