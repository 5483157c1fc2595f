package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeSpeechFileConfig writes an audio-mode configuration for the built-in simulator with the
// demo's speech WAV (looped) as the microphone, no speaker and no camera, plus extra YAML.
func writeSpeechFileConfig(t *testing.T, dir, extra string) string {
	t.Helper()
	demo, _ := filepath.Abs("../../configs/demo")
	cfg := filepath.Join(dir, "omnisat.yaml")
	yaml := "server:\n  mode: audio\naudio:\n  input: file:" + demo + "/hello.wav\n  loop: true\n  output: none\n" +
		"camera:\n  source: none\n" + extra
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func journalStreamOf(t *testing.T, f *os.File) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

func TestIsJournal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !isJournal(f, journalStreamOf(t, f)) {
		t.Error("the stream JOURNAL_STREAM names is not recognised")
	}
	other, _ := os.Create(filepath.Join(t.TempDir(), "other"))
	defer other.Close()
	for _, v := range []string{"", "garbage", "1:x", journalStreamOf(t, other)} {
		if isJournal(f, v) {
			t.Errorf("JOURNAL_STREAM=%q taken for this stream", v)
		}
	}
}

func TestJournalLogLines(t *testing.T) {
	var buf bytes.Buffer
	log := newLogOutput(&buf, logConfig{Level: "debug", Format: "text"}, true).logger()
	log.Debug("d")
	log.Info("i")
	log.Warn("w")
	log.Error("e")
	log.With("component", "mic").WithGroup("dev").Info("grouped", "rate", 48000)
	want := []string{`<7>level=DEBUG msg=d`, `<6>level=INFO msg=i`, `<4>level=WARN msg=w`, `<3>level=ERROR msg=e`,
		`<6>level=INFO msg=grouped component=mic dev.rate=48000`}
	if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("journal text lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	buf.Reset()
	newLogOutput(&buf, logConfig{Level: "info", Format: "json"}, true).logger().Warn("careful", "n", 1)
	line, ok := strings.CutPrefix(strings.TrimSpace(buf.String()), "<4>")
	var rec map[string]any
	if !ok || json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "careful" || rec["time"] == nil {
		t.Errorf("journal JSON line %q: want <4> then a JSON record with its time", buf.String())
	}

	buf.Reset()
	newLogOutput(&buf, logConfig{Level: "info", Format: "text"}, false).logger().Info("plain")
	if s := buf.String(); !strings.HasPrefix(s, "time=") {
		t.Errorf("outside the journal a text line starts with its time: %q", s)
	}
}

// The real binary under a JOURNAL_STREAM that names its stderr: log lines carry priorities and
// no time, event lines no time either; the same run outside the journal keeps its times.
func TestRunWritesForTheJournal(t *testing.T) {
	buildProgram(t, simulatorProgram())
	bin := buildOmnisat(t)
	cfg := writeSpeechFileConfig(t, t.TempDir(), "log:\n  level: debug\n")
	runLogged := func(journal bool) string {
		out, err := os.Create(filepath.Join(t.TempDir(), "journal"))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		cmd := exec.Command(bin, "run", "--simulator", "-c", cfg, "--state-dir", t.TempDir())
		cmd.Stdout, cmd.Stderr = out, out
		cmd.Env = os.Environ()
		if journal {
			cmd.Env = append(cmd.Env, "JOURNAL_STREAM="+journalStreamOf(t, out))
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// A generous deadline: a busy machine starts the binary (and OpenCV) slowly.
		listening := func() bool { b, _ := os.ReadFile(out.Name()); return bytes.Contains(b, []byte("state listening")) }
		deadline := time.Now().Add(time.Minute)
		for !listening() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		b, _ := os.ReadFile(out.Name())
		if !bytes.Contains(b, []byte("state listening")) {
			t.Fatalf("omnisat run did not reach listening within a minute:\n%s", b)
		}
		return string(b)
	}

	stamped := regexp.MustCompile(`^\d\d:\d\d:\d\d `)
	text := runLogged(true)
	var logLines, eventLines int
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		switch {
		case strings.Contains(line, "time="), stamped.MatchString(line):
			t.Errorf("a line with its own time in the journal: %q", line)
		case regexp.MustCompile(`^<[3467]>level=`).MatchString(line):
			logLines++
		case strings.HasPrefix(line, "state "):
			eventLines++
		}
	}
	if logLines == 0 || eventLines == 0 {
		t.Errorf("want log lines with priorities and event lines; got %d and %d in:\n%s", logLines, eventLines, text)
	}

	text = runLogged(false)
	if !regexp.MustCompile(`(?m)^time=\S+ level=INFO`).MatchString(text) || strings.Contains(text, "<6>") ||
		!regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d state listening`).MatchString(text) {
		t.Errorf("outside the journal, lines keep their times and have no priorities:\n%s", text)
	}
}

func TestRunLogFormatFlag(t *testing.T) {
	buildProgram(t, simulatorProgram())
	if code, _, stderr := runCLI(t, "run", "--log-format", "xml", "-c", "../../configs/demo/demo.yaml"); code != exitUsage ||
		!strings.Contains(stderr, `--log-format: "xml" is not one of text, json`) {
		t.Errorf("--log-format xml: exit %d %q", code, stderr)
	}
	dir := t.TempDir()
	cfg := writeSpeechFileConfig(t, dir, "log:\n  level: debug\n  format: text\n")
	var out, errb syncBuffer
	env := &cliEnv{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--simulator", "--log-format", "json", "-c", cfg, "--state-dir", dir}, env)
	}()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(out.String(), "state listening") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("run exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "state listening") {
		t.Fatalf("run did not reach listening within a minute: %s", out.String())
	}
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["level"] == nil {
			t.Errorf("--log-format json over log.format text: line %q is not a JSON record", line)
		}
	}
	if len(lines) < 2 {
		t.Errorf("want debug records on stderr, got %q", errb.String())
	}
}
