package camera

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/omnisat/omnisat/pipeline/jpeg"
)

// Defaults for Config.
const (
	DefaultEncodeFPS = 1
	DefaultRetry     = time.Second
	DefaultRetryMax  = 30 * time.Second
)

// Config is the camera's part of the `camera:` section. A zero field takes its default.
type Config struct {
	// Source is where frames come from:
	//   - "0", "1", ...: a V4L2 camera by index (/dev/video0, ...)
	//   - "/dev/video0", "/dev/v4l/by-id/...": a V4L2 camera by path
	//   - "file:PATH": a video file, played at its own frame rate and looped (a test camera)
	//   - anything else goes to OpenCV as is: a GStreamer pipeline ending in appsink (anything
	//     with a "!" in it; CSI cameras on a Raspberry Pi or Jetson), or an RTSP/HTTP URL.
	Source string `yaml:"source"`
	// Width, Height and FPS are what is asked of the camera (0: its default). Cameras pick
	// the nearest mode they have; files ignore them.
	Width  int     `yaml:"width"`
	Height int     `yaml:"height"`
	FPS    float64 `yaml:"fps"`
	// MaxEdge and Quality are the JPEG settings (pipeline/jpeg): longest edge (default 640)
	// and quality (default 80).
	MaxEdge int `yaml:"max_edge"`
	Quality int `yaml:"quality"`
	// EncodeFPS is how often a new JPEG is made (default 1: the agent takes one per 1 s audio
	// chunk). Frames in between are grabbed and dropped without being decoded.
	EncodeFPS float64 `yaml:"encode_fps"`
	// Retry is the first wait before reopening a lost camera (default 1 s); it doubles after
	// each failed attempt up to RetryMax (default 30 s).
	Retry    time.Duration `yaml:"retry"`
	RetryMax time.Duration `yaml:"retry_max"`
}

// WithDefaults fills in unset fields.
func (c Config) WithDefaults() Config {
	if c.EncodeFPS == 0 {
		c.EncodeFPS = DefaultEncodeFPS
	}
	if c.Retry == 0 {
		c.Retry = DefaultRetry
	}
	if c.RetryMax == 0 {
		c.RetryMax = max(DefaultRetryMax, c.Retry)
	}
	o := c.jpegOptions().WithDefaults()
	c.MaxEdge, c.Quality = o.MaxEdge, o.Quality
	return c
}

func (c Config) jpegOptions() jpeg.Options {
	return jpeg.Options{MaxEdge: c.MaxEdge, Quality: c.Quality}
}

// Validate reports every unusable field. Zero fields are valid: they take their defaults.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	c = c.WithDefaults()
	if _, err := parseSource(c.Source); err != nil {
		bad("camera.source: %w", err)
	}
	if c.Width < 0 || c.Width > 16384 {
		bad("camera.width: %d is outside 0..16384", c.Width)
	}
	if c.Height < 0 || c.Height > 16384 {
		bad("camera.height: %d is outside 0..16384", c.Height)
	}
	if !(c.FPS >= 0 && c.FPS <= 240) { // also rejects NaN
		bad("camera.fps: %v is outside 0..240", c.FPS)
	}
	if !(c.EncodeFPS > 0 && c.EncodeFPS <= 30) {
		bad("camera.encode_fps: %v is outside 0..30 (0: the default, 1)", c.EncodeFPS)
	}
	// A lost camera is looked for again after Retry, doubling up to RetryMax: sooner than
	// 10 ms is a busy loop, and a camera plugged back in should not wait more than an hour.
	if c.Retry < 10*time.Millisecond || c.Retry > time.Minute {
		bad("camera.retry: %v is outside 10ms..1m", c.Retry)
	}
	if c.RetryMax < c.Retry {
		bad("camera.retry_max: %v is shorter than camera.retry (%v)", c.RetryMax, c.Retry)
	} else if c.RetryMax > time.Hour {
		bad("camera.retry_max: %v is outside camera.retry..1h", c.RetryMax)
	}
	if err := c.jpegOptions().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

type sourceKind int

const (
	kindIndex  sourceKind = iota // "0"
	kindDevice                   // "/dev/video0"
	kindFile                     // "file:PATH"
	kindOther                    // GStreamer pipeline, URL
)

// source is a parsed Config.Source.
type source struct {
	name  string // as configured, for messages
	kind  sourceKind
	index int    // kindIndex
	uri   string // what OpenCV opens (the path for kindDevice and kindFile)
	api   int    // OpenCV API preference
}

func parseSource(s string) (source, error) {
	src := source{name: s, uri: s, api: apiAny}
	switch {
	case strings.TrimSpace(s) == "":
		return src, errors.New("empty: want a camera index, /dev/videoN, file:PATH or a GStreamer pipeline")
	case isDigits(s):
		n, err := strconv.Atoi(s)
		if err != nil || n > 1023 {
			return src, fmt.Errorf("%q is not a usable camera index", s)
		}
		src.kind, src.index, src.api = kindIndex, n, apiV4L2
	case strings.HasPrefix(s, "/dev/"):
		src.kind, src.api = kindDevice, apiV4L2
	case strings.HasPrefix(s, "file:"):
		src.kind, src.api, src.uri = kindFile, apiFFmpeg, strings.TrimPrefix(s, "file:")
		if src.uri == "" {
			return src, fmt.Errorf("%q names no file", s)
		}
	case strings.Contains(s, "!"):
		src.kind, src.api = kindOther, apiGStreamer
	default:
		src.kind = kindOther
	}
	return src, nil
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}
