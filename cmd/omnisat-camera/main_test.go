package main

import (
	"bytes"
	"context"
	"errors"
	"image/jpeg"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/omnisat/omnisat/devices/camera"
	"github.com/omnisat/omnisat/internal/syncbuf"
)

func requireFFmpeg(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("ffmpeg not installed: run make deps")
		}
		t.Skip("ffmpeg not installed: run make deps")
	}
}

// makeVideo writes a 2 s 640x480 test video at 10 fps and returns its path.
func makeVideo(t *testing.T) string {
	t.Helper()
	requireFFmpeg(t)
	video := filepath.Join(t.TempDir(), "cam.mp4")
	if out, err := exec.Command("ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=640x480:rate=10",
		"-t", "2", "-pix_fmt", "yuv420p", video).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v %s", err, out)
	}
	return video
}

// runProgram runs the program on args until stop is called; its output is read as the agent
// reads it.
func runProgram(t *testing.T, args ...string) (r *camera.StreamReader, stderr *bytes.Buffer, stop func() int) {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	stderr = &bytes.Buffer{}
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, args, pw, stderr, -1)
		pw.Close()
	}()
	t.Cleanup(cancel)
	return camera.NewStreamReader(pr, 1<<20), stderr, func() int {
		cancel()
		go io.Copy(io.Discard, pr)
		select {
		case c := <-code:
			return c
		case <-time.After(30 * time.Second):
			t.Fatal("the program did not stop within 30 s")
			return -1
		}
	}
}

// Real OpenCV on a real video file: the program says the camera is up and sends JPEGs of the
// configured size, and stops cleanly when told.
func TestProgramSendsFrames(t *testing.T) {
	video := makeVideo(t)
	r, _, stop := runProgram(t, "--source", "file:"+video, "--max-edge", "320", "--encode-fps", "5")
	frames, up := 0, false
	for frames < 3 {
		m, err := r.Next()
		if err != nil {
			t.Fatalf("after %d frames: %v", frames, err)
		}
		switch m.Kind {
		case camera.MsgUp:
			up = true
		case camera.MsgLost:
			t.Fatalf("lost: %s", m.Reason)
		case camera.MsgFrame:
			frames++
			cfg, err := jpeg.DecodeConfig(bytes.NewReader(m.Frame))
			if err != nil || cfg.Width != 320 || cfg.Height != 240 {
				t.Fatalf("frame %d: %dx%d, %v; want a 320x240 JPEG", frames, cfg.Width, cfg.Height, err)
			}
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d after SIGTERM's equivalent", code)
	}
	if !up {
		t.Fatal("no up message before 3 frames")
	}
}

// As the agent starts it, on a pipe of its own: the camera's thread writes the frames (and the
// up message before them) itself, after the header the program wrote; when the agent is gone
// the program ends with 1.
func TestProgramFramesFromTheCameraThread(t *testing.T) {
	video := makeVideo(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	fd := -1
	if rc, err := pw.SyscallConn(); err != nil || rc.Control(func(d uintptr) { fd = int(d) }) != nil {
		t.Fatal("no descriptor for the pipe")
	}
	var stderr syncbuf.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(context.Background(), []string{"--source", "file:" + video, "--max-edge", "320", "--encode-fps", "5"}, pw, &stderr, fd)
	}()
	r := camera.NewStreamReader(pr, 1<<20)
	if m, err := r.Next(); err != nil || m.Kind != camera.MsgUp {
		t.Fatalf("first message %q, %v; want up (log: %s)", m.Kind, err, stderr.String())
	}
	for i := range 3 {
		m, err := r.Next()
		if err != nil || m.Kind != camera.MsgFrame {
			t.Fatalf("message %d: %q, %v; want a frame", i+2, m.Kind, err)
		}
		if cfg, err := jpeg.DecodeConfig(bytes.NewReader(m.Frame)); err != nil || cfg.Width != 320 || cfg.Height != 240 {
			t.Fatalf("frame %d: %dx%d, %v; want a 320x240 JPEG", i+1, cfg.Width, cfg.Height, err)
		}
	}
	pr.Close()
	select {
	case c := <-code:
		if c != 1 {
			t.Fatalf("output gone: exit %d, want 1 (log: %s)", c, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the program kept running with its output gone")
	}
}

// A camera that is not there: the program says so (with why) and keeps trying.
func TestProgramCameraAbsent(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.mp4")
	r, stderr, stop := runProgram(t, "--source", "file:"+missing, "--retry", "50ms", "--retry-max", "100ms")
	for i := range 2 {
		m, err := r.Next()
		if err != nil || m.Kind != camera.MsgLost || !strings.Contains(m.Reason, "no such file or directory") {
			t.Fatalf("message %d: %+v %v", i, m, err)
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(stderr.String(), "camera not available; retrying") {
		t.Fatalf("log %q", stderr.String())
	}
}

type brokenPipe struct{}

func (brokenPipe) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestProgramExitCodes(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"--source", "0", "--quality", "101"}, io.Discard, &stderr, -1); code != 2 || !strings.Contains(stderr.String(), "camera.quality") {
		t.Fatalf("bad flag value: exit %d, %q", code, stderr.String())
	}
	if code := run(context.Background(), []string{"--nope"}, io.Discard, io.Discard, -1); code != 2 {
		t.Fatalf("unknown flag: exit %d", code)
	}
	// The agent gone: the first write fails and the program ends instead of retrying forever.
	missing := filepath.Join(t.TempDir(), "nope.mp4")
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"--source", "file:" + missing}, brokenPipe{}, io.Discard, -1)
	}()
	select {
	case code := <-done:
		if code != 1 {
			t.Fatalf("output gone: exit %d, want 1", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the program kept running with its output gone")
	}
}

// wholeSchedTrace is the start of a schedule trace (GODEBUG=schedtrace) up to its processor
// count: the runtime prints a trace in several writes, and a line read as it arrives may end
// anywhere (CI once read "SCHED 162ms: gomaxprocs=1").
var wholeSchedTrace = regexp.MustCompile(`^SCHED \d+ms: gomaxprocs=\d+ idleprocs=`)

// The program runs Go code on one thread unless GOMAXPROCS says otherwise (the runtime's own
// schedule trace says how many it uses), and GOMAXPROCS still wins.
func TestProgramGOMAXPROCS(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "omnisat-camera")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v %s", err, out)
	}
	missing := filepath.Join(t.TempDir(), "nope.mp4")
	for _, tc := range []struct{ procs, want string }{{"", "gomaxprocs=1 "}, {"2", "gomaxprocs=2 "}} {
		t.Run("GOMAXPROCS="+tc.procs, func(t *testing.T) {
			cmd := exec.Command(bin, "--source", "file:"+missing, "--retry", "50ms", "--retry-max", "100ms")
			// An empty GOMAXPROCS is unset for the runtime and for the program.
			cmd.Env = append(os.Environ(), "GOMAXPROCS="+tc.procs, "GODEBUG=schedtrace=50")
			var stderr syncbuf.Buffer
			cmd.Stdout, cmd.Stderr = io.Discard, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			// Traces from before main ran show the runtime's default: judge those printed after
			// the program's first message.
			var traces []string
			for deadline := time.Now().Add(30 * time.Second); len(traces) < 3; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no three schedule traces after the first message within 30 s: %q", stderr.String())
				}
				_, after, started := strings.Cut(stderr.String(), "camera not available")
				traces = traces[:0]
				for _, line := range strings.Split(after, "\n") {
					if started && wholeSchedTrace.MatchString(line) {
						traces = append(traces, line)
					}
				}
			}
			for _, line := range traces {
				if !strings.Contains(line, tc.want) {
					t.Fatalf("schedule trace %q, want %s", line, tc.want)
				}
			}
		})
	}
}
