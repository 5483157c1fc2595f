package camera

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary stands in for the camera program when OMNISAT_FAKE_CAMERA names how it
// should misbehave; each run appends a line to OMNISAT_FAKE_CAMERA_RUNS. The real program is
// tested in cmd/omnisat-camera and end to end in cmd/omnisat.
func TestMain(m *testing.M) {
	if mode := os.Getenv("OMNISAT_FAKE_CAMERA"); mode != "" {
		os.Exit(fakeCamera(mode))
	}
	os.Exit(m.Run())
}

var fakeJPEG = append([]byte{0xFF, 0xD8}, bytes.Repeat([]byte{0x42}, 100)...)

func fakeCamera(mode string) int {
	if f, err := os.OpenFile(os.Getenv("OMNISAT_FAKE_CAMERA_RUNS"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
		fmt.Fprintln(f, time.Now().UnixNano(), strings.Join(os.Args[1:], " "))
		f.Close()
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	out := NewStreamWriter(os.Stdout)
	fmt.Fprintln(os.Stderr, `time=x level=WARN msg="fake camera" mode=`+mode)
	switch mode {
	case "frames": // a healthy camera until told to stop
		out.Up()
		for {
			out.Frame(fakeJPEG)
			select {
			case <-term:
				return 0
			case <-time.After(20 * time.Millisecond):
			}
		}
	case "crash": // a driver that takes the process down after two frames
		out.Up()
		out.Frame(fakeJPEG)
		out.Frame(fakeJPEG)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	case "garble":
		out.Frame(fakeJPEG)
		os.Stdout.Write([]byte("GStreamer-WARNING: this is not the protocol\n"))
		time.Sleep(time.Minute)
	case "absent": // no camera: says so, then waits to be stopped
		out.Lost(`open camera "/dev/video9": no such file or directory`)
		<-term
		return 0
	case "stubborn": // one frame, then silence, and it ignores SIGTERM
		signal.Ignore(syscall.SIGTERM)
		out.Frame(fakeJPEG)
		time.Sleep(time.Minute)
	}
	return 3
}

// states records what onState was told.
type states struct {
	mu    sync.Mutex
	got   []string
	delay time.Duration // before each is recorded: a slow callback
}

func (s *states) on(ok bool, err error) {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.got = append(s.got, "up")
	} else {
		s.got = append(s.got, "lost: "+err.Error())
	}
}

func (s *states) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func (s *states) waitFor(t *testing.T, what string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, count := s.list(), 0
		for _, g := range got {
			if strings.Contains(g, what) {
				count++
			}
		}
		if count >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, %d of %d %q: %q", count, n, what, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startFake runs the test binary as the camera program in mode.
func startFake(t *testing.T, mode string, cfg Config, st *states) (*Process, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(t.TempDir(), "runs")
	t.Setenv("OMNISAT_FAKE_CAMERA", mode)
	t.Setenv("OMNISAT_FAKE_CAMERA_RUNS", runs)
	p, err := startProcess(context.Background(), exe, cfg, st.on, nil, 500*time.Millisecond, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, runs
}

func runCount(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}

func TestProcessDeliversFrames(t *testing.T) {
	before := runtime.NumGoroutine()
	st := &states{}
	p, runs := startFake(t, "frames", Config{Source: "file:cam.mp4", MaxEdge: 320, EncodeFPS: 2}, st)
	if !p.WaitStarted(context.Background()) {
		t.Fatalf("no frame after the program started: %q", st.list())
	}
	if jpg, ok := p.Latest(); !ok || !bytes.Equal(jpg, fakeJPEG) {
		t.Fatalf("Latest: %v", ok)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Latest(); ok {
		// The last frame may still be fresh; what matters is that the program is gone.
	}
	if got := st.list(); len(got) != 1 || got[0] != "up" {
		t.Fatalf("states %q, want one up", got)
	}
	b, _ := os.ReadFile(runs)
	if args := string(b); runCount(runs) != 1 || !strings.Contains(args, "--source file:cam.mp4") || !strings.Contains(args, "--max-edge 320") ||
		!strings.Contains(args, "--encode-fps 2") {
		t.Fatalf("runs %q", args)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines before, %d after Close", before, n)
	}
}

// A camera driver that crashes takes down only the camera program: it is reported lost with
// why, restarted with backoff, and up again.
func TestProcessRestartsAfterCrash(t *testing.T) {
	st := &states{}
	_, runs := startFake(t, "crash", Config{Source: "0", Retry: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond}, st)
	st.waitFor(t, "up", 4)
	got := st.waitFor(t, "signal: killed", 3)
	if runCount(runs) < 3 {
		t.Fatalf("%d runs after 3 crashes", runCount(runs))
	}
	for i, g := range got[:6] {
		if want := []string{"up", "lost"}[i%2]; !strings.HasPrefix(g, want) {
			t.Fatalf("states %q: want up and lost in turn", got)
		}
	}
	if !strings.Contains(got[1], "camera program exited: signal: killed") {
		t.Fatalf("lost reason %q", got[1])
	}
	// Restarts back off: 50 ms, 100 ms, then 200 ms (retry_max) apart at least.
	b, _ := os.ReadFile(runs)
	var starts []int64
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ns int64
		fmt.Sscan(line, &ns)
		starts = append(starts, ns)
	}
	for i, want := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond} {
		if gap := time.Duration(starts[i+1] - starts[i]); gap < want {
			t.Fatalf("restart %d came %v after the last start, want at least %v", i+1, gap, want)
		}
	}
}

// A garbled stream is an error: the program is killed and restarted.
func TestProcessGarbledStream(t *testing.T) {
	st := &states{}
	_, runs := startFake(t, "garble", Config{Source: "0", Retry: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond}, st)
	got := st.waitFor(t, "garbled camera stream", 2)
	if runCount(runs) < 2 {
		t.Fatalf("%d runs", runCount(runs))
	}
	if !strings.Contains(got[1], "unknown message kind") {
		t.Fatalf("states %q", got)
	}
}

// A camera that is not there is lost from the start, without a restart (the program keeps
// trying by itself); Latest has nothing.
func TestProcessCameraAbsent(t *testing.T) {
	// A slow state callback: WaitStarted must not return before the loss has been reported.
	st := &states{delay: 100 * time.Millisecond}
	p, runs := startFake(t, "absent", Config{Source: "/dev/video9"}, st)
	if p.WaitStarted(context.Background()) {
		t.Fatal("a frame from an absent camera")
	}
	if got := st.list(); len(got) != 1 || !strings.Contains(got[0], "no such file") {
		t.Fatalf("states %q", got)
	}
	if _, ok := p.Latest(); ok {
		t.Fatal("Latest from an absent camera")
	}
	p.Close()
	if runCount(runs) != 1 {
		t.Fatalf("%d runs", runCount(runs))
	}
}

// A program that hangs (silent, deaf to SIGTERM) is killed after the silence limit and
// restarted; Close kills one that ignores SIGTERM.
func TestProcessHungProgram(t *testing.T) {
	st := &states{}
	p, runs := startFake(t, "stubborn", Config{Source: "0", Retry: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond}, st)
	got := st.waitFor(t, "hung; killed", 1)
	if !strings.HasPrefix(got[0], "up") {
		t.Fatalf("states %q", got)
	}
	st.waitFor(t, "up", 2)
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not kill a program that ignores SIGTERM")
	}
	if runCount(runs) < 2 {
		t.Fatalf("%d runs", runCount(runs))
	}
}

func TestStartProcessErrors(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "camera")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644)
	for path, want := range map[string]string{
		filepath.Join(dir, "missing"): "no such file",
		dir:                           "not an executable file",
		notExec:                       "not an executable file",
	} {
		_, err := StartProcess(context.Background(), path, Config{Source: "0"}, nil, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
	if _, err := StartProcess(context.Background(), "/bin/true", Config{Source: "0", Quality: 101}, nil, nil); err == nil || !errors.Is(err, err) || !strings.Contains(err.Error(), "camera.quality") {
		t.Errorf("bad config: %v", err)
	}
}
