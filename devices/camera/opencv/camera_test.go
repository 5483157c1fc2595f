package opencv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	stdjpeg "image/jpeg"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/omnisat/omnisat/devices/camera"
)

// The camera is what the agent takes frames from (agent.FrameSource); the agent is not
// imported here so that this cgo package's tests do not depend on it.
var _ interface{ Latest() ([]byte, bool) } = (*Camera)(nil)

// requireFFmpeg skips the test without ffmpeg, or fails it on CI where it must be installed.
func requireFFmpeg(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("ffmpeg not installed: run make deps")
		}
		t.Skip("ffmpeg not installed: run make deps")
	}
}

// makeVideo writes an H.264 test-pattern video (a moving pattern with a frame counter) and
// returns its path. It writes to a temporary name first, so that a camera polling path never
// opens a half-written file.
func makeVideo(t testing.TB, path string, w, h int, fps int, seconds float64) string {
	t.Helper()
	requireFFmpeg(t)
	tmp := path + ".part.mp4"
	out, err := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-y",
		"-f", "lavfi", "-i", fmt.Sprintf("testsrc=size=%dx%d:rate=%d", w, h, fps),
		"-t", fmt.Sprint(seconds), "-pix_fmt", "yuv420p", tmp).CombinedOutput()
	if err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// stateLog records onState calls.
type stateLog struct {
	mu     sync.Mutex
	events []error // nil: up
	ch     chan struct{}
}

func newStateLog() *stateLog { return &stateLog{ch: make(chan struct{}, 100)} }

func (s *stateLog) on(ok bool, err error) {
	if ok != (err == nil) {
		err = fmt.Errorf("inconsistent onState(%v, %v)", ok, err)
	}
	s.mu.Lock()
	s.events = append(s.events, err)
	s.mu.Unlock()
	s.ch <- struct{}{}
}

func (s *stateLog) snapshot() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// waitFor waits for the n-th state event.
func (s *stateLog) waitFor(t *testing.T, n int, within time.Duration) error {
	t.Helper()
	deadline := time.After(within)
	for {
		if ev := s.snapshot(); len(ev) >= n {
			return ev[n-1]
		}
		select {
		case <-s.ch:
		case <-deadline:
			t.Fatalf("no state event %d within %v (got %v)", n, within, s.snapshot())
		}
	}
}

func openCamera(t *testing.T, cfg camera.Config, onState func(bool, error)) *Camera {
	t.Helper()
	c, err := Open(context.Background(), cfg, onState, nil)
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func decodeJPEG(t *testing.T, b []byte) image.Image {
	t.Helper()
	img, err := stdjpeg.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the frame does not decode (%d bytes): %v", len(b), err)
	}
	return img
}

func TestLatestDeliversFramesAtEncodeFPS(t *testing.T) {
	path := makeVideo(t, filepath.Join(t.TempDir(), "cam.mp4"), 640, 480, 30, 5)
	c := openCamera(t, camera.Config{Source: "file:" + path, MaxEdge: 320, Quality: 60, EncodeFPS: 5}, nil)

	b, ok := c.Latest()
	if !ok {
		t.Fatal("no frame right after Open")
	}
	if got := decodeJPEG(t, b).Bounds().Size(); got != image.Pt(320, 240) {
		t.Errorf("frame size %v, want 320x240", got)
	}
	if q, _ := estimateQuality(b); q != 60 {
		t.Errorf("frame quality %d, want 60", q)
	}

	// Count new frames for 2 s: about 10 at 5 per second. Loose bounds: this checks the rate
	// is EncodeFPS and not the file's 30 fps, not the scheduler's accuracy.
	const window = 2 * time.Second
	changes, last := 0, b
	for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		b, ok := c.Latest()
		if !ok {
			t.Fatal("Latest lost its frame while the file plays")
		}
		if &b[0] != &last[0] {
			changes++
			if bytes.Equal(b, last) {
				t.Error("a new frame has the same bytes as the last: the video is not advancing")
			}
			last = b
		}
	}
	// Under load frames can come late, never early: the lower bound only proves progress, the
	// upper one that encoding is limited to encode_fps.
	if changes < 3 || changes > 14 {
		t.Errorf("%d new frames in %v at encode_fps 5, want about 10 (3..14)", changes, window)
	}
}

func TestDefaultsShrink720p(t *testing.T) {
	path := makeVideo(t, filepath.Join(t.TempDir(), "hd.mp4"), 1280, 720, 25, 1)
	c := openCamera(t, camera.Config{Source: "file:" + path}, nil)
	b, ok := c.Latest()
	if !ok {
		t.Fatal("no frame")
	}
	if got := decodeJPEG(t, b).Bounds().Size(); got != image.Pt(640, 360) {
		t.Errorf("frame size %v, want 640x360", got)
	}
	if q, _ := estimateQuality(b); q != 80 {
		t.Errorf("frame quality %d, want the default 80", q)
	}
}

func TestFilePlaysAtItsFrameRateAndLoops(t *testing.T) {
	// A 0.5 s file at 10 fps, encoded at the file's own rate: in 2 s the camera must show about
	// 20 frames (so it loops, and is paced rather than read as fast as possible).
	path := makeVideo(t, filepath.Join(t.TempDir(), "short.mp4"), 160, 120, 10, 0.5)
	c := openCamera(t, camera.Config{Source: "file:" + path, EncodeFPS: 10}, nil)
	changes, last := 0, []byte(nil)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		b, ok := c.Latest()
		if !ok {
			t.Fatal("Latest lost its frame while the file loops")
		}
		if last == nil || &b[0] != &last[0] {
			changes++
			last = b
		}
	}
	// More than the file's 5 frames proves it loops; no more than ~20 that it is paced (a loaded
	// machine may show fewer, never more).
	if changes < 6 || changes > 28 {
		t.Errorf("%d new frames in 2 s from a looping 10 fps file, want about 20 (6..28)", changes)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	notVideo := filepath.Join(dir, "notes.mp4")
	if err := os.WriteFile(notVideo, []byte("not a video"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  camera.Config
		want []string
	}{
		{"missing file", camera.Config{Source: "file:" + filepath.Join(dir, "nope.mp4")},
			[]string{`open camera "file:` + dir, "no such file or directory"}},
		{"not a video", camera.Config{Source: "file:" + notVideo},
			[]string{`open camera "file:` + notVideo + `"`, "could not open it"}},
		{"missing device", camera.Config{Source: "/dev/video63"},
			[]string{`open camera "/dev/video63"`, "no such file or directory"}},
		{"missing index", camera.Config{Source: "63"},
			[]string{`open camera "63"`, "/dev/video63: no such file or directory"}},
		{"bad pipeline", camera.Config{Source: "nosuchelement ! appsink"},
			[]string{`open camera "nosuchelement ! appsink"`}},
		{"empty source", camera.Config{}, []string{`open camera ""`, "camera.source: empty"}},
		{"bad quality", camera.Config{Source: "0", Quality: 101}, []string{"camera.quality: 101"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			states := newStateLog()
			c, err := Open(context.Background(), tc.cfg, states.on, nil)
			if err == nil {
				c.Close()
				t.Fatal("Open succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if ev := states.snapshot(); len(ev) != 0 {
				t.Errorf("onState called for a camera that never opened: %v", ev)
			}
		})
	}
}

func TestLostAndRecovered(t *testing.T) {
	dir := t.TempDir()
	path := makeVideo(t, filepath.Join(dir, "cam.mp4"), 320, 240, 30, 0.5)
	spare := makeVideo(t, filepath.Join(dir, "spare.mp4"), 320, 240, 30, 0.5)
	states := newStateLog()
	c := openCamera(t, camera.Config{Source: "file:" + path, EncodeFPS: 10, Retry: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond}, states.on)
	if err := states.waitFor(t, 1, time.Second); err != nil {
		t.Fatalf("first state: %v, want up", err)
	}

	// The file disappears: at its end the camera cannot reopen it.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	err := states.waitFor(t, 2, 3*time.Second)
	if err == nil {
		t.Fatal("second state is up, want lost")
	}
	if want := `reopen camera "file:` + path + `" to loop`; !strings.Contains(err.Error(), want) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("loss error %q does not say %q (and not found)", err, want)
	}
	if _, ok := c.Latest(); ok {
		t.Error("Latest has a frame while the camera is lost")
	}
	time.Sleep(600 * time.Millisecond) // several retries: each must stay silent
	if ev := states.snapshot(); len(ev) != 2 {
		t.Errorf("state events while lost: %v, want exactly one loss", ev)
	}

	// It comes back.
	if err := os.Rename(spare, path); err != nil {
		t.Fatal(err)
	}
	if err := states.waitFor(t, 3, 3*time.Second); err != nil {
		t.Fatalf("third state: %v, want up", err)
	}
	b, ok := c.Latest()
	if !ok {
		t.Fatal("no frame after recovery")
	}
	decodeJPEG(t, b)
}

func TestCloseAndCancelLeakNothing(t *testing.T) {
	path := makeVideo(t, filepath.Join(t.TempDir(), "cam.mp4"), 320, 240, 30, 1)
	before := runtime.NumGoroutine()

	c, err := Open(context.Background(), camera.Config{Source: "file:" + path}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, ok := c.Latest(); ok {
		t.Error("Latest has a frame after Close")
	}

	// Cancelling the context stops the grabber as Close does.
	ctx, cancel := context.WithCancel(context.Background())
	c, err = Open(ctx, camera.Config{Source: "file:" + path}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-c.done:
	case <-time.After(time.Second):
		t.Fatal("the grabber did not stop when the context was cancelled")
	}
	if _, ok := c.Latest(); ok {
		t.Error("Latest has a frame after the context ended")
	}
	c.Close()

	// Open with a context that is already over fails and leaves nothing behind.
	if _, err := Open(ctx, camera.Config{Source: "file:" + path}, nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Open with a cancelled context: %v", err)
	}

	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

func TestPacerDoesNotDrift(t *testing.T) {
	p := newPacer(200) // 5 ms a frame
	start := time.Now()
	for i := 0; i < 100; i++ {
		if !p.wait(context.Background()) {
			t.Fatal("wait ended early")
		}
		time.Sleep(time.Millisecond) // work between frames must not add up
	}
	// 100 frames: the last is due at 99 × 5 ms.
	// Pacing can only be late under load, never early: the lower bound is the test.
	if d := time.Since(start); d < 490*time.Millisecond || d > 5*time.Second {
		t.Errorf("100 frames at 200 fps took %v, want about 0.5 s", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p = newPacer(0.1)
	p.wait(ctx) // the first frame is due at once
	if p.wait(ctx) {
		t.Error("wait with a cancelled context reported true")
	}
}
