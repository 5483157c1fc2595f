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

	// OpenVoice. The configuration keys are ours; they go on the wire under the names the server
	// reads (vad_sensitivity, model_tts, silence_timeout_ms, ...).
	VADSensitivity string        `yaml:"vad_sensitivity"`
	Language       string        `yaml:"language"`
	HotWords       []string      `yaml:"hot_words"`
	TTSModel       string        `yaml:"tts_model"`
	TTSRate        int           `yaml:"tts_rate"`
	SilenceTimeout time.Duration `yaml:"silence_timeout"`
	HoldTimeout    time.Duration `yaml:"hold_timeout"`
	EnableITN      *bool         `yaml:"enable_itn"`
	// AudioFrame is the length of OpenVoice's binary audio frames.
	AudioFrame time.Duration `yaml:"audio_frame"`

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
			VADSensitivity: s.VADSensitivity, Language: s.Language, HotWords: s.HotWords, TTSModel: s.TTSModel,
			SilenceTimeout: s.SilenceTimeout, HoldTimeout: s.HoldTimeout, EnableITN: s.EnableITN},
		OpenVoiceTTSRate: s.TTSRate, OpenVoiceFrame: s.AudioFrame, PingInterval: s.PingInterval, DeadLinkTimeout: s.DeadLinkTimeout,
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
		for config, file := range map[string]string{"init.": "", "openvoice_tts_rate:": "tts_rate:", "openvoice_frame:": "audio_frame:"} {
			if rest, ok := strings.CutPrefix(msg, config); ok {
				msg = file + rest
			}
		}
		errs = append(errs, errors.New("server."+msg))
	}
	errs = append(errs, s.ranges(s.Config())...)
	if s.Token != "" && s.TokenFile != "" {
		errs = append(errs, errors.New("server.token_file: set either token or token_file, not both"))
	}
	return errors.Join(errs...)
}

// maxHotWords bounds server.hot_words.
const maxHotWords = 100

// ranges checks the timings and sizes against what a person can defend, beyond what Config
// needs to work at all (tests dial with millisecond timings; a configuration file may not).
func (s Settings) ranges(c Config) []error {
	var errs []error
	outside := func(key string, v, lo, hi time.Duration, bounds string) {
		if v >= 0 && (v < lo || v > hi) { // negative: Config.Validate says so
			errs = append(errs, fmt.Errorf("server.%s: %v is outside %s", key, v, bounds))
		}
	}
	// The phase deadlines (zero takes the default); time in the server's queue is not limited.
	outside("init_timeout", c.InitTimeout, minInitTimeout, maxInitTimeout, fmt.Sprint(minInitTimeout, "..", maxInitTimeout))
	outside("close_timeout", c.CloseTimeout, minCloseTimeout, maxCloseTimeout, fmt.Sprint(minCloseTimeout, "..", maxCloseTimeout))
	// Real gateways ping every 20 s: under 1 s is chatter, over a minute lets NATs forget the link.
	outside("ping_interval", c.PingInterval, time.Second, time.Minute, "1s..1m")
	outside("dead_link_timeout", c.DeadLinkTimeout, 3*time.Second, 5*time.Minute, "3s..5m")
	// Connect, TLS and the WebSocket handshake: a slow link needs seconds, never minutes.
	outside("dial_timeout", c.DialTimeout, time.Second, 2*time.Minute, "1s..2m")
	// One reply delta of 1 s is ~128 KiB as base64 JSON; servers themselves refuse frames over
	// 128 MiB (close 1009), and a frame that size is the memory of a small board.
	if c.MaxFrameBytes >= 4096 && (c.MaxFrameBytes < 256<<10 || c.MaxFrameBytes > 128<<20) { // below 4096: Config.Validate
		errs = append(errs, fmt.Errorf("server.max_frame_bytes: %v is outside 256KiB..128MiB", yamlconf.Size(c.MaxFrameBytes)))
	}
	// OpenVoice's hot words bias the recogniser's prompt, which holds a few hundred tokens.
	if len(s.HotWords) > maxHotWords {
		errs = append(errs, fmt.Errorf("server.hot_words: %d words; at most %d", len(s.HotWords), maxHotWords))
	}
	return errs
}
