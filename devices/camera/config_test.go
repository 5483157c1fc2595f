package camera

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Source: "0"}, ""},
		{Config{Source: "/dev/video0", Width: 1280, Height: 720, FPS: 30, EncodeFPS: 2}, ""},
		{Config{Source: "file:x.mp4", MaxEdge: 320, Quality: 50}, ""},
		{Config{Source: "libcamerasrc ! videoconvert ! appsink"}, ""},
		{Config{Source: "rtsp://cam.local/stream"}, ""},
		{Config{}, "camera.source: empty"},
		{Config{Source: "  "}, "camera.source: empty"},
		{Config{Source: "file:"}, `camera.source: "file:" names no file`},
		{Config{Source: "99999999999999999999"}, "camera.source: \"99999999999999999999\" is not a usable camera index"},
		{Config{Source: "0", Width: -1}, "camera.width: -1"},
		{Config{Source: "0", Height: 20000}, "camera.height: 20000"},
		{Config{Source: "0", FPS: -1}, "camera.fps: -1"},
		{Config{Source: "0", EncodeFPS: -1}, "camera.encode_fps: -1"},
		{Config{Source: "0", EncodeFPS: 31}, "camera.encode_fps: 31"},
		{Config{Source: "0", MaxEdge: 8}, "camera.max_edge: 8"},
		{Config{Source: "0", Quality: -3}, "camera.quality: -3"},
		{Config{Source: "0", Retry: time.Millisecond}, "camera.retry: 1ms"},
		{Config{Source: "0", Retry: time.Minute, RetryMax: time.Second}, "camera.retry_max: 1s"},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestParseSource(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Source
	}{
		{"0", Source{Name: "0", Kind: SourceIndex, Index: 0, URI: "0"}},
		{"12", Source{Name: "12", Kind: SourceIndex, Index: 12, URI: "12"}},
		{"/dev/video2", Source{Name: "/dev/video2", Kind: SourceDevice, URI: "/dev/video2"}},
		{"file:/a b.mp4", Source{Name: "file:/a b.mp4", Kind: SourceFile, URI: "/a b.mp4"}},
		{"v4l2src ! appsink", Source{Name: "v4l2src ! appsink", Kind: SourcePipeline, URI: "v4l2src ! appsink"}},
		{"rtsp://x/y", Source{Name: "rtsp://x/y", Kind: SourceURL, URI: "rtsp://x/y"}},
	} {
		got, err := ParseSource(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSource(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// FuzzConfigValidate: any configuration is accepted or rejected with a message naming a
// camera.* field, never a panic.
func FuzzConfigValidate(f *testing.F) {
	f.Add("0", 640, 480, 30.0, 640, 80, 1.0)
	f.Add("file:x.mp4", 0, 0, 0.0, 0, 0, 0.0)
	f.Add("libcamerasrc ! appsink", -1, 99999, -3.5, 1, 101, 1e9)
	f.Fuzz(func(t *testing.T, src string, w, h int, fps float64, edge, q int, efps float64) {
		err := Config{Source: src, Width: w, Height: h, FPS: fps, MaxEdge: edge, Quality: q, EncodeFPS: efps}.Validate()
		if err != nil && !strings.HasPrefix(err.Error(), "camera.") {
			t.Errorf("error %q does not name a camera.* field", err)
		}
	})
}

// The camera program gets the configuration through flags: Args and RegisterFlags agree.
func TestConfigFlagsRoundTrip(t *testing.T) {
	for _, c := range []Config{
		{Source: "file:/a b.mp4"},
		{Source: "libcamerasrc ! video/x-raw,width=1280 ! appsink", Width: 1280, Height: 720, FPS: 7.5, MaxEdge: 320, Quality: 55,
			EncodeFPS: 0.5, Retry: 250 * time.Millisecond, RetryMax: time.Minute},
	} {
		var got Config
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		got.RegisterFlags(fs)
		if err := fs.Parse(c.Args()); err != nil || got != c {
			t.Errorf("through flags %+v became %+v (%v)", c, got, err)
		}
	}
}
