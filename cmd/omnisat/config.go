package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/mqtt"
	"github.com/omnisat/omnisat/realtime"
)

// defaultConfigPath is where the service looks without -c.
const defaultConfigPath = "/etc/omnisat/omnisat.yaml"

// fileConfig is the whole configuration file: each section belongs to the package that reads it.
type fileConfig struct {
	DeviceID string              `yaml:"device_id"`
	StateDir string              `yaml:"state_dir"`
	Server   realtime.Settings   `yaml:"server"`
	Session  agent.Config        `yaml:"session"`
	Audio    devices.AudioConfig `yaml:"audio"`
	Camera   cameraSection       `yaml:"camera"`
	Control  controlConfig       `yaml:"control"`
	MQTT     mqtt.Config         `yaml:"mqtt"`
	Log      logConfig           `yaml:"log"`
}

type controlConfig struct {
	// Socket is the local control socket; default <state_dir>/control.sock.
	Socket string `yaml:"socket"`
}

type logConfig struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text or json
}

// simulatorURL stands in for server.url when the built-in simulator replaces the server.
const simulatorURL = "ws://127.0.0.1:1/v1/realtime"

// loadConfig reads and checks a configuration file. Unknown keys are errors. Relative file paths
// in it are taken from the file's folder. With simulator, server.url may be empty.
func loadConfig(path string, simulator bool) (*fileConfig, error) {
	return loadConfigWith(path, simulator, "")
}

// loadConfigWith is loadConfig with state_dir overridden (the --state-dir flag) before the
// defaults that derive from it (control socket, MQTT outbox) are filled in.
func loadConfigWith(path string, simulator bool, stateDir string) (*fileConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	var c fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if simulator && c.Server.URL == "" {
		c.Server.URL = simulatorURL
	}
	if stateDir != "" {
		c.StateDir, c.Control.Socket = stateDir, ""
	}
	c.resolvePaths(filepath.Dir(path))
	c.applyDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return &c, nil
}

func (c *fileConfig) applyDefaults() {
	if c.DeviceID == "" {
		c.DeviceID, _ = os.Hostname()
	}
	if c.StateDir == "" {
		c.StateDir = "/var/lib/omnisat"
	}
	c.Session = c.Session.WithDefaults()
	c.Audio = c.Audio.WithDefaults()
	c.Camera = c.Camera.withDefaults()
	if c.MQTT.Password == "" && c.MQTT.PasswordFile == "" {
		// A secret kept out of the file: the environment (e.g. a systemd EnvironmentFile).
		c.MQTT.Password = os.Getenv("OMNISAT_MQTT_PASSWORD")
	}
	c.MQTT = c.MQTT.Resolve(c.DeviceID, c.StateDir)
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Log.Format == "" {
		c.Log.Format = "text"
	}
}

// resolvePaths makes relative paths in the file relative to the file's folder.
func (c *fileConfig) resolvePaths(dir string) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	prefixed := func(v, prefix string) string {
		if p, ok := strings.CutPrefix(v, prefix); ok {
			return prefix + abs(p)
		}
		return v
	}
	c.StateDir = abs(c.StateDir)
	c.Server.RefAudio = abs(c.Server.RefAudio)
	c.Server.TTSRefAudio = abs(c.Server.TTSRefAudio)
	c.Server.TokenFile = abs(c.Server.TokenFile)
	c.Audio.Input = prefixed(c.Audio.Input, "file:")
	c.Audio.InputFallback = prefixed(c.Audio.InputFallback, "file:")
	c.Audio.Output = prefixed(c.Audio.Output, "file:")
	c.Audio.OutputFallback = prefixed(c.Audio.OutputFallback, "file:")
	c.Camera.Source = prefixed(prefixed(c.Camera.Source, "dir:"), "file:")
	c.Camera.Fallback = prefixed(c.Camera.Fallback, "dir:")
	c.Control.Socket = abs(c.Control.Socket)
	c.MQTT.PasswordFile = abs(c.MQTT.PasswordFile)
	c.MQTT.TLS.CAFile, c.MQTT.TLS.CertFile, c.MQTT.TLS.KeyFile = abs(c.MQTT.TLS.CAFile), abs(c.MQTT.TLS.CertFile), abs(c.MQTT.TLS.KeyFile)
	c.MQTT.Outbox.Path = abs(c.MQTT.Outbox.Path)
}

func (c *fileConfig) validate() error {
	if c.Server.URL == "" {
		return errors.New("server.url: empty; want ws://host:port/v1/realtime (or run with --simulator)")
	}
	for _, check := range []func() error{c.Server.Validate, c.Session.Validate, c.Audio.Validate, c.Camera.validate, c.MQTT.Validate} {
		if err := check(); err != nil {
			return err
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return fmt.Errorf("log.format: %q is not one of text, json", c.Log.Format)
	}
	return nil
}

func (c *fileConfig) socketPath() string {
	if c.Control.Socket != "" {
		return c.Control.Socket
	}
	return filepath.Join(c.StateDir, "control.sock")
}
