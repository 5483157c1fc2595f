package testaudio

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/internal/signaltest"
)

// recorder is a testing.TB that records Fatalf and Skipf instead of stopping the test.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Fatalf(format string, args ...any) { r.fatal = format }
func (r *recorder) Skipf(format string, args ...any)  { r.skip = format }

// TestRequireFailsInCI: a missing tool skips a test on a developer's machine and fails it in CI.
func TestRequireFailsInCI(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // nothing to find
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	if Require(r, "pulseaudio") || r.fatal == "" || r.skip != "" {
		t.Errorf("CI=true: Require = fatal %q skip %q, want a failure", r.fatal, r.skip)
	}
	t.Setenv("CI", "")
	r = &recorder{TB: t}
	if Require(r, "pulseaudio") || r.fatal != "" || r.skip == "" {
		t.Errorf("no CI: Require = fatal %q skip %q, want a skip", r.fatal, r.skip)
	}
}

// TestCardPlaysAndRecords: the daemon starts, answers, and its sinks carry sound.
func TestCardPlaysAndRecords(t *testing.T) {
	c := Start(t)
	out, err := c.Pactl("info")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Default Sink: spk") || !strings.Contains(out, "Default Source: mic.monitor") {
		t.Errorf("pactl info:\n%s", out)
	}
	if os.Getenv("PULSE_SERVER") != c.Server {
		t.Errorf("PULSE_SERVER = %q, want %q", os.Getenv("PULSE_SERVER"), c.Server)
	}
	dir := t.TempDir()
	tone := filepath.Join(dir, "tone.wav")
	c.Sox(t, "-n", "-r", "44100", "-c", "2", "-b", "16", tone, "synth", "0.5", "sine", "440", "vol", "0.5")
	file := filepath.Join(dir, "rec.wav")
	stop := c.Record(t, file)
	live := c.Listen(t, "spk.monitor", 44100)
	// Play into spk directly (as the program would) and find it in both recordings.
	if _, err := c.run(time.Minute, "paplay", "--device=spk", tone); err != nil {
		t.Fatal(err)
	}
	// paplay returns once the sink has played the tone: the recordings hold it once they have
	// run on past that point (a quarter second of the stream, counted in samples).
	if err := live.WaitLen(max(live.Len(), int(time.Since(live.Start()).Seconds()*44100))+44100/4, time.Minute); err != nil {
		t.Fatal(err)
	}
	live.Stop()
	want := make([]float32, 44100/2)
	for i := range want {
		want[i] = float32(0.5 * math.Sin(2*math.Pi*440*float64(i)/44100))
	}
	heard := live.Samples()
	if at, ncc := signaltest.Align(want, heard); ncc < 0.99 || at < 0 || at+len(want) > len(heard) {
		t.Errorf("the tone in the live recording: at %d of %d samples, ncc %.3f; want all of it, ncc ≥ 0.99", at, len(heard), ncc)
	}
	if rms := signaltest.RMS(heard); rms < 0.1 {
		t.Errorf("live recording rms %.3f: the tone is missing", rms)
	}
	// The file grows as parecord writes it: wait until it holds a quarter second more.
	st, _ := os.Stat(file)
	deadline := time.Now().Add(time.Minute)
	for size := st.Size(); st.Size() < size+44100*4/4; st, _ = os.Stat(file) {
		if time.Now().After(deadline) {
			t.Fatalf("parecord wrote %d bytes in a minute, want %d", st.Size()-size, 44100)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	rec, err := wav.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if at, ncc := signaltest.Align(want, rec.Mono()); ncc < 0.99 || at < 0 || at+len(want) > len(rec.Mono()) {
		t.Errorf("the tone in the recorded file: at %d of %d samples, ncc %.3f; want all of it, ncc ≥ 0.99", at, len(rec.Mono()), ncc)
	}
	unload, err := c.LoadLoopback(50)
	if err != nil {
		t.Fatal(err)
	}
	if err := unload(); err != nil {
		t.Fatal(err)
	}
	c.Stop()
	if _, err := c.Pactl("info"); err == nil {
		t.Error("pactl info works after Stop")
	}
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pactl("info"); err != nil {
		t.Errorf("after Restart: %v", err)
	}
}
