package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `omnisat run` runs Go code on one thread unless GOMAXPROCS says otherwise (the runtime's own
// schedule trace says how many it uses), and GOMAXPROCS still wins.
func TestRunGOMAXPROCS(t *testing.T) {
	bin := buildOmnisat(t)
	wav, err := filepath.Abs("../../configs/demo/hello.wav")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ procs, want string }{{"", "gomaxprocs=1 "}, {"2", "gomaxprocs=2 "}} {
		t.Run("GOMAXPROCS="+tc.procs, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "omnisat.yaml")
			if err := os.WriteFile(cfg, []byte("audio:\n  input: file:"+wav+"\n  loop: true\n  output: none\ncamera:\n  source: none\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			// An empty GOMAXPROCS is unset for the runtime and for omnisat.
			t.Setenv("GOMAXPROCS", tc.procs)
			t.Setenv("GODEBUG", "schedtrace=100")
			_, logs, stop := startOmnisatArgs(t, bin, "run", "--simulator", "-c", cfg, "--state-dir", dir)
			defer stop()
			// Traces from before main ran (a slow start on a busy machine) show the runtime's
			// default: judge those printed after the banner.
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				_, after, started := strings.Cut(logs.String(), "control socket")
				var traces []string
				for _, line := range strings.Split(after, "\n") {
					if strings.HasPrefix(line, "SCHED ") {
						traces = append(traces, line)
					}
				}
				if started && len(traces) >= 3 {
					for _, line := range traces {
						if !strings.Contains(line, tc.want) {
							t.Fatalf("schedule trace %q, want %s", line, tc.want)
						}
					}
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Fatalf("no schedule trace within 30 s:\n%s", logs.String())
		})
	}
}
