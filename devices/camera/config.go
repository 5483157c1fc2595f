package camera

import (
	"errors"
	"flag"
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

// StaleAfter is how old the newest frame may be before the camera counts as silent: three
// encode intervals, at least 3 s.
func (c Config) StaleAfter() time.Duration {
	return max(3*time.Second, 3*time.Duration(float64(time.Second)/c.WithDefaults().EncodeFPS))
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
	o := c.JPEG().WithDefaults()
	c.MaxEdge, c.Quality = o.MaxEdge, o.Quality
	return c
}

// JPEG is the encoding settings.
func (c Config) JPEG() jpeg.Options {
	return jpeg.Options{MaxEdge: c.MaxEdge, Quality: c.Quality}
}

// Validate reports every unusable field. Zero fields are valid: they take their defaults.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	c = c.WithDefaults()
	if _, err := ParseSource(c.Source); err != nil {
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
	if err := c.JPEG().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// SourceKind is what a Source names.
type SourceKind int

const (
	SourceIndex    SourceKind = iota // "0": a V4L2 camera by index
	SourceDevice                     // "/dev/video0"
	SourceFile                       // "file:PATH"
	SourcePipeline                   // a GStreamer pipeline (it has a "!")
	SourceURL                        // anything else: an RTSP/HTTP URL for OpenCV to try
)

// Source is a parsed Config.Source.
type Source struct {
	Name  string // as configured, for messages
	Kind  SourceKind
	Index int    // SourceIndex
	URI   string // what is opened (the path for SourceDevice and SourceFile)
}

// ParseSource reads a Config.Source.
func ParseSource(s string) (Source, error) {
	src := Source{Name: s, URI: s}
	switch {
	case strings.TrimSpace(s) == "":
		return src, errors.New("empty: want a camera index, /dev/videoN, file:PATH or a GStreamer pipeline")
	case isDigits(s):
		n, err := strconv.Atoi(s)
		if err != nil || n > 1023 {
			return src, fmt.Errorf("%q is not a usable camera index", s)
		}
		src.Kind, src.Index = SourceIndex, n
	case strings.HasPrefix(s, "/dev/"):
		src.Kind = SourceDevice
	case strings.HasPrefix(s, "file:"):
		src.Kind, src.URI = SourceFile, strings.TrimPrefix(s, "file:")
		if src.URI == "" {
			return src, fmt.Errorf("%q names no file", s)
		}
	case strings.Contains(s, "!"):
		src.Kind = SourcePipeline
	default:
		src.Kind = SourceURL
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

// Args are the camera program's command-line flags for c (see RegisterFlags).
func (c Config) Args() []string {
	return []string{"--source", c.Source,
		"--width", strconv.Itoa(c.Width), "--height", strconv.Itoa(c.Height),
		"--fps", strconv.FormatFloat(c.FPS, 'g', -1, 64),
		"--max-edge", strconv.Itoa(c.MaxEdge), "--quality", strconv.Itoa(c.Quality),
		"--encode-fps", strconv.FormatFloat(c.EncodeFPS, 'g', -1, 64),
		"--retry", c.Retry.String(), "--retry-max", c.RetryMax.String()}
}

// RegisterFlags makes fs fill c from the flags Args writes (zero values take the defaults).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Source, "source", "", "camera.source: index, /dev/videoN, file:PATH, a GStreamer pipeline or a URL")
	fs.IntVar(&c.Width, "width", 0, "camera.width (0: the camera's)")
	fs.IntVar(&c.Height, "height", 0, "camera.height (0: the camera's)")
	fs.Float64Var(&c.FPS, "fps", 0, "camera.fps (0: the camera's)")
	fs.IntVar(&c.MaxEdge, "max-edge", 0, "camera.max_edge (0: 640)")
	fs.IntVar(&c.Quality, "quality", 0, "camera.quality (0: 80)")
	fs.Float64Var(&c.EncodeFPS, "encode-fps", 0, "camera.encode_fps (0: 1)")
	fs.DurationVar(&c.Retry, "retry", 0, "camera.retry (0: 1s)")
	fs.DurationVar(&c.RetryMax, "retry-max", 0, "camera.retry_max (0: 30s)")
}
