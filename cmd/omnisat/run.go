package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/omnisat/omnisat/agent/control"
	"github.com/omnisat/omnisat/satellite"
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
	// load's release ends its hold on PortAudio (see loadAndHold): once the devices are open,
	// or the configuration is refused.
	load := func() (*fileConfig, func(), error) {
		cfg, release, err := loadAndHold(*path, loadOptions{simulator: *simulator, stateDir: *stateDir, getenv: env.getenv})
		if err == nil && *logFormat != "" {
			cfg.Log.Format = *logFormat
		}
		return cfg, release, err
	}
	cfg, release, err := load()
	if err != nil {
		return fail(exitConfig, "%v", err)
	}
	logs := newLogOutput(env.stderr, cfg.Log, env.journal)
	log := logs.logger()
	for _, w := range cfg.warnings {
		log.Warn("config: " + w)
	}

	var sim *simulatorChild
	if *simulator {
		sim, err = startSimulator(string(cfg.Server.Dialect), log)
		if err != nil {
			release()
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

	sc, err := systemConfig(cfg, env, log)
	if err != nil {
		release()
		return fail(exitConfig, "%v", err)
	}
	sys, err := satellite.Start(ctx, sc)
	release()
	if err != nil {
		return fail(startExitCode(err), "%v", err)
	}
	for {
		select {
		case <-ctx.Done():
			sys.Stop()
			return exitOK
		case <-sys.Done():
			sys.Stop()
			switch err := sys.Err(); {
			case errors.Is(err, io.EOF):
				fmt.Fprintln(env.stdout, "audio input ended; stopped")
			case err != nil:
				return fail(exitFailure, "%v", err)
			}
			return exitOK
		case <-hangup:
			// The new configuration is read, checked and opened completely before the running
			// one is touched; on any failure the running one goes on.
			next, release, err := load()
			var nextSys satellite.Config
			if err == nil {
				if sim != nil {
					useSimulator(next, sim)
				}
				nextSys, err = systemConfig(next, env, log)
				if err != nil {
					release()
				}
			}
			if err != nil {
				log.Error("config: reload refused; the running configuration stays", "file", *path, "err", err)
				sys.Announce("config_rejected", err.Error())
				continue
			}
			for _, w := range next.warnings {
				log.Warn("config: " + w)
			}
			plan := planReload(cfg, next)
			// Reloaded even when the file is the same: a token or voice file may have changed.
			running, err := sys.Reload(ctx, nextSys)
			release()
			if running == nil {
				return fail(exitFailure, "after reload: %v", err)
			}
			if err != nil {
				sys = running
				log.Error("config: reload refused; the running configuration stays", "file", *path, "err", err)
				sys.Announce("config_rejected", err.Error())
				continue
			}
			restarted := running.Agent() != sys.Agent()
			sys, cfg = running, next
			logs.set(cfg.Log)
			if plan.empty() {
				if !restarted {
					log.Info("config: reloaded; nothing changed", "file", *path)
					continue
				}
				plan.restart = []string{"the files it names (token, reference voice)"}
			}
			log.Info("config: reloaded", "file", *path, "live", plan.live, "restart", plan.restart)
			sys.Announce("config_reloaded", plan.String())
		}
	}
}

// startExitCode is the exit code of a system that did not start: a control socket that cannot
// be bound is the machine's state (exit 1), anything else the configuration's (exit 3).
func startExitCode(err error) int {
	var ctl *control.ListenError
	if errors.As(err, &ctl) {
		return exitFailure
	}
	return exitConfig
}

// useSimulator points the server settings at the built-in simulator.
func useSimulator(cfg *fileConfig, sim *simulatorChild) {
	cfg.Server.URL = sim.URL()
	if cfg.Server.ChatURL != "" {
		cfg.Server.ChatURL = sim.URL()
	}
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
