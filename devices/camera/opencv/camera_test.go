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
	"github.com/omnisat/omnisat/pipeline/jpeg"
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

// makeVideo writes a test-pattern video (a moving pattern with a frame counter; H.264 for .mp4
// unless codec says otherwise, e.g. "-c:v", "rawvideo") and returns its path. It writes to a
// temporary name first, so that a camera polling path never opens a half-written file.
func makeVideo(t testing.TB, path string, w, h int, fps int, seconds float64, codec ...string) string {
	t.Helper()
	requireFFmpeg(t)
	tmp := path + ".part" + filepath.Ext(path)
	args := []string{"-hide_banner", "-loglevel", "error", "-y",
		"-f", "lavfi", "-i", fmt.Sprintf("testsrc=size=%dx%d:rate=%d", w, h, fps),
		"-t", fmt.Sprint(seconds), "-pix_fmt", "yuv420p"}
	out, err := exec.Command("ffmpeg", append(append(args, codec...), tmp)...).CombinedOutput()
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

// TestGrabberPacesWithoutDrift: the grabber's thread plays a file at its frame rate, counted
// against the clock (work between frames does not add up), grabs every frame, encodes those
// due, and stops at once when told to, even in the middle of a long wait for a frame.
func TestGrabberPacesWithoutDrift(t *testing.T) {
	path := makeVideo(t, filepath.Join(t.TempDir(), "fast.mp4"), 64, 48, 200, 0.5) // 100 frames, 5 ms apart
	src, _ := camera.ParseSource("file:" + path)
	enc := newEncoder(t, jpeg.Options{})
	run := func(fps float64, interval time.Duration, stopAfterFirst bool) (frames int, how grabEnd, grabbed int64, took time.Duration) {
		cp, err := openCapture(src)
		if err != nil {
			t.Fatal(err)
		}
		defer cp.close()
		sched := newSchedule(fps, interval)
		defer sched.free()
		stop, err := newStopSignal(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer stop.close()
		start := time.Now()
		gr, err := startGrabber(cp, enc, sched, stop.fd, "", -1)
		if err != nil {
			t.Fatal(err)
		}
		defer gr.free()
		for {
			b, how := gr.next()
			if b == nil {
				return frames, how, gr.grabbed(), time.Since(start)
			}
			if decodeJPEG(t, b).Bounds().Size() != image.Pt(64, 48) {
				t.Fatal("a frame of the wrong size")
			}
			frames++
			time.Sleep(time.Millisecond) // work between frames must not add up
			if stopAfterFirst {
				stop.signal()
			}
		}
	}

	// 100 frames at 200 fps: the last is due at 99 × 5 ms. Pacing can only be late under load,
	// never early: the lower bound is the test. Encoding every 20 ms keeps about one in four.
	frames, how, grabbed, took := run(200, 20*time.Millisecond, false)
	if how != grabNoFrame || grabbed != 100 {
		t.Errorf("the grabber ended with %d after %d frames, want %d after 100", how, grabbed, grabNoFrame)
	}
	if took < 490*time.Millisecond || took > 5*time.Second {
		t.Errorf("100 frames at 200 fps took %v, want about 0.5 s", took)
	}
	if most := int(took/(20*time.Millisecond)) + 1; frames < 5 || frames > most {
		t.Errorf("%d frames encoded at one per 20 ms over %v, want about 25 (5..%d)", frames, took, most)
	}

	// A frame every 10 s: the first comes at once, and a stop ends the wait for the second.
	frames, how, _, took = run(0.1, time.Millisecond, true)
	if frames != 1 || how != grabStopped || took > 5*time.Second {
		t.Errorf("stopped while waiting for a frame: %d frames, ended with %d after %v; want 1, %d, at once", frames, how, took, grabStopped)
	}
}

// The grabber's thread shrinks frames as jpeg.OutputSize says.
func TestOutputSizeMatchesGo(t *testing.T) {
	for w := 1; w <= 2000; w += 37 {
		for h := 1; h <= 2000; h += 41 {
			for _, edge := range []int{16, 320, 640, 1280} {
				gw, gh := jpeg.OutputSize(w, h, edge)
				if cw, ch := outputSize(w, h, edge); cw != gw || ch != gh {
					t.Fatalf("%dx%d to fit %d: C %dx%d, Go %dx%d", w, h, edge, cw, ch, gw, gh)
				}
			}
		}
	}
}
