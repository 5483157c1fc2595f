// Package satellite is the running satellite as one value: the devices, the agent, the MQTT
// bridge, the control socket and the console printer, built from one Config (as Tailscale's
// tsd.System holds a tailscaled). cmd/omnisat reads the file and says how each part is opened;
// this package owns their lifetimes, and a reload as a transaction.
//
// A reload builds the next System completely before the running one is touched: devices whose
// configuration did not change are handed over (never opened twice), the others are opened
// beside the running ones, a new control socket is bound, MQTT's files are read. Only when all
// of that worked does the swap happen: the old agent says goodbye to the server, its bridge
// publishes what it said last, the new agent starts. On any failure the running System goes on
// untouched and Reload says why.
//
// A device that only one process can hold at a time (an ALSA hw device) cannot be opened beside
// itself: when a changed part fails to open and names a device the running part holds, the
// running System is stopped to release it and the new one started; if that fails too, the old
// configuration is started again (a new session, same settings).
package satellite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/agent/control"
	"github.com/omnisat/omnisat/mqtt"
	"github.com/omnisat/omnisat/realtime"
)

// Config is what one System is built from.
type Config struct {
	// Audio opens the microphone and the speaker (together: the speaker feeds the microphone's
	// echo canceller), Camera the camera (a nil Device: none).
	Audio  Part[Audio]
	Camera Part[agent.FrameSource]
	// Agent is the agent's configuration; the System fills in the devices and the logger.
	// Server.Init.Instructions and Volume change live: the running agent (and, for the volume,
	// its session) goes on.
	Agent agent.Options
	// MQTT is the bridge's configuration; none runs when it has no broker. StatsInterval
	// changes live.
	MQTT MQTT
	// ControlSocket is the control socket's path.
	ControlSocket string
	// Console receives the agent's events as lines (each starting with the time when Stamp).
	Console io.Writer
	Stamp   bool
	// Banner is the line printed to Console when an agent starts, given the devices' descriptions.
	Banner func(devices string) string
	Log    *slog.Logger
}

// Part is a set of devices the configuration names.
type Part[T any] struct {
	// Key is the part's configuration: a reload whose Key equals the running part's
	// (reflect.DeepEqual) hands the open devices over.
	Key any
	// Holds names the devices the part holds (e.g. "audio:USB Audio (hw:1,0)"), so that a
	// reload knows when a failed open may be the running part holding the same device.
	Holds []string
	// Reports names the devices it reports the health of (microphone, speaker, camera).
	Reports []string
	// Open opens the devices; ctx is their lifetime, cancelled when they are closed.
	Open func(ctx context.Context) (Opened[T], error)
}

// Opened is an open part.
type Opened[T any] struct {
	Device   T
	Describe string
	// Close releases the devices; nil when there is nothing to release.
	Close func() error
	// Attach sends the devices' health reports to an agent (each new agent that uses them).
	Attach func(*agent.Supervisor)
}

// Audio is the microphone and the speaker.
type Audio struct {
	Microphone agent.AudioSource
	Speaker    agent.Speaker
}

// MQTT is the bridge's configuration.
type MQTT struct {
	Config   mqtt.Config
	DeviceID string
	Version  string
}

// agentStopWait bounds how long a stopping agent may take to say goodbye to the server.
const agentStopWait = 10 * time.Second

// System is the running satellite built from one Config.
type System struct {
	cfg    Config
	log    *slog.Logger
	audio  *openPart[Audio]
	camera *openPart[agent.FrameSource]
	ctl    *controlRun
	agent  *agentRun
	bridge *bridgeRun // nil: no MQTT
}

// Start opens everything cfg names and starts it. On an error nothing is left open or running.
func Start(ctx context.Context, cfg Config) (*System, error) {
	next, err := prepare(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	if err := next.commit(ctx, nil); err != nil {
		next.closeExcept(nil)
		return nil, err
	}
	return next, nil
}

// Reload makes cfg the running configuration. It returns the System that runs afterwards and,
// when that is not one built from cfg, why: a part that cannot be opened leaves s running
// untouched (same session); see the package comment for a device only one process can hold.
// A nil System means nothing could be started at all (the old configuration included).
func (s *System) Reload(ctx context.Context, cfg Config) (*System, error) {
	next, err := prepare(ctx, cfg, s)
	var busy *heldError
	switch {
	case err == nil:
		if err := next.commit(ctx, s); err != nil {
			return s.fallBack(ctx, next, err)
		}
		return next, nil
	case !errors.As(err, &busy):
		return s, err
	}
	s.log.Warn("reload: a device the running configuration holds must be released first; restarting",
		"device", busy.device, "err", busy.err)
	old := s.cfg
	s.Stop()
	next, err = Start(ctx, cfg)
	if err == nil {
		return next, nil
	}
	back, backErr := Start(ctx, old)
	if backErr != nil {
		return nil, fmt.Errorf("%w; the previous configuration did not start again either: %v", err, backErr)
	}
	return back, err
}

// Done is closed when the agent has stopped by itself or after Stop; Err says why.
func (s *System) Done() <-chan struct{} { return s.agent.done }

// Err is the agent's end: nil, io.EOF (a file microphone ended), or what stopped it.
func (s *System) Err() error {
	<-s.agent.done
	return s.agent.err
}

// Announce publishes a lifecycle event (config_rejected, ...) to every subscriber.
func (s *System) Announce(kind, reason string) { s.agent.sup.Announce(kind, reason) }

// Agent is the running agent.
func (s *System) Agent() *agent.Supervisor { return s.agent.sup }

// Stop ends the agent (it says goodbye to the server), then the bridge (which still publishes
// what the agent said last), the control socket and the devices.
func (s *System) Stop() {
	s.stopAgent()
	s.stopBridge()
	s.closeExcept(nil)
}

// prepare opens and binds what cfg needs that prev does not already hold; prev is not touched.
func prepare(ctx context.Context, cfg Config, prev *System) (*System, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	next := &System{cfg: cfg, log: cfg.Log}
	var prevAudio *openPart[Audio]
	var prevCamera *openPart[agent.FrameSource]
	var prevCtl *controlRun
	if prev != nil {
		prevAudio, prevCamera, prevCtl = prev.audio, prev.camera, prev.ctl
	}
	var err error
	if next.audio, err = openOrTake(ctx, cfg.Audio, prevAudio); err != nil {
		return nil, err
	}
	if next.camera, err = openOrTake(ctx, cfg.Camera, prevCamera); err != nil {
		next.closeExcept(prev)
		return nil, err
	}
	if prevCtl != nil && prevCtl.path == cfg.ControlSocket {
		next.ctl = prevCtl
	} else if next.ctl, err = listenControl(cfg.ControlSocket, cfg.Log); err != nil {
		next.closeExcept(prev)
		return nil, err
	}
	if cfg.MQTT.Config.Enabled() && !next.keepsBridge(prev) {
		// Building a bridge reads its password and certificates: a file that is missing now
		// refuses the reload. It connects only when it runs.
		if _, err := mqtt.New(cfg.MQTT.Config, cfg.MQTT.DeviceID, cfg.MQTT.Version, nil, nil); err != nil {
			next.closeExcept(prev)
			return nil, err
		}
	}
	return next, nil
}

// commit makes next the running system: what prev no longer needs stops first, then next's
// agent, bridge, control socket and printer start. prev's devices that next does not use are
// closed only once next's agent exists; when it cannot be built, prev is left as it was and
// the caller falls back.
func (next *System) commit(ctx context.Context, prev *System) error {
	if next.keepsAgent(prev) {
		next.agent = prev.agent
		next.applyLive(prev.cfg)
		if next.keepsBridge(prev) {
			next.bridge = prev.bridge
			if st := next.cfg.MQTT.Config.StatsInterval; next.bridge != nil && st != prev.cfg.MQTT.Config.StatsInterval {
				next.bridge.b.SetStatsInterval(st)
			}
		} else {
			prev.stopBridge()
			next.startBridge(ctx)
		}
		if next.ctl != prev.ctl {
			prev.ctl.stop()
			next.ctl.serve(ctx, next.agent.sup)
		}
		return nil
	}
	var known map[string]string // what the running agent knew of the devices handed over
	if prev != nil {
		known = prev.agent.sup.Status().Devices
		prev.ctl.srv.SetAgent(nil) // requests meanwhile are told to try again
		prev.stopAgent()
		prev.stopBridge()
	}
	if err := next.buildAgent(prev, known); err != nil {
		return err
	}
	if prev != nil {
		prev.closeExcept(next)
	}
	next.start(ctx)
	return nil
}

// start runs a built agent after its bridge has subscribed to it (so the bridge hears
// everything from the first state on), and points the control socket at it.
func (s *System) start(ctx context.Context) {
	s.startBridge(ctx)
	s.ctl.serve(ctx, s.agent.sup)
	if s.cfg.Banner != nil && s.cfg.Console != nil {
		fmt.Fprintln(s.cfg.Console, s.cfg.Banner(s.describe()))
	}
	ctx, s.agent.cancel = context.WithCancel(ctx)
	run := s.agent
	go func() { run.err = run.sup.Run(ctx); close(run.done) }()
}

// fallBack runs prev's configuration again on prev's devices after next's agent could not be
// built (prev's agent has already stopped), and closes what next opened.
func (prev *System) fallBack(ctx context.Context, next *System, why error) (*System, error) {
	next.closeExcept(prev)
	back := &System{cfg: prev.cfg, log: prev.log, audio: prev.audio, camera: prev.camera, ctl: prev.ctl}
	if err := back.buildAgent(nil, nil); err != nil {
		back.closeExcept(nil)
		return nil, fmt.Errorf("%w; the previous configuration did not start again either: %v", why, err)
	}
	back.start(ctx)
	return back, why
}

// keepsAgent says whether next can go on with prev's agent: the same devices, and nothing but
// live settings changed.
func (next *System) keepsAgent(prev *System) bool {
	return prev != nil && next.audio == prev.audio && next.camera == prev.camera &&
		reflect.DeepEqual(agentKey(next.cfg.Agent), agentKey(prev.cfg.Agent))
}

// keepsBridge says whether next can go on with prev's MQTT bridge: the same agent and the same
// MQTT settings but for the statistics interval.
func (next *System) keepsBridge(prev *System) bool {
	if !next.keepsAgent(prev) {
		return false
	}
	a, b := next.cfg.MQTT, prev.cfg.MQTT
	a.Config.StatsInterval, b.Config.StatsInterval = 0, 0
	return reflect.DeepEqual(a, b)
}

// agentKey is what an agent is built from, without the live settings and what cannot be
// compared (loggers, functions).
func agentKey(o agent.Options) any {
	strip := func(c realtime.Config) realtime.Config {
		c.Logger, c.OnQueue, c.Init.Instructions = nil, nil, ""
		return c
	}
	key := struct {
		Session      agent.Config
		Server       realtime.Config
		Chat         *realtime.Config
		SettingsFile string
	}{Session: o.Config, Server: strip(o.Server), SettingsFile: o.SettingsFile}
	if o.ChatServer != nil {
		c := strip(*o.ChatServer)
		key.Chat = &c
	}
	return key
}

// applyLive gives the running agent the new values of the live settings.
func (next *System) applyLive(old Config) {
	sup := next.agent.sup
	volume, oldVolume := next.cfg.Agent.Volume, old.Agent.Volume
	instructions := next.cfg.Agent.Server.Init.Instructions
	volumeChanged := (volume == nil) != (oldVolume == nil) || volume != nil && *volume != *oldVolume
	instructionsChanged := instructions != old.Agent.Server.Init.Instructions
	if !volumeChanged && !instructionsChanged {
		return
	}
	// The file's new values apply, and replace what a command had set for them.
	d := sup.Defaults()
	if volume != nil {
		d.Volume = *volume
	}
	d.Instructions = instructions
	sup.SetDefaults(d)
	if instructionsChanged && !sup.Status().Held {
		sup.Restart() // the prompt is part of a session's set-up: a new session carries it
	}
}

// agentRun is an agent with its console printer.
type agentRun struct {
	sup     *agent.Supervisor
	cancel  context.CancelFunc
	done    chan struct{} // closed when Run has returned, with err set
	err     error
	printed sync.WaitGroup
}

// buildAgent builds the agent on next's devices, with its console printer; start runs it. The
// devices' health goes to it; for those handed over from prev, known is what prev's agent knew.
func (next *System) buildAgent(prev *System, known map[string]string) error {
	o := next.cfg.Agent
	o.Audio, o.Speaker, o.Frames = next.audio.opened.Device.Microphone, next.audio.opened.Device.Speaker, next.camera.opened.Device
	if o.Logger == nil {
		o.Logger = next.log.With("component", "agent")
	}
	if o.Server.Logger == nil {
		o.Server.Logger = next.log.With("component", "realtime")
	}
	sup, err := agent.New(o)
	if err != nil {
		return err
	}
	run := &agentRun{sup: sup, cancel: func() {}, done: make(chan struct{})}
	var prevAudio *openPart[Audio]
	var prevCamera *openPart[agent.FrameSource]
	if prev != nil {
		prevAudio, prevCamera = prev.audio, prev.camera
	}
	next.audio.attach(sup, next.audio == prevAudio, known)
	next.camera.attach(sup, next.camera == prevCamera, known)
	if next.cfg.Console != nil {
		events, unsubscribe := sup.Subscribe(4096)
		run.printed.Add(1)
		go func() {
			defer run.printed.Done()
			defer unsubscribe()
			printEvents(next.cfg.Console, events, next.cfg.Stamp)
		}()
	}
	next.agent = run
	return nil
}

// stopAgent ends the agent and waits for its goodbye (bounded) and its last printed line.
func (s *System) stopAgent() {
	if s.agent == nil {
		return
	}
	s.agent.cancel()
	t := time.NewTimer(agentStopWait)
	defer t.Stop()
	select {
	case <-s.agent.done:
		s.agent.printed.Wait()
	case <-t.C:
		s.log.Warn("agent did not stop within " + agentStopWait.String())
	}
}

func (s *System) describe() string {
	var d []string
	for _, x := range []string{s.audio.opened.Describe, s.camera.opened.Describe} {
		if x != "" {
			d = append(d, x)
		}
	}
	return strings.Join(d, ", ")
}

// bridgeRun is a running MQTT bridge.
type bridgeRun struct {
	b      *mqtt.Bridge
	cancel context.CancelFunc
	done   chan struct{}
}

// startBridge runs an MQTT bridge for the agent, if MQTT is configured. Its files were read in
// prepare; should one have gone since, the satellite runs without MQTT and says so.
func (s *System) startBridge(ctx context.Context) {
	m := s.cfg.MQTT
	if !m.Config.Enabled() {
		return
	}
	log := s.log.With("component", "mqtt")
	b, err := mqtt.New(m.Config, m.DeviceID, m.Version, s.agent.sup, s.log) // it names itself in its lines
	if err != nil {
		log.Error("mqtt: not started", "err", err)
		return
	}
	// Not cancelled with ctx: Stop ends the bridge after the agent, so that it still publishes
	// what the agent said last.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	br := &bridgeRun{b: b, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(br.done)
		if err := b.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("mqtt bridge stopped", "err", err)
		}
	}()
	s.bridge = br
}

func (s *System) stopBridge() {
	if s.bridge != nil {
		s.bridge.cancel()
		<-s.bridge.done
		s.bridge = nil
	}
}

// controlRun is the control socket.
type controlRun struct {
	path    string
	srv     *control.Server
	cancel  context.CancelFunc
	done    chan struct{}
	serving bool
}

func listenControl(path string, log *slog.Logger) (*controlRun, error) {
	srv, err := control.Listen(path, nil, log.With("component", "control"))
	if err != nil {
		return nil, err
	}
	return &controlRun{path: path, srv: srv, done: make(chan struct{})}, nil
}

// serve points the socket at sup and serves it (once).
func (c *controlRun) serve(ctx context.Context, sup *agent.Supervisor) {
	c.srv.SetAgent(sup)
	if c.serving {
		return
	}
	c.serving = true
	ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go func() { c.srv.Serve(ctx); close(c.done) }()
}

func (c *controlRun) stop() {
	if c == nil {
		return
	}
	if !c.serving {
		c.srv.Close()
		return
	}
	c.cancel()
	<-c.done
}

// openPart is an open Part.
type openPart[T any] struct {
	key     any
	holds   []string
	reports []string
	opened  Opened[T]
	cancel  context.CancelFunc
}

// attach sends the part's health reports to sup; a part handed over first tells it what the
// agent before it knew (a lost device stays lost until it reports otherwise).
func (p *openPart[T]) attach(sup *agent.Supervisor, handedOver bool, known map[string]string) {
	if handedOver {
		for _, name := range p.reports {
			if detail, ok := known[name]; ok {
				sup.DeviceState(name, detail == "ok", errors.New(detail))
			}
		}
	}
	if p.opened.Attach != nil {
		p.opened.Attach(sup)
	}
}

func (p *openPart[T]) close() {
	p.cancel()
	if p.opened.Close != nil {
		_ = p.opened.Close() // a device that fails to close is gone either way
	}
}

// heldError is a part that could not be opened while the running one holds a device it names.
type heldError struct {
	device string
	err    error
}

func (e *heldError) Error() string { return e.err.Error() }
func (e *heldError) Unwrap() error { return e.err }

// openOrTake hands running over when its key is spec's, and opens spec otherwise. The devices
// live in their own context: they may outlive this System (handed over to the next one).
func openOrTake[T any](ctx context.Context, spec Part[T], running *openPart[T]) (*openPart[T], error) {
	if running != nil && reflect.DeepEqual(running.key, spec.Key) {
		return running, nil
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	opened, err := spec.Open(pctx)
	if err != nil {
		cancel()
		if running != nil {
			for _, d := range spec.Holds {
				if slices.Contains(running.holds, d) {
					return nil, &heldError{device: d, err: err}
				}
			}
		}
		return nil, err
	}
	return &openPart[T]{key: spec.Key, holds: spec.Holds, reports: spec.Reports, opened: opened, cancel: cancel}, nil
}

// closeExcept closes the devices and the control socket of s that keep does not hold too.
func (s *System) closeExcept(keep *System) {
	var held System
	if keep != nil {
		held = *keep
	}
	if s.camera != nil && s.camera != held.camera {
		s.camera.close()
	}
	if s.audio != nil && s.audio != held.audio {
		s.audio.close()
	}
	if s.ctl != nil && s.ctl != held.ctl {
		s.ctl.stop()
	}
}
