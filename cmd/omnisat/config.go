package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/internal/yamlconf"
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

	// warnings are things that work but should be fixed (a secret readable by every user).
	warnings []string
}

type controlConfig struct {
	// Socket is the local control socket; default <state_dir>/control.sock.
	Socket string `yaml:"socket"`
}

type logConfig struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text or json
}

// maxSocketPath is the longest path a unix socket can have (sun_path holds 108 bytes with NUL).
const maxSocketPath = 107

// simulatorURL stands in for server.url when the built-in simulator replaces the server.
const simulatorURL = "ws://127.0.0.1:1/v1/realtime"

// loadOptions are the command-line choices that change how a file is read.
type loadOptions struct {
	// simulator lets server.url be empty (the built-in simulator stands in).
	simulator bool
	// stateDir overrides state_dir (the --state-dir flag, relative to the working directory)
	// before the defaults that derive from it (control socket, MQTT outbox) are filled in.
	stateDir string
	// getenv resolves ${VAR} in the file; nil means the process environment.
	getenv func(string) string
}

// loadConfig reads, expands, decodes, completes and checks a configuration file. Only a regular
// file of at most yamlconf.MaxFileBytes is read. Unknown keys are errors; relative file paths
// in it are taken from the file's folder. The error joins every problem found
// (yamlconf.Problems splits them), each naming its key path.
func loadConfig(path string, o loadOptions) (*fileConfig, error) {
	raw, err := yamlconf.ReadFile(path, yamlconf.MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parseConfig(raw, path, o)
}

// parseConfig is loadConfig for the bytes of the file at path.
func parseConfig(raw []byte, path string, o loadOptions) (*fileConfig, error) {
	if o.getenv == nil {
		o.getenv = os.Getenv
	}
	var c fileConfig
	// Decoding problems do not stop here: what decoded is completed and checked as well, so that
	// one run lists everything to fix.
	decodeErr := yamlconf.Decode(raw, &c, o.getenv)
	var syntax *yamlconf.SyntaxError
	if errors.As(decodeErr, &syntax) {
		return nil, &configError{path: path, err: decodeErr}
	}
	if o.simulator && c.Server.URL == "" {
		c.Server.URL = simulatorURL
	}
	if o.stateDir != "" {
		// A command-line path: relative to the working directory, not to the file.
		dir, err := filepath.Abs(o.stateDir)
		if err != nil {
			return nil, fmt.Errorf("--state-dir %s: %w", o.stateDir, err)
		}
		c.StateDir, c.Control.Socket = dir, ""
	}
	c.resolvePaths(filepath.Dir(path))
	c.applyDefaults(o.getenv)
	if err := errors.Join(decodeErr, c.validate()); err != nil {
		return nil, &configError{path: path, err: err}
	}
	c.warnings = secretWarnings(path, raw, &c)
	return &c, nil
}

// configError is a file's list of problems. Its message puts each on a line of its own.
type configError struct {
	path string
	err  error
}

func (e *configError) Error() string {
	problems := yamlconf.Problems(e.err)
	if len(problems) == 1 {
		return fmt.Sprintf("config %s: %v", e.path, problems[0])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config %s: %d problems:", e.path, len(problems))
	for _, p := range problems {
		b.WriteString("\n  - " + p.Error())
	}
	return b.String()
}

func (e *configError) Unwrap() error { return e.err }

// secretWarnings says when the file itself holds a secret (not a ${VAR} or *_file reference) and
// other users may read it.
func secretWarnings(path string, raw []byte, c *fileConfig) []string {
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o004 == 0 {
		return nil
	}
	var held []string
	for _, s := range []struct{ key, v string }{{"server.token", c.Server.Token}, {"mqtt.password", c.MQTT.Password}} {
		if s.v != "" && bytes.Contains(raw, []byte(s.v)) {
			held = append(held, s.key)
		}
	}
	if len(held) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%s holds %s and every user can read it (mode %04o): chmod 640 it (owner root, group omnisat), "+
		"or move the secret to a *_file or a ${VAR} from the service's environment", path, strings.Join(held, ", "), st.Mode().Perm())}
}

func (c *fileConfig) applyDefaults(getenv func(string) string) {
	if c.DeviceID == "" {
		c.DeviceID, _ = os.Hostname()
	}
	if c.StateDir == "" {
		c.StateDir = "/var/lib/omnisat"
	}
	if c.Server.Dialect == "" {
		c.Server.Dialect = realtime.DialectCurrent
	}
	if c.Server.Mode == "" {
		c.Server.Mode = realtime.ModeVideo
	}
	c.Session = c.Session.WithDefaults()
	c.Audio = c.Audio.WithDefaults()
	c.Camera = c.Camera.withDefaults()
	if c.MQTT.Password == "" && c.MQTT.PasswordFile == "" {
		// A secret kept out of the file: the environment (e.g. a systemd EnvironmentFile).
		c.MQTT.Password = getenv("OMNISAT_MQTT_PASSWORD")
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
	var errs []error
	if c.Server.URL == "" {
		errs = append(errs, errors.New("server.url: empty; want ws://host:port/v1/realtime (or run with --simulator)"))
	} else {
		errs = append(errs, c.Server.Validate())
	}
	errs = append(errs, c.Session.Validate(), c.Audio.Validate(), c.Camera.validate(), c.MQTT.Validate())
	// Across sections: sessions started with this prompt must be useful before their rollover.
	errs = append(errs, c.Session.CheckContext(c.Server.Instructions))
	if c.Server.Mode == realtime.ModeChat {
		errs = append(errs, errors.New("server.mode: chat is for one-off requests (omnisat chat); the agent needs video or audio"))
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level))
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log.format: %q is not one of text, json", c.Log.Format))
	}
	// A unix socket's path is at most 107 bytes (sun_path); a longer one fails only at bind.
	if sock := c.socketPath(); len(sock) > maxSocketPath {
		key := "control.socket"
		if c.Control.Socket == "" {
			key = "state_dir"
		}
		errs = append(errs, fmt.Errorf("%s: %s is %d bytes long; a unix socket path holds at most %d", key, sock, len(sock), maxSocketPath))
	}
	return errors.Join(errs...)
}

func (c *fileConfig) socketPath() string {
	if c.Control.Socket != "" {
		return c.Control.Socket
	}
	return filepath.Join(c.StateDir, "control.sock")
}
