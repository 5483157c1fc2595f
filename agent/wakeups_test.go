package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/realtime"
)

// periodSource is a microphone that behaves like a device with an input buffer of one period:
// samples become available a whole period at a time, at real time, and Read returns what is
// available (waiting only when nothing is). One wake-up per period, as PortAudio's callback.
type periodSource struct {
	samples []float32
	period  int

	mu    sync.Mutex
	start time.Time
	given int64
}

func (p *periodSource) Read(ctx context.Context, out []float32) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.start.IsZero() {
		p.start = time.Now()
	}
	for {
		elapsed := time.Since(p.start)
		periods := int64(elapsed * 16000 / time.Second / time.Duration(p.period))
		if avail := periods*int64(p.period) - p.given; avail > 0 {
			n := int(min(avail, int64(len(out))))
			for i := range out[:n] {
				out[i] = p.samples[(p.given+int64(i))%int64(len(p.samples))]
			}
			p.given += int64(n)
			return n, nil
		}
		next := p.start.Add(time.Duration(periods+1) * time.Duration(p.period) * time.Second / 16000)
		t := time.NewTimer(time.Until(next))
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			t.Stop()
			p.mu.Lock()
			return 0, ctx.Err()
		case <-t.C:
		}
		p.mu.Lock()
	}
}

// clockSpeaker plays into nothing: what is queued ends at a point in wall time, so it needs no
// goroutine and keeps no samples.
type clockSpeaker struct {
	mu  sync.Mutex
	end time.Time
}

func (c *clockSpeaker) Play(s []float32) {
	c.mu.Lock()
	c.end = later(c.end, time.Now()).Add(time.Duration(len(s)) * time.Second / 24000)
	c.mu.Unlock()
}

func (c *clockSpeaker) FlushAfter(keep time.Duration) {
	c.mu.Lock()
	if lim := time.Now().Add(keep); c.end.After(lim) {
		c.end = lim
	}
	c.mu.Unlock()
}

func (c *clockSpeaker) Pending() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(0, time.Until(c.end))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// wakeups sums the voluntary context switches of every thread of this process: each is a
// thread going to sleep because it had nothing to do, so their rate is the rate of wake-ups.
func wakeups() int64 {
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				k, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += k
			}
		}
	}
	return n
}

// BenchmarkStreamingWakeups streams in real time, as a satellite does all day: a microphone
// delivering 100 ms periods, the default 1 s chunks, a server in its own process that answers
// the speech in the audio, a speaker that costs nothing. It reports the agent's share of the
// process's wake-ups and CPU per second of media (the realtime client included; the devices
// are stand-ins without timers of their own beyond the microphone's period).
//
//	go test -run '^$' -bench StreamingWakeups -benchtime 1x ./agent
func BenchmarkStreamingWakeups(b *testing.B) {
	url := startSimulatorProcess(b, "--workers", "2")
	// One second of speech every eight: the server answers now and then, as in use.
	audio := slices.Concat(tone(16000, 0.3), make([]float32, 16000*7))
	for range b.N {
		src := &periodSource{samples: audio, period: 1600}
		sup, err := agent.New(agent.Options{
			Server: realtime.Config{URL: url, Mode: realtime.ModeAudio, Init: realtime.Init{Instructions: "bench"}},
			Audio:  src, Speaker: &clockSpeaker{},
		})
		if err != nil {
			b.Fatal(err)
		}
		events, _ := sup.Subscribe(100000)
		go func() {
			for range events { // a subscriber, as the console and MQTT are
			}
		}()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sup.Run(ctx) }()
		deadline := time.Now().Add(10 * time.Second)
		for sup.Status().State != agent.StateListening && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(2 * time.Second) // past the start and the first replies' set-up
		const media = 20 * time.Second
		w0, cpu0, sent0 := wakeups(), cpuTime(), sup.Status().ChunksSent
		time.Sleep(media)
		w1, cpu1, sent1 := wakeups(), cpuTime(), sup.Status().ChunksSent
		cancel()
		<-done
		if sent1-sent0 < 15 {
			b.Fatalf("only %d chunks sent in %v", sent1-sent0, media)
		}
		// The microphone's own share: the same source read alone for as long.
		base := &periodSource{samples: audio, period: 1600}
		bctx, bcancel := context.WithTimeout(context.Background(), media+time.Second)
		go func() {
			buf := make([]float32, 1600)
			for {
				if _, err := base.Read(bctx, buf); err != nil {
					return
				}
			}
		}()
		time.Sleep(time.Second / 2)
		wb0, cpub0 := wakeups(), cpuTime()
		time.Sleep(media)
		wb1, cpub1 := wakeups(), cpuTime()
		bcancel()
		secs := media.Seconds()
		b.ReportMetric(float64(w1-w0)/secs, "wakeups/s")
		b.ReportMetric(float64(wb1-wb0)/secs, "mic-wakeups/s")
		b.ReportMetric(float64((w1-w0)-(wb1-wb0))/secs, "agent-wakeups/s")
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/1000/secs, "cpu-ms/s-media")
		b.ReportMetric(float64(((cpu1-cpu0)-(cpub1-cpub0)).Microseconds())/1000/secs, "agent-cpu-ms/s-media")
	}
}
