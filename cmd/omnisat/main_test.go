package main

import (
	"context"
	"encoding/json"
	"github.com/omnisat/omnisat/internal/syncbuf"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// syncBuffer holds a command's output while the test reads it.
type syncBuffer = syncbuf.Buffer

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb syncBuffer
	env := &cliEnv{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = run(ctx, args, env)
	return code, out.String(), errb.String()
}

func TestUsage(t *testing.T) {
	buildProgram(t, simulatorProgram())
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{nil, exitUsage, "usage: omnisat"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"chat", "--nope"}, exitUsage, "flag provided but not defined"},
		{[]string{"chat"}, exitUsage, "no text"},
		{[]string{"chat", "hi"}, exitUsage, "no server"},
		{[]string{"chat", "--server", "ws://x", "--dialect", "legacy", "hi"}, exitUsage, "legacy dialect has no chat mode"},
		{[]string{"simulate", "--fault", "explode"}, exitUsage, "explode"},
		{[]string{"simulate", "--quirk", "slow"}, exitUsage, `quirk "slow" is unknown`},
		{[]string{"version", "extra"}, exitUsage, "unexpected argument"},
		{[]string{"ctl"}, exitUsage, "no command"},
		{[]string{"ctl", "--socket", "/nonexistent.sock", "dance"}, exitUsage, "unknown command"},
		{[]string{"ctl", "--socket", "/nonexistent.sock", "mute", "maybe"}, exitUsage, "on or off"},
		{[]string{"run", "-c", "/nonexistent/omnisat.yaml"}, exitConfig, "no such file"},
	} {
		code, _, stderr := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
	if code, out, _ := runCLI(t, "version"); code != 0 || !strings.HasPrefix(out, "omnisat ") {
		t.Errorf("version: %d %q", code, out)
	}
	if code, out, _ := runCLI(t, "--help"); code != 0 || !strings.Contains(out, "simulate") {
		t.Errorf("help: %d %q", code, out)
	}
}

func TestChatAgainstSimulator(t *testing.T) {
	current := realtimetest.NewServer(realtimetest.Options{})
	defer current.Close()
	openvoice := realtimetest.NewServer(realtimetest.Options{Dialect: realtimetest.OpenVoice})
	defer openvoice.Close()
	dir := t.TempDir()

	code, out, stderr := runCLI(t, "chat", "--server", current.URL(), "Reply with exactly: all good")
	if code != 0 || out != "all good\n" {
		t.Fatalf("chat: exit %d out %q err %q", code, out, stderr)
	}
	code, out, _ = runCLI(t, "chat", "--server", current.URL(), "--no-stream", "echo me")
	if code != 0 || out != "echo me\n" {
		t.Fatalf("non-streaming chat: exit %d out %q", code, out)
	}
	reply := filepath.Join(dir, "reply.wav")
	code, _, stderr = runCLI(t, "chat", "--server", current.URL(), "--tts-out", reply, "Reply with exactly: spoken words")
	a, err := wav.ReadFile(reply)
	if code != 0 || err != nil || a.Rate != 24000 || a.Frames() == 0 {
		t.Fatalf("tts: exit %d, %v, %+v, %s", code, err, a.Rate, stderr)
	}
	img := filepath.Join(dir, "x.jpg")
	os.WriteFile(img, tinyJPEG(t), 0o644)
	code, out, _ = runCLI(t, "chat", "--server", current.URL(), "--image", img, "--system", "be terse", "what is this")
	if code != 0 || out != "what is this\n" {
		t.Fatalf("image chat: exit %d out %q", code, out)
	}
	speech := filepath.Join(dir, "speech.wav")
	code, _, stderr = runCLI(t, "chat", "--dialect", "openvoice", "--model", "m", "--server", openvoice.URL(), "--tts-out", speech, "hello there")
	if a, err := wav.ReadFile(speech); code != 0 || err != nil || a.Frames() == 0 {
		t.Fatalf("openvoice: exit %d, %v, %s", code, err, stderr)
	}
	for _, rec := range append(current.Sessions(), openvoice.Sessions()...) {
		if len(rec.Rejections) > 0 {
			t.Errorf("simulator rejected: %v", rec.Rejections)
		}
	}
}

// Faults give clear messages and the documented exit codes.
func TestChatFailures(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts realtimetest.Options
		code int
		want string
	}{
		{"busy", realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultRefuse}}}, exitFailure, "worker_busy"},
		{"queue full", realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultRefuse, Code: "queue_full"}}}, exitFailure, "queue_full"},
		{"chat disabled", realtimetest.Options{ChatDisabled: true}, exitConfig, "1008"},
		// A legacy gateway ignores a current-dialect init: no answer is no proof of the wrong
		// dialect, so it is a failure (exit 1) whose message points at the likely cause.
		{"wrong dialect", realtimetest.Options{Dialect: realtimetest.Legacy}, exitFailure, "is this a legacy gateway?"},
		{"dropped", realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultDrop}}}, exitFailure, "cut"},
		{"closed early", realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultClose, Reason: "backend_error"}}}, exitFailure, "backend_error"},
		{"oversize", realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultOversize, Size: 20 << 20}}}, exitFailure, "larger than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := realtimetest.NewServer(tt.opts)
			defer srv.Close()
			code, _, stderr := runCLI(t, "chat", "--server", srv.URL(), "--timeout", "10s", "Reply with exactly: x")
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d stderr %q; want %d and %q", code, stderr, tt.code, tt.want)
			}
		})
	}
	srv := realtimetest.NewServer(realtimetest.Options{Faults: []realtimetest.Fault{{Kind: realtimetest.FaultStall}}})
	defer srv.Close()
	code, _, stderr := runCLI(t, "chat", "--server", srv.URL(), "--timeout", "1s", "hi")
	if code != exitFailure || !strings.Contains(stderr, "within 1s") {
		t.Fatalf("stall: exit %d %q", code, stderr)
	}
}

// omnisat run --simulator on the demo configuration, driven by omnisat ctl.
func TestRunAndCtl(t *testing.T) {
	buildProgram(t, simulatorProgram())
	state := t.TempDir()
	var out, errb syncBuffer
	env := &cliEnv{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--simulator", "-c", "../../configs/demo/demo.yaml", "--state-dir", state}, env)
	}()
	sock := filepath.Join(state, "control.sock")
	var st agent.Status
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		code, stdout, _ := runCLI(t, "ctl", "--socket", sock, "status")
		if code == 0 && json.Unmarshal([]byte(stdout), &st) == nil && st.State == agent.StateListening {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st.State != agent.StateListening || st.Mode != "video" || !st.CameraOn {
		t.Fatalf("status %+v; output %s %s", st, out.String(), errb.String())
	}
	if code, stdout, stderr := runCLI(t, "ctl", "--socket", sock, "ask", "Reply with exactly: ctl works"); code != 0 || stdout != "ctl works\n" {
		t.Fatalf("ctl ask: %d %q %q", code, stdout, stderr)
	}
	if code, _, stderr := runCLI(t, "ctl", "--socket", sock, "say", "hello"); code != 0 {
		t.Fatalf("ctl say: %d %q", code, stderr)
	}
	code, stdout, _ := runCLI(t, "ctl", "--socket", sock, "mute", "on")
	if code != 0 || !strings.Contains(stdout, `"mic_muted": true`) {
		t.Fatalf("ctl mute: %d %q", code, stdout)
	}
	if code, stdout, _ := runCLI(t, "ctl", "--socket", sock, "mute", "off"); code != 0 || !strings.Contains(stdout, `"mic_muted": false`) {
		t.Fatalf("ctl mute off: %d %q", code, stdout)
	}
	for _, cmd := range []string{"interrupt", "stop", "start", "restart"} {
		if code, _, stderr := runCLI(t, "ctl", "--socket", sock, cmd); code != 0 {
			t.Fatalf("ctl %s: %d %q", cmd, code, stderr)
		}
	}
	// The demo speech makes the simulator answer within a few seconds.
	deadline = time.Now().Add(15 * time.Second)
	for !strings.Contains(out.String(), "assistant: I heard") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run exit %d: %s", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop")
	}
	text := out.String()
	for _, want := range []string{"built-in simulator", "state listening session", "assistant: I heard", "saw a 320x240 frame"} {
		if !strings.Contains(text, want) {
			t.Errorf("console output lacks %q:\n%s", want, text)
		}
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
	if pids := processesRunning(t, os.Getenv("OMNISAT_SIMULATOR_PROGRAM")); len(pids) > 0 {
		t.Errorf("the simulator program still runs after run returned: pids %v", pids)
	}
}

// processesRunning lists the processes whose executable is program.
func processesRunning(t *testing.T, program string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == program {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// Without its simulator program, or with one that does not say where it listens, simulate and
// run --simulator say so and fail (exit 1) instead of hanging.
func TestSimulatorProgramFaults(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("OMNISAT_SIMULATOR_PROGRAM", filepath.Join(dir, "missing"))
	for _, args := range [][]string{{"simulate"}, {"run", "--simulator", "-c", "../../configs/demo/demo.yaml", "--state-dir", dir}} {
		if code, _, stderr := runCLI(t, args...); code != exitFailure || !strings.Contains(stderr, "the simulator program OMNISAT_SIMULATOR_PROGRAM=") {
			t.Errorf("%v without the program: exit %d, %q", args, code, stderr)
		}
	}
	failing := filepath.Join(dir, "failing")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\necho cannot listen >&2\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OMNISAT_SIMULATOR_PROGRAM", failing)
	code, _, stderr := runCLI(t, "run", "--simulator", "-c", "../../configs/demo/demo.yaml", "--state-dir", dir)
	if code != exitFailure || !strings.Contains(stderr, "simulator: cannot listen") || !strings.Contains(stderr, "ended before it said where it listens") {
		t.Errorf("a program that fails: exit %d, %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "simulate"); code != 2 || !strings.Contains(stderr, "cannot listen") {
		t.Errorf("simulate with a program that fails: exit %d, %q; want its exit code and its words", code, stderr)
	}
	chatty := filepath.Join(dir, "chatty")
	if err := os.WriteFile(chatty, []byte("#!/bin/sh\necho hello\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OMNISAT_SIMULATOR_PROGRAM", chatty)
	began := time.Now()
	code, _, stderr = runCLI(t, "run", "--simulator", "-c", "../../configs/demo/demo.yaml", "--state-dir", dir)
	if code != exitFailure || !strings.Contains(stderr, `the simulator said "hello", not its URL`) {
		t.Errorf("a program that gives no URL: exit %d, %q", code, stderr)
	}
	// It was stopped, not waited out.
	if took := time.Since(began); took > 50*time.Second {
		t.Errorf("run took %v to give up on it", took)
	}
}

func TestRunConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		yaml string
		want string
	}{
		{"server:\n  url: ws://x/v1/realtime\n  mode: vidoe\n", `"vidoe" is not one of video, audio, chat`},
		{"server:\n  url: ws://x/v1/realtime\nsesion: {}\n", `sesion: unknown key; did you mean "session"?`},
		{"server:\n  url: ws://x/v1/realtime\nsession:\n  chunk: 5s\n", "session.chunk"},
		{"server: {}\n", "server.url: empty"},
		{"server:\n  url: ws://x/v1/realtime\naudio:\n  input: file:/nonexistent.wav\n", "nonexistent.wav"},
		{"server:\n  url: ws://x/v1/realtime\naudio:\n  input: hw:1\n", `audio.input: find input device "hw:1"`},
		{"server:\n  url: ws://x/v1/realtime\naudio:\n  volume: 120\n", "audio.volume: 120"},
		{"server:\n  url: ws://x/v1/realtime\ncamera:\n  quality: 101\n", "camera.quality: 101"},
		{"server:\n  url: ws://x/v1/realtime\naudio:\n  input: auto\n", "audio.input_fallback"},
	} {
		path := filepath.Join(dir, "c.yaml")
		os.WriteFile(path, []byte(tt.yaml), 0o600)
		code, _, stderr := runCLI(t, "run", "-c", path, "--state-dir", dir)
		if code != exitConfig || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d %q; want %q", tt.yaml, code, stderr, tt.want)
		}
	}
}

func tinyJPEG(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../../configs/demo/frames/frame1.jpg")
	if err != nil {
		t.Fatal(err)
	}
	return b
}
