package pipeline

import (
	"math"
	"strings"
	"testing"
)

func TestInt16ToMono(t *testing.T) {
	stereo := []int16{16384, -16384, 32767, 32767, -32768, -32768, 100, 300}
	for _, c := range []struct {
		name         string
		src          []int16
		channels, ch int
		gain         float32
		want         []float32
	}{
		{"mixdown", stereo, 2, Mixdown, 1, []float32{0, 32767.0 / 32768, -1, 200.0 / 32768}},
		{"left", stereo, 2, 0, 1, []float32{0.5, 32767.0 / 32768, -1, 100.0 / 32768}},
		{"right", stereo, 2, 1, 1, []float32{-0.5, 32767.0 / 32768, -1, 300.0 / 32768}},
		{"gain clips", stereo, 2, 0, 4, []float32{1, 1, -1, 400.0 / 32768}},
		{"mixdown gain clips", stereo, 2, Mixdown, 2, []float32{0, 1, -1, 400.0 / 32768}},
		{"mixdown negative gain", stereo, 2, Mixdown, -1, []float32{0, -32767.0 / 32768, 1, -200.0 / 32768}},
		{"mono", []int16{-32768, 0, 16384}, 1, Mixdown, 0.5, []float32{-0.5, 0, 0.25}},
		{"mono channel 0", []int16{-32768, 0, 16384}, 1, 0, 1, []float32{-1, 0, 0.5}},
		{"three channels", []int16{300, 600, 900, -3, -3, -3}, 3, Mixdown, 1, []float32{600.0 / 32768, -3.0 / 32768}},
		{"empty", nil, 2, Mixdown, 1, []float32{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Int16ToMono(nil, c.src, c.channels, c.ch, c.gain)
			if err != nil {
				t.Fatal(err)
			}
			expectSamples(t, got, c.want)
		})
	}
}

func TestInt32ToMono(t *testing.T) {
	src := []int32{1 << 30, -(1 << 30), math.MaxInt32, math.MaxInt32, math.MinInt32, math.MinInt32, 1 << 20, 3 << 20}
	got, err := Int32ToMono(nil, src, 2, Mixdown, 1)
	if err != nil {
		t.Fatal(err)
	}
	expectSamples(t, got, []float32{0, 1, -1, 2.0 / 2048})
	got, err = Int32ToMono(got, src, 2, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	expectSamples(t, got, []float32{-1, 1, -1, 6.0 / 2048})
}

func TestFloat32ToMono(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	src := []float32{0.25, 0.75, nan, 0.5, inf, -inf, 2, 2, -0.1, 0.1}
	got, err := Float32ToMono(nil, src, 2, Mixdown, 1)
	if err != nil {
		t.Fatal(err)
	}
	expectSamples(t, got, []float32{0.5, 0, 0, 1, 0}) // NaN poisons its frame, which becomes 0
	got, err = Float32ToMono(nil, src, 2, 1, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	expectSamples(t, got, []float32{0.375, 0.25, -1, 1, 0.05})

	// In place: the documented way to mix a buffer down without a second one.
	buf := []float32{0.1, 0.3, 0.5, 0.7, -1, 1}
	got, err = Float32ToMono(buf, buf, 2, Mixdown, 1)
	if err != nil {
		t.Fatal(err)
	}
	expectSamples(t, got, []float32{0.2, 0.6, 0})
}

func TestToMonoErrors(t *testing.T) {
	for _, c := range []struct {
		n, channels, ch int
		want            string
	}{
		{4, 0, Mixdown, "at least 1"},
		{4, 2, 2, "channel 2 out of range for 2 channels"},
		{4, 2, -2, "channel -2 out of range"},
		{5, 2, 0, "not a whole number"},
	} {
		dst := make([]float32, 3, 10)
		for name, conv := range map[string]func() ([]float32, error){
			"int16":   func() ([]float32, error) { return Int16ToMono(dst, make([]int16, c.n), c.channels, c.ch, 1) },
			"int32":   func() ([]float32, error) { return Int32ToMono(dst, make([]int32, c.n), c.channels, c.ch, 1) },
			"float32": func() ([]float32, error) { return Float32ToMono(dst, make([]float32, c.n), c.channels, c.ch, 1) },
		} {
			got, err := conv()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, %d samples, %d channels, channel %d: error %v, want one with %q", name, c.n, c.channels, c.ch, err, c.want)
			}
			if len(got) != 0 {
				t.Errorf("%s: %d samples returned with an error", name, len(got))
			}
		}
	}
}

func TestFloat32ToInt16(t *testing.T) {
	nan := float32(math.NaN())
	src := []float32{0, 0.5, -0.5, 1, -1, 1.5, -1.5, nan, float32(math.Inf(-1)), 1.4 / 32768, -1.6 / 32768, 32766.5 / 32768}
	want := []int16{0, 16384, -16384, 32767, -32768, 32767, -32768, 0, -32768, 1, -2, 32767}
	got := Float32ToInt16(nil, src)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%v became %d, want %d", src[i], got[i], want[i])
		}
	}
	// int16 → float32 → int16 is lossless.
	all := make([]int16, 65536)
	for i := range all {
		all[i] = int16(i - 32768)
	}
	f, err := Int16ToMono(nil, all, 1, Mixdown, 1)
	if err != nil {
		t.Fatal(err)
	}
	back := Float32ToInt16(make([]int16, 0, len(f)), f)
	for i := range all {
		if back[i] != all[i] {
			t.Fatalf("%d came back as %d", all[i], back[i])
		}
	}
}

func TestConversionsReuseDst(t *testing.T) {
	src := make([]int16, 960) // 10 ms of 48 kHz stereo
	dst := make([]float32, 0, 480)
	out := make([]int16, 0, 480)
	allocs := testing.AllocsPerRun(50, func() {
		var err error
		dst, err = Int16ToMono(dst, src, 2, Mixdown, 1)
		if err != nil {
			t.Fatal(err)
		}
		out = Float32ToInt16(out, dst)
	})
	if allocs != 0 || len(dst) != 480 || len(out) != 480 {
		t.Fatalf("%v allocations, %d and %d samples", allocs, len(dst), len(out))
	}
}

func expectSamples(t *testing.T, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d samples %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-6 || math.IsNaN(float64(got[i])) {
			t.Errorf("sample %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

// clipInto is clip on every sample, at the edges of the range and outside it included.
func TestClipInto(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	next := math.Nextafter32
	src := []float32{0, float32(math.Copysign(0, -1)), 0.5, -0.5, 1, -1, next(1, 2), next(-1, -2),
		2, -2, inf, -inf, nan, float32(math.SmallestNonzeroFloat32), math.MaxFloat32, -math.MaxFloat32}
	dst := make([]float32, len(src))
	clipInto(dst, src)
	for i, v := range src {
		if got, want := dst[i], clip(v); math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("clipInto(%v) = %v, want %v", v, got, want)
		}
	}
}

// PeakAbove is the largest magnitude of any sample at any position (the four running maxima
// and the tail), or the floor it is given when that is larger.
func TestPeakAbove(t *testing.T) {
	for n := range 11 {
		for at := range n {
			block := make([]float32, n)
			for i := range block {
				block[i] = 0.25
			}
			block[at] = -0.5
			if got := PeakAbove(0, block); got != 0.5 {
				t.Fatalf("%d samples, -0.5 at %d: peak %v", n, at, got)
			}
			if got := PeakAbove(0.75, block); got != 0.75 {
				t.Fatalf("%d samples under a peak of 0.75: %v", n, got)
			}
		}
	}
	if got := PeakAbove(0, nil); got != 0 {
		t.Fatalf("no samples: peak %v", got)
	}
	if got := PeakAbove(0, []float32{0.5, float32(math.NaN()), 2, -3, 0.1}); got == got {
		t.Fatalf("a NaN among the samples: peak %v, want NaN as max gives", got)
	}
}
