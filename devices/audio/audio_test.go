package audio

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/internal/testaudio"
	"github.com/omnisat/omnisat/pipeline"
	"github.com/omnisat/omnisat/pipeline/aec"
)

// ---- helpers ----

func resampleTo(t testing.TB, x []float32, from, to int) []float32 {
	t.Helper()
	r, err := pipeline.NewResampler(from, to)
	if err != nil {
		t.Fatal(err)
	}
	return r.Flush(r.Process(nil, x))
}

func readWAV(t testing.TB, path string) ([]float32, int) {
	t.Helper()
	a, err := wav.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return a.Mono(), a.Rate
}

// decimate averages blocks of k samples (a crude low-pass, for a coarse alignment).
func decimate(x []float32, k int) []float64 {
	y := make([]float64, len(x)/k)
	for i := range y {
		var s float64
		for _, v := range x[i*k : i*k+k] {
			s += float64(v)
		}
		y[i] = s / float64(k)
	}
	return y
}

// ncc is the normalised correlation of a[off:off+len(b)] with b.
func ncc[T float32 | float64](a, b []T, off int) float64 {
	var ab, aa, bb float64
	for i, v := range b {
		w := float64(a[off+i])
		ab += w * float64(v)
		aa += w * w
		bb += float64(v) * float64(v)
	}
	if aa == 0 || bb == 0 {
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}

// align finds where ref sits in x (a coarse search on 16× decimated signals, refined at full
// rate) and returns the offset and the normalised correlation there.
func align(t testing.TB, x, ref []float32) (int, float64) {
	t.Helper()
	if len(x) < len(ref) {
		t.Fatalf("captured %d samples, fewer than the reference's %d", len(x), len(ref))
	}
	const k = 16
	dx, dr := decimate(x, k), decimate(ref, k)
	best, bestC := 0, -2.0
	for off := 0; off+len(dr) <= len(dx); off++ {
		if c := ncc(dx, dr, off); c > bestC {
			best, bestC = off, c
		}
	}
	best *= k
	fine, fineC := best, -2.0
	for off := max(0, best-2*k); off <= min(len(x)-len(ref), best+2*k); off++ {
		if c := ncc(x, ref, off); c > fineC {
			fine, fineC = off, c
		}
	}
	return fine, fineC
}

// states records onState calls.
type states struct {
	mu     sync.Mutex
	events []error // nil: back
	ch     chan struct{}
}

func newStates() *states { return &states{ch: make(chan struct{}, 16)} }

func (s *states) on(ok bool, err error) {
	s.mu.Lock()
	if ok {
		err = nil
	} else if err == nil {
		err = errors.New("lost without an error")
	}
	s.events = append(s.events, err)
	s.mu.Unlock()
	s.ch <- struct{}{}
}

func (s *states) wait(t *testing.T, what string, d time.Duration) error {
	t.Helper()
	select {
	case <-s.ch:
	case <-time.After(d):
		t.Fatalf("no %s report within %v", what, d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events[len(s.events)-1]
}

// testWriter sends a logger's lines to t.Log (the devices are closed before the test ends).
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// ---- pure tests ----

func TestSelect(t *testing.T) {
	devs := []DeviceInfo{
		{Index: 0, Name: "HDA Intel PCH: ALC892 Analog (hw:0,0)", MaxInputChannels: 2, MaxOutputChannels: 2},
		{Index: 1, Name: "USB Audio Device: - (hw:1,0)", MaxInputChannels: 1},
		{Index: 2, Name: "pulse", MaxInputChannels: 32, MaxOutputChannels: 32},
		{Index: 3, Name: "default", MaxInputChannels: 32, MaxOutputChannels: 32, DefaultInput: true, DefaultOutput: true},
		{Index: 4, Name: "pulse monitor", MaxOutputChannels: 2},
	}
	for _, c := range []struct {
		spec    string
		input   bool
		want    int
		wantErr string
	}{
		{"default", true, 3, ""},
		{"", false, 3, ""},
		{"DEFAULT", false, 3, ""},
		{"1", true, 1, ""},
		{"1", false, 0, `device 1 "USB Audio Device: - (hw:1,0)" has no output channels`},
		{"9", true, 0, "no device with index 9"},
		{"usb", true, 1, ""},
		{"usb audio", true, 1, ""},
		{"Pulse", true, 2, ""},    // a whole-name match wins ...
		{"pulse", false, 2, ""},   // ... over the later "pulse monitor"
		{"monitor", false, 4, ""}, // substring
		{"monitor", true, 0, "no input device name contains it"},
		{"nosuch", true, 0, `available: 0 "HDA Intel PCH: ALC892 Analog (hw:0,0)", 1 "USB Audio Device: - (hw:1,0)", 2 "pulse", 3 "default"`},
		{"-1", true, 0, "no input device name contains it"},
	} {
		d, err := Select(devs, c.spec, c.input)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("Select(%q, input=%v) = %v, %v; want error containing %q", c.spec, c.input, d.Name, err, c.wantErr)
			}
			continue
		}
		if err != nil || d.Index != c.want {
			t.Errorf("Select(%q, input=%v) = %d %q, %v; want %d", c.spec, c.input, d.Index, d.Name, err, c.want)
		}
	}
	if _, err := Select(nil, "default", true); err == nil || !strings.Contains(err.Error(), "no default input device (available: none)") {
		t.Errorf("Select on no devices: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultMicConfig().Validate(); err != nil {
		t.Error(err)
	}
	if err := DefaultSpeakerConfig().Validate(); err != nil {
		t.Error(err)
	}
	bad := []MicConfig{
		{Rate: 100}, {Channels: -1}, {Channel: -2}, {Channels: 2, Channel: 2},
		{GainDB: 60}, {GainDB: math.NaN()}, {Latency: -1}, {FramesPerBuffer: -1}, {Buffer: time.Hour},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		} else if !strings.HasPrefix(err.Error(), "microphone ") {
			t.Errorf("%+v: error %q does not say what", c, err)
		}
	}
	for _, c := range []SpeakerConfig{{Rate: 1}, {Volume: 101}, {Volume: -1}, {Channels: 40}, {Latency: time.Hour}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	// Bad settings fail before PortAudio is touched.
	if _, err := OpenMicrophone(context.Background(), MicConfig{Device: "x", GainDB: 100}, nil, nil); err == nil || !strings.Contains(err.Error(), `open microphone "x": microphone gain`) {
		t.Errorf("OpenMicrophone with bad gain: %v", err)
	}
}

// TestRing covers the capture ring's mixdown, wrap-around and overflow accounting.
func TestRing(t *testing.T) {
	// 8 samples: the second of 2 channels; sixty-fourths are exact in float32.
	r := newRing(8, 2, 1, 1)
	frame := func(i int) []float32 { return []float32{float32(i) / 64, -float32(i) / 64} }
	want := func(i int) float32 { return -float32(i) / 64 }
	for i := range 6 {
		r.write(frame(i))
	}
	dst := make([]float32, 8)
	if n, start, _ := r.readFrom(dst[:5]); n != 5 || start != 0 || dst[0] != want(0) || dst[4] != want(4) {
		t.Fatalf("read 5 of 6: n=%d start=%d %v", n, start, dst)
	}
	for i := 6; i < 20; i++ { // 14 more into 8 of room with 1 held: 7 dropped
		r.write(frame(i))
	}
	w, d := r.counts()
	if w != 20 || d != 7 {
		t.Errorf("written %d dropped %d, want 20 and 7", w, d)
	}
	got := make([]float32, 16)
	if n, start, _ := r.readFrom(got); n != 8 || start != 12 || got[0] != want(12) || got[7] != want(19) {
		t.Errorf("after overflow read %d from %d: %v (want samples 12..19)", n, start, got)
	}
	big := make([]float32, 0, 40) // 20 frames: more than the ring at once
	for i := range 20 {
		big = append(big, frame(i)...)
	}
	r.write(big)
	if n, _, _ := r.readFrom(got); n != 8 || got[0] != want(12) || got[7] != want(19) {
		t.Errorf("oversized write: read %d: %v, want frames 12..19", n, got[:n])
	}
	r.write([]float32{1}) // a partial frame is ignored
	if n, _, _ := r.readFrom(got); n != 0 {
		t.Errorf("partial frame was stored: %d", n)
	}
	mix := newRing(8, 3, Mixdown, 2) // three channels mixed, 6 dB up (a gain of 2)
	mix.write([]float32{0.125, 0.25, 0.375, -0.375, 0, 0})
	if n, _, _ := mix.readFrom(got); n != 2 || got[0] != 0.5 || got[1] != -0.25 {
		t.Errorf("mixdown: read %d: %v, want [0.5 -0.25]", n, got[:n])
	}
}

// write appends whole frames of interleaved samples, as a device delivers them, mixed down in
// Go: the reference the bridge's mixdown is held to (writeMixed), and how the reader-side
// tests feed a microphone's ring.
func (r *ring) write(in []float32) {
	in = in[:len(in)-len(in)%r.channels]
	mono, err := pipeline.Float32ToMono(r.mixed, in, r.channels, r.channel, r.gain)
	if err != nil {
		panic(err)
	}
	r.mixed = mono
	r.append(mono)
}

// newTestMic makes a Microphone with no device, for the reader-side tests and benchmarks.
func newTestMic(t testing.TB, rate, channels, channel int, gainDB float64) *Microphone {
	m := &Microphone{cfg: MicConfig{Channel: channel, GainDB: gainDB}, rate: rate, channels: channels,
		gain: float32(math.Pow(10, gainDB/20)), done: make(chan struct{})}
	m.link = newLink("microphone", "read", "test", nil, nil)
	if err := m.initReader(); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMicReader: mixdown, channel choice, gain and resampling on the reader side, the silence
// while lost, and io.EOF after close.
func TestMicReader(t *testing.T) {
	ctx := context.Background()
	m := newTestMic(t, 48000, 2, Mixdown, 6)
	in := make([]float32, 2*48000) // 1 s: left 0.2, right 0.1 → mix 0.15 → +6 dB ≈ 0.299
	for i := range in {
		in[i] = 0.2 / float32(1+i%2)
	}
	for i := 0; i < len(in); i += 960 {
		m.ring.write(in[i : i+960])
	}
	var got []float32
	p := make([]float32, 1000)
	for {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		n, err := m.Read(rctx, p)
		cancel()
		if err != nil {
			break
		}
		got = append(got, p[:n]...)
	}
	want := 0.15 * math.Pow(10, 6.0/20)
	if v := got[8000]; math.Abs(float64(v)-want) > 1e-3 {
		t.Errorf("mixed, +6 dB: %v, want %v", v, want)
	}
	// 1 s in gives 16000 out, less the resampler's look-ahead still held.
	if len(got) > 16000 || len(got) < 15800 {
		t.Errorf("1 s at 48 kHz gave %d samples", len(got))
	}

	m2 := newTestMic(t, 44100, 2, 1, 0)
	in2 := make([]float32, 2*4410)
	for i := range in2 {
		in2[i] = float32(i%2) * 0.5 // right channel only
	}
	m2.ring.write(in2)
	n, _ := m2.Read(ctx, p)
	if n == 0 || math.Abs(float64(p[n-1])-0.5) > 1e-3 {
		t.Errorf("channel 1: %d samples ending %v, want 0.5", n, p[n-1])
	}

	// Lost: silence at real-time pace from the moment the device last delivered.
	m2.setLost(time.Now().Add(-500*time.Millisecond), errors.New("gone"))
	start := time.Now()
	total := 0
	for time.Since(start) < 300*time.Millisecond {
		n, err := m2.Read(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	secs := time.Since(start).Seconds() + 0.5
	if f := float64(total) / OutputRate / secs; f < 0.8 || f > 1.1 {
		t.Errorf("silence while lost: %d samples in %.2f s (%.2f× real time)", total, secs, f)
	}
	m2.setBack()
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := m2.Read(cctx, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Read with nothing captured: %v, want the context's error", err)
	}
	close(m2.done)
	if _, err := m2.Read(ctx, p); err != io.EOF {
		t.Errorf("Read after close: %v, want io.EOF", err)
	}
	if n, err := m2.Read(ctx, nil); n != 0 || err != nil {
		t.Errorf("Read(nil) = %d, %v", n, err)
	}
}

// TestReaderDoesNotAllocate: the callback's ring write and the steady-state Read.
func TestReaderDoesNotAllocate(t *testing.T) {
	m := newTestMic(t, 44100, 2, Mixdown, 0)
	buf := make([]float32, 2*441)
	p := make([]float32, 160)
	ctx := context.Background()
	if a := testing.AllocsPerRun(200, func() {
		m.ring.write(buf)
		m.Read(ctx, p)
	}); a != 0 {
		t.Errorf("capture path: %v allocations per buffer", a)
	}
	// Cleaned after resampling: a 48 kHz capture with the echo canceller, against a speaker
	// that plays four 12.5 ms buffers per 50 ms capture buffer.
	const rate = 48000
	mc := newTestMic(t, rate, 1, Mixdown, 0)
	ref := NewEchoReference()
	ref.attach(rate)
	mc.cfg.Clean = CleanConfig{Echo: EchoAEC, Reference: ref, Processor: aec.Config{Denoise: true}}
	if err := mc.initReader(); err != nil {
		t.Fatal(err)
	}
	defer mc.clean.close()
	spk, capture, q := make([]float32, 600), make([]float32, 2400), make([]float32, 2000)
	for i := range spk {
		spk[i] = float32(i%50) / 100
	}
	var played, captured int64
	buffer := func() {
		for range 4 {
			ev := timelineGoesOn
			if played == 0 {
				ev = timelineNew
			}
			ref.play(spk, 1000+float64(played)/rate, 0, ev)
			played += int64(len(spk))
		}
		ev := timelineGoesOn
		if captured == 0 {
			ev = timelineNew
		}
		mc.ring.mark(1000+float64(captured+2400)/rate, rate, ev)
		mc.ring.write(capture)
		captured += int64(len(capture))
		mc.fill(q) // Read would wait when a buffer fills no whole frame
	}
	for range 100 { // the buffers grow to their largest once
		buffer()
	}
	if a := testing.AllocsPerRun(200, buffer); a != 0 {
		t.Errorf("capture path, cleaned at the output rate: %v allocations per buffer", a)
	}
	if st := mc.clean.counters(); st.Slips != 1 || st.Unknown != 0 || st.Frames < 1490 { // 15 s, less what waits
		t.Errorf("the canceller did not run as a microphone's would: %+v", st)
	}
	pb, _ := pipeline.NewPlayback(InputRate, 44100)
	pb.Play(make([]float32, 48000))
	out, scratch := make([]float32, 2*441), make([]float32, speakerChunk)
	if a := testing.AllocsPerRun(200, func() { fillOutput(pb, out, 2, scratch) }); a != 0 {
		t.Errorf("playback callback: %v allocations", a)
	}
}

// TestMissingPulseFailsInCI: with CI=true, a machine without PulseAudio fails these tests.
func TestMissingPulseFailsInCI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CI", "true")
	r := &failRecorder{TB: t}
	testaudio.Require(r, "pulseaudio")
	if !r.failed || r.skipped {
		t.Errorf("CI=true without pulseaudio: failed=%v skipped=%v, want a failure", r.failed, r.skipped)
	}
}

type failRecorder struct {
	testing.TB
	failed, skipped bool
}

func (r *failRecorder) Helper()                 {}
func (r *failRecorder) Fatalf(string, ...any)   { r.failed = true }
func (r *failRecorder) Skipf(string, ...any)    { r.skipped = true }
func (r *failRecorder) Logf(f string, a ...any) { r.TB.Logf(f, a...) }

// ---- tests on the virtual sound card ----

func TestListAndOpenBySelection(t *testing.T) {
	testaudio.Start(t)
	devs, err := List()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range devs {
		names = append(names, d.Name)
		t.Logf("%v", d)
	}
	joined := strings.Join(names, "|")
	if !strings.Contains(joined, "pulse") || !strings.Contains(joined, "default") {
		t.Fatalf("devices %q: want pulse and default", names)
	}
	in, err := Select(devs, "default", true)
	if err != nil || in.MaxInputChannels == 0 {
		t.Errorf("default input: %v %v", in, err)
	}
	pulse, err := Select(devs, "PUL", false)
	if err != nil || pulse.Name != "pulse" {
		t.Errorf(`"PUL": %v %v`, pulse, err)
	}
	ctx := context.Background()
	// By index, then by a name that matches nothing.
	spk, err := OpenSpeaker(ctx, SpeakerConfig{Device: strconv.Itoa(pulse.Index), Volume: 100}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if spk.Name() != "pulse" || spk.Rate() != 44100 {
		t.Errorf("speaker by index: %q at %d Hz", spk.Name(), spk.Rate())
	}
	spk.Close()
	_, err = OpenMicrophone(ctx, MicConfig{Device: "usb headset", Channel: Mixdown}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), `open microphone "usb headset": find input device "usb headset": no input device name contains it (available: `) ||
		!strings.Contains(err.Error(), `"pulse"`) {
		t.Errorf("unknown device: %v", err)
	}
}

// Listing and opening under one Hold initialise PortAudio once (each initialisation probes
// every ALSA device and plugin); without it, every List starts and ends PortAudio again.
func TestHoldInitialisesOnce(t *testing.T) {
	testaudio.Start(t)
	inits := func() int { _, n := paCounts(); return n }
	before := inits()
	for range 2 {
		if _, err := List(); err != nil {
			t.Fatal(err)
		}
	}
	if got := inits() - before; got != 2 {
		t.Fatalf("two Lists without a hold: %d initialisations, want 2", got)
	}
	release, err := Hold()
	if err != nil {
		t.Fatal(err)
	}
	before = inits()
	devs, err := List()
	if err != nil {
		t.Fatal(err)
	}
	in, err := Select(devs, "default", true)
	if err != nil {
		t.Fatal(err)
	}
	mic, err := OpenMicrophone(context.Background(), MicConfig{Device: in.Name, Channel: Mixdown}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	release()
	release() // twice is fine
	if got := inits() - before; got != 0 {
		t.Errorf("List and open under a hold: %d initialisations, want 0 beyond the hold's", got)
	}
	mic.Close()
	if refs, _ := paCounts(); refs != 0 {
		t.Errorf("after release and Close: %d holders of PortAudio, want 0", refs)
	}
}

// paCounts is PortAudio's holders and initialisations so far.
func paCounts() (refs, inits int) {
	pa.mu.Lock()
	defer pa.mu.Unlock()
	return pa.refs, pa.inits
}

// PortAudio's start opens every ALSA device and plugin; what no stream uses is unloaded again
// (the a52 plugin alone maps libavcodec and ~90 libraries). The virtual card needs the ALSA
// plugins package, so the probe has plugins to load here.
func TestProbeLeavesNoPlugins(t *testing.T) {
	testaudio.Start(t)
	modules, _ := filepath.Glob("/usr/lib/*/alsa-lib/libasound_module_pcm_*.so")
	if len(modules) == 0 {
		t.Fatal("no ALSA plugin modules installed: the virtual card's pulse plugin is one")
	}
	release, err := Hold()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	var mapped []string
	for _, line := range strings.Split(string(maps), "\n") {
		if i := strings.Index(line, "/alsa-lib/libasound_module_"); i >= 0 && !slices.Contains(mapped, line[i:]) {
			mapped = append(mapped, line[i:])
		}
	}
	if len(mapped) > 0 {
		t.Errorf("PortAudio initialised, no stream open: ALSA plugins still mapped: %v", mapped)
	}
}

// speechToHear starts the virtual card and makes speech to play into its microphone: the WAV
// and the same at 16 kHz, to find in what is captured.
func speechToHear(t *testing.T) (*testaudio.Card, string, []float32) {
	t.Helper()
	card := testaudio.Start(t)
	speech := card.Speech(t, "Omnisat hears you. One, two, three, four, five.")
	src, rate := readWAV(t, speech)
	return card, speech, resampleTo(t, src, rate, OutputRate)
}

// captureWhilePlaying plays speech into the card's microphone and gathers what read returns
// until half a second after it ended; elapsed is how long that took, in seconds.
func captureWhilePlaying(t *testing.T, card *testaudio.Card, speech string, read func() []float32) (got []float32, elapsed float64) {
	t.Helper()
	played := make(chan error, 1)
	go func() { played <- card.PlayInto(speech) }()
	start := time.Now()
	var end time.Time
	for end.IsZero() || time.Now().Before(end) {
		got = append(got, read()...)
		select {
		case err := <-played:
			if err != nil {
				t.Fatal(err)
			}
			end = time.Now().Add(500 * time.Millisecond)
		default:
		}
	}
	return got, time.Since(start).Seconds()
}

// TestMicrophoneCapture plays speech into the virtual room and finds it, intact, in what
// Read returns at 16 kHz: with the device's own rate and latency, and with a rate and a
// latency of the config's (longer device buffers, converted 3:1).
func TestMicrophoneCapture(t *testing.T) {
	card := testaudio.Start(t)
	speech := card.Speech(t, "Omnisat hears you. One, two, three, four, five.")
	src, rate := readWAV(t, speech)
	ref := resampleTo(t, src, rate, OutputRate)
	// A capture with long buffers misses the played file's first milliseconds (most likely
	// the room's sink rewinding when paplay connects, over a stretch the capture has taken
	// already). A lead of silence keeps them out of what is compared.
	padded := filepath.Join(t.TempDir(), "padded.wav")
	card.Sox(t, speech, padded, "pad", "0.3", "0")
	speech = padded
	for _, c := range []struct {
		name string
		cfg  MicConfig
	}{
		{"device default", MicConfig{Device: "pulse", Channel: Mixdown}},
		{"48 kHz, 100 ms", MicConfig{Device: "pulse", Channel: Mixdown, Rate: 48000, Latency: 100 * time.Millisecond}},
	} {
		t.Run(c.name, func(t *testing.T) { testMicrophoneCapture(t, card, speech, ref, c.cfg) })
	}
}

func testMicrophoneCapture(t *testing.T, card *testaudio.Card, speech string, ref []float32, cfg MicConfig) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mic, err := OpenMicrophone(ctx, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mic.Close()
	p := make([]float32, 320)
	opened := time.Now()
	if _, err := mic.Read(ctx, p); err != nil { // the stream has started
		t.Fatal(err)
	}
	t.Logf("first samples %v after opening (%d Hz, %d channels)", time.Since(opened).Round(time.Millisecond), mic.Rate(), mic.Stats().Channels)

	got, elapsed := captureWhilePlaying(t, card, speech, func() []float32 {
		n, err := mic.Read(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return p[:n]
	})
	pace := float64(len(got)) / OutputRate / elapsed
	t.Logf("read %d samples (%.2f s of audio) in %.2f s: %.3f× real time", len(got), float64(len(got))/OutputRate, elapsed, pace)
	if pace < 0.8 || pace > 1.25 {
		t.Errorf("captured %.3f× real time", pace)
	}
	off, c := align(t, got, ref)
	t.Logf("speech found at %.3f s, normalised correlation %.4f", float64(off)/OutputRate, c)
	if c < 0.9 {
		t.Errorf("correlation with the source %.3f < 0.9", c)
	}
	st := mic.Stats()
	if st.Dropped != 0 || st.Losses != 0 {
		t.Errorf("stats %+v", st)
	}
	if err := mic.Close(); err != nil {
		t.Error(err)
	}
	if _, err := mic.Read(ctx, p); err != io.EOF {
		t.Errorf("Read after Close: %v", err)
	}
}

// TestReadPatiently: a patient reader gets the capture in whole blocks, the same audio Read
// gives (the speech is found in it as in TestMicrophoneCapture, at real-time pace), and the
// device's buffers wake the process once per block of several instead of once each.
func TestReadPatiently(t *testing.T) {
	card, speech, ref := speechToHear(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mic, err := OpenMicrophone(ctx, MicConfig{Device: "pulse", Channel: Mixdown}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mic.Close()
	block := mic.PatientBlock()

	// Plain reads for a second: a wake-up for every buffer, which gives the buffer's size.
	p := make([]float32, block)
	if _, err := mic.Read(ctx, p); err != nil { // the stream has started
		t.Fatal(err)
	}
	before := mic.Stats()
	for got := 0; got < OutputRate; {
		n, err := mic.Read(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	plain := mic.Stats()
	bufferFrames := float64(plain.Captured-before.Captured) / float64(max(plain.Wakes-before.Wakes, 1))
	perBlock := float64(block) * float64(mic.Rate()) / OutputRate / bufferFrames
	t.Logf("plain reads: %d wake-ups for %d frames: buffers of %.0f frames, %.1f to a block of %d samples",
		plain.Wakes-before.Wakes, plain.Captured-before.Captured, bufferFrames, perBlock, block)
	if perBlock < 2 {
		t.Fatalf("the card's buffers (%.0f frames) are too long to gather %d-sample blocks of", bufferFrames, block)
	}

	// Patient reads while the speech plays: whole blocks, a wake-up for each.
	got, elapsed := captureWhilePlaying(t, card, speech, func() []float32 {
		n, err := mic.ReadPatiently(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if n != block {
			t.Fatalf("a patient read returned %d samples, want a block of %d", n, block)
		}
		return p[:n]
	})
	after := mic.Stats()
	wakes, blocks := after.Wakes-plain.Wakes, int64(len(got)/block)
	buffers := float64(after.Captured-plain.Captured) / bufferFrames
	t.Logf("patient reads: %d blocks, %.0f buffers, %d wake-ups", blocks, buffers, wakes)
	if wakes > blocks+blocks/4+2 || float64(wakes) > 0.75*buffers {
		t.Errorf("%d wake-ups for %d blocks (%.0f buffers)", wakes, blocks, buffers)
	}
	if pace := float64(len(got)) / OutputRate / elapsed; pace < 0.8 || pace > 1.25 {
		t.Errorf("captured %.3f× real time", pace)
	}
	off, c := align(t, got, ref)
	t.Logf("speech found at %.3f s, normalised correlation %.4f", float64(off)/OutputRate, c)
	if c < 0.9 {
		t.Errorf("correlation with the source %.3f < 0.9", c)
	}
	if st := mic.Stats(); st.Dropped != 0 || st.Losses != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestSpeakerPlaysAndFlushes plays speech and finds it in the recording of spk, then cuts a
// tone with FlushAfter(0) and measures how much of it was still heard.
func TestSpeakerPlaysAndFlushes(t *testing.T) {
	card := testaudio.Start(t)
	speech := card.Speech(t, "This is omnisat speaking through the speaker.")
	src, rate := readWAV(t, speech)
	ref := resampleTo(t, src, rate, OutputRate)
	play := resampleTo(t, src, rate, InputRate)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spk, err := OpenSpeaker(ctx, SpeakerConfig{Device: "pulse", Volume: 100}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer spk.Close()
	waitDrained := func() {
		t.Helper()
		for spk.Pending() > 0 {
			if ctx.Err() != nil {
				t.Fatalf("queue never drained: Pending %v", spk.Pending())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	dir := t.TempDir()
	recSpeech := filepath.Join(dir, "speech.wav")
	stop := card.Record(t, recSpeech)
	for i := 0; i < len(play); i += 4800 { // as the server sends it: 200 ms pieces
		spk.Play(play[i:min(i+4800, len(play))])
	}
	waitDrained()
	time.Sleep(400 * time.Millisecond)
	stop()
	rec, recRate := readWAV(t, recSpeech)
	off, c := align(t, resampleTo(t, rec, recRate, OutputRate), ref)
	t.Logf("speech found in the recording at %.3f s, normalised correlation %.4f", float64(off)/OutputRate, c)
	if c < 0.9 {
		t.Errorf("correlation with the source %.3f < 0.9", c)
	}

	// A 3 s tone, cut after about 1 s.
	recTone := filepath.Join(dir, "tone.wav")
	stop = card.Record(t, recTone)
	tone := tone440(3 * time.Second)
	before := spk.Position()
	spk.Play(tone)
	for spk.Position()-before < time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	atBefore := spk.Position() - before
	spk.FlushAfter(0)
	// What had been handed to the device when the flush took effect (at most a fade more
	// than before the call; unlike atBefore it does not depend on this goroutine's timing).
	at := spk.Position() - before
	time.Sleep(500 * time.Millisecond)
	stop()
	rec, recRate = readWAV(t, recTone)
	first, last := -1, -1
	for i, v := range rec {
		if math.Abs(float64(v)) > 0.1 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		t.Fatal("the tone is not in the recording")
	}
	heard := time.Duration(float64(last-first+1) / float64(recRate) * float64(time.Second))
	extra := heard - at
	t.Logf("tone heard for %v; handed to the device before/after FlushAfter(0): %v/%v; heard beyond that: %v (device buffer + %v fade, less what the ring held)",
		heard.Round(time.Millisecond/10), atBefore.Round(time.Millisecond/10), at.Round(time.Millisecond/10), extra.Round(time.Millisecond/10), pipeline.PlaybackFade)
	// What the stream's ring held ahead of the device (up to outputAhead) was handed over but
	// is dropped by the flush: the tone may stop that much before Position.
	if extra > 100*time.Millisecond || extra < -outputAhead-20*time.Millisecond {
		t.Errorf("heard %v of the tone beyond what was handed to the device, want from -%v to 100 ms", extra, outputAhead+20*time.Millisecond)
	}
	if spk.Pending() != 0 {
		t.Errorf("Pending after the flush: %v", spk.Pending())
	}
}

// lossChildEnv marks the process TestDeviceLossAndRecovery runs itself in.
const lossChildEnv = "OMNISAT_AUDIO_LOSS_CHILD"

// The speaker's device buffers are half its latency, two periods a latency as the microphone's,
// not what PortAudio would choose (four on ALSA): each buffer wakes PortAudio's thread, also
// while the speaker plays only silence. Counted from what the device played, on the virtual card.
func TestSpeakerBuffersAreHalfItsLatency(t *testing.T) {
	testaudio.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const latency = 50 * time.Millisecond
	ref := NewEchoReference()
	spk, err := OpenSpeaker(ctx, SpeakerConfig{Device: "pulse", Volume: 100, Latency: latency, Echo: ref}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer spk.Close()
	// Sound to play keeps the pump recording each buffer the device takes.
	spk.Play(make([]float32, 10*InputRate))
	want := halfLatencyFrames(0, latency, spk.Rate())
	// What was played and the buffers that played it, counted over stretches of 20 buffers or
	// more with no host xrun between (one restarts the buffer count).
	snapshot := func() (written int64, buffers int, era int64) {
		ref.mu.Lock()
		defer ref.mu.Unlock()
		return ref.written, ref.fit.n, ref.fit.era
	}
	w0, n0, e0 := snapshot()
	for ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		w, n, e := snapshot()
		if e != e0 || n < n0 {
			w0, n0, e0 = w, n, e
			continue
		}
		if n-n0 < 20 {
			continue
		}
		if got := float64(w-w0) / float64(n-n0); got < 0.9*float64(want) || got > 1.1*float64(want) {
			t.Fatalf("the device played %.0f frames a buffer at %d Hz, want %d (half of %v)", got, spk.Rate(), want, latency)
		}
		return
	}
	t.Fatal("fewer than 20 buffers played in 30 s")
}

// TestDeviceLossAndRecovery stops the sound server under a microphone and a speaker, checks
// that both report the loss, that Read goes on at real-time pace and the speaker's queue
// drains, then brings the server back and checks both recover.
//
// It runs in a process of its own (this test binary again): when the server dies, libpulse
// can deadlock inside ALSA's pulse plugin (see the package's README, "When PulseAudio dies"),
// and the stream's close then never returns. omnisat abandons it and opens a new stream,
// which this test checks; but PortAudio then stays initialised for the life of the process,
// which would fail the later tests that need it terminated.
func TestDeviceLossAndRecovery(t *testing.T) {
	if os.Getenv(lossChildEnv) == "" {
		child := exec.Command(os.Args[0], "-test.run=^TestDeviceLossAndRecovery$", "-test.v", "-test.count=1")
		child.Env = append(os.Environ(), lossChildEnv+"=1")
		out, err := child.CombinedOutput()
		if err != nil {
			t.Fatalf("the test in its own process: %v\n%s", err, out)
		}
		t.Logf("the test in its own process:\n%s", out)
		if bytes.Contains(out, []byte("--- SKIP: TestDeviceLossAndRecovery")) {
			t.Skip("skipped in its own process (see there)")
		}
		if bytes.Contains(out, []byte("closing the stream hangs")) {
			t.Log("libpulse deadlocked closing a stream, as it can when its server dies; the stream was abandoned and the device recovered")
		}
		return
	}
	card := testaudio.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	micStates, spkStates := newStates(), newStates()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mic, err := OpenMicrophone(ctx, MicConfig{Device: "pulse", Channel: Mixdown}, micStates.on, log)
	if err != nil {
		t.Fatal(err)
	}
	defer mic.Close()
	spk, err := OpenSpeaker(ctx, SpeakerConfig{Device: "pulse", Volume: 100}, spkStates.on, log)
	if err != nil {
		t.Fatal(err)
	}
	defer spk.Close()
	// A speaker at rest when the server goes finds out when it is next asked to play.
	restStates := newStates()
	rester, err := OpenSpeaker(ctx, SpeakerConfig{Device: "pulse", Volume: 100, RestAfter: time.Second}, restStates.on, log)
	if err != nil {
		t.Fatal(err)
	}
	defer rester.Close()
	p := make([]float32, 1600)
	if _, err := mic.Read(ctx, p); err != nil {
		t.Fatal(err)
	}
	for rester.Rests() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the resting speaker never rested")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Read continuously in the background, as the agent does.
	var mu sync.Mutex
	var got int64
	readErr := make(chan error, 1)
	go func() {
		buf := make([]float32, 320)
		for {
			n, err := mic.Read(ctx, buf)
			if err != nil {
				readErr <- err
				return
			}
			mu.Lock()
			got += int64(n)
			mu.Unlock()
		}
	}()
	counted := func() int64 { mu.Lock(); defer mu.Unlock(); return got }

	lostAt := time.Now()
	card.Stop()
	err = micStates.wait(t, "microphone loss", 10*time.Second)
	t.Logf("microphone loss reported after %v: %v", time.Since(lostAt).Round(time.Millisecond), err)
	if err == nil || !strings.Contains(err.Error(), `read microphone "pulse"`) {
		t.Errorf("loss error %v: want it to name what was done with what", err)
	}
	err = spkStates.wait(t, "speaker loss", 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), `play speaker "pulse"`) {
		t.Errorf("speaker loss error %v", err)
	}
	// While lost: silence at real-time pace; the speaker's queue drains in real time. The
	// silence since the device last delivered comes at once, to keep the count true; it can be
	// seconds (a stall is found after 2 s, and closing a hung stream waits up to 5 s before it
	// is abandoned) and the reader may still be taking it when the loss is reported. The pace
	// is measured once a tenth of a second brings less than half a second of audio.
	for range 100 {
		before := counted()
		time.Sleep(100 * time.Millisecond)
		if counted()-before < OutputRate/2 {
			break
		}
	}
	n0, t0 := counted(), time.Now()
	spk.Play(make([]float32, InputRate/2))
	time.Sleep(time.Second)
	pace := float64(counted()-n0) / OutputRate / time.Since(t0).Seconds()
	t.Logf("while lost, Read delivered %.2f× real time", pace)
	if pace < 0.7 || pace > 1.3 {
		t.Errorf("while lost, Read delivered %.2f× real time", pace)
	}
	if p := spk.Pending(); p > 100*time.Millisecond {
		t.Errorf("while lost, 0.5 s played 1 s ago still pending: %v", p)
	}
	rester.Play(make([]float32, InputRate/2))
	err = restStates.wait(t, "resting speaker loss", 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "pulse") {
		t.Errorf("resting speaker's loss error %v: want it to name the device", err)
	}

	back := time.Now()
	if err := card.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := micStates.wait(t, "microphone back", 40*time.Second); err != nil {
		t.Fatalf("microphone: %v", err)
	}
	t.Logf("microphone back %v after the server", time.Since(back).Round(time.Millisecond))
	if err := spkStates.wait(t, "speaker back", 40*time.Second); err != nil {
		t.Fatalf("speaker: %v", err)
	}
	if err := restStates.wait(t, "resting speaker back", 40*time.Second); err != nil {
		t.Fatalf("resting speaker: %v", err)
	}
	// Audio flows again at real-time pace, from the device now.
	n1, t1 := counted(), time.Now()
	time.Sleep(time.Second)
	pace = float64(counted()-n1) / OutputRate / time.Since(t1).Seconds()
	if pace < 0.7 || pace > 1.3 {
		t.Errorf("after recovery, Read delivered %.2f× real time", pace)
	}
	st := mic.Stats()
	t.Logf("microphone stats %+v; speaker stats %+v", st, spk.Stats())
	if st.Losses != 1 || st.Silence == 0 {
		t.Errorf("microphone stats %+v: want 1 loss and some silence", st)
	}
	spk.Play(make([]float32, InputRate/10))
	deadline := time.Now().Add(3 * time.Second)
	for spk.Pending() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if spk.Pending() > 0 {
		t.Errorf("after recovery the speaker does not play: Pending %v", spk.Pending())
	}
	rester.Play(make([]float32, InputRate/10))
	for rester.Pending() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if rester.Pending() > 0 || rester.Losses() != 1 {
		t.Errorf("after recovery the resting speaker: Pending %v, %d losses; want it playing, one loss", rester.Pending(), rester.Losses())
	}
	mic.Close()
	select {
	case err := <-readErr:
		if err != io.EOF {
			t.Errorf("Read after Close: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("Read did not return after Close")
	}
}

// TestOpenCloseDoesNotLeak opens and closes devices repeatedly and checks that no goroutine
// stays behind and PortAudio is released.
func TestOpenCloseDoesNotLeak(t *testing.T) {
	testaudio.Start(t)
	ctx := context.Background()
	before := runtime.NumGoroutine()
	for range 3 {
		mic, err := OpenMicrophone(ctx, DefaultMicConfig(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		spk, err := OpenSpeaker(ctx, DefaultSpeakerConfig(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		mic.Close()
		spk.Close()
		spk.Close()
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Close took %v", d)
		}
	}
	// A context that ends closes the device too.
	cctx, cancel := context.WithCancel(ctx)
	mic, err := OpenMicrophone(cctx, DefaultMicConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := mic.Read(ctx, make([]float32, 10)); err != io.EOF && err != nil {
		t.Errorf("Read after the context ended: %v", err)
	}
	mic.Close()
	time.Sleep(100 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("%d goroutines before, %d after", before, after)
	}
	if refs, _ := paCounts(); refs != 0 {
		t.Errorf("PortAudio still held %d times", refs)
	}
}

// ---- benchmarks ----

// BenchmarkCapturePath: one op is one second of 44.1 kHz stereo through the callback's ring
// write and Read's mixdown and resampling to 16 kHz.
func BenchmarkCapturePath(b *testing.B) {
	m := newTestMic(b, 44100, 2, Mixdown, 0)
	buf := make([]float32, 2*441)
	for i := range buf {
		buf[i] = float32(math.Sin(float64(i) / 10))
	}
	p := make([]float32, 1600)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for i := range 100 {
			m.ring.write(buf)
			if i%10 == 9 {
				m.Read(ctx, p)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s")
}

// BenchmarkPlaybackPath: one op is one second of 24 kHz audio queued and pulled by the stream
// callback as 44.1 kHz stereo.
func BenchmarkPlaybackPath(b *testing.B) {
	pb, err := pipeline.NewPlayback(InputRate, 44100)
	if err != nil {
		b.Fatal(err)
	}
	sig := make([]float32, 480)
	for i := range sig {
		sig[i] = float32(math.Sin(float64(i) / 10))
	}
	out, scratch := make([]float32, 2*441), make([]float32, speakerChunk)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for range 50 {
			pb.Play(sig)
			fillOutput(pb, out, 2, scratch)
			fillOutput(pb, out, 2, scratch)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s")
}

// A stream's buffer is half the latency unless configured: two device periods a buffer.
func TestHalfLatencyFrames(t *testing.T) {
	for _, tt := range []struct {
		configured int
		latency    time.Duration
		rate, want int
	}{
		{0, 100 * time.Millisecond, 48000, 2400},
		{0, 100 * time.Millisecond, 44100, 2205},
		{0, 50 * time.Millisecond, 48000, 1200}, // the speaker's default output_latency
		{0, 20 * time.Millisecond, 16000, 160},
		{0, 2 * time.Second, 192000, maxFramesPerBuffer},
		{0, 0, 48000, 0},
		{512, 100 * time.Millisecond, 48000, 512},
	} {
		if got := halfLatencyFrames(tt.configured, tt.latency, tt.rate); got != tt.want {
			t.Errorf("halfLatencyFrames(%d, %v, %d) = %d, want %d", tt.configured, tt.latency, tt.rate, got, tt.want)
		}
	}
}

// A speaker with nothing to play closes its stream after RestAfter (nothing wakes for it at
// rest), and Play opens it again: the sound plays, the device is not reported lost, and the
// echo reference's timeline goes on where it was, the silence of the rest counted in by the
// clock, so that the echo canceller's alignment holds. On the virtual card.
func TestSpeakerRestsAndResumes(t *testing.T) {
	card := testaudio.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rec := filepath.Join(t.TempDir(), "rest.wav")
	stop := card.Record(t, rec)
	ref := NewEchoReference()
	var downs atomic.Int64
	onState := func(ok bool, _ error) {
		if !ok {
			downs.Add(1)
		}
	}
	const restAfter = 300 * time.Millisecond
	spk, err := OpenSpeaker(ctx, SpeakerConfig{Device: "pulse", Volume: 100, Latency: 50 * time.Millisecond,
		Echo: ref, RestAfter: restAfter}, onState, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer spk.Close()
	timeline := func() (written int64, tm streamTiming, stopped bool) {
		ref.mu.Lock()
		defer ref.mu.Unlock()
		return ref.written, ref.fit.timing(), ref.stopped
	}
	// Opened with nothing to play, it rests; the first tone wakes it, and after it it rests
	// again.
	waitFor(t, "the speaker at rest after opening", func() bool { return spk.Rests() == 1 })
	// Where a tone starts in the reference's index: looked for once it has played.
	toneAt := func() int64 {
		t.Helper()
		time.Sleep(200 * time.Millisecond) // the device's buffer and the pump's record
		at := firstAbove(ref, 0.1)
		if at < 0 {
			t.Fatal("the tone is not in the echo reference")
		}
		return at
	}
	spk.Play(tone440(400 * time.Millisecond))
	waitFor(t, "the first tone played", func() bool { return spk.Pending() == 0 })
	tone1 := toneAt()
	waitFor(t, "the speaker at rest after the tone", func() bool { return spk.Rests() == 2 })
	w0, before, stopped := timeline()
	if !stopped || !before.firm {
		t.Fatalf("at rest: reference stopped %v, timing firm %v; want both", stopped, before.firm)
	}
	time.Sleep(time.Second)
	if w, _, _ := timeline(); w != w0 {
		t.Fatalf("the reference grew by %d samples while the speaker rested", w-w0)
	}

	spk.Play(tone440(600 * time.Millisecond))
	waitFor(t, "the second tone played", func() bool { return spk.Pending() == 0 })
	tone2 := toneAt()
	waitFor(t, "the timing measured again", func() bool { _, tm, _ := timeline(); return tm.firm })
	w1, after, _ := timeline()
	time.Sleep(400 * time.Millisecond)
	stop()
	if downs.Load() != 0 || spk.Losses() != 0 {
		t.Errorf("the speaker was reported lost %d times (losses %d): a rest is not a loss", downs.Load(), spk.Losses())
	}
	if after.era != before.era {
		t.Errorf("the timeline's era went from %d to %d: a rest must not start a new timeline", before.era, after.era)
	}
	rate := float64(spk.Rate())
	moved := (after.base - before.base) / rate
	t.Logf("rest: the reference held %d samples, %d after; the timeline moved %.1f ms across the rest", w0, w1, moved*1000)
	if math.Abs(moved) > alignTolerance.Seconds() {
		t.Errorf("the timeline moved %.1f ms across the rest, want within %v", moved*1000, alignTolerance)
	}
	if w1-w0 < int64(time.Second.Seconds()*rate) {
		t.Errorf("the reference grew by %d samples across a rest of over a second: the rest's silence is not counted in", w1-w0)
	}

	// Both tones are heard, the second one whole: stretches of sound apart by more than 100 ms.
	got, gotRate := readWAV(t, rec)
	type stretch struct{ from, to int }
	var heard []stretch
	for i, v := range got {
		if math.Abs(float64(v)) < 0.1 {
			continue
		}
		if n := len(heard); n > 0 && i-heard[n-1].to <= gotRate/10 {
			heard[n-1].to = i
		} else {
			heard = append(heard, stretch{i, i})
		}
	}
	if len(heard) != 2 {
		t.Fatalf("heard %d stretches of tone, want 2: %v", len(heard), heard)
	}
	if d := float64(heard[1].to-heard[1].from) / float64(gotRate); d < 0.9*0.6 {
		t.Errorf("the tone after the rest was heard for %.3f s of 0.6", d)
	}
	// The sink played them as far apart as the reference holds them: its timeline went on.
	atSink := float64(heard[1].from-heard[0].from) / float64(gotRate)
	inRef := float64(tone2-tone1) / rate
	t.Logf("the tones' starts %.4f s apart at the sink, %.4f s in the echo reference", atSink, inRef)
	if math.Abs(atSink-inRef) > alignTolerance.Seconds() {
		t.Errorf("the tones are %.1f ms further apart at the sink than in the echo reference, want within %v", (atSink-inRef)*1000, alignTolerance)
	}
}

// tone440 is d of a 440 Hz tone at half scale, at the speaker's input rate.
func tone440(d time.Duration) []float32 {
	x := make([]float32, int(d.Seconds()*InputRate))
	for i := range x {
		x[i] = float32(0.5 * math.Sin(2*math.Pi*440*float64(i)/InputRate))
	}
	return x
}
