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
	"strings"
	"testing"
	"time"

	"github.com/omnisat/omnisat/devices/camera"
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

// runProgram runs the program on args until stop is called; its output is read as the agent
// reads it.
func runProgram(t *testing.T, args ...string) (r *camera.StreamReader, stderr *bytes.Buffer, stop func() int) {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	stderr = &bytes.Buffer{}
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, args, pw, stderr)
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
	requireFFmpeg(t)
	video := filepath.Join(t.TempDir(), "cam.mp4")
	if out, err := exec.Command("ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=640x480:rate=10",
		"-t", "2", "-pix_fmt", "yuv420p", video).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v %s", err, out)
	}
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
	if code := run(context.Background(), []string{"--source", "0", "--quality", "101"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "camera.quality") {
		t.Fatalf("bad flag value: exit %d, %q", code, stderr.String())
	}
	if code := run(context.Background(), []string{"--nope"}, io.Discard, io.Discard); code != 2 {
		t.Fatalf("unknown flag: exit %d", code)
	}
	// The agent gone: the first write fails and the program ends instead of retrying forever.
	missing := filepath.Join(t.TempDir(), "nope.mp4")
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"--source", "file:" + missing}, brokenPipe{}, io.Discard)
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
