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

// CameraConfig is the `camera:` section.
//
// Source takes "dir:PATH" (a folder of JPEG files, shown in name order), "none", or a camera for
// the real devices.
type CameraConfig struct {
	Source string  `yaml:"source"`
	FPS    float64 `yaml:"fps"`
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

// WithDefaults fills in unset fields.
func (c CameraConfig) WithDefaults() CameraConfig {
	if c.Source == "" {
		c.Source = "none"
	}
	if c.FPS == 0 {
		c.FPS = 1
	}
	return c
}

// Validate names the first unusable field.
func (c CameraConfig) Validate() error {
	if p, ok := strings.CutPrefix(c.Source, "dir:"); ok && p == "" {
		return fmt.Errorf("camera.source: %q names no folder", c.Source)
	}
	if c.FPS < 0 || c.FPS > 60 {
		return fmt.Errorf("camera.fps: %v is outside 0..60", c.FPS)
	}
	return nil
}
