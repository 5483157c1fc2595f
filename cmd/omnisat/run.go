package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
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
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "omnisat run: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(env.stderr, "omnisat run: "+format+"\n", a...)
		return code
	}
	cfg, err := loadConfigWith(*path, *simulator, *stateDir)
	if err != nil {
		return fail(exitConfig, "%v", err)
	}
	log := newLogger(env.stderr, cfg.Log)

	if *simulator {
		sim, err := realtimetest.Listen("127.0.0.1:0", realtimetest.Options{Dialect: realtimetest.Dialect(cfg.Server.Dialect), Workers: 2,
			Logger: log.With("component", "simulator")})
		if err != nil {
			return fail(exitFailure, "%v", err)
		}
		defer sim.Close()
		cfg.Server.URL = sim.URL()
		if cfg.Server.ChatURL != "" {
			cfg.Server.ChatURL = sim.URL()
		}
		fmt.Fprintf(env.stdout, "built-in simulator (%s dialect) at %s\n", cfg.Server.Dialect, sim.URL())
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	report := &deviceReporter{}
	parts, err := buildParts(ctx, cfg, report, log)
	if err != nil {
		return fail(exitConfig, "%v", err)
	}
	defer parts.close()

	sup, err := agent.New(agent.Options{Config: cfg.Session, Server: parts.server, ChatServer: parts.chat,
		Audio: parts.audio, Frames: parts.frames, Speaker: parts.speaker, Logger: log.With("component", "agent")})
	if err != nil {
		return fail(exitConfig, "%v", err)
	}
	report.attach(sup)

	// The MQTT bridge subscribes to the agent's events when built: before the agent runs.
	var bridge *mqtt.Bridge
	if cfg.MQTT.Enabled() {
		bridge, err = mqtt.New(cfg.MQTT, cfg.DeviceID, version, sup, log.With("component", "mqtt"))
		if err != nil {
			return fail(exitConfig, "%v", err)
		}
	}

	var wg sync.WaitGroup
	ctl, err := control.Listen(cfg.socketPath(), sup, log.With("component", "control"))
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); ctl.Serve(ctx) }()

	if bridge != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := bridge.Run(ctx); err != nil && ctx.Err() == nil {
				log.Error("mqtt bridge stopped", "err", err)
			}
		}()
	}

	events, unsubscribe := sup.Subscribe(4096)
	wg.Add(1)
	go func() { defer wg.Done(); printEvents(env.stdout, events) }()

	fmt.Fprintf(env.stdout, "omnisat %s: %s, %s/%s at %s; control socket %s\n", version, parts.describe,
		cfg.Server.Dialect, cfg.Server.Mode, cfg.Server.URL, cfg.socketPath())
	err = sup.Run(ctx)
	unsubscribe()
	cancel()
	wg.Wait()
	switch {
	case errors.Is(err, io.EOF):
		fmt.Fprintln(env.stdout, "audio input ended; stopped")
	case err != nil:
		return fail(exitFailure, "%v", err)
	}
	return exitOK
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

func newLogger(w io.Writer, c logConfig) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// printEvents writes the agent's events as readable lines: state changes, the assistant's text
// as it streams, transcripts, lifecycle events and answers.
func printEvents(w io.Writer, events <-chan agent.Event) {
	streaming := false
	line := func(format string, a ...any) {
		if streaming {
			fmt.Fprintln(w)
			streaming = false
		}
		fmt.Fprintf(w, time.Now().Format("15:04:05")+" "+format+"\n", a...)
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
				fmt.Fprint(w, time.Now().Format("15:04:05")+" assistant: ")
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
