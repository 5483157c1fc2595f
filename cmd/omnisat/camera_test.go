package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/agent/control"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// needTool finds a program the test drives; in CI a missing one is a failure, not a skip.
func needTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed: run make deps", name)
		}
		t.Skipf("%s not installed: run make deps", name)
	}
}

// buildProgram builds one of omnisat's helper programs (cmd/NAME) and points omnisat at it for
// the rest of the test.
func buildProgram(t *testing.T, p helperProgram) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), p.name)
	if out, err := exec.Command("go", "build", "-o", bin, "../"+p.name).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", p.name, err, out)
	}
	t.Setenv(p.env, bin)
}

// runVideoAgent runs `omnisat run` in this process in video mode on the demo WAV with camera
// (YAML lines under camera:), until done says so (it gets the status over the control socket)
// or 30 s pass; it returns what run printed.
func runVideoAgent(t *testing.T, sim *realtimetest.Server, dir, camera string, done func(*agent.Status) bool) (stdout, stderr string) {
	t.Helper()
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
`+camera), 0o600)
	var out, errb syncBuffer
	env := &cliEnv{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() { exit <- run(ctx, []string{"run", "-c", cfg, "--state-dir", dir}, env) }()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := control.Call(ctx, filepath.Join(dir, "control.sock"), control.Request{Cmd: "status"})
		if err == nil && resp.Status != nil && done(resp.Status) {
			break
		}
	}
	cancel()
	if code := <-exit; code != 0 {
		t.Fatalf("run exit %d: %s", code, errb.String())
	}
	return out.String(), errb.String()
}

// The camera path end to end: the camera program reads a video file with OpenCV, frames are
// resized and encoded on the device and piped to omnisat, and the simulator receives one
// decodable JPEG of the configured size and quality per chunk.
func TestRunWithVideoFileCamera(t *testing.T) {
	needTool(t, "ffmpeg")
	buildProgram(t, cameraProgram())
	dir := t.TempDir()
	video := filepath.Join(dir, "cam.mp4")
	if out, err := exec.Command("ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=640x480:rate=30",
		"-t", "3", "-pix_fmt", "yuv420p", video).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v %s", err, out)
	}
	sim := realtimetest.NewServer(realtimetest.Options{})
	defer sim.Close()
	// The camera program starts beside the session (OpenCV's start takes ~0.15 s, longer on a
	// busy machine): chunks before its first frame carry none; from then on each carries one.
	withFrames := func(appends []realtimetest.AppendRecord) []realtimetest.AppendRecord {
		for i, a := range appends {
			if len(a.Frames) > 0 {
				return appends[i:]
			}
		}
		return nil
	}
	out, errb := runVideoAgent(t, sim, dir, "  source: file:cam.mp4\n  max_edge: 320\n  quality: 70\n  encode_fps: 2\n",
		func(*agent.Status) bool {
			recs := sim.Sessions()
			return len(recs) > 0 && len(withFrames(recs[0].Appends)) >= 6
		})
	recs := sim.Sessions()
	if len(recs) == 0 || len(withFrames(recs[0].Appends)) < 6 {
		t.Fatalf("too few chunks with frames; output %s %s", out, errb)
	}
	for i, a := range withFrames(recs[0].Appends) {
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

// A camera driver that crashes takes down the camera program, not the conversation: the
// session streams on without frames, the camera is reported lost with why, and the program is
// started again with backoff.
func TestRunSurvivesCameraCrash(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	crasher := filepath.Join(dir, "omnisat-camera")
	// It says hello as the real program does, then dies as a segfaulting driver would.
	if err := os.WriteFile(crasher, []byte("#!/bin/sh\necho run >> "+runs+"\nprintf 'omnisat-camera 1\\n'\nkill -SEGV $$\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OMNISAT_CAMERA_PROGRAM", crasher)
	sim := realtimetest.NewServer(realtimetest.Options{})
	defer sim.Close()
	var st *agent.Status
	out, errb := runVideoAgent(t, sim, dir, "  source: /dev/video0\n  retry: 100ms\n  retry_max: 400ms\n", func(s *agent.Status) bool {
		b, _ := os.ReadFile(runs)
		recs := sim.Sessions()
		st = s
		return strings.Count(string(b), "run") >= 3 && len(recs) > 0 && len(recs[0].Appends) >= 6
	})
	if b, _ := os.ReadFile(runs); strings.Count(string(b), "run") < 3 || st == nil {
		t.Fatalf("after 30 s: %d camera program runs, sessions %d; output %s %s", strings.Count(string(b), "run"), len(sim.Sessions()), out, errb)
	}
	if !strings.Contains(st.Devices["camera"], "camera program") || st.State != agent.StateListening {
		t.Fatalf("status %+v: want listening with the camera lost", st)
	}
	if !strings.Contains(out, "device lost") && !strings.Contains(errb, "camera program exited") {
		t.Fatalf("the loss was not reported: %s %s", out, errb)
	}
	for i, a := range sim.Sessions()[0].Appends {
		if len(a.Frames) != 0 {
			t.Fatalf("chunk %d carries a frame from a camera that never delivered", i)
		}
	}
}

// Issue 15: an audio-only satellite must not load OpenCV's ~270 libraries. The omnisat binary
// links none of them (the camera program does), and no package it is built from imports gocv.
func TestOmnisatLinksNoOpenCV(t *testing.T) {
	needTool(t, "ldd")
	deps, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range strings.Fields(string(deps)) {
		if strings.HasPrefix(pkg, "gocv.io/") || strings.HasSuffix(pkg, "/devices/camera/opencv") {
			t.Errorf("omnisat is built from %s", pkg)
		}
	}
	out, err := exec.Command("ldd", buildOmnisat(t)).CombinedOutput()
	if err != nil {
		t.Fatalf("ldd: %v %s", err, out)
	}
	if n := strings.Count(string(out), "libopencv"); n != 0 {
		t.Fatalf("omnisat links %d OpenCV libraries:\n%s", n, out)
	}
	// PortAudio is linked in (devices/audio/hostapis.c); ALSA is what it and the probe load.
	if !strings.Contains(string(out), "libasound") {
		t.Fatalf("ldd output without ALSA: is this the omnisat binary?\n%s", out)
	}
	for _, lib := range []string{"libportaudio", "libjack"} {
		if strings.Contains(string(out), lib) {
			t.Errorf("omnisat links %s: PortAudio's shared library with its JACK host API\n%s", lib, out)
		}
	}
}

// The camera program is found next to omnisat (a build tree) or in ../libexec/omnisat (the
// package), also through a symlinked omnisat; when it is missing the error says where it looked.
func TestCameraProgramBeside(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"bin", "usr/bin", "usr/libexec/omnisat", "links"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	for _, f := range []string{"bin/omnisat", "bin/omnisat-camera", "usr/bin/omnisat", "usr/libexec/omnisat/omnisat-camera"} {
		os.WriteFile(filepath.Join(root, f), nil, 0o755)
	}
	os.Symlink(filepath.Join(root, "usr/bin/omnisat"), filepath.Join(root, "links/omnisat"))
	for exe, want := range map[string]string{
		"bin/omnisat":     "bin/omnisat-camera",
		"usr/bin/omnisat": "usr/libexec/omnisat/omnisat-camera",
		"links/omnisat":   "usr/libexec/omnisat/omnisat-camera",
	} {
		got, err := programBeside(cameraProgram(), filepath.Join(root, exe))
		if wantPath, _ := filepath.EvalSymlinks(filepath.Join(root, want)); err != nil || got != wantPath {
			t.Errorf("%s: %q %v, want %q", exe, got, err, wantPath)
		}
	}
	os.Remove(filepath.Join(root, "usr/libexec/omnisat/omnisat-camera"))
	if _, err := programBeside(cameraProgram(), filepath.Join(root, "usr/bin/omnisat")); err == nil || !strings.Contains(err.Error(), "not installed") ||
		!strings.Contains(err.Error(), "libexec/omnisat/omnisat-camera") {
		t.Errorf("missing program: %v", err)
	}
}
