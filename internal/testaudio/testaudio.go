// Package testaudio is a virtual sound card for tests: a private PulseAudio daemon with two null
// sinks, started for one test and stopped (by its pid) when the test ends.
//
//   - The sink "mic" stands for the room: what a test plays into it (PlayInto) is what the
//     program captures from the default source, "mic.monitor".
//   - The sink "spk" is the default output: what the program plays lands there, and Record
//     captures it from "spk.monitor".
//   - Listen records a source into memory as it plays, so that a test can wait until the
//     recording holds what it needs (counted in samples) instead of sleeping for the time that
//     should take: on a busy machine the program, the daemon and the tools start late, but the
//     streams' positions stay true.
//
// Start points PULSE_SERVER (with t.Setenv, so the calling test cannot be parallel) at the
// daemon's socket. PortAudio then reaches it through ALSA: Debian's libasound2-plugins installs
// /etc/alsa/conf.d/99-pulse.conf, which adds the ALSA devices "pulse" and "default" (routed to
// PulseAudio) whenever a PulseAudio server is reachable at the time ALSA reads its configuration
// (Pa_Initialize). That works as root too; no asoundrc or ALSA_CONFIG_PATH is needed.
//
// Every daemon gets its own HOME, XDG_RUNTIME_DIR and PULSE_RUNTIME_PATH in a temporary folder,
// so test packages running in parallel (go test ./...) never meet.
//
// When the tools are missing the test is skipped, unless the environment says CI=true: then it
// fails, so that a CI machine without `make deps` cannot pass by skipping.
package testaudio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/omnisat/omnisat/internal/syncbuf"
)

// Card is one private PulseAudio daemon.
type Card struct {
	// Dir is the daemon's private folder (HOME, runtime files, socket).
	Dir string
	// Server is the PULSE_SERVER value that reaches the daemon ("unix:" + socket path).
	Server string

	t   testing.TB
	env []string // for the daemon and the pa* tools

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the daemon has exited
	log  *syncbuf.Buffer
}

// Require reports whether the named programs are on PATH. When one is missing it fails the
// test if the environment has CI=true (the machine should have run `make deps`) and skips it
// otherwise; it returns false in both cases (for callers whose t does not stop the test).
func Require(t testing.TB, programs ...string) bool {
	t.Helper()
	var missing []string
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return true
	}
	msg := fmt.Sprintf("%s not installed: run make deps", strings.Join(missing, ", "))
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s", msg)
	} else {
		t.Skipf("%s", msg)
	}
	return false
}

// Start starts a daemon for t, makes spk the default sink and mic.monitor the default source,
// and sets PULSE_SERVER for the rest of the test. The daemon is stopped when t ends.
func Start(t testing.TB) *Card {
	t.Helper()
	if !Require(t, "pulseaudio", "pactl") {
		return nil
	}
	// A short path: a unix socket's path must fit in 108 bytes, which t.TempDir's long names
	// (they carry the test's name) do not always do.
	dir, err := os.MkdirTemp("", "testaudio")
	if err != nil {
		t.Fatalf("testaudio: make a folder for PulseAudio: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, d := range []string{"home", "run"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatalf("testaudio: %v", err)
		}
	}
	// No autospawn: when a test stops the daemon, the program's libpulse must see a lost
	// server, not start a new one of its own.
	clientConf := filepath.Join(dir, "client.conf")
	if err := os.WriteFile(clientConf, []byte("autospawn = no\n"), 0o600); err != nil {
		t.Fatalf("testaudio: %v", err)
	}
	c := &Card{
		Dir:    dir,
		Server: "unix:" + filepath.Join(dir, "native"),
		t:      t,
	}
	c.env = append(os.Environ(),
		"HOME="+filepath.Join(dir, "home"),
		"XDG_RUNTIME_DIR="+filepath.Join(dir, "run"),
		"PULSE_RUNTIME_PATH="+filepath.Join(dir, "run"),
		"PULSE_STATE_PATH="+filepath.Join(dir, "run"),
		"PULSE_CLIENTCONFIG="+clientConf,
		"PULSE_SERVER="+c.Server,
	)
	t.Setenv("PULSE_SERVER", c.Server)
	t.Setenv("PULSE_CLIENTCONFIG", clientConf)
	t.Cleanup(c.Stop)
	if err := c.start(); err != nil {
		t.Fatalf("testaudio: %v", err)
	}
	return c
}

// start runs the daemon and waits until it answers.
func (c *Card) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		return errors.New("start PulseAudio: already running")
	}
	socket := strings.TrimPrefix(c.Server, "unix:")
	os.Remove(socket) // a stale socket from a stopped daemon
	cmd := exec.Command("pulseaudio",
		"-n", // no default.pa: only the modules below
		"--daemonize=no", "--system=no", "--use-pid-file=no",
		"--exit-idle-time=-1", "--disallow-exit", "--disallow-module-loading=no",
		"--log-target=stderr",
		"-L", "module-null-sink sink_name=spk",
		"-L", "module-null-sink sink_name=mic",
		"-L", "module-native-protocol-unix auth-anonymous=1 socket="+socket,
		"-L", "module-always-sink",
	)
	cmd.Env = c.env
	dieWithParent(cmd)
	c.log = &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = c.log, c.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start pulseaudio: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	c.cmd, c.done = cmd, done

	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := c.pactlLocked("info"); err == nil {
			break
		}
		select {
		case <-done:
			c.cmd = nil
			return fmt.Errorf("pulseaudio exited at start: %s", c.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stopLocked()
			return fmt.Errorf("pulseaudio did not answer on %s within 10 s: %s", socket, c.log.String())
		}
	}
	if _, err := c.pactlLocked("set-default-sink", "spk"); err != nil {
		return err
	}
	if _, err := c.pactlLocked("set-default-source", "mic.monitor"); err != nil {
		return err
	}
	return nil
}

// Stop stops the daemon (SIGTERM to its pid, SIGKILL after 5 s) and waits for it. A test of
// device loss calls it mid-stream; Cleanup calls it at the end. It logs the daemon's output
// if the test failed.
func (c *Card) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopLocked()
}

func (c *Card) stopLocked() {
	if c.cmd == nil {
		return
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
	if c.t.Failed() {
		c.t.Logf("testaudio: pulseaudio output:\n%s", c.log.String())
	}
	c.cmd = nil
}

// Restart starts the daemon again on the same socket after Stop (a device coming back).
func (c *Card) Restart() error { return c.start() }

// Pactl runs pactl against the daemon and returns its output.
func (c *Card) Pactl(args ...string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pactlLocked(args...)
}

func (c *Card) pactlLocked(args ...string) (string, error) {
	return c.run(10*time.Second, "pactl", args...)
}

// run runs a tool in the daemon's environment.
func (c *Card) run(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// PlayInto plays an audio file into the "mic" sink, which is what the program captures, and
// returns when it has been played.
func (c *Card) PlayInto(path string) error {
	if !Require(c.t, "paplay") {
		return errors.New("paplay missing")
	}
	_, err := c.run(2*time.Minute, "paplay", "--device=mic", path)
	return err
}

// Record records what the program plays (spk.monitor) into a WAV file at path until stop is
// called; it returns once the recording runs, and stop waits until the file is complete. The recording is at the sink's rate (44.1 kHz,
// 2 channels, 16 bits).
func (c *Card) Record(t testing.TB, path string) (stop func()) {
	t.Helper()
	return c.RecordFrom(t, "spk.monitor", path)
}

// RecordFrom is Record from another source: "mic.monitor" is what the program's microphone
// hears (the echo path and the played speech).
func (c *Card) RecordFrom(t testing.TB, source, path string) (stop func()) {
	t.Helper()
	if !Require(t, "parecord") {
		return func() {}
	}
	cmd := exec.Command("parecord", "--device="+source, "--file-format=wav", "--latency-msec=20", path)
	cmd.Env = c.env
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("testaudio: start parecord: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGINT) // parecord completes the WAV header on SIGINT
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Errorf("testaudio: parecord did not stop on SIGINT: %s", out.String())
			}
		})
	}
	t.Cleanup(stop)
	// Return once audio is being written (header + 50 ms), so that the caller's sound is in it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, err := os.Stat(path); err == nil && st.Size() >= 44+44100*4/20 {
			return stop
		}
		select {
		case <-done:
			t.Fatalf("testaudio: parecord exited: %s", out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("testaudio: parecord wrote nothing to %s within 10 s: %s", path, out.String())
		}
	}
}

// Recording is a source of the card recorded into memory as it plays (pacat, mono 16-bit at
// Rate), for tests that must act on what has been heard so far: wait until the recording holds
// enough of something, measured in samples, instead of sleeping for the time it should take.
// Positions in it are stream positions of the daemon's clock, which keeps running in real time
// however late the program under test or the test itself runs; a busy machine delays when the
// samples arrive, never which samples they are.
type Recording struct {
	// Rate is the recording's sample rate.
	Rate int

	cmd     *exec.Cmd
	done    chan struct{} // closed when pacat's output has been read to its end
	out     syncbuf.Buffer
	stopped sync.Once

	mu      sync.Mutex
	samples []float32
	start   time.Time     // wall time of samples[0], an upper bound (see Start)
	grew    chan struct{} // closed and replaced whenever samples grow
}

// Listen records source ("spk.monitor": what the program plays; "mic.monitor": what its
// microphone hears) at rate, mono, for the rest of the test or until Stop. It returns once the
// recording runs (50 ms of it are in), so that a sound played afterwards is in it.
func (c *Card) Listen(t testing.TB, source string, rate int) *Recording {
	t.Helper()
	if !Require(t, "pacat") {
		return nil
	}
	// A short buffer keeps the wall-clock estimate of sample 0 tight (Start); the server
	// keeps up to 4 MB (20 s here) for a reader that is late, so nothing is lost under load.
	cmd := exec.Command("pacat", "--record", "--device="+source, "--raw", "--format=s16le",
		"--rate="+strconv.Itoa(rate), "--channels=1", "--latency-msec=5")
	cmd.Env = c.env
	r := &Recording{Rate: rate, cmd: cmd, done: make(chan struct{}), grew: make(chan struct{})}
	cmd.Stderr = &r.out
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("testaudio: record %s: %v", source, err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testaudio: record %s: start pacat: %v", source, err)
	}
	go r.read(pipe)
	t.Cleanup(r.Stop)
	if err := r.WaitLen(rate/20, 30*time.Second); err != nil {
		r.Stop()
		t.Fatalf("testaudio: record %s: %v", source, err)
	}
	return r
}

// read turns pacat's output into samples until it ends.
func (r *Recording) read(pipe io.Reader) {
	defer close(r.done)
	buf := make([]byte, 8192)
	var odd []byte // a sample split between two reads
	for {
		n, err := pipe.Read(buf)
		now := time.Now()
		if n > 0 {
			b := append(odd, buf[:n]...)
			r.mu.Lock()
			for i := 0; i+1 < len(b); i += 2 {
				r.samples = append(r.samples, float32(int16(uint16(b[i])|uint16(b[i+1])<<8))/32768)
			}
			odd = append(odd[:0:0], b[len(b)-len(b)%2:]...)
			// Data arrives after it was captured: each read bounds the time of sample 0 from
			// above, and the earliest bound is the tightest.
			if est := now.Add(-time.Duration(len(r.samples)) * time.Second / time.Duration(r.Rate)); r.start.IsZero() || est.Before(r.start) {
				r.start = est
			}
			close(r.grew)
			r.grew = make(chan struct{})
			r.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// Len is how many samples have been recorded so far.
func (r *Recording) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.samples)
}

// Samples is the recording so far. The slice is the recording's own (later samples are
// appended after it, never written into it): read it, do not change it.
func (r *Recording) Samples() []float32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.samples[:len(r.samples):len(r.samples)]
}

// Start is the wall-clock time of sample 0, as an upper bound: a latency measured from a wall
// time to a sample position with it is never underestimated.
func (r *Recording) Start() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.start
}

// WaitLen waits until the recording holds n samples, for at most within; it wakes on each
// piece of audio that arrives, not on a timer.
func (r *Recording) WaitLen(n int, within time.Duration) error {
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	for {
		r.mu.Lock()
		have, grew := len(r.samples), r.grew
		r.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-grew:
		case <-r.done:
			if r.Len() >= n {
				return nil
			}
			return fmt.Errorf("pacat stopped after %.2f s of %.2f s: %s", float64(r.Len())/float64(r.Rate),
				float64(n)/float64(r.Rate), strings.TrimSpace(r.out.String()))
		case <-timeout.C:
			return fmt.Errorf("%.2f s recorded within %v, want %.2f s", float64(r.Len())/float64(r.Rate), within,
				float64(n)/float64(r.Rate))
		}
	}
}

// Stop ends the recording (SIGTERM to pacat's pid) and waits until everything it recorded
// has been read.
func (r *Recording) Stop() {
	r.stopped.Do(func() {
		r.cmd.Process.Signal(syscall.SIGTERM)
		<-r.done
		r.cmd.Wait()
	})
}

// Speech writes text spoken by espeak-ng (22.05 kHz mono WAV) into the test's temporary
// folder and returns the path.
func (c *Card) Speech(t testing.TB, text string) string {
	t.Helper()
	if !Require(t, "espeak-ng") {
		return ""
	}
	path := filepath.Join(t.TempDir(), "speech.wav")
	if out, err := c.run(time.Minute, "espeak-ng", "-w", path, text); err != nil {
		t.Fatalf("testaudio: speak %q: %v %s", text, err, out)
	}
	return path
}

// Sox runs sox with args (to make or convert test signals), failing the test on error.
func (c *Card) Sox(t testing.TB, args ...string) {
	t.Helper()
	if !Require(t, "sox") {
		return
	}
	if _, err := c.run(time.Minute, "sox", args...); err != nil {
		t.Fatalf("testaudio: %v", err)
	}
}

// LoadLoopback connects spk.monitor to mic with latencyMS of delay (module-loopback): an echo
// path from the speaker to the microphone, for echo-cancellation tests. The returned func
// unloads it; it is also unloaded when the daemon stops.
func (c *Card) LoadLoopback(latencyMS int) (unload func() error, err error) {
	return c.LoadEchoPath(latencyMS, 0)
}

// LoadEchoPath is LoadLoopback with the echo attenuated by gainDB (≤ 0): a room where the
// microphone hears the speaker quieter than it plays.
func (c *Card) LoadEchoPath(latencyMS int, gainDB float64) (unload func() error, err error) {
	out, err := c.Pactl("load-module", "module-loopback", "source=spk.monitor", "sink=mic",
		"latency_msec="+strconv.Itoa(latencyMS))
	if err != nil {
		return nil, fmt.Errorf("load echo loopback: %w", err)
	}
	idx := strings.TrimSpace(out)
	unload = func() error {
		_, err := c.Pactl("unload-module", idx)
		return err
	}
	if gainDB == 0 {
		return unload, nil
	}
	// The loopback's sink input is the one whose owner module is idx.
	list, err := c.Pactl("list", "sink-inputs")
	if err != nil {
		unload()
		return nil, err
	}
	input := ""
	for _, block := range strings.Split(list, "Sink Input #")[1:] {
		if strings.Contains(block, "Owner Module: "+idx+"\n") {
			input, _, _ = strings.Cut(block, "\n")
		}
	}
	if input == "" {
		unload()
		return nil, fmt.Errorf("echo loopback: no sink input of module %s in %q", idx, list)
	}
	if _, err := c.Pactl("set-sink-input-volume", strings.TrimSpace(input), strconv.FormatFloat(gainDB, 'f', 1, 64)+"dB"); err != nil {
		unload()
		return nil, err
	}
	return unload, nil
}
