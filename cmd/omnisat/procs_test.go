package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// wholeSchedTrace is the start of one of omnisat's own schedule traces (GODEBUG=schedtrace), up
// to its processor count; the simulator's come through the log as warnings.
var wholeSchedTrace = regexp.MustCompile(`^SCHED \d+ms: gomaxprocs=\d+ idleprocs=`)

// wholeGCTraceEnd is the end of a whole collection trace (GODEBUG=gctrace=1): the processor
// count, and whether the collection was forced.
var wholeGCTraceEnd = regexp.MustCompile(` \d+ P( \(forced\))?$`)

// `omnisat run` runs Go code on one thread unless GOMAXPROCS says otherwise (the runtime's own
// schedule trace says how many it uses), and GOMAXPROCS still wins.
func TestRunGOMAXPROCS(t *testing.T) {
	bin := buildOmnisat(t)
	for _, tc := range []struct{ procs, want string }{{"", "gomaxprocs=1 "}, {"2", "gomaxprocs=2 "}} {
		t.Run("GOMAXPROCS="+tc.procs, func(t *testing.T) {
			// An empty GOMAXPROCS is unset for the runtime and for omnisat.
			t.Setenv("GOMAXPROCS", tc.procs)
			t.Setenv("GODEBUG", "schedtrace=100")
			logs, stop := runOnDemoWAV(t, bin)
			defer stop()
			// Traces from before main ran (a slow start on a busy machine) show the runtime's
			// default: judge those printed after the banner. The runtime prints a trace in
			// several writes, which other output can split: only whole ones are judged.
			var traces []string
			waitUntil(t, "three schedule traces after the banner", 30*time.Second, func() bool {
				_, after, started := strings.Cut(logs.String(), "control socket")
				traces = traces[:0]
				for _, line := range strings.Split(after, "\n") {
					if wholeSchedTrace.MatchString(line) {
						traces = append(traces, line)
					}
				}
				return started && len(traces) >= 3
			})
			for _, line := range traces {
				if !strings.Contains(line, tc.want) {
					t.Fatalf("schedule trace %q, want %s", line, tc.want)
				}
			}
		})
	}
}

// `omnisat run` collects at GOGC=50 unless GOGC says otherwise, and GOGC still wins: the
// collector's first cycle reports the heap floor as its goal, 4 MB × GOGC / 100.
func TestRunGCPercent(t *testing.T) {
	bin := buildOmnisat(t)
	for _, tc := range []struct{ gogc, want string }{{"", " 2 MB goal"}, {"25", " 1 MB goal"}} {
		t.Run("GOGC="+tc.gogc, func(t *testing.T) {
			// An empty GOGC is unset for the runtime and for omnisat.
			t.Setenv("GOGC", tc.gogc)
			t.Setenv("GODEBUG", "gctrace=1")
			logs, stop := runOnDemoWAV(t, bin)
			defer stop()
			// The runtime prints the trace in several writes: judge the line once it is whole
			// (up to its processor count and its newline), not as it arrives.
			var first string
			waitUntil(t, "collection", 60*time.Second, func() bool {
				lines := strings.Split(logs.String(), "\n")
				for _, line := range lines[:len(lines)-1] { // the last is not ended yet
					if strings.HasPrefix(line, "gc 1 @") && wholeGCTraceEnd.MatchString(line) {
						first = line
						return true
					}
				}
				return false
			})
			if !strings.Contains(first, tc.want) {
				t.Fatalf("the first collection %q, want%s", first, tc.want)
			}
		})
	}
}

// runOnDemoWAV starts `omnisat run` on the built-in simulator with the demo WAV looped as its
// microphone, no speaker and no camera.
func runOnDemoWAV(t *testing.T, bin string) (logs *syncBuffer, stop func()) {
	t.Helper()
	buildProgram(t, simulatorProgram())
	wav, err := filepath.Abs("../../configs/demo/hello.wav")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "omnisat.yaml")
	if err := os.WriteFile(cfg, []byte("audio:\n  input: file:"+wav+"\n  loop: true\n  output: none\ncamera:\n  source: none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, logs, stop = startOmnisatArgs(t, bin, "run", "--simulator", "-c", cfg, "--state-dir", dir)
	return logs, stop
}
