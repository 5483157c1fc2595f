package realtime

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/omnisat/omnisat/internal/yamlconf"
)

// Settings is the `server:` section of the configuration file. Config builds the connection
// settings from it; the command reads reference voices from their files (this package reads no
// files).
type Settings struct {
	URL     string  `yaml:"url"`
	Dialect Dialect `yaml:"dialect"`
	Mode    Mode    `yaml:"mode"`
	// Model is the OpenVoice STT model id.
	Model string `yaml:"model"`
	// Token is sent as a bearer token; TokenFile names a file holding it instead.
	Token     string `yaml:"token"`
	TokenFile string `yaml:"token_file"`
	// Instructions is the system prompt.
	Instructions string `yaml:"instructions"`
	// RefAudio and TTSRefAudio are WAV files of a reference voice (any rate; sent as 16 kHz).
	RefAudio     string         `yaml:"ref_audio"`
	TTSRefAudio  string         `yaml:"tts_ref_audio"`
	MaxSliceNums int            `yaml:"max_slice_nums"`
	Extra        map[string]any `yaml:"config"`
	// ChatURL is where Ask and Say go (mode=chat); empty uses URL.
	ChatURL string `yaml:"chat_url"`

	// OpenVoice.
	VADSensitivity string   `yaml:"vad_sensitivity"`
	Language       string   `yaml:"language"`
	HotWords       []string `yaml:"hot_words"`
	TTSModel       string   `yaml:"tts_model"`
	TTSRate        int      `yaml:"tts_rate"`

	PingInterval    time.Duration `yaml:"ping_interval"`
	DeadLinkTimeout time.Duration `yaml:"dead_link_timeout"`
	DialTimeout     time.Duration `yaml:"dial_timeout"`
	MaxFrameBytes   yamlconf.Size `yaml:"max_frame_bytes"`

	// Phase deadlines: session.init → session.created (OpenVoice: connect → session.created),
	// and session.close → session.closed. Time in the server's queue is not limited.
	InitTimeout  time.Duration `yaml:"init_timeout"`
	CloseTimeout time.Duration `yaml:"close_timeout"`
}

// The ranges of the phase deadlines. session.created follows the worker's prefill of the system
// prompt and reference voice, seconds on a slow GPU; past a few minutes the wait only holds a
// gateway's worker for nothing (its session limit is 300 s for video). session.closed follows at
// once unless the server is stuck; a minute is already far past that.
const (
	minInitTimeout, maxInitTimeout   = time.Second, 5 * time.Minute
	minCloseTimeout, maxCloseTimeout = 100 * time.Millisecond, time.Minute
)

// Config turns the settings into a connection configuration (without reference voices).
func (s Settings) Config() Config {
	return Config{
		URL: s.URL, Dialect: s.Dialect, Mode: s.Mode, Model: s.Model, Token: s.Token,
		Init: Init{Instructions: s.Instructions, MaxSliceNums: s.MaxSliceNums, Config: s.Extra,
			VADSensitivity: s.VADSensitivity, Language: s.Language, HotWords: s.HotWords, TTSModel: s.TTSModel},
		OpenVoiceTTSRate: s.TTSRate, PingInterval: s.PingInterval, DeadLinkTimeout: s.DeadLinkTimeout,
		DialTimeout: s.DialTimeout, MaxFrameBytes: int64(s.MaxFrameBytes),
		InitTimeout: s.InitTimeout, CloseTimeout: s.CloseTimeout,
		// The agent keeps the send queue short: audio waiting here is lost if the link dies.
		SendQueue: 2,
	}.withDefaults()
}

// Validate reports every setting that cannot work, each as "server.<key>: ..." with the key as
// written in the configuration file.
func (s Settings) Validate() error {
	var errs []error
	for _, err := range yamlconf.Problems(s.Config().Validate()) {
		msg := err.Error()
		for config, file := range map[string]string{"init.": "", "openvoice_tts_rate:": "tts_rate:"} {
			if rest, ok := strings.CutPrefix(msg, config); ok {
				msg = file + rest
			}
		}
		errs = append(errs, errors.New("server."+msg))
	}
	if s.Token != "" && s.TokenFile != "" {
		errs = append(errs, errors.New("server.token_file: set either token or token_file, not both"))
	}
	errs = append(errs, s.phaseDeadlineProblems()...)
	return errors.Join(errs...)
}

// phaseDeadlineProblems checks the phase deadlines against their ranges (zero takes the default).
func (s Settings) phaseDeadlineProblems() []error {
	var errs []error
	for _, d := range []struct {
		key      string
		v        time.Duration
		min, max time.Duration
	}{
		{"init_timeout", s.InitTimeout, minInitTimeout, maxInitTimeout},
		{"close_timeout", s.CloseTimeout, minCloseTimeout, maxCloseTimeout},
	} {
		if d.v > 0 && (d.v < d.min || d.v > d.max) { // negative: Config.Validate says so
			errs = append(errs, fmt.Errorf("server.%s: %v is outside %v..%v", d.key, d.v, d.min, d.max))
		}
	}
	return errs
}
