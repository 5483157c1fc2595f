package pipeline

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ratios are the conversions omnisat makes (microphone → 16 kHz model input, 24 kHz model output →
// speaker) and a few neighbours.
var ratios = []struct{ in, out int }{
	{44100, 16000},
	{48000, 16000},
	{22050, 16000},
	{16000, 44100},
	{24000, 48000},
	{24000, 44100},
	{16000, 24000},
	{44100, 48000},
	{48000, 44100},
}

func ratioName(in, out int) string { return strconv.Itoa(in) + "to" + strconv.Itoa(out) }

func newResampler(t testing.TB, in, out int) *Resampler {
	t.Helper()
	r, err := NewResampler(in, out)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// noise is reproducible white noise in [-0.5, 0.5).
func noise(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n)
	for i := range x {
		x[i] = rng.Float32() - 0.5
	}
	return x
}

// resampleAll runs a whole signal through a fresh resampler, in one piece, with Flush.
func resampleAll(t testing.TB, in, out int, x []float32) []float32 {
	r := newResampler(t, in, out)
	y := r.Process(nil, x)
	return r.Flush(y)
}

func TestNewResamplerErrors(t *testing.T) {
	for _, c := range []struct {
		in, out int
		want    string
	}{
		{0, 16000, "positive"},
		{-44100, 16000, "positive"},
		{16000, 0, "positive"},
		{16000, 16000*MaxRatio + 1, "ratio"},
		{16000*MaxRatio + 1, 16000, "ratio"},
		{44101, 16000, "coefficients"},
	} {
		r, err := NewResampler(c.in, c.out)
		if err == nil {
			t.Errorf("NewResampler(%d, %d) = %v, want an error", c.in, c.out, r)
			continue
		}
		// The message must say which conversion was refused and why.
		msg := err.Error()
		if !strings.Contains(msg, strconv.Itoa(c.in)) || !strings.Contains(msg, strconv.Itoa(c.out)) || !strings.Contains(msg, c.want) {
			t.Errorf("NewResampler(%d, %d): %q should name both rates and mention %q", c.in, c.out, msg, c.want)
		}
	}
	for _, c := range [][2]int{{16000, 16000 * MaxRatio}, {16000 * MaxRatio, 16000}, {11025, 48000}, {8000, 44100}, {11025, 64000}, {192000, 12000}} {
		if _, err := NewResampler(c[0], c[1]); err != nil {
			t.Errorf("NewResampler(%d, %d): %v", c[0], c[1], err)
		}
	}
}

func TestSameRateIsACopy(t *testing.T) {
	r := newResampler(t, 16000, 16000)
	x := noise(1000, 1)
	y := r.Process(make([]float32, 0, 1000), x)
	y = r.Flush(y)
	if len(y) != len(x) || r.Delay() != 0 || r.OutputLen(1000) != 1000 {
		t.Fatalf("len %d delay %v bound %d", len(y), r.Delay(), r.OutputLen(1000))
	}
	for i := range x {
		if x[i] != y[i] {
			t.Fatalf("sample %d: %v became %v", i, x[i], y[i])
		}
	}
}

// TestChunkedEqualsWhole checks the streaming promise: any chunking, down to empty and
// one-sample pieces, gives bit for bit the output of one call, and the stream's length is
// ceil(n·out/in).
func TestChunkedEqualsWhole(t *testing.T) {
	x := noise(9000, 2)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range ratios {
		t.Run(ratioName(c.in, c.out), func(t *testing.T) {
			whole := resampleAll(t, c.in, c.out, x)
			if want := (len(x)*c.out + c.in - 1) / c.in; len(whole) != want {
				t.Fatalf("%d samples gave %d, want %d", len(x), len(whole), want)
			}
			r := newResampler(t, c.in, c.out)
			for _, maxChunk := range []int{1, 7, 160, 441, 5000} {
				var got []float32
				for rest := x; len(rest) > 0; {
					n := min(rng.IntN(maxChunk+1), len(rest)) // 0 included
					before := len(got)
					got = r.Process(got, rest[:n])
					if len(got)-before > r.OutputLen(n) {
						t.Fatalf("Process(%d samples) gave %d, more than OutputLen %d", n, len(got)-before, r.OutputLen(n))
					}
					rest = rest[n:]
				}
				before := len(got)
				got = r.Flush(got) // also resets r for the next round
				if len(got)-before > r.OutputLen(0) {
					t.Fatalf("Flush gave %d, more than OutputLen(0) = %d", len(got)-before, r.OutputLen(0))
				}
				if len(got) != len(whole) {
					t.Fatalf("chunks of ≤%d: %d samples, want %d", maxChunk, len(got), len(whole))
				}
				for i := range got {
					if got[i] != whole[i] {
						t.Fatalf("chunks of ≤%d: sample %d is %v, want %v", maxChunk, i, got[i], whole[i])
					}
				}
			}
		})
	}
}

// TestLatency checks Delay against the output: a click comes out where it went in (the delay is
// compensated) but only once Delay more input has gone in.
func TestLatency(t *testing.T) {
	for _, c := range ratios {
		r := newResampler(t, c.in, c.out)
		d := r.Delay()
		if d <= 0 || d > 10*time.Millisecond {
			t.Errorf("%d→%d: Delay %v, want (0, 10ms]", c.in, c.out, d)
		}
		delayIn := int(math.Round(d.Seconds() * float64(c.in)))
		click := c.in / 10 // 100 ms in; a multiple of down for these ratios so it lands on an output
		x := make([]float32, click+delayIn+1)
		x[click] = 1
		y := r.Process(nil, x[:click+delayIn]) // one sample short of Delay after the click
		outAt := click * c.out / c.in
		if len(y) != outAt {
			t.Errorf("%d→%d: %d outputs one sample before click+Delay, want %d", c.in, c.out, len(y), outAt)
		}
		y = r.Process(y, x[click+delayIn:])
		// Upsampling emits the outputs between input samples together, so there may be more.
		if len(y) <= outAt {
			t.Fatalf("%d→%d: %d outputs after click+Delay, want more than %d", c.in, c.out, len(y), outAt)
		}
		peak := 0
		for i := range y {
			if math.Abs(float64(y[i])) > math.Abs(float64(y[peak])) {
				peak = i
			}
		}
		if peak != outAt {
			t.Errorf("%d→%d: click at output %d, want %d", c.in, c.out, peak, outAt)
		}
	}
}

func TestResetStartsOver(t *testing.T) {
	x := noise(3000, 5)
	r := newResampler(t, 44100, 16000)
	first := r.Process(nil, x)
	r.Process(nil, noise(777, 6)) // leave state behind
	r.Reset()
	second := r.Process(nil, x)
	if len(first) != len(second) {
		t.Fatalf("%d then %d samples", len(first), len(second))
	}
	for i := range first {
		if first[i] != second[i] {
			t.Fatalf("sample %d: %v after Reset, %v fresh", i, second[i], first[i])
		}
	}
}

func TestDCPassesUnchanged(t *testing.T) {
	for _, c := range ratios {
		x := make([]float32, c.in/5)
		for i := range x {
			x[i] = 0.5
		}
		r := newResampler(t, c.in, c.out)
		y := r.Process(nil, x)
		skip := int(r.Delay().Seconds()*float64(c.out)) + 2 // the step at the start
		for i, v := range y[skip:] {
			if math.Abs(float64(v)-0.5) > 1e-5 {
				t.Fatalf("%d→%d: DC 0.5 gave %v at output %d", c.in, c.out, v, skip+i)
			}
		}
	}
}

func TestProcessDoesNotAllocate(t *testing.T) {
	for _, c := range ratios {
		r := newResampler(t, c.in, c.out)
		block := noise(c.in/100, 7)   // 10 ms, as a device callback delivers
		big := noise(2*blockLen+5, 8) // more than the working buffer holds
		dst := make([]float32, 0, r.OutputLen(len(big)))
		allocs := testing.AllocsPerRun(5, func() {
			dst = r.Process(dst[:0], block)
			dst = r.Process(dst[:0], big)
			dst = r.Flush(dst[:0])
		})
		if allocs != 0 {
			t.Errorf("%d→%d: %v allocations per run", c.in, c.out, allocs)
		}
	}
}

// TestStandardRatesFit checks the claim in maxCoefs: every pair of standard rates within
// MaxRatio of each other is accepted, and the largest table is far below the limit.
func TestStandardRatesFit(t *testing.T) {
	rates := []int{8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200, 96000, 176400, 192000}
	most, phases := 0, 0
	for _, in := range rates {
		for _, out := range rates {
			if in > MaxRatio*out || out > MaxRatio*in || in == out {
				continue
			}
			g := gcd(in, out)
			n := coefCount(out/g, in/g)
			if n > maxCoefs {
				t.Errorf("%d→%d Hz needs %d coefficients, more than %d", in, out, n, maxCoefs)
			}
			most, phases = max(most, n), max(phases, out/g)
		}
	}
	if most > 256<<10 || phases > 2560 {
		t.Errorf("largest table %d coefficients, most phases %d: update the maxCoefs comment", most, phases)
	}
	if _, err := NewResampler(11025, 64000); err != nil { // the most phases: 2560
		t.Error(err)
	}
}

// TestSilenceIsProcessOfZeros: Silence gives what Process gives for a block of zeros, sample for
// sample, whether the history is still ringing from sound before it or silent already, in any
// chunking, and leaves the stream where Process would (the sound after it comes out the same).
func TestSilenceIsProcessOfZeros(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, rates := range [][2]int{{48000, 16000}, {44100, 16000}, {24000, 48000}, {16000, 16000}, {8000, 16000}} {
		viaProcess, err := NewResampler(rates[0], rates[1])
		if err != nil {
			t.Fatal(err)
		}
		viaSilence, _ := NewResampler(rates[0], rates[1])
		var want, got []float32
		for range 60 {
			n := rng.IntN(3000)
			block := make([]float32, n)
			if rng.IntN(3) == 0 { // sound, then silence of every length
				for i := range block {
					block[i] = float32(rng.NormFloat64() * 0.3)
				}
				want = viaProcess.Process(want, block)
				got = viaSilence.Process(got, block)
				continue
			}
			want = viaProcess.Process(want, block)
			got = viaSilence.Silence(got, n)
		}
		want, got = viaProcess.Flush(want), viaSilence.Flush(got)
		if len(got) != len(want) {
			t.Fatalf("%d → %d Hz: %d samples through Silence, %d through Process", rates[0], rates[1], len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%d → %d Hz: sample %d is %v through Silence, %v through Process", rates[0], rates[1], i, got[i], want[i])
			}
		}
	}
}

// BenchmarkResampleSilence: a second of silence at 48 kHz to 16 kHz, through Process and
// through Silence (the speaker's record between replies).
func BenchmarkResampleSilence(b *testing.B) {
	zeros := make([]float32, 480)
	for _, how := range []string{"process", "silence"} {
		b.Run(how, func(b *testing.B) {
			r, _ := NewResampler(48000, 16000)
			out := make([]float32, 0, 200)
			b.ReportAllocs()
			for b.Loop() {
				for range 100 {
					if how == "process" {
						out = r.Process(out[:0], zeros)
					} else {
						out = r.Silence(out[:0], len(zeros))
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s-audio")
		})
	}
}
