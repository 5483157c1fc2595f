package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// needTool finds a program the test drives; in CI a missing one is a failure, not a skip.
func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed: run make deps", name)
		}
		t.Skipf("%s not installed: run make deps", name)
	}
}

// The camera path end to end: OpenCV reads a video file, frames are resized and encoded on the
// device, and the simulator receives one decodable JPEG of the configured size and quality per
// chunk.
func TestRunWithVideoFileCamera(t *testing.T) {
	needTool(t, "ffmpeg")
	dir := t.TempDir()
	video := filepath.Join(dir, "cam.mp4")
	if out, err := exec.Command("ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=640x480:rate=30",
		"-t", "3", "-pix_fmt", "yuv420p", video).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v %s", err, out)
	}
	sim := realtimetest.NewServer(realtimetest.Options{})
	defer sim.Close()
	wavPath, _ := filepath.Abs("../../configs/demo/hello.wav")
	cfg := filepath.Join(dir, "omnisat.yaml")
	os.WriteFile(cfg, []byte(`
server:
  url: `+sim.URL()+`
  mode: video
session:
  chunk: 500ms
audio:
  input: file:`+wavPath+`
  loop: true
  output: none
camera:
  source: file:cam.mp4
  max_edge: 320
  quality: 70
  encode_fps: 2
`), 0o600)
	var out, errb syncBuffer
	env := &cliEnv{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"run", "-c", cfg, "--state-dir", dir}, env) }()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if recs := sim.Sessions(); len(recs) > 0 && len(recs[0].Appends) >= 6 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d: %s", code, errb.String())
	}
	recs := sim.Sessions()
	if len(recs) == 0 || len(recs[0].Appends) < 6 {
		t.Fatalf("too few chunks; output %s %s", out.String(), errb.String())
	}
	for i, a := range recs[0].Appends {
		if len(a.Frames) != 1 {
			t.Fatalf("chunk %d carries %d frames, want 1", i, len(a.Frames))
		}
		f := a.Frames[0]
		if f.Format != "jpeg" || f.Width != 320 || f.Height != 240 || f.Quality != 70 {
			t.Fatalf("chunk %d frame %+v, want a 320x240 JPEG at quality 70", i, f)
		}
	}
	if len(recs[0].Rejections) > 0 {
		t.Fatalf("rejections %v", recs[0].Rejections)
	}
}
