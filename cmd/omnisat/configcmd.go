package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/omnisat/omnisat/configs"
	"github.com/omnisat/omnisat/internal/yamlconf"
)

// runConfig is `omnisat config check|example`.
func runConfig(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(env.stderr, "usage: omnisat config check [-c FILE] | omnisat config example")
		return exitUsage
	}
	switch args[0] {
	case "example":
		if len(args) > 1 {
			fmt.Fprintf(env.stderr, "omnisat config example: unexpected argument %q\n", args[1])
			return exitUsage
		}
		fmt.Fprint(env.stdout, configs.Example())
		return exitOK
	case "check":
		return runConfigCheck(env, args[1:])
	default:
		fmt.Fprintf(env.stderr, "omnisat config: unknown subcommand %q (check, example)\n", args[0])
		return exitUsage
	}
}

// runConfigCheck loads the file exactly as `run` would, opens what it names (without starting
// anything) and lists every problem, one a line. --file-only checks the file alone: for a
// machine other than the satellite (a build host, a workstation), where its devices are not.
// Exit 0: usable (warnings may still be printed); 1: not usable.
func runConfigCheck(env *cliEnv, args []string) int {
	fs := newFlagSet("config check", env, "")
	path := fs.String("c", defaultConfigPath, "configuration file")
	fileOnly := fs.Bool("file-only", false, "check the file alone, without opening the files, folders and devices it names")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "omnisat config check: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	load := loadAndCheck
	if *fileOnly {
		load = loadConfig
	}
	cfg, err := load(*path, loadOptions{getenv: env.getenv})
	if err != nil {
		var ce *configError
		if !errors.As(err, &ce) {
			fmt.Fprintf(env.stderr, "%v\n", err)
			return exitFailure
		}
		problems := yamlconf.Problems(ce.err)
		fmt.Fprintf(env.stderr, "%s: %d problem(s):\n", *path, len(problems))
		for _, p := range problems {
			fmt.Fprintf(env.stderr, "  %v\n", p)
		}
		return exitFailure
	}
	for _, w := range cfg.warnings {
		fmt.Fprintf(env.stderr, "warning: %s\n", w)
	}
	mqtt := "off"
	if cfg.MQTT.Enabled() {
		mqtt = cfg.MQTT.Broker
	}
	fmt.Fprintf(env.stdout, "%s: ok (device %s; %s %s/%s; microphone %s, speaker %s, camera %s; mqtt %s)\n", *path,
		cfg.DeviceID, cfg.Server.URL, cfg.Server.Dialect, cfg.Server.Mode, cfg.Audio.Input, cfg.Audio.Output, cfg.Camera.Source, mqtt)
	return exitOK
}
