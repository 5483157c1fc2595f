package mqtt

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/omnisat/omnisat/internal/yamlconf"
)

// Config is the `mqtt:` section of the configuration file. An empty Broker disables MQTT.
type Config struct {
	// Broker is the broker URL: tcp://host:1883, ssl://host:8883 (also mqtts://, tls://),
	// ws://host:port/path, wss://host:port/path. "" disables MQTT.
	Broker   string `yaml:"broker"`
	Username string `yaml:"username"`
	// Password may come from ${VAR} expansion done by the configuration loader; never logged.
	Password string `yaml:"password"`
	// PasswordFile is read when the bridge is built (trailing newline removed); it wins over Password.
	PasswordFile string `yaml:"password_file"`
	// ClientID defaults to "omnisat-<device_id>".
	ClientID string `yaml:"client_id"`
	// Keepalive is the MQTT keepalive (default 30s).
	Keepalive time.Duration `yaml:"keepalive"`
	// ConnectTimeout bounds one connection attempt (default 10s).
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// MaxReconnectInterval caps the reconnect backoff (default 30s).
	MaxReconnectInterval time.Duration `yaml:"max_reconnect_interval"`
	TLS                  TLSConfig     `yaml:"tls"`
	// Prefix of every topic, default "omnisat/<device_id>".
	Prefix string `yaml:"prefix"`
	// Discovery publishes Home Assistant device discovery (default true).
	Discovery *bool `yaml:"discovery"`
	// DiscoveryPrefix is Home Assistant's discovery prefix (default "homeassistant").
	DiscoveryPrefix string `yaml:"discovery_prefix"`
	// StatsInterval is the period of <prefix>/stats (default 60s; negative disables).
	StatsInterval time.Duration `yaml:"stats_interval"`
	// PartialTranscripts publishes <prefix>/transcript/partial while text streams (default false).
	PartialTranscripts bool         `yaml:"partial_transcripts"`
	Outbox             OutboxConfig `yaml:"outbox"`
	// Image publishes the newest camera frame the satellite sent to the model on <prefix>/image
	// (a Home Assistant image entity). Off by default: a picture leaving the device is the
	// owner's decision.
	Image bool `yaml:"image"`
	// ImageInterval is the shortest time between two pictures on <prefix>/image (default 10s).
	ImageInterval time.Duration `yaml:"image_interval"`
}

// TLSConfig secures ssl:// and wss:// connections. Verification is on unless Insecure.
type TLSConfig struct {
	CAFile     string `yaml:"ca_file"`     // PEM CA bundle; "" uses the system roots
	CertFile   string `yaml:"cert_file"`   // client certificate (PEM), with KeyFile
	KeyFile    string `yaml:"key_file"`    // client key (PEM, unencrypted)
	ServerName string `yaml:"server_name"` // expected name in the broker's certificate; default the URL's host
	Insecure   bool   `yaml:"insecure"`    // skip verification (testing only)
}

// OutboxConfig is the on-disk queue of transcripts, answers and events.
type OutboxConfig struct {
	// Path is a directory; default <state_dir>/outbox (see Resolve).
	Path string `yaml:"path"`
	// MaxBytes bounds the messages waiting to be sent (default 4 MiB); beyond it the oldest are dropped.
	MaxBytes yamlconf.Size `yaml:"max_bytes"`
}

const (
	defaultKeepalive      = 30 * time.Second
	defaultConnectTimeout = 10 * time.Second
	defaultMaxReconnect   = 30 * time.Second
	defaultStatsInterval  = 60 * time.Second
	defaultOutboxBytes    = 4 << 20
	minOutboxBytes        = 4 << 10
	maxOutboxBytes        = 1 << 30
	defaultImageInterval  = 10 * time.Second
)

// Enabled reports whether a broker is configured.
func (c Config) Enabled() bool { return strings.TrimSpace(c.Broker) != "" }

// DiscoveryEnabled reports whether Home Assistant discovery is on (the default).
func (c Config) DiscoveryEnabled() bool { return c.Discovery == nil || *c.Discovery }

// WithDefaults fills the defaults that do not depend on the device: keepalive, timeouts,
// discovery, stats interval and the outbox bound. Resolve fills the rest.
func (c Config) WithDefaults() Config {
	if c.Keepalive == 0 {
		c.Keepalive = defaultKeepalive
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = defaultConnectTimeout
	}
	if c.MaxReconnectInterval == 0 {
		c.MaxReconnectInterval = defaultMaxReconnect
	}
	if c.Discovery == nil {
		t := true
		c.Discovery = &t
	}
	if c.DiscoveryPrefix == "" {
		c.DiscoveryPrefix = "homeassistant"
	}
	if c.StatsInterval == 0 {
		c.StatsInterval = defaultStatsInterval
	}
	if c.Outbox.MaxBytes == 0 {
		c.Outbox.MaxBytes = defaultOutboxBytes
	}
	if c.ImageInterval == 0 {
		c.ImageInterval = defaultImageInterval
	}
	return c
}

// Resolve applies WithDefaults and the defaults that depend on the device id and the state
// directory: client id "omnisat-<device_id>", prefix "omnisat/<device_id>", outbox
// "<state_dir>/outbox". This is what cmd/omnisat calls before New.
func (c Config) Resolve(deviceID, stateDir string) Config {
	c = c.WithDefaults()
	id := topicSafeID(deviceID)
	if c.ClientID == "" {
		c.ClientID = "omnisat-" + id
	}
	if c.Prefix == "" {
		c.Prefix = "omnisat/" + id
	}
	c.Prefix = strings.TrimRight(c.Prefix, "/")
	if c.Outbox.Path == "" && stateDir != "" {
		c.Outbox.Path = filepath.Join(stateDir, "outbox")
	}
	return c
}

// Validate reports every setting that cannot work, each with its path under "mqtt.". A disabled
// configuration (no broker) is always valid.
func (c Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	u, err := url.Parse(c.Broker)
	switch {
	case err != nil:
		bad("mqtt.broker: %q is not a URL: %v", c.Broker, err)
	case !slices.Contains([]string{"tcp", "mqtt", "ssl", "tls", "mqtts", "ws", "wss"}, u.Scheme):
		bad("mqtt.broker: scheme %q of %q is not one of tcp, mqtt, ssl, tls, mqtts, ws, wss", u.Scheme, c.Broker)
	case u.Host == "":
		bad("mqtt.broker: %q has no host", c.Broker)
	}
	if c.Password != "" && c.PasswordFile != "" {
		bad("mqtt.password_file: set either password or password_file, not both")
	}
	if c.Keepalive < 0 || (c.Keepalive > 0 && c.Keepalive < time.Second) || c.Keepalive > 18*time.Hour {
		bad("mqtt.keepalive: %v is outside 1s..18h", c.Keepalive)
	}
	// One connection attempt: a slow link needs seconds, never minutes.
	if c.ConnectTimeout < time.Second || c.ConnectTimeout > 5*time.Minute {
		bad("mqtt.connect_timeout: %v is outside 1s..5m", c.ConnectTimeout)
	}
	// Reconnects back off up to this: past an hour a broker that came back waits for nothing.
	if c.MaxReconnectInterval < time.Second || c.MaxReconnectInterval > time.Hour {
		bad("mqtt.max_reconnect_interval: %v is outside 1s..1h", c.MaxReconnectInterval)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad("mqtt.tls.key_file: a client certificate needs both cert_file and key_file")
	}
	for _, err := range []error{checkTopicPart("mqtt.prefix", c.Prefix), checkTopicPart("mqtt.discovery_prefix", c.DiscoveryPrefix)} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if c.StatsInterval > 0 && (c.StatsInterval < time.Second || c.StatsInterval > 24*time.Hour) {
		bad("mqtt.stats_interval: %v is outside 1s..24h (negative: no statistics)", c.StatsInterval)
	}
	if c.ImageInterval < time.Second || c.ImageInterval > time.Hour {
		bad("mqtt.image_interval: %v is outside 1s..1h", c.ImageInterval)
	}
	// The outbox lives on the board's storage (often an SD card): 4 MiB holds days of
	// transcripts, 1 GiB more than a year's; beyond that it only wears the card out.
	if c.Outbox.MaxBytes < minOutboxBytes || c.Outbox.MaxBytes > maxOutboxBytes {
		bad("mqtt.outbox.max_bytes: %v is outside %v..%v", c.Outbox.MaxBytes, yamlconf.Size(minOutboxBytes), yamlconf.Size(maxOutboxBytes))
	}
	if c.Outbox.Path == "" {
		bad("mqtt.outbox.path: empty (default <state_dir>/outbox: call Resolve with the state directory)")
	}
	return errors.Join(errs...)
}

func checkTopicPart(key, s string) error {
	if s == "" {
		return fmt.Errorf("%s: empty", key)
	}
	if strings.ContainsAny(s, "+#\x00") {
		return fmt.Errorf("%s: %q contains a wildcard (+, #) or NUL", key, s)
	}
	if strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/") {
		return fmt.Errorf("%s: %q must not start or end with /", key, s)
	}
	return nil
}

// LogValue keeps secrets out of logs: slog prints the broker, user and client id only.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("broker", c.Broker),
		slog.String("username", c.Username),
		slog.Bool("password_set", c.Password != "" || c.PasswordFile != ""),
		slog.String("client_id", c.ClientID),
		slog.String("prefix", c.Prefix),
	)
}

// topicSafeID maps a device id onto [a-zA-Z0-9_-], as Home Assistant requires for the discovery
// topic's object id and as is safe in any topic level.
func topicSafeID(id string) string {
	var b strings.Builder
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "omnisat"
	}
	return b.String()
}
