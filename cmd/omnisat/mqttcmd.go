package main

import (
	"context"
	"fmt"
	"time"

	"github.com/omnisat/omnisat/mqtt"
)

// runMQTT holds the MQTT maintenance commands.
func runMQTT(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet("mqtt", env, "remove-discovery")
	path := fs.String("c", defaultConfigPath, "configuration file")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() != 1 || fs.Arg(0) != "remove-discovery" {
		fs.Usage()
		fmt.Fprintln(env.stderr, "omnisat mqtt: want remove-discovery (publishes the empty retained Home Assistant config, which removes this device's entities)")
		return exitUsage
	}
	cfg, err := loadConfig(*path, loadOptions{simulator: true, getenv: env.getenv})
	if err != nil {
		fmt.Fprintf(env.stderr, "omnisat mqtt: %v\n", err)
		return exitConfig
	}
	if !cfg.MQTT.Enabled() {
		fmt.Fprintln(env.stderr, "omnisat mqtt: no mqtt.broker in the configuration")
		return exitConfig
	}
	br, err := mqtt.New(cfg.MQTT, cfg.DeviceID, version, nil, newLogOutput(env.stderr, cfg.Log, env.journal).logger())
	if err != nil {
		fmt.Fprintf(env.stderr, "omnisat mqtt: %v\n", err)
		return exitConfig
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := br.RemoveDiscovery(ctx); err != nil {
		fmt.Fprintf(env.stderr, "omnisat mqtt: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(env.stdout, "removed the Home Assistant entities of %s\n", cfg.DeviceID)
	return exitOK
}
