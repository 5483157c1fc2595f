package devices

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// AudioConfig is the `audio:` section: where sound comes from and goes to, and how the real
// devices are set up.
//
// Input takes "default", a PortAudio device index, part of a device name (case-insensitive),
// "file:PATH" (a WAV file standing in for the microphone) or "auto" (the default input device if
// there is one, else InputFallback). Output takes the same, plus "none" (discard, in real time).
type AudioConfig struct {
	Input          string `yaml:"input"`
	InputFallback  string `yaml:"input_fallback"`
	Output         string `yaml:"output"`
	OutputFallback string `yaml:"output_fallback"`
	// Loop replays a file input from the start when it ends (otherwise the agent stops at its end).
	Loop bool `yaml:"loop"`

	// Microphone: capture rate (0: native), channels (0: up to 2), which channel ("mix" or a
	// 0-based number) and gain in dB.
	InputRate     int     `yaml:"input_rate"`
	InputChannels int     `yaml:"input_channels"`
	InputChannel  string  `yaml:"input_channel"`
	GainDB        float64 `yaml:"gain_db"`
	// Speaker: output rate (0: native) and volume 0..100 (changeable live).
	OutputRate int  `yaml:"output_rate"`
	Volume     *int `yaml:"volume"`
	// InputLatency and OutputLatency are asked of PortAudio for each stream. Small buffers cost
	// CPU (measured on PulseAudio: 69 ms CPU per second with ~9 ms buffers against 21 ms with
	// 200 ms); the speaker's buffer bounds how fast an interrupt is heard, the microphone's
	// only delays capture. Defaults 100 ms in, 50 ms out. A file input delivers blocks of
	// InputLatency, as a device with that buffer would, when it is set; left unset (0 after
	// WithDefaults), a file delivers the agent's chunk at a time (DefaultInputLatency blocks
	// for OpenVoice's small frames): nothing hears a file in real time, and each block is a
	// wake-up.
	InputLatency  time.Duration `yaml:"input_latency"`
	OutputLatency time.Duration `yaml:"output_latency"`
	// OutputRest is how long the speaker plays only silence before it closes its stream, to
	// open it again when a reply comes (0, the default: never). A stream playing silence wakes
	// the sound thread at every device period all day: a battery-powered satellite on a plain
	// ALSA card wants a few seconds here. Outputs that take long to wake (HDMI sinks) or click
	// when a stream starts want 0. The echo canceller verifies itself, protected, at the start
	// of the first reply after a rest (see the README).
	OutputRest time.Duration `yaml:"output_rest"`
	// JitterBuffer is how long reply audio waits before it starts playing, so that a server
	// producing about a second of speech per second plays without gaps (0: play at once).
	JitterBuffer *time.Duration `yaml:"jitter_buffer"`

	// EchoCancel is what is done about the speaker's sound coming back into the microphone:
	// "aec" (cancel it, the default), "mute" (half duplex: the microphone sends silence while
	// the speaker plays, plus MuteHangover) or "none". It applies when both the microphone and
	// the speaker are real devices.
	EchoCancel string `yaml:"echo_cancel"`
	// HardwareAEC says the microphone cancels the echo itself (ReSpeaker, XMOS arrays): no
	// echo handling here, whatever EchoCancel says.
	HardwareAEC bool      `yaml:"hardware_aec"`
	AEC         AECConfig `yaml:"aec"`
	// MuteHangover is how long the microphone stays silent after the speaker's sound (mute).
	MuteHangover     time.Duration          `yaml:"mute_hangover"`
	NoiseSuppression NoiseSuppressionConfig `yaml:"noise_suppression"`
	AGC              AGCConfig              `yaml:"agc"`
}

// AECConfig tunes the echo canceller (audio.aec).
type AECConfig struct {
	// FilterLength is the longest echo the canceller models (room reverberation plus any delay
	// not covered by Delay); longer costs CPU and converges slower. Default 200ms.
	FilterLength time.Duration `yaml:"filter_length"`
	// Delay is extra echo path delay beyond the devices' own buffers (which are measured from
	// PortAudio's timestamps): e.g. a Bluetooth speaker's. Default 0.
	Delay time.Duration `yaml:"delay"`
	// EchoSuppressDB and EchoSuppressActiveDB attenuate what echo is left after cancelling,
	// while only the speaker is heard and while the user talks too. Defaults -40 and -15.
	EchoSuppressDB       int `yaml:"echo_suppress_db"`
	EchoSuppressActiveDB int `yaml:"echo_suppress_active_db"`
}

// NoiseSuppressionConfig is audio.noise_suppression.
type NoiseSuppressionConfig struct {
	Enabled *bool `yaml:"enabled"`  // default true
	LevelDB int   `yaml:"level_db"` // most attenuation of noise, default -30
}

// AGCConfig is audio.agc: automatic gain on the cleaned microphone signal.
type AGCConfig struct {
	Enabled   bool    `yaml:"enabled"`     // default false
	LevelDBFS float64 `yaml:"level_dbfs"`  // target loudness, default -20
	MaxGainDB int     `yaml:"max_gain_db"` // default 30
}

// DefaultInputLatency is a microphone's buffer when audio.input_latency is not set.
const DefaultInputLatency = 100 * time.Millisecond

// FileInput reports whether the microphone is a WAV file (audio.input: file:PATH).
func (c AudioConfig) FileInput() bool { return strings.HasPrefix(c.Input, "file:") }

// EchoMode is the echo handling in effect: none with a hardware canceller.
func (c AudioConfig) EchoMode() string {
	if c.HardwareAEC {
		return "none"
	}
	return c.EchoCancel
}

// WithDefaults fills in unset fields.
func (c AudioConfig) WithDefaults() AudioConfig {
	if c.Input == "" {
		c.Input = "default"
	}
	if c.Output == "" {
		c.Output = "default"
	}
	if c.OutputFallback == "" {
		c.OutputFallback = "none"
	}
	if c.InputChannel == "" {
		c.InputChannel = "mix"
	}
	if c.Volume == nil {
		v := 100
		c.Volume = &v
	}
	if c.InputLatency == 0 && !c.FileInput() {
		c.InputLatency = DefaultInputLatency
	}
	if c.OutputLatency == 0 {
		c.OutputLatency = 50 * time.Millisecond
	}
	if c.JitterBuffer == nil {
		d := 200 * time.Millisecond
		c.JitterBuffer = &d
	}
	if c.EchoCancel == "" {
		c.EchoCancel = "aec"
	}
	if c.AEC.FilterLength == 0 {
		c.AEC.FilterLength = 200 * time.Millisecond
	}
	if c.AEC.EchoSuppressDB == 0 {
		c.AEC.EchoSuppressDB = -40
	}
	if c.AEC.EchoSuppressActiveDB == 0 {
		c.AEC.EchoSuppressActiveDB = -15
	}
	if c.MuteHangover == 0 {
		c.MuteHangover = 300 * time.Millisecond
	}
	if c.NoiseSuppression.Enabled == nil {
		on := true
		c.NoiseSuppression.Enabled = &on
	}
	if c.NoiseSuppression.LevelDB == 0 {
		c.NoiseSuppression.LevelDB = -30
	}
	if c.AGC.LevelDBFS == 0 {
		c.AGC.LevelDBFS = -20
	}
	if c.AGC.MaxGainDB == 0 {
		c.AGC.MaxGainDB = 30
	}
	return c
}

// Channel is the microphone channel to keep, or -1 to mix all down.
func (c AudioConfig) Channel() int {
	if c.InputChannel == "mix" {
		return -1
	}
	n, _ := strconv.Atoi(c.InputChannel)
	return n
}

// Validate reports every unusable field, each with its path under "audio.".
func (c AudioConfig) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for _, f := range []struct{ key, v string }{{"input", c.Input}, {"input_fallback", c.InputFallback},
		{"output", c.Output}, {"output_fallback", c.OutputFallback}} {
		if p, ok := strings.CutPrefix(f.v, "file:"); ok && p == "" {
			bad("audio.%s: %q names no file", f.key, f.v)
		}
	}
	if c.Input == "none" {
		bad("audio.input: none: the agent needs a microphone (or file:PATH)")
	}
	if c.Input == "auto" && c.InputFallback == "" {
		bad("audio.input_fallback: empty; auto needs a fallback for when there is no microphone (e.g. file:PATH)")
	}
	if c.InputFallback == "auto" || c.OutputFallback == "auto" {
		bad("audio: a fallback cannot be auto")
	}
	if c.InputRate != 0 && (c.InputRate < 8000 || c.InputRate > 192000) {
		bad("audio.input_rate: %d is not 0 (native) or 8000..192000", c.InputRate)
	}
	if c.OutputRate != 0 && (c.OutputRate < 8000 || c.OutputRate > 192000) {
		bad("audio.output_rate: %d is not 0 (native) or 8000..192000", c.OutputRate)
	}
	if c.InputChannels < 0 || c.InputChannels > 32 {
		bad("audio.input_channels: %d is outside 0..32", c.InputChannels)
	}
	if c.GainDB < -40 || c.GainDB > 40 {
		bad("audio.gain_db: %v is outside -40..40", c.GainDB)
	}
	if *c.Volume < 0 || *c.Volume > 100 {
		bad("audio.volume: %d is outside 0..100", *c.Volume)
	}
	// PortAudio rounds up to what the device can do; over 2 s the speaker would answer an
	// interrupt seconds late.
	if (c.InputLatency != 0 || !c.FileInput()) && (c.InputLatency < time.Millisecond || c.InputLatency > 2*time.Second) {
		bad("audio.input_latency: %v is outside 1ms..2s", c.InputLatency)
	}
	if c.OutputLatency < time.Millisecond || c.OutputLatency > 2*time.Second {
		bad("audio.output_latency: %v is outside 1ms..2s", c.OutputLatency)
	}
	if c.OutputRest < 0 || (c.OutputRest > 0 && c.OutputRest < time.Second) {
		bad("audio.output_rest: %v is not 0 (never) or 1s or more", c.OutputRest)
	}
	if *c.JitterBuffer < 0 || *c.JitterBuffer > 2*time.Second {
		bad("audio.jitter_buffer: %v is outside 0..2s", *c.JitterBuffer)
	}
	if c.EchoCancel != "aec" && c.EchoCancel != "mute" && c.EchoCancel != "none" {
		bad("audio.echo_cancel: %q is not one of aec, mute, none", c.EchoCancel)
	}
	if c.AEC.FilterLength < 10*time.Millisecond || c.AEC.FilterLength > time.Second {
		bad("audio.aec.filter_length: %v is outside 10ms..1s", c.AEC.FilterLength)
	}
	if c.AEC.Delay < 0 || c.AEC.Delay > time.Second {
		bad("audio.aec.delay: %v is outside 0..1s", c.AEC.Delay)
	}
	if c.AEC.EchoSuppressDB < -90 || c.AEC.EchoSuppressDB > 0 {
		bad("audio.aec.echo_suppress_db: %d is outside -90..0", c.AEC.EchoSuppressDB)
	}
	if c.AEC.EchoSuppressActiveDB < -90 || c.AEC.EchoSuppressActiveDB > 0 {
		bad("audio.aec.echo_suppress_active_db: %d is outside -90..0", c.AEC.EchoSuppressActiveDB)
	}
	if c.MuteHangover < 0 || c.MuteHangover > 10*time.Second {
		bad("audio.mute_hangover: %v is outside 0..10s", c.MuteHangover)
	}
	if c.NoiseSuppression.LevelDB < -90 || c.NoiseSuppression.LevelDB > 0 {
		bad("audio.noise_suppression.level_db: %d is outside -90..0", c.NoiseSuppression.LevelDB)
	}
	if !(c.AGC.LevelDBFS >= -60 && c.AGC.LevelDBFS <= 0) {
		bad("audio.agc.level_dbfs: %v is outside -60..0", c.AGC.LevelDBFS)
	}
	if c.AGC.MaxGainDB < 0 || c.AGC.MaxGainDB > 60 {
		bad("audio.agc.max_gain_db: %d is outside 0..60", c.AGC.MaxGainDB)
	}
	if c.InputChannel != "mix" {
		n, err := strconv.Atoi(c.InputChannel)
		if err != nil || n < 0 || (c.InputChannels > 0 && n >= c.InputChannels) {
			bad("audio.input_channel: %q is not mix or a channel number below input_channels", c.InputChannel)
		}
	}
	return errors.Join(errs...)
}
