package devices

import (
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
	// only delays capture. Defaults 100 ms in, 50 ms out.
	InputLatency  time.Duration `yaml:"input_latency"`
	OutputLatency time.Duration `yaml:"output_latency"`
	// JitterBuffer is how long reply audio waits before it starts playing, so that a server
	// producing about a second of speech per second plays without gaps (0: play at once).
	JitterBuffer *time.Duration `yaml:"jitter_buffer"`
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
	if c.InputLatency == 0 {
		c.InputLatency = 100 * time.Millisecond
	}
	if c.OutputLatency == 0 {
		c.OutputLatency = 50 * time.Millisecond
	}
	if c.JitterBuffer == nil {
		d := 200 * time.Millisecond
		c.JitterBuffer = &d
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

// Validate names the first unusable field.
func (c AudioConfig) Validate() error {
	for _, f := range []struct{ key, v string }{{"input", c.Input}, {"input_fallback", c.InputFallback},
		{"output", c.Output}, {"output_fallback", c.OutputFallback}} {
		if p, ok := strings.CutPrefix(f.v, "file:"); ok && p == "" {
			return fmt.Errorf("audio.%s: %q names no file", f.key, f.v)
		}
	}
	switch {
	case c.Input == "none":
		return fmt.Errorf("audio.input: none: the agent needs a microphone (or file:PATH)")
	case c.Input == "auto" && c.InputFallback == "":
		return fmt.Errorf("audio.input_fallback: empty; auto needs a fallback for when there is no microphone (e.g. file:PATH)")
	case c.InputFallback == "auto" || c.OutputFallback == "auto":
		return fmt.Errorf("audio: a fallback cannot be auto")
	case c.InputRate != 0 && (c.InputRate < 8000 || c.InputRate > 192000):
		return fmt.Errorf("audio.input_rate: %d is not 0 (native) or 8000..192000", c.InputRate)
	case c.OutputRate != 0 && (c.OutputRate < 8000 || c.OutputRate > 192000):
		return fmt.Errorf("audio.output_rate: %d is not 0 (native) or 8000..192000", c.OutputRate)
	case c.InputChannels < 0 || c.InputChannels > 32:
		return fmt.Errorf("audio.input_channels: %d is outside 0..32", c.InputChannels)
	case c.GainDB < -40 || c.GainDB > 40:
		return fmt.Errorf("audio.gain_db: %v is outside -40..40", c.GainDB)
	case *c.Volume < 0 || *c.Volume > 100:
		return fmt.Errorf("audio.volume: %d is outside 0..100", *c.Volume)
	case c.InputLatency < 0 || c.InputLatency > 2*time.Second:
		return fmt.Errorf("audio.input_latency: %v is outside 0..2s", c.InputLatency)
	case c.OutputLatency < 0 || c.OutputLatency > 2*time.Second:
		return fmt.Errorf("audio.output_latency: %v is outside 0..2s", c.OutputLatency)
	case *c.JitterBuffer < 0 || *c.JitterBuffer > 2*time.Second:
		return fmt.Errorf("audio.jitter_buffer: %v is outside 0..2s", *c.JitterBuffer)
	}
	if c.InputChannel != "mix" {
		n, err := strconv.Atoi(c.InputChannel)
		if err != nil || n < 0 || (c.InputChannels > 0 && n >= c.InputChannels) {
			return fmt.Errorf("audio.input_channel: %q is not mix or a channel number below input_channels", c.InputChannel)
		}
	}
	return nil
}
