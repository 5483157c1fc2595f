package testaudio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	rec := filepath.Join(dir, "rec.wav")
	stop := c.Record(t, rec)
	time.Sleep(200 * time.Millisecond)
	// Play into spk directly (as the program would) and find it in the recording.
	if _, err := c.run(time.Minute, "paplay", "--device=spk", tone); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	stop()
	st, err := os.Stat(rec)
	if err != nil || st.Size() < 44100*2*2/2 {
		t.Fatalf("recording %v %v: want at least 0.5 s", st, err)
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
