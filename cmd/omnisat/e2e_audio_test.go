package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/agent/control"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/internal/signaltest"
	"github.com/omnisat/omnisat/internal/testaudio"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// buildOmnisat builds the binary once per test run.
func buildOmnisat(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "omnisat")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("build omnisat: %v\n%s", err, out)
	}
	return bin
}

// recordRate is the rate of the speaker recordings: the sinks' native rate.
const recordRate = 44100

// writeDeviceConfig writes a configuration for the default PortAudio microphone and speaker, no
// camera, against serverURL, with extra YAML appended; it returns its path and the socket's.
func writeDeviceConfig(t *testing.T, dir, serverURL, extra string) (cfgPath, sock string) {
	t.Helper()
	sock = filepath.Join(dir, "control.sock")
	cfgPath = filepath.Join(dir, "omnisat.yaml")
	yaml := "server:\n  url: " + serverURL + "\n  mode: audio\naudio:\n  input: default\n  output: default\n" +
		"camera:\n  source: none\ncontrol:\n  socket: " + sock + "\n" + extra
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath, sock
}

// runOmnisat starts `omnisat run` as a child process (its environment carries PULSE_SERVER
// from testaudio) and returns the function that stops it with SIGINT. Its output is shown when
// the test fails, also when the failure comes after the stop (the measurements).
func runOmnisat(t *testing.T, bin, cfgPath, stateDir string) (stop func()) {
	t.Helper()
	_, _, stop = startOmnisat(t, bin, cfgPath, stateDir)
	return stop
}

// startOmnisat is runOmnisat that also hands out the process and its combined output.
func startOmnisat(t *testing.T, bin, cfgPath, stateDir string) (cmd *exec.Cmd, logs *syncBuffer, stop func()) {
	t.Helper()
	return startOmnisatArgs(t, bin, "run", "-c", cfgPath, "--state-dir", stateDir)
}

// startOmnisatArgs is startOmnisat with the whole command line.
func startOmnisatArgs(t *testing.T, bin string, args ...string) (cmd *exec.Cmd, logs *syncBuffer, stop func()) {
	t.Helper()
	logs = &syncBuffer{}
	cmd = exec.Command(bin, args...)
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-exited:
			case <-time.After(30 * time.Second): // it closes its session and devices first
				cmd.Process.Kill()
				<-exited
				t.Error("omnisat run did not stop on SIGINT within 30 s")
			}
		})
	}
	t.Cleanup(func() {
		stop()
		// A run that crashed after the test saw what it wanted still fails it.
		if out := logs.String(); strings.Contains(out, "\npanic: ") || strings.HasPrefix(out, "panic: ") || strings.Contains(out, "fatal error: ") {
			t.Error("omnisat crashed")
		}
		if t.Failed() {
			t.Logf("omnisat output:\n%s", logs.String())
		}
	})
	return cmd, logs, stop
}

func status(t *testing.T, sock string) agent.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := control.Call(ctx, sock, control.Request{Cmd: "status"})
	if err != nil || !resp.OK {
		return agent.Status{}
	}
	return *resp.Status
}

// position is the sample of rec that was playing at wall time at, as a lower bound (Start is
// an upper bound of sample 0's time).
func position(rec *testaudio.Recording, at time.Time) int {
	return int(at.Sub(rec.Start()).Seconds() * float64(rec.Rate))
}

// waitSound waits until rec, from sample from on, holds dur of sound (10 ms windows louder than
// -40 dBFS, not necessarily in a row): something is being played, measured on the recording,
// not assumed from the time that passed. Pauses between words do not count.
func waitSound(t *testing.T, rec *testaudio.Recording, from int, dur time.Duration) {
	t.Helper()
	win := rec.Rate / 100
	want := int(dur.Seconds() * 100)
	loud, at := 0, from
	for loud < want {
		if at-from > 60*rec.Rate {
			t.Fatalf("the recording holds %d ms of sound in the minute from %.2f s, want %v", loud*10, float64(from)/float64(rec.Rate), dur)
		}
		if err := rec.WaitLen(at+win, time.Minute); err != nil {
			t.Fatalf("waiting for %v of sound on the recording (%d ms so far): %v", dur, loud*10, err)
		}
		s := rec.Samples()
		for ; at+win <= len(s) && loud < want; at += win {
			if signaltest.RMS(s[at:at+win]) > 0.01 {
				loud++
			}
		}
	}
}

func waitState(t *testing.T, sock string, want agent.State, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if status(t, sock).State == want {
			return time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("agent never reached state %s; last %+v", want, status(t, sock))
	return time.Time{}
}

// probedOnlyItsDevices checks that omnisat run, on the default devices, did not have PortAudio
// probe the ALSA plugin devices its configuration does not name: the a52 encoder plugin's
// libavcodec brings x265 and glib, which stay mapped once loaded (devices/audio/README.md).
// Nor does it map JACK's client library: PortAudio is linked in with its ALSA host API alone
// (devices/audio/hostapis.c), and the jack ALSA plugin is not probed either.
func probedOnlyItsDevices(t *testing.T, pid int) {
	t.Helper()
	if mods, _ := filepath.Glob("/usr/lib/*/alsa-lib/libasound_module_pcm_a52.so"); len(mods) == 0 {
		t.Fatal("no a52 ALSA plugin (libasound2-plugins): nothing here shows whether the probe is narrowed")
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	const probed = "PortAudio probed plugin devices it does not use"
	const jack = "PortAudio's JACK host API is linked (Debian's shared libportaudio2 brings it)"
	for lib, why := range map[string]string{"libavcodec": probed, "libx265": probed, "libglib-2.0": probed, "libportaudio.so": jack, "libjack": jack} {
		if strings.Contains(string(maps), "/"+lib) {
			t.Errorf("omnisat run on the default devices maps %s: %s", lib, why)
		}
	}
}

// The whole audio path on a virtual sound card: espeak-ng speech is played into the microphone
// sink, `omnisat run` captures it with PortAudio and streams it to the parrot simulator, plays
// the parrot's reply on the PortAudio speaker, and `omnisat ctl interrupt` silences it. The
// simulator's record and a recording of the speaker sink prove each step.
func TestEndToEndVirtualSoundCard(t *testing.T) {
	card := testaudio.Start(t)
	if !testaudio.Require(t, "espeak-ng", "paplay", "parecord") {
		return
	}
	bin := buildOmnisat(t)
	ctlBin := filepath.Join(t.TempDir(), "omnisat-ctl")
	if out, err := exec.Command("go", "build", "-o", ctlBin, "../omnisat-ctl").CombinedOutput(); err != nil {
		t.Fatalf("build omnisat-ctl: %v %s", err, out)
	}
	dir := t.TempDir()
	speech1 := card.Speech(t, "Hello omnisat. This is the microphone test, one two three four.")
	speech2 := filepath.Join(dir, "speech2.wav")
	os.Rename(card.Speech(t, "Now a longer sentence, so that the parrot talks for a while and can be interrupted in the middle of it."), speech2)

	sim := realtimetest.NewServer(realtimetest.Options{ForceListenCount: -1})
	defer sim.Close()
	cfgPath, sock := writeDeviceConfig(t, dir, sim.URL(), "log:\n  level: debug\n")

	rec := card.Listen(t, "spk.monitor", recordRate)
	proc, _, stop := startOmnisat(t, bin, cfgPath, dir)
	defer stop()
	waitState(t, sock, agent.StateListening, 20*time.Second)
	probedOnlyItsDevices(t, proc.Process.Pid)

	// Phase 1: speech in, parrot reply out.
	if err := card.PlayInto(speech1); err != nil {
		t.Fatal(err)
	}
	waitState(t, sock, agent.StateSpeaking, 15*time.Second)
	waitState(t, sock, agent.StateListening, 20*time.Second)
	reply1 := len(sim.Sessions()[0].ReplyAudio)

	// Phase 2: a longer reply, interrupted in the middle.
	if err := card.PlayInto(speech2); err != nil {
		t.Fatal(err)
	}
	waitState(t, sock, agent.StateSpeaking, 15*time.Second)
	// Interrupt it once the speaker has played a second of it, as the recording shows.
	waitSound(t, rec, rec.Len(), time.Second)
	asked, askedAt := time.Now(), rec.Len()
	if out, err := exec.Command(ctlBin, "--socket", sock, "interrupt").CombinedOutput(); err != nil {
		t.Fatalf("omnisat-ctl interrupt: %v %s", err, out)
	}
	answered := time.Now()
	// Keep recording for a second of the stream after the command returned: the silence to find.
	if err := rec.WaitLen(max(rec.Len(), position(rec, answered))+recordRate, time.Minute); err != nil {
		t.Fatal(err)
	}
	rec.Stop()

	session := sim.Sessions()[0]
	if len(session.Rejections) > 0 {
		t.Fatalf("simulator rejected: %v", session.Rejections)
	}

	// 1. The microphone path: the server heard the speech.
	src, err := wav.ReadFile(speech1)
	if err != nil {
		t.Fatal(err)
	}
	src16, _ := devices.Resample(src.Mono(), src.Rate, 16000)
	lag, ncc := signaltest.Align(src16, session.Audio)
	t.Logf("microphone → server: speech found at %.2f s, normalised cross-correlation %.3f", float64(lag)/16000, ncc)
	if ncc < 0.9 {
		t.Errorf("the server's audio matches the spoken phrase with ncc %.3f, want ≥ 0.9", ncc)
	}

	// 2. The speaker path: the recording holds the reply the server sent, in order and
	// undistorted. When the machine is busy the device may underrun: silence put between two
	// pieces of the reply, which is followed in half seconds (and logged: a real-time figure),
	// while nothing of the reply may be missing or changed.
	mono, rate := rec.Samples(), recordRate
	out24, _ := devices.Resample(mono, rate, 24000)
	ref := session.ReplyAudio[:reply1]
	lag, ncc = signaltest.Align(ref, out24)
	head := ref[:min(len(ref), 24000)] // where it starts: the whole may have moved at a gap
	from := max(0, lag-2*24000)
	start, _ := signaltest.Align(head, out24[from:min(len(out24), lag+len(ref)+24000)])
	gaps, worst := signaltest.Follow(ref, out24, from+start, 24000/2, 2*24000, 24000/400)
	t.Logf("server → speaker: first reply (%.2f s) found at %.2f s of the recording, ncc %.3f as a whole; "+
		"worst half second ncc %.3f, gaps %v samples at 24 kHz", float64(len(ref))/24000, float64(from+start)/24000, ncc, worst, gaps)
	if worst < 0.9 {
		t.Errorf("the speaker's output matches the server's reply with ncc %.3f in its worst half second, want ≥ 0.9", worst)
	}

	// 3. Interrupt: silence on the recording soon after the agent has taken the command (its
	// answer comes after it flushed the speaker). Starting omnisat-ctl and reaching the agent
	// take what a busy machine gives them; they are logged, not judged.
	// Where the stream was at each moment: both the position the wall clock gives and what had
	// been recorded by then are lower bounds (the recording lags what plays), so the latency
	// below is never underestimated.
	at := max(position(rec, asked), askedAt)
	before := mono[max(0, at-rate/5):at]
	if signaltest.RMS(before) < 0.01 {
		t.Fatalf("nothing was playing when interrupt was sent (rms %.4f): the test proves nothing", signaltest.RMS(before))
	}
	quiet := signaltest.SilentFrom(mono, at-rate/10, rate/100, rate/2, 0.003)
	if quiet < 0 {
		t.Fatal("the speaker never fell silent after the interrupt")
	}
	latency := time.Duration(float64(quiet-position(rec, answered)) / float64(rate) * float64(time.Second))
	t.Logf("interrupt: speaker silent %v after omnisat-ctl returned; it was started %v before that",
		latency.Round(time.Millisecond), answered.Sub(asked).Round(time.Millisecond))
	// What `omnisat ctl` costs against the light omnisat-ctl (omnisat links no OpenCV any more).
	began := time.Now()
	if out, err := exec.Command(bin, "ctl", "--socket", sock, "status").CombinedOutput(); err != nil {
		t.Errorf("omnisat ctl status: %v %s", err, out)
	}
	t.Logf("omnisat ctl status took %v (omnisat-ctl: %v)", time.Since(began).Round(time.Millisecond), answered.Sub(asked).Round(time.Millisecond))
	if latency > 100*time.Millisecond {
		t.Errorf("speaker silent %v after the interrupt was taken, want ≤ 100 ms", latency)
	}
	if out, err := exec.Command(ctlBin, "--socket", sock, "volume", "40").CombinedOutput(); err != nil || !strings.Contains(string(out), `"volume": 40`) {
		t.Errorf("omnisat-ctl volume 40: %v %s", err, out)
	}
	st := status(t, sock)
	b, _ := json.Marshal(st.Devices)
	if st.Devices["microphone"] != "" && st.Devices["microphone"] != "ok" || strings.Contains(string(b), "lost") {
		t.Errorf("device state %s", b)
	}
}

// Losing the sound server mid-session (as a USB microphone and speaker unplugged): the agent
// keeps its session and its pace, says which devices are lost, and resumes when they return.
func TestEndToEndDeviceLoss(t *testing.T) {
	card := testaudio.Start(t)
	bin := buildOmnisat(t)
	dir := t.TempDir()
	sim := realtimetest.NewServer(realtimetest.Options{})
	defer sim.Close()
	cfgPath, sock := writeDeviceConfig(t, dir, sim.URL(), "")
	defer runOmnisat(t, bin, cfgPath, dir)()
	waitState(t, sock, agent.StateListening, 20*time.Second)
	card.Stop()
	lostAt := time.Now()
	var st agent.Status
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		st = status(t, sock)
		if st.Devices["microphone"] != "" && st.Devices["microphone"] != "ok" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st.Devices["microphone"] == "" || st.Devices["microphone"] == "ok" {
		t.Fatalf("microphone loss not reported: %+v", st)
	}
	t.Logf("device loss reported after %v: %v", time.Since(lostAt).Round(time.Millisecond), st.Devices)
	// The pace goes on: two more chunks (silence, the microphone's stand-in) reach the server.
	before := len(sim.Sessions()[0].Appends)
	waitUntil(t, "two more chunks", 30*time.Second, func() bool { return len(sim.Sessions()[0].Appends) >= before+2 })
	if st := status(t, sock); st.State != agent.StateListening || len(sim.Sessions()) != 1 {
		t.Fatalf("session did not carry on without the devices: %+v, %d sessions", st, len(sim.Sessions()))
	}
	if err := card.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		st = status(t, sock)
		if st.Devices["microphone"] == "ok" && st.Devices["speaker"] == "ok" {
			t.Logf("devices back after restart: %v", st.Devices)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("devices did not come back: %+v", st.Devices)
}
