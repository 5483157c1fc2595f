package devices

import (
	"fmt"
	"strings"
)

// AudioConfig is the `audio:` section: where sound comes from and goes to.
//
// Input and Output take "file:PATH" (a WAV file standing in for the device), "none" (output
// only: discard), or a device name for the real devices.
type AudioConfig struct {
	Input  string `yaml:"input"`
	Output string `yaml:"output"`
	// Loop replays a file input from the start when it ends (otherwise the agent stops at its end).
	Loop bool `yaml:"loop"`
}

// WithDefaults fills in unset fields.
func (c AudioConfig) WithDefaults() AudioConfig {
	if c.Input == "" {
		c.Input = "default"
	}
	if c.Output == "" {
		c.Output = "default"
	}
	return c
}

// Validate names the first unusable field.
func (c AudioConfig) Validate() error {
	if p, ok := strings.CutPrefix(c.Input, "file:"); ok && p == "" {
		return fmt.Errorf("audio.input: %q names no file", c.Input)
	}
	if p, ok := strings.CutPrefix(c.Output, "file:"); ok && p == "" {
		return fmt.Errorf("audio.output: %q names no file", c.Output)
	}
	if c.Input == "none" {
		return fmt.Errorf("audio.input: none: the agent needs a microphone (or file:PATH)")
	}
	return nil
}
