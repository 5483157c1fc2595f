// Package jpeg holds the settings of the JPEG images the model server receives and the size a
// frame is shrunk to (keeping its aspect ratio, never enlarging it). It is pure Go, so that the
// agent's process can check the camera section without OpenCV; the encoder itself
// (OpenCV's, libjpeg-turbo on Debian and Raspberry Pi OS) lives with the camera in its own
// program: see devices/camera/opencv.
package jpeg

import (
	"errors"
	"fmt"
)

// Defaults for Options.
const (
	DefaultMaxEdge = 640
	DefaultQuality = 80
)

// Limits of Options.
const (
	MinMaxEdge = 16
	MaxMaxEdge = 8192
)

// Options are the encoding settings, read from the `camera:` section of the configuration.
// A zero field takes its default.
type Options struct {
	// MaxEdge is the longest edge of the encoded image in pixels (default 640). Larger frames
	// are shrunk with their aspect ratio kept; smaller ones are encoded at their own size.
	MaxEdge int `yaml:"max_edge"`
	// Quality is the JPEG quality, 1..100 (default 80).
	Quality int `yaml:"quality"`
}

// WithDefaults fills in unset fields.
func (o Options) WithDefaults() Options {
	if o.MaxEdge == 0 {
		o.MaxEdge = DefaultMaxEdge
	}
	if o.Quality == 0 {
		o.Quality = DefaultQuality
	}
	return o
}

// Validate names the first unusable field. Zero fields are valid: they take their defaults.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	o = o.WithDefaults()
	if o.MaxEdge < MinMaxEdge || o.MaxEdge > MaxMaxEdge {
		bad("camera.max_edge: %d is outside %d..%d", o.MaxEdge, MinMaxEdge, MaxMaxEdge)
	}
	if o.Quality < 1 || o.Quality > 100 {
		bad("camera.quality: %d is outside 1..100", o.Quality)
	}
	return errors.Join(errs...)
}

// OutputSize is the size an image of w×h pixels is encoded at: the longest edge at most
// maxEdge, the aspect ratio kept (rounded to whole pixels, at least 1), never enlarged.
func OutputSize(w, h, maxEdge int) (int, int) {
	long := max(w, h)
	if long <= maxEdge || long <= 0 {
		return w, h
	}
	scale := float64(maxEdge) / float64(long)
	ow := max(1, int(float64(w)*scale+0.5))
	oh := max(1, int(float64(h)*scale+0.5))
	return min(ow, maxEdge), min(oh, maxEdge)
}
