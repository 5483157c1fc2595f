package agent_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// BenchmarkSoakRollover runs the agent through many planned rollovers in compressed time against a
// simulator in its own process (so the CPU figure is the agent's alone) and reports what must not
// grow — goroutines, heap, open files — and what it costs: CPU per second of media, and how long
// from a rollover's start until audio flows in the new session.
//
//	go test -run '^$' -bench SoakRollover -benchtime 1x ./agent
func BenchmarkSoakRollover(b *testing.B) {
	const rollovers = 40
	url := startSimulatorProcess(b, "--workers", "2")
	for range b.N {
		soak(b, url, rollovers)
	}
}

func soak(b *testing.B, url string, rollovers int) {
	source := devices.NewPacedSource(ramp(16000*600), 16000, true, 8)
	speaker := devices.NewFileSpeaker("", 24000)
	defer speaker.Close()
	sup, err := agent.New(agent.Options{
		Config: agent.Config{Chunk: 250 * time.Millisecond, TimeLimit: 900 * time.Millisecond, TimeMargin: 300 * time.Millisecond,
			BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond},
		Server: realtime.Config{URL: url, Mode: realtime.ModeAudio, Init: realtime.Init{Instructions: "soak"}},
		Audio:  source, Speaker: speaker,
	})
	if err != nil {
		b.Fatal(err)
	}
	events, _ := sup.Subscribe(100000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	runtime.GC()
	goroutines0, heap0, fds0 := runtime.NumGoroutine(), heapInUse(), openFiles()
	cpu0, w0 := cpuTime(), wakeups()
	go func() { done <- sup.Run(ctx) }()

	n := 0
	timeout := time.After(time.Duration(rollovers) * 3 * time.Second)
	var firstListening time.Time
	for n < rollovers {
		select {
		case ev := <-events:
			switch ev := ev.(type) {
			case agent.StateChanged:
				if firstListening.IsZero() && ev.Status.State == agent.StateListening {
					firstListening = time.Now()
				}
			case agent.Lifecycle:
				switch ev.Kind {
				case "rollover":
					n++
				case "session_ended", "reconnect", "error":
					b.Fatalf("unplanned %s during soak: %s", ev.Kind, ev.Reason)
				}
			}
		case <-timeout:
			b.Fatalf("only %d rollovers; status %+v", n, sup.Status())
		}
	}
	st := sup.Status()
	sent := st.ChunksSent
	cpu, woken := cpuTime()-cpu0, wakeups()-w0
	wall := time.Since(firstListening)
	cancel()
	<-done
	time.Sleep(200 * time.Millisecond) // let closers and the GC settle
	runtime.GC()
	goroutines1, heap1, fds1 := runtime.NumGoroutine(), heapInUse(), openFiles()
	runtime.KeepAlive(source) // its samples count in both heap figures

	media := float64(sent) * 0.25
	b.ReportMetric(float64(n), "rollovers")
	b.ReportMetric(float64(cpu.Milliseconds())/media, "cpu-ms/s-media")
	b.ReportMetric(float64(woken)/media, "wakeups/s-media")
	b.ReportMetric(media/wall.Seconds(), "media-s/wall-s")
	b.ReportMetric(float64(goroutines0), "goroutines-before")
	b.ReportMetric(float64(goroutines1), "goroutines-after")
	b.ReportMetric(float64(heap0)/1024, "heap-KiB-before")
	b.ReportMetric(float64(heap1)/1024, "heap-KiB-after")
	b.ReportMetric(float64(fds0), "fds-before")
	b.ReportMetric(float64(fds1), "fds-after")
	b.ReportMetric(float64(st.ChunksDropped), "chunks-dropped")
	if goroutines1 > goroutines0+2 || fds1 > fds0+2 {
		b.Errorf("leak: goroutines %d→%d, open files %d→%d", goroutines0, goroutines1, fds0, fds1)
	}
	if st.ChunksDropped != 0 {
		b.Errorf("%d chunks dropped across planned rollovers", st.ChunksDropped)
	}
}

// BenchmarkRolloverGap measures, on the simulator's side, how long audio stops flowing at a
// planned rollover: the time between the last chunk the old session received and the first the
// new one did, against the normal spacing of chunks.
func BenchmarkRolloverGap(b *testing.B) {
	for range b.N {
		h := newHarness(b, setup{speed: 1, sim: realtimetest.Options{Workers: 2},
			cfg: agent.Config{TimeLimit: 1500 * time.Millisecond, TimeMargin: 500 * time.Millisecond}})
		deadline := time.Now().Add(20 * time.Second)
		for len(h.sim.Sessions()) < 6 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		h.stop()
		recs := h.sim.Sessions()
		var gaps, firsts []time.Duration
		for i := 1; i < len(recs)-1; i++ {
			prev, next := recs[i-1].Appends, recs[i].Appends
			if len(prev) == 0 || len(next) == 0 {
				continue
			}
			gaps = append(gaps, next[0].At.Sub(prev[len(prev)-1].At))
			firsts = append(firsts, next[0].At.Sub(recs[i].ConnectedAt))
		}
		if len(gaps) == 0 {
			b.Fatal("no rollovers measured")
		}
		sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
		sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
		b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds())/1000, "chunk-gap-ms-p50")
		b.ReportMetric(float64(gaps[len(gaps)-1].Microseconds())/1000, "chunk-gap-ms-max")
		b.ReportMetric(float64(firsts[len(firsts)/2].Microseconds())/1000, "connect-to-audio-ms-p50")
		h.sim.Close()
	}
}

// startSimulatorProcess builds the simulator program (what `omnisat simulate` runs) and runs it
// as a child process.
func startSimulatorProcess(b *testing.B, args ...string) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "omnisat-simulator")
	build := exec.Command("go", "build", "-o", bin, "../cmd/omnisat-simulator")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build omnisat-simulator: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("simulator: %v", err)
	}
	i := strings.Index(line, "ws://")
	if i < 0 {
		b.Fatalf("simulator said %q", line)
	}
	return strings.TrimSpace(line[i:])
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func openFiles() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// timedSession records when each Send is called.
type timedSession struct {
	realtime.Session
	mu    *sync.Mutex
	sends *[]time.Time
}

func (s timedSession) Send(ctx context.Context, c realtime.Chunk) error {
	s.mu.Lock()
	*s.sends = append(*s.sends, time.Now())
	s.mu.Unlock()
	return s.Session.Send(ctx, c)
}

// BenchmarkCaptureToSend measures how long a finished chunk waits before it is handed to the
// session: from the moment its last sample was captured (the paced source's clock) to the Send
// call, over real-time capture of 250 ms chunks.
func BenchmarkCaptureToSend(b *testing.B) {
	for range b.N {
		var mu sync.Mutex
		var sends []time.Time
		h := newHarness(b, setup{speed: 1, dialWrap: func(d agent.DialFunc) agent.DialFunc {
			return func(ctx context.Context, cfg realtime.Config) (realtime.Session, error) {
				s, err := d(ctx, cfg)
				if err != nil {
					return nil, err
				}
				return timedSession{s, &mu, &sends}, nil
			}
		}})
		h.waitFor("listening", 5*time.Second, isState(agent.StateListening))
		time.Sleep(6 * time.Second)
		h.stop()
		start := h.source.Started()
		mu.Lock()
		var lat []time.Duration
		// Chunks captured before the session was ready were sent from the backlog: skip them.
		for k, at := range sends {
			captured := start.Add(time.Duration(k+1) * 250 * time.Millisecond)
			if d := at.Sub(captured); d >= 0 && d < 100*time.Millisecond {
				lat = append(lat, d)
			}
		}
		mu.Unlock()
		if len(lat) < 10 {
			b.Fatalf("only %d chunks measured", len(lat))
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "capture-to-send-ms-p50")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "capture-to-send-ms-p99")
		b.ReportMetric(float64(len(lat)), "chunks")
		h.sim.Close()
	}
}

// BenchmarkSoakMemory is the long soak of issue 13: the agent streams in real time to a talking
// server in its own process (a second of speech every four, which the parrot answers and plays
// back), with no speaker (audio.output: none), through about 100 rollovers, and must end with its
// resident memory, goroutines and open files within a small bound of where they stood once warm
// (at minute 2, or a third of a shorter run). OMNISAT_SOAK sets the length (default 150s, about
// 2.5 minutes; e.g. 30m), and the rollovers stay about 100.
//
//	go test -run '^$' -bench SoakMemory -benchtime 1x -timeout 40m ./agent
func BenchmarkSoakMemory(b *testing.B) {
	length := 150 * time.Second
	if v := os.Getenv("OMNISAT_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("OMNISAT_SOAK: %v", err)
		}
		length = d
	}
	const rollovers = 100
	url := startSimulatorProcess(b, "--workers", "2")
	for range b.N {
		soakMemory(b, url, length, rollovers)
	}
}

func soakMemory(b *testing.B, url string, length time.Duration, rollovers int) {
	audio := slices.Concat(tone(16000, 0.3), make([]float32, 16000*3))
	source := devices.NewPacedSource(audio, 16000, true, 1)
	var speaker agent.Speaker
	if os.Getenv("OMNISAT_SOAK_SPEAKER") == "clock" {
		speaker = &clockSpeaker{} // keeps nothing by construction: the agent's share alone
	} else {
		spk := devices.NewFileSpeaker("", 24000) // what audio.output: none plays into
		defer spk.Close()
		speaker = spk
	}
	every := length / time.Duration(rollovers)
	sup, err := agent.New(agent.Options{
		Config: agent.Config{TimeLimit: every + every/4, TimeMargin: every / 4, SwitchWait: every / 4,
			BackoffMin: every / 10, BackoffMax: every / 5},
		// Every chunk may be answered: sessions are short, and the server would otherwise force
		// the first three to listen.
		Server: realtime.Config{URL: url, Mode: realtime.ModeAudio,
			Init: realtime.Init{Instructions: "soak", Config: map[string]any{"force_listen_count": 0}}},
		Audio: source, Speaker: speaker,
	})
	if err != nil {
		b.Fatal(err)
	}
	events, _ := sup.Subscribe(1 << 16)
	var mu sync.Mutex
	kinds := map[string]int{}
	replies := 0
	go func() {
		for ev := range events {
			mu.Lock()
			switch ev := ev.(type) {
			case agent.Lifecycle:
				kinds[ev.Kind]++
			case agent.Utterance:
				if ev.Role == "assistant" {
					replies++
				}
			}
			mu.Unlock()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	sample := func() (rss int64, goroutines, fds int) {
		runtime.GC()
		debug.FreeOSMemory()
		return residentKiB(), runtime.NumGoroutine(), openFiles()
	}
	began := time.Now()
	warm := min(length/3, 2*time.Minute)
	time.Sleep(warm)
	rss0, g0, fds0 := sample()
	cpu0, w0, sent0 := cpuTime(), wakeups(), sup.Status().ChunksSent
	time.Sleep(length - warm)
	rss1, g1, fds1 := sample()
	cpu1, w1, st := cpuTime(), wakeups(), sup.Status()
	mu.Lock()
	lost := kinds["session_ended"] // before the shutdown ends the last one
	mu.Unlock()
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	media := float64(st.ChunksSent - sent0) // 1 s chunks
	b.ReportMetric(time.Since(began).Seconds(), "s")
	b.ReportMetric(float64(st.Rollovers), "rollovers")
	b.ReportMetric(float64(replies), "replies")
	b.ReportMetric(float64(rss0)/1024, "rss-MiB-warm")
	b.ReportMetric(float64(rss1)/1024, "rss-MiB-end")
	b.ReportMetric(float64(g0), "goroutines-warm")
	b.ReportMetric(float64(g1), "goroutines-end")
	b.ReportMetric(float64(fds0), "fds-warm")
	b.ReportMetric(float64(fds1), "fds-end")
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/1000/media, "cpu-ms/s-media")
	b.ReportMetric(float64(w1-w0)/media, "wakeups/s-media")
	b.ReportMetric(float64(st.ChunksDropped), "chunks-dropped")
	if st.Rollovers < rollovers*3/4 || replies == 0 {
		b.Errorf("%d rollovers and %d replies in %v: not the soak intended (lifecycle %v)", st.Rollovers, replies, length, kinds)
	}
	if lost > 0 || st.SessionsLost > 0 {
		b.Errorf("sessions lost during the soak: %v", kinds)
	}
	// Flat: a few MiB of slack for the allocator and the GC's pacing, a couple of goroutines
	// and files for whatever is closing at the moment of the sample.
	if rss1 > rss0+8*1024 || g1 > g0+3 || fds1 > fds0+2 {
		b.Errorf("grew from warm to end: resident %d → %d KiB, goroutines %d → %d, open files %d → %d", rss0, rss1, g0, g1, fds0, fds1)
	}
}

// residentKiB is this process's resident memory (VmRSS).
func residentKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return -1
}
